"""What an answer rests on, computed by the app rather than written by the model (issue 32).

A small model loses a long list in its synthesis (it names the last few items and counts
those), answers from unrelated passages instead of saying it cannot, and no answer says how
much of the file it read.  This module holds the pure parts of the fixes; the analysis calls
them and the record keeps their results as notes (``notes``), shown at view time:

* ``list_target``: whether an instruction asks for every X, a list, a count or a total, and X;
* ``merge_items``: the items every chunk's structured partial answer listed, each resting on the
  exact words it quotes, merged across chunks (the same place in the file, the same or nearly the
  same words: the overlap two chunks share, a repeat), in the file's order, with any numbers summed;
* ``stated_count``: the count the model's own text gives, to be checked against the app's;
* ``point_question`` and ``versions``: a question with one answer, and the different answers the
  chunks gave it (with their confidence and chunks);
* ``read_coverage`` / ``passages_coverage``: how much of the file an answer rests on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from .quotes import Squashed

MAX_ITEMS = 2000          # items one answer lists (a file with more: the rest are counted as cut)

# "list every X", "find all the X", "what are all the X", "how many X", "count the X", "the total of X"
_TARGET = re.compile(
    r"\b(?:(?:list|name|find|extract|give|show|enumerate|collect|identify|what\s+are)\s+(?:me\s+)?"
    r"(?P<all>all|every|each)(?:\s+of)?(?:\s+the)?\s+"
    r"|(?P<many>how\s+many)\s+"
    r"|(?P<count>count|number\s+of)\s+(?:all\s+|every\s+|the\s+)*"
    r"|(?P<total>total|sum|add\s+up)\s+(?:of\s+|up\s+)?(?:all\s+|every\s+|the\s+)*"
    r"|\blist\s+(?:the\s+)?)"
    r"(?P<what>[^.?!;:\n]{2,80})", re.I)
_TAIL = re.compile(r"\s+(?:(?:that|which|who)\s+(?:are|is|were|was)\s+)?(?:are|is|were|was|do|does|did|appear\w*|"
                   r"there|in|on|from|of|mentioned|listed|named|given|found|the\s+file|this|that)\b.*$", re.I)
_LEAD = re.compile(r"^(?:the|all|every|each|of)\s+", re.I)


def list_target(instruction: str) -> str:
    """What an instruction asks to be listed, counted or totalled ("vault codes"), or "" when it
    asks for no list.  ``instruction``'s ``@model`` directive does not matter (it is not matched)."""
    m = _TARGET.search(instruction)
    if m is None:
        return ""
    what = m["what"].strip()
    what = _TAIL.sub("", what) or what
    while (lead := _LEAD.match(what)):
        what = what[lead.end():]
    what = " ".join(what.split()).strip(" ,")
    return what if len(what) >= 2 else ""


_QUESTION = re.compile(r"^\W*(?:what|when|who|whom|whose|which|where|how\s+(?:much|long|old|far|big|tall|often)|"
                       r"is|are|was|were|does|do|did|has|have|can)\b", re.I)
_SUMMARY = re.compile(r"\b(?:summar\w*|describe|explain|outline|overview|each\s+section|every\s+section)\b", re.I)


def point_question(instruction: str) -> bool:
    """A question with one answer ("When was the survey signed?"): chunks that answer it differently
    disagree.  A summary or a list is not one (each chunk adds its own part)."""
    text = instruction.strip()
    if not text or list_target(text) or _SUMMARY.search(text):
        return False
    return bool(_QUESTION.match(text)) or (text.endswith("?") and len(text) <= 200)


# -- the items of a list -----------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])[-−]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])|(?<![\w.])[-−]?\d+(?:\.\d+)?(?![\w])")
_DIGITS = re.compile(r"\d+")
_WORD = re.compile(r"[\w]+")


def numbers_in(text: str) -> list[float]:
    """The numbers a text writes ("1,234.50" is one), in order."""
    return [float(m.group(0).replace(",", "").replace("−", "-")) for m in _NUMBER.finditer(text)]


def _norm(text: str) -> str:
    return " ".join(_WORD.findall(text.casefold()))


def near(a: str, b: str, ratio: float | None = None) -> bool:
    """Two quotes (or items) that are the same words as far as a reader can tell: folded equal (case,
    spaces and punctuation aside), or one holding the other (a quote cut shorter), always with the same
    digits (record 17 and record 18 are two items however alike their words); with ``ratio``, also
    nearly equal by letters (for short answers, never for quotes: "Aaason" and "Aabson" are two people)."""
    return _near_folded(_norm(a), _norm(b), ratio)


def _near_folded(a: str, b: str, ratio: float | None = None) -> bool:
    """``near`` of two texts already folded (``_norm``)."""
    if not a or not b:
        return False
    if a == b:
        return True
    if _DIGITS.findall(a) != _DIGITS.findall(b):
        return False
    short, long = sorted((a, b), key=len)
    if len(short) >= 4 and short in long and len(short) >= 0.5 * len(long):
        return True
    return ratio is not None and SequenceMatcher(None, a, b, autojunk=False).ratio() >= ratio


@dataclass
class Item:
    """One item of a computed list: the model's words for it, the file's words it rests on, the
    number it carries (when its quote writes it), the chunks (1-based) that listed it and where
    its quote lies in the document's text (-1: no quote the file holds)."""

    text: str
    quote: str = ""
    value: float | None = None
    chunks: list[int] = field(default_factory=list)
    at: int = -1
    end: int = -1          # where its quote ends in the document's text
    digits: tuple = field(default=(), repr=False, compare=False)   # its quote's digits (the merge's first test)
    folded: str = field(default="", repr=False, compare=False)     # its quote (or words) folded

    @property
    def chunk(self) -> int:
        return self.chunks[0] if self.chunks else 0


def _value(item: dict, quote: str) -> float | None:
    """The item's number: the model's ``value`` when its quote writes it, else the quote's only
    number (never a number the file does not hold)."""
    in_quote = numbers_in(quote)
    given = item.get("value")
    if isinstance(given, str):
        found = numbers_in(given)
        given = found[0] if len(found) == 1 else None
    if isinstance(given, (int, float)) and not isinstance(given, bool):
        if any(abs(n - float(given)) < 1e-9 for n in in_quote):
            return float(given)
    return in_quote[0] if len(in_quote) == 1 else None


def merge_items(results, text: str) -> tuple[list[Item], int]:
    """The items of every relevant chunk's list (``ChunkResult``s with ``points`` of
    ``{"point", "quote", "value"}``), merged: an item is the same as one before when its quote lies at
    the same place of ``text`` or overlaps it there (the overlap two chunks share), when its quote (or,
    without quotes, its words) folds to the same words anywhere, or when it is ``near`` an item of its
    own chunk or the chunk before (a model's slightly different quote of the shared overlap).  In the
    file's order (items without a place after, in chunk order).  Returns the items and how many were
    left out over ``MAX_ITEMS``.  Linear in the items but for the near-match window (a Pi lists
    thousands)."""
    items: list[Item] = []
    by_place: dict[int, Item] = {}
    by_words: dict[str, Item] = {}
    cut = 0
    for r in results:
        if not getattr(r, "relevant", True) or getattr(r, "status", "ok") != "ok":
            continue
        chunk_text = text[r.start:r.end] if r.end > r.start else ""
        squashed = Squashed(chunk_text) if chunk_text else None
        n = r.index + 1
        for p in r.points:
            words = " ".join(str(p.get("point", "")).split())
            quote = " ".join(str(p.get("quote", "")).split())
            if not words and not quote:
                continue
            at, span = -1, (0, 0)
            if quote and squashed is not None and (spans := squashed.spans(quote)):
                span = (r.start + spans[0][0], r.start + spans[0][1])
                at = span[0]
            key = ("q:" + _norm(quote)) if quote else ("w:" + _norm(words))
            candidates = (by_place.get(at) if at >= 0 else None, by_words.get(key), _overlapping(items, span, n),
                          _near(items, quote, words, n))
            same = next((c for c in candidates if c is not None and alike(words, c.text)), None)
            if same is not None:
                if n not in same.chunks:
                    same.chunks.append(n)
                if same.value is None and quote:
                    same.value = _value(p, quote)
                continue
            if len(items) >= MAX_ITEMS:
                cut += 1
                continue
            item = Item(words or quote, quote, _value(p, quote) if quote else None, [n], at)
            item.end, item.folded = span[1], _norm(quote or words)
            item.digits = tuple(_DIGITS.findall(item.folded))
            items.append(item)
            by_words.setdefault(key, item)
            if at >= 0:
                by_place.setdefault(at, item)
    placed = sorted((i for i in items if i.at >= 0), key=lambda i: i.at)
    return placed + [i for i in items if i.at < 0], cut


def alike(a: str, b: str) -> bool:
    """Two names of items that may be one item: the same digits, and the same words, one within the
    other ("VC-001" and "vault code VC-001"; never "VC-001" and "VC-002", nor "A1" and "B2" that quote
    the same sentence)."""
    a, b = _norm(a), _norm(b)
    if not a or not b or a == b:
        return True
    if _DIGITS.findall(a) != _DIGITS.findall(b):
        return False
    return a in b or b in a


NEAR_WINDOW = 400          # items of the chunk before and this one compared letter by letter


def _recent(items: list[Item], n: int):
    """The latest items that came from chunk ``n`` or the one before (newest first, at most NEAR_WINDOW)."""
    for item in reversed(items[-NEAR_WINDOW:]):
        if item.chunks and item.chunks[-1] >= n - 1:
            yield item


def _overlapping(items: list[Item], span: tuple[int, int], n: int) -> Item | None:
    """An item whose quote's place in the file overlaps this one's (two chunks quoting their overlap)."""
    if span[1] <= span[0]:
        return None
    return next((i for i in _recent(items, n) if i.at >= 0 and i.at < span[1] and span[0] < i.end), None)


def _near(items: list[Item], quote: str, words: str, n: int) -> Item | None:
    """An item of this chunk or the one before whose quote (or, without quotes, words) is ``near``
    this one's; the digits are compared first, so most items cost one tuple comparison."""
    mine = _norm(quote or words)
    digits = tuple(_DIGITS.findall(mine))
    for item in _recent(items, n):
        if bool(quote) != bool(item.quote) or item.digits != digits:
            continue
        if (len(item.folded) >= 4 and len(mine) >= 4 and (item.folded in mine or mine in item.folded)
                and _near_folded(mine, item.folded)):
            return item
    return None


def total_of(items: list[Item]) -> float | None:
    """The sum of the items' numbers (None: no item carries one)."""
    values = [i.value for i in items if i.value is not None]
    return sum(values) if values else None


def number_text(value: float) -> str:
    """1234.5 -> "1,234.5"; 37.0 -> "37"."""
    if abs(value - round(value)) < 1e-9:
        return f"{round(value):,}"
    return f"{value:,.6f}".rstrip("0").rstrip(".")


_WORDS_NUMBERS = {w: n for n, w in enumerate("zero one two three four five six seven eight nine ten eleven "
                                             "twelve".split())}
_STATED = re.compile(r"\b(?:there\s+(?:are|were|is)\s+|(?:a\s+)?total\s+of\s+|found\s+|lists?\s+|contains?\s+|"
                     r"holds?\s+|counted\s+)?(?<![\w\-.,])(?P<n>\d[\d,]*|zero|one|two|three|four|five|six|seven|eight|nine|ten|"
                     r"eleven|twelve)\s+(?:(?:different|distinct|unique|separate|such|\w+)\s+){0,2}?(?P<noun>\w+)",
                     re.I)


def stated_count(text: str, target: str) -> int | None:
    """The count the model's text gives for ``target`` ("There are 4 vault codes" -> 4), None when it
    gives none: a number written before one of the target's words (singular or plural)."""
    stems = {w.casefold().rstrip("s") for w in _WORD.findall(target) if len(w) > 2} | {"item", "entr", "entrie",
                                                                                        "record", "one"}
    for m in _STATED.finditer(text):
        noun = m["noun"].casefold()
        if noun.rstrip("s") in stems or noun.removesuffix("ies") in stems:
            n = m["n"].casefold().replace(",", "")
            return _WORDS_NUMBERS[n] if n in _WORDS_NUMBERS else int(n)
    return None


def plural(target: str, n: int) -> str:
    """"vault code" -> "vault codes" when n is not 1 (a target given in the plural stays as it is)."""
    if n == 1 or target.endswith("s") or not target[-1:].isalpha():
        return target
    if target.endswith("y") and target[-2:-1] not in "aeiou":
        return target[:-1] + "ies"
    return target + ("es" if target.endswith(("sh", "ch", "x", "z")) else "s")


def count_line(count: int, target: str, total: float | None, valued: int, stated: int | None, cut: int) -> str:
    """The computed count as the answer shows it (and the scene's ``chunk-count`` note says)."""
    line = f"{count:,} {plural(target or 'item', count)}" + (f" (and {cut:,} more not kept)" if cut else "")
    if total is not None:
        line += f"; total {number_text(total)}" + (f" over the {valued:,} that carry a number" if valued < count else "")
    if stated is not None and stated != count:
        line += f". The model's summary says {stated:,}; the app counted {count:,} in the chunks' answers"
    return line


# -- disagreeing answers ---------------------------------------------------------------------------

@dataclass
class Version:
    """One answer to a point question, the chunks (1-based) that gave it and their best confidence."""

    answer: str
    chunks: list[int] = field(default_factory=list)
    confidence: int | None = None


def versions(results) -> list[Version]:
    """The different short answers the relevant chunks gave (near-same answers merged), most
    confident first; one version (or none) means they agree."""
    out: list[Version] = []
    for r in results:
        answer = " ".join(str(getattr(r, "answer", "") or "").split())
        if not getattr(r, "relevant", True) or not answer:
            continue
        same = next((v for v in out if near(v.answer, answer, ratio=0.85)), None)
        if same is None:
            out.append(Version(answer, [r.index + 1], r.confidence))
        else:
            same.chunks.append(r.index + 1)
            if r.confidence is not None and (same.confidence is None or r.confidence > same.confidence):
                same.confidence = r.confidence
    return sorted(out, key=lambda v: -(v.confidence if v.confidence is not None else -1))


def conflict_note(found: list[Version]) -> str:
    """The synthesis request's line when the chunks disagree: each version, its chunks and confidence,
    and the ask to weigh them ("" when they agree)."""
    if len(found) < 2:
        return ""
    said = "; ".join(f"chunk{'s' if len(v.chunks) > 1 else ''} {', '.join(map(str, v.chunks))} "
                     f"(confidence {v.confidence if v.confidence is not None else '?'} of 5) say \"{v.answer}\""
                     for v in found)
    return (f"\nThe chunks disagree: {said}. Weigh them by their confidence, give each version with its "
            "chunks, and say which is more likely and why.")


# -- coverage ---------------------------------------------------------------------------------------

def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' if n != 1 else ''}"


def read_coverage(read: int, chunks: int, first_line: int, last_line: int, irrelevant: int,
                  unread: str = "") -> str:
    """A full read's coverage: "read 41 of 41 chunks (lines 1–6,592); 3 had nothing relevant"."""
    line = f"read {read:,} of {_plural(chunks, 'chunk')} (lines {first_line:,}–{last_line:,})"
    if irrelevant:
        line += f"; {irrelevant:,} had nothing relevant"
    if unread:
        line += f"; not read: {unread}"
    return line


def passages_coverage(passages: list[dict], text_chars: int, max_sections: int = 4) -> str:
    """A passages answer's coverage: "9 passages, about 4 % of the file (sections A, B, …)"."""
    chars = sum(max(0, p["end"] - p["start"]) for p in passages)
    share = 100 * chars / text_chars if text_chars else 0.0
    pct = f"{share:.0f} %" if share >= 1 else ("under 1 %" if chars else "0 %")
    sections: list[str] = []
    for p in passages:
        s = (p.get("section") or "").split(" › ")[-1].strip()
        if s and s not in sections:
            sections.append(s)
    where = ""
    if sections:
        shown = ", ".join(sections[:max_sections]) + (", …" if len(sections) > max_sections else "")
        where = f" (section{'s' if len(sections) > 1 else ''} {shown})"
    return f"{_plural(len(passages), 'passage')}, about {pct} of the file{where}"
