"""What an answer rests on, computed by the app beside the model's words (issues 32 and 40).

A small model loses a long list in its synthesis, answers from unrelated passages instead of saying it
cannot, and no answer says how much of the file it read; so the app lists, counts and totals a list
question's records itself.  But a computed figure carries more authority than the model's, so it must
be right, typed, only what was asked, and never overrule a right answer (issue 40).  This module holds
the pure parts; the analysis calls them and the record keeps their results as notes (``notes``),
shown at view time:

* ``chat_list``: whether a chat message about a file that fits asks for its items (the list path, issue 45);
* ``list_target`` and ``asked``: whether an instruction asks for a list, a count ("how many", "every
  X"), a total ("total", "net", "how much") or an average, and of what; the words that decided it are
  kept and shown (a guess the user sees, and edits on the card's "List every" field);
* ``typed``: an item's value and unit: the model's reading where the quote writes that number, else the
  quote's one amount (``quantities``: never an id's digits, a year, a date, a version, a phone number);
* ``merge_items``: the records merged by what they are (the same place, or the same name, value, unit
  and dates: never one name within another); total and subtotal lines are no records;
* ``file_states``: the figures the file itself states as the answer ("250 employees", "Total due");
* ``summarize`` and ``figure_lines``: what the app states: the file's figure first, the items as what
  they are, totals only within one unit and only when every value could be typed, over how much of
  the file; ``model_figure``: the model's own figure, shown beside the app's when they differ;
* ``point_question``, ``versions`` and ``same_answer``: a question with one answer, and the different
  answers the chunks gave (one fact written two ways is one answer);
* ``read_coverage`` / ``passages_coverage``: how much of the file an answer rests on.

Every guess here is measured on the labelled cases of ``tests/data/records/`` (``test_figures_corpus``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from . import quantities
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
                   r"there|in|on|from|of|mentioned|listed|named|given|found|defined|declared|used|imported|recorded|"
                   r"the\s+file|this|that)\b.*$", re.I)
_LEAD = re.compile(r"^(?:the|all|every|each|of)\s+", re.I)


_FIGURE = re.compile(r"\b(?:what(?:'s|’s|\s+is|\s+was|\s+are|\s+were)\s+(?:the\s+|my\s+|our\s+|their\s+|its\s+)?"
                     r"(?:[\w’'-]+\s+){0,3}?(?:net|gross|grand|overall|final|total|combined|average|mean)\b|"
                     r"how\s+far\s+did\b|"
                     r"how\s+much\b(?!\s+(?:time|longer|older|bigger|more|less))|"
                     r"(?:calculate|compute|work\s+out|give\s+me|tell\s+me)\s+the\s+(?:net\s+|grand\s+)?"
                     r"(?:total|sum|average|mean)\b|\bin\s+total\s*\?|\baltogether\s*\?|\bin\s+all\s*\?)", re.I)
# A plain list: "Which rooms need repainting?", "Name the suppliers", "Who are the speakers?" (a plural).
_PLAIN_LIST = re.compile(r"^\W*which\s+(?P<a>[a-z][\w-]*s)\b"
                         r"|\bname\s+(?:the\s+|all\s+(?:the\s+)?|every\s+)?(?P<b>[a-z][\w-]*s)\b"
                         r"|^\W*who\s+(?:are|were)\s+the\s+(?:[\w’'-]+['’]s\s+)?(?P<c>[a-z][\w-]*s)\b", re.I)
_WHY = re.compile(r"^\W*(?:why|explain|how\s+come|what\s+caused|what\s+explains)\b", re.I)


def list_target(instruction: str) -> str:
    """What an instruction asks to be listed, counted or totalled ("vault codes"), or "" when it
    asks for no list; "amounts" for a figure asked of the whole file ("What is the net total?", "How
    much did we spend?").  ``instruction``'s ``@model`` directive does not matter (it is not matched)."""
    if re.match(r"^\W*(?:summar\w*|sum\s+up|describe|explain|outline|overview)\b", instruction, re.I) or \
            _WHY.match(instruction):
        return ""                                      # "Summarize the total picture", "Why doesn't the total match?"
    m = _TARGET.search(instruction)
    if m is None:
        if _FIGURE.search(instruction):
            return "amounts"
        plain = _PLAIN_LIST.search(instruction)
        return next((g for g in plain.groups() if g), "") if plain else ""
    what = re.sub(r"^(?:the\s+)?(?:total\s+)?number\s+of\s+", "", m["what"].strip(), flags=re.I)
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


# -- what the question asks the app to compute ------------------------------------------------------

_NUMBER_OF = re.compile(r"\b(?:how\s+many|(?:total\s+)?number\s+of|count\s+(?:of\s+)?(?:the\s+|all\s+)?)", re.I)
_AVERAGE = re.compile(r"\b(?:average|mean|median|on\s+average)\b", re.I)
_TOTAL = re.compile(r"\b(?:total|totals|totalled|totaled|sum|net|add(?:s|ed)?\s+up|in\s+all|altogether|combined|"
                    r"how\s+much(?!\s+(?:time|longer|older|bigger|more|less))|how\s+far\s+did)\b", re.I)
_EVERY = re.compile(r"\b(?:every|all(?:\s+of)?\s+the|all|each)\b", re.I)


@dataclass(frozen=True)
class Ask:
    """What a list question asks the app to compute (issue 40): ``op`` "count" (how many, every X),
    "total" (a total, sum or net), "average", "list" (a plain list: no figure) or "none" (not a list
    question); ``target`` what is listed; ``words`` the question's words that decided it (shown)."""

    op: str
    target: str = ""
    words: str = ""


def asked(instruction: str, list_of: str | None = None) -> Ask:
    """What ``instruction`` asks the app to compute.  ``list_of``: the card's "List every" field as the
    user left it (None: what ``list_target`` reads; "": cleared, so nothing is computed)."""
    target = list_target(instruction) if list_of is None else " ".join(list_of.split())
    if not target:
        return Ask("none")
    for op, pattern in (("count", _NUMBER_OF), ("average", _AVERAGE), ("total", _TOTAL), ("count", _EVERY)):
        if (m := pattern.search(instruction)):
            return Ask(op, target, " ".join(m.group(0).split()).lower())
    plain = _PLAIN_LIST.search(instruction)
    return Ask("list", target, " ".join(plain.group(0).split()).lower() if plain else "list")


# -- a chat message on the list path (issue 45) -------------------------------------------------------

# Questions about the file as a file ("how many lines does app.log have?"): no items to list.
_FILE_AS_FILE = {"line", "lines", "word", "words", "character", "characters", "chars", "token", "tokens", "page",
                 "pages", "byte", "bytes", "paragraph", "paragraphs", "sentence", "sentences", "letters"}
# Lists the model writes from its reading rather than items the file holds ("list the main ideas", "the pros
# and cons", "the differences between"): plain chat answers them, unless the question asks for every one.
_MODEL_LISTS = {"idea", "ideas", "point", "points", "takeaway", "takeaways", "theme", "themes", "difference",
                "differences", "reason", "reasons", "lesson", "lessons", "argument", "arguments", "pros", "cons",
                "advantages", "disadvantages", "benefits", "steps", "highlights", "insights", "conclusions",
                "findings", "suggestions", "questions", "topics", "things", "options", "improvements", "ways",
                "strengths", "weaknesses", "similarities", "tips", "changes", "problems", "issues", "risks"}
_JUDGED = re.compile(r"^(?:(?:the\s+)?(?:main|key|important|most\s+\w+|top|best|biggest|major|core|central|"
                     r"essential|relevant|notable|interesting|\d+|two|three|four|five|six|seven|ten|few)\s+)+", re.I)
_STATED = re.compile(r"\b(?:stated|quoted|given|written|printed|say|says|said|state|states)\b", re.I)
_TYPOS = ((re.compile(r"\bwhats\b", re.I), "what's"), (re.compile(r"\bwich\b", re.I), "which"),
          (re.compile(r"\b(?<=\w\s)r\b(?=\s+(?:in|on|there|listed|mentioned)\b)", re.I), "are"))
# Requests to do something with the file (check it, explain it, make something of it) and yes-or-no questions
# ("is the total correct?", "can I count on these numbers?"): plain chat, whatever words follow.
_NOT_A_LIST = re.compile(r"^\W*(?:(?:(?:can|could|would)\s+you|please|pls)\s+)?(?:check|explain|describe|fix|review|"
                         r"rewrite|translate|verify|improve|test|write|make|draft|summar\w*|comment|critique|evaluate|"
                         r"compare|convert|refactor|walk\s+me\s+through)\b"
                         r"|\b(?:and|then)\s+(?:explain|describe|tell\s+me\s+(?:what|how|why))\b"
                         r"|^\W*total\s+\w+(?:\s+\w+)?\s*[:,!]"
                         r"|^\W*(?:is|are|was|were|does|do|did|should|shall|has|have|can\s+(?:i|we)|could\s+(?:i|we))\b",
                         re.I)
# A target that is no item of the file: a preposition ("count on the numbers"), a pronoun ("count me in"),
# the model's own ("list your assumptions"), how often ("how many times a day")
_PREPOSITION = re.compile(r"^(?:in|on|from|of|at|to|for|with|about|by|into|me|you|us|it|them|your|yours|times)\b",
                          re.I)
_NOT_PLURAL = {"is", "was", "has", "does", "this", "its", "his", "us", "yes", "always", "perhaps", "sometimes",
               "across", "less", "unless", "thus", "as", "ones", "your"}
_PLURAL = r"(?P<what>(?:[a-z][\w-]*\s+)?[a-z][\w-]*s)"
# What a chat message says that a card's instruction seldom does: "what countries appear in…", "which IP
# addresses show up…", "tell me which cities we stop in…", "what ingredients do I need…", "what are the flight
# numbers in…", "pull out the action items…", "name the keynote speakers…", "every email address that…",
# "who attended…", "sum up the amounts…", "average star rating across…".
_CHAT_LISTS = (
    re.compile(r"\b(?:what|which)\s+" + _PLURAL + r"\s+(?:appear|show|occur|are|were|is|do|does|did|have|has|"
               r"we|i|you|they|get|got)\b", re.I),
    re.compile(r"\bwhat\s+are\s+(?:the\s+|all\s+(?:of\s+)?(?:the\s+)?)?" + _PLURAL
               + r"\s+(?:in|on|from|of|listed|mentioned|named|recorded|used|defined|given)\b", re.I),
    re.compile(r"\b(?:pull\s+out|pick\s+out|extract|enumerate|grab|name|list)\s+(?:the\s+|all\s+(?:of\s+)?(?:the\s+)?|"
               r"every\s+)?" + _PLURAL + r"\b", re.I),
    re.compile(r"\b(?:every|all\s+(?:of\s+)?the)\s+(?P<what>[a-z][\w-]*(?:\s+[a-z][\w-]*)?)\s+(?:that|which|in|from|"
               r"mentioned|listed|named|on)\b", re.I),
    re.compile(r"^\W*(?:what|which)\s+" + _PLURAL + r"\s+(?:does|do|did)\s+\S+\s+(?:define|declare|contain|import|"
               r"export|use|have|mention|list|name|hold|include|call)\b", re.I),
)
_WHO = re.compile(r"\bthe\s+names\s+of\s+(?:every(?:one|body)|all)\b|\bwho\s+(?:attended|came|took\s+part|participated|(?:was|were)\s+(?:at|present|there|invited))\b",
                  re.I)
_FIGURE_FIRST = re.compile(r"^\W*(?:the\s+)?(?P<op>average|mean|median|total|sum)\s+(?!up\b)(?:[a-z][\w-]*\s+){0,3}"
                           r"(?:of|across|in|for|over|from|per)\b", re.I)
_SUM_UP = re.compile(r"^\W*(?:sum|add)\s+up\s+(?:the\s+|all\s+(?:of\s+)?(?:the\s+)?)?" + _PLURAL + r"\b", re.I)
_DOCUMENT_PARTS = {"results", "notes", "minutes", "sections", "chapters", "contents", "documents", "papers",
                   "articles", "discussions", "meetings", "comments", "reviews", "emails", "messages", "events"}


def chat_list(message: str) -> Ask:
    """Whether a chat message about a file that fits the window asks for the file's items listed, counted,
    totalled or averaged (issue 45): then one model call lists them from the whole file and the app counts
    them, as for a large file.  The app's one guess of this, measured on ``tests/data/chat_lists``
    (``test_chat_lists``): the answer shows it and "Answer in chat instead" undoes it in one tap.

    ``asked`` decides, with what a chat message adds: requests to do something with the file and yes-or-no
    questions are none; a question about the file as a file ("how many lines", no items) is none; a list
    the model writes rather than one the file holds ("the main ideas", "the pros and cons") is none unless
    every one is asked for; a figure the file states ("the total cost stated", "how many hours does it
    say") is none; and the ways a chat message asks for a list that a card's instruction seldom uses."""
    for typo, right in _TYPOS:
        message = typo.sub(right, message)
    if _NOT_A_LIST.search(message):
        return Ask("none")
    ask = asked(message)
    if ask.op == "none":
        return _chat_only(message)
    target = ask.target.lower()
    if target in _FILE_AS_FILE or "," in target or _PREPOSITION.match(target) or target in _NOT_PLURAL:
        return _chat_only(message)
    judged = _JUDGED.match(target)
    head = target[judged.end():] if judged else target
    if ask.op == "list" and (judged or not head.split() or head.split()[0] in _MODEL_LISTS):
        return Ask("none")
    if ask.op in ("total", "average", "count") and _STATED.search(message) and not _EVERY.search(message):
        return Ask("none")
    return ask


def _chat_only(message: str) -> Ask:
    """The list a chat message asks for in words ``asked`` does not read (``_CHAT_LISTS``, ``_WHO``,
    ``_FIGURE_FIRST``, ``_SUM_UP``); none when it asks for none, or for a list the model writes."""
    if (m := _FIGURE_FIRST.match(message)):
        op = m["op"].lower()
        return Ask("average" if op in ("average", "mean", "median") else "total", "amounts",
                   " ".join(m.group(0).split()).lower())
    if (m := _SUM_UP.match(message)) and m["what"].lower().split()[-1] not in _DOCUMENT_PARTS | _MODEL_LISTS:
        return Ask("total", m["what"].lower(), " ".join(m.group(0).split()).lower())
    if (m := _WHO.search(message)):
        return Ask("list", "people", " ".join(m.group(0).split()).lower())
    for pattern in _CHAT_LISTS:
        m = pattern.search(message)
        if m is None:
            continue
        what = m["what"].lower()
        words = what.split()
        if words[-1] in _NOT_PLURAL or words[0] in _NOT_PLURAL or _JUDGED.match(what) or words[-1] in _MODEL_LISTS \
                or what in _FILE_AS_FILE:
            continue
        every = bool(_EVERY.search(m.group(0)))
        if words[-1].endswith("ss") and not every:      # "which class", "what address": one, not a list
            continue
        op = "count" if every else "list"
        return Ask(op, what, " ".join(m.group(0).split()).lower())
    return Ask("none")


# -- the items of a list -----------------------------------------------------------------------

_DIGITS = re.compile(r"\d+")
_WORD = re.compile(r"[\w]+")
_TOTAL_LINE = re.compile(r"^\W*(?:sub-?\s?totals?|grand\s+totals?|totals?|sum|net\s+(?:total|amount)|amount\s+due|"
                         r"balance|(?:closing|opening|running|new|old)\s+balance|carried\s+forward|brought\s+forward|"
                         r"c/f|b/f)\b", re.I)
_SUBTOTAL = re.compile(r"^\W*(?:sub-?\s?totals?|balance|(?:closing|opening|running|new|old)\s+balance|carried|brought|"
                       r"c/f|b/f)\b", re.I)


def numbers_in(text: str) -> list[float]:
    """The amounts a text writes (``quantities``: never an id's digits, a year or a date), in order."""
    return [q.value for q in quantities.amounts(text)]


def _norm(text: str) -> str:
    return " ".join(_WORD.findall(text.casefold()))


def near(a: str, b: str, ratio: float | None = None) -> bool:
    """Two short answers that are the same words as far as a reader can tell: folded equal (case,
    spaces and punctuation aside), always with the same digits; with ``ratio``, also nearly equal by
    letters (never for names: "Aaason" and "Aabson" are two people)."""
    a, b = _norm(a), _norm(b)
    if not a or not b:
        return False
    if a == b:
        return True
    if _DIGITS.findall(a) != _DIGITS.findall(b):
        return False
    return ratio is not None and SequenceMatcher(None, a, b, autojunk=False).ratio() >= ratio


def name_key(name: str, instruction: str = "") -> str:
    """An item's name as two names are compared: folded (case, spacing, punctuation), without a trailing
    qualifier the question does not ask about ("Ann Smith (manager)", "Paris, France" -> "paris")."""
    head = re.split(r"\s*[(,–—]|\s+-\s+", name, maxsplit=1)[0]
    tail = name[len(head):]
    asked_words = set(_norm(instruction).split())
    if head.strip() and (not tail or not set(_norm(tail).split()) & asked_words):
        name = head
    return _norm(name)


@dataclass
class Item:
    """One record of a computed list: the model's words for it, the file's words it rests on, its value
    and unit as typed (``typed``), the chunks (1-based) that listed it and where its quote lies in the
    document's text (-1: no quote the file holds)."""

    text: str
    quote: str = ""
    value: float | None = None
    chunks: list[int] = field(default_factory=list)
    at: int = -1
    end: int = -1          # where its quote ends in the document's text
    unit: str = ""
    inferred: bool = False  # the value is the app's reading of the quote (the model gave none)
    key: tuple = field(default=(), repr=False, compare=False)        # (name, value, unit, dates)
    words: frozenset = field(default=frozenset(), repr=False, compare=False)

    @property
    def chunk(self) -> int:
        return self.chunks[0] if self.chunks else 0


def typed(point: dict, quote: str, commas: bool | None = None) -> tuple[float | None, str]:
    """A listed item's value and unit: the model's reading (its sign included: a purchase that a bank
    export writes -63.18 is 63.18 to a question about spending) when the quote writes that number;
    else, when the model gave none, the quote's one amount (or its one amount with a unit beside whole
    numbers without one: "Dose 7: 12.5mg"), with the file's sign; else none.  Never a number the file does not hold, never an id's
    digits, a year, a date, a version or a phone number (``quantities``)."""
    given = quantities.number_in(point.get("value"), commas)
    unit_given = quantities.normal_unit(point.get("unit")) or (given.unit if given is not None else "")
    numbers = quantities.quantities(quote, commas) if quote else []
    in_quote = [q for q in numbers if q.kind == "amount"]
    if given is not None:
        # The model's reading wins over the app's guess that a number is an id (room 12B, "four engineers"),
        # never over a date, a time, a year, a version or a phone number.
        readable = in_quote + [q for q in numbers if q.kind == "id"] + quantities.number_words(quote)
        same = [q for q in readable if math.isclose(abs(q.value), abs(given.value), rel_tol=1e-9, abs_tol=1e-9)]
        if not same:
            return None, unit_given
        return given.value, same[0].unit or unit_given           # the model's reading, its sign included
    if len(in_quote) == 1:
        return in_quote[0].value, in_quote[0].unit or unit_given
    with_unit = [q for q in in_quote if q.unit]
    if len(with_unit) == 1 and all(q.unit or q.value == int(q.value) for q in in_quote):
        return with_unit[0].value, with_unit[0].unit         # "Dose 7 (2024): 12.5mg": the measure, not the label
    return None, unit_given


def is_total_line(name: str, quote: str) -> bool:
    """A line that totals others (a total, a subtotal, a balance) is a total, not a record."""
    return bool(_TOTAL_LINE.match(name) or (quote and _TOTAL_LINE.match(quote)))


def merge_items(results, text: str, instruction: str = "") -> tuple[list[Item], int]:
    """The items of every relevant chunk's list (``ChunkResult``s with ``points`` of ``{"point", "quote",
    "value", "unit"}``), merged by what they are: the same record quoted at the same place (the overlap
    two chunks share) is one; elsewhere two items are one when their names agree once folded
    (``name_key``: not when one contains the other) and so do their values, units and the dates their
    quotes write: one person named in two places is one item with two passages, two payments of
    different amounts stay two.  A line that totals others is left out (``is_total_line``; the file's
    stated figures are ``file_states``).  In the file's order (items without a place after, in chunk
    order).  Returns the items and how many were left out over ``MAX_ITEMS``.  Linear in the items."""
    commas = quantities.comma_decimal(text[:200_000])
    items: list[Item] = []
    by_key: dict[tuple, Item] = {}
    cut = 0
    for r in results:
        if not getattr(r, "relevant", True) or getattr(r, "status", "ok") != "ok":
            continue
        chunk_text = text[r.start:r.end] if r.end > r.start else ""
        squashed = Squashed(chunk_text) if chunk_text else None
        n = r.index + 1
        for p in r.points:
            if p.get("stated"):
                continue
            words = " ".join(str(p.get("point", "")).split())
            quote = " ".join(str(p.get("quote", "")).split())
            if (not words and not quote) or is_total_line(words, quote):
                continue
            at, span = -1, (0, 0)
            if quote and squashed is not None and (spans := squashed.spans(quote)):
                span = (r.start + spans[0][0], r.start + spans[0][1])
                at = span[0]
            value, unit = typed(p, quote, commas)
            inferred = value is not None and quantities.number_in(p.get("value"), commas) is None
            name = name_key(words or quote, instruction)
            dates = tuple(sorted(dates_in(quote)))
            key = (name, value, unit, dates)
            tokens = frozenset(name.split())
            same = _overlapping(items, span, n, tokens) or by_key.get(key)
            if same is not None:
                if n not in same.chunks:
                    same.chunks.append(n)
                if same.value is None and value is not None:
                    same.value, same.unit, same.inferred = value, unit, inferred
                continue
            if len(items) >= MAX_ITEMS:
                cut += 1
                continue
            item = Item(words or quote, quote, value, [n], at, span[1], unit, inferred, key, tokens)
            items.append(item)
            by_key.setdefault(key, item)
    placed = sorted((i for i in items if i.at >= 0), key=lambda i: i.at)
    return placed + [i for i in items if i.at < 0], cut


NEAR_WINDOW = 400          # items of the chunk before and this one looked at for the shared overlap


def _recent(items: list[Item], n: int):
    """The latest items that came from chunk ``n`` or the one before (newest first, at most NEAR_WINDOW)."""
    for item in reversed(items[-NEAR_WINDOW:]):
        if item.chunks and item.chunks[-1] >= n - 1:
            yield item


def _overlapping(items: list[Item], span: tuple[int, int], n: int, tokens: frozenset) -> Item | None:
    """An item whose quote's place in the file overlaps this one's (two chunks quoting their overlap),
    named alike (one name's words within the other's: "code B2" and "B2"; never "A1" and "B2" that
    quote one sentence)."""
    if span[1] <= span[0]:
        return None
    for i in _recent(items, n):
        if i.at >= 0 and i.at < span[1] and span[0] < i.end and (tokens <= i.words or i.words <= tokens):
            return i
    return None


def line_numbers(text: str, offsets: list[int]) -> dict[int, int]:
    """The 1-based line of each offset into ``text`` (-1 offsets left out), in one pass over the text."""
    out: dict[int, int] = {}
    line, at = 1, 0
    for offset in sorted(o for o in set(offsets) if o >= 0):
        line += text.count("\n", at, offset)
        at = offset
        out[offset] = line
    return out


def file_states(results, text: str, ask: Ask) -> list[dict]:
    """The figures the file itself states as the answer (issue 40: "Northwind has 250 employees",
    "Total due: €4,247.25"): each chunk's ``stated`` entries and, for a total, its total lines (not its
    subtotals or balances), each kept only where its quote is the chunk's and writes that value.
    [{"value", "unit", "chunk", "quote"}], one per value and unit, in the file's order."""
    if ask.op not in ("count", "total", "average"):
        return []
    commas = quantities.comma_decimal(text[:200_000])
    out: list[dict] = []
    for r in results:
        if not getattr(r, "relevant", True) or getattr(r, "status", "ok") != "ok":
            continue
        chunk_text = text[r.start:r.end] if r.end > r.start else ""
        for p in r.points:
            words = " ".join(str(p.get("point", "")).split())
            quote = " ".join(str(p.get("quote", "")).split())
            wanted = p.get("stated") or (ask.op == "total" and is_total_line(words, quote)
                                         and not _SUBTOTAL.match(words) and not _SUBTOTAL.match(quote))
            if not wanted or not quote or not Squashed(chunk_text).find(quote):
                continue
            value, unit = typed(p, quote, commas)
            if value is None or any(s["value"] == value and s["unit"] == unit for s in out):
                continue
            out.append({"value": value, "unit": unit, "chunk": r.index + 1, "quote": quote})
    return out


def values_asked(ask: Ask, items: list[Item]) -> list[Item]:
    """The items as the answer shows them: a value the app read from a quote itself is kept only where the
    question asks for a total or an average (a roster's shirt number is no value of a player)."""
    if ask.op in ("total", "average"):
        units = {i.unit for i in items if i.value is not None and not i.inferred}
        for i in items:                  # "Year 5" read from a pledge among pounds: not a pledge's value
            if i.inferred and not i.unit and units and "" not in units:
                i.value, i.inferred = None, False
        return items
    for i in items:
        if i.inferred:
            i.value, i.unit, i.inferred = None, "", False
    return items


def settled(ask: Ask, items: list[Item]) -> Ask:
    """A "how many" whose every record carries a number of what is counted is a total of those numbers
    ("How many hours did Marta work?" over timesheet rows of hours; "How many visitors came?" over each
    day's visitors), not a count of the rows; an ask of anything else stays as it is."""
    if ask.op != "count" or ask.words not in ("how many", "number of", "total number of") or not items:
        return ask
    word = ask.target.split()[0].lower() if ask.target else ""
    if word in quantities.UNIT_WORDS:
        return Ask("total", ask.target, ask.words)              # "how many hours", "how many litres": a quantity
    if all(i.value is not None and not i.inferred and not i.unit for i in items):
        return Ask("total", ask.target, ask.words)              # the model read a number of them in every row
    stem = re.escape(word.rstrip("s")[:max(3, len(word) - 2)])
    counts = re.compile(rf"\d[\d,.' ]*\s+(?:[\w-]+\s+)?{stem}\w*", re.I) if word else None
    if counts is not None and sum(1 for i in items if counts.search(i.quote)) * 2 >= len(items):
        return Ask("total", ask.target, ask.words)              # "Friday: 180 visitors": each row counts them
    return ask


def summarize(items: list[Item], states: list[dict], ask: Ask, read: int, chunks: int, cut: int = 0) -> dict:
    """What the app states beside the model's answer (recorded as the scene's ``chunk-count`` note):
    the ask, the distinct items, for a total or an average the figure per unit (only when every item
    has a value the app could type: else none, and how many have none), the file's own stated figures,
    and how much of the file was read."""
    out = {"op": ask.op, "target": ask.target, "words": ask.words, "count": len(items), "cut": cut,
           "read": read, "chunks": chunks, "file_states": states, "totals": {}, "values": {}, "untyped": 0,
           "model_says": None}
    if ask.op in ("total", "average"):
        untyped = [i for i in items if i.value is None]
        out["untyped"] = len(untyped)
        by_unit: dict[str, list[float]] = {}
        for i in items:
            if i.value is not None:
                by_unit.setdefault(i.unit, []).append(i.value)
        out["values"] = {u: len(v) for u, v in by_unit.items()}
        if by_unit and not untyped:
            out["totals"] = {u: round(sum(v) / (len(v) if ask.op == "average" else 1), 10) for u, v in by_unit.items()}
    return out


def number_text(value: float) -> str:
    """1234.5 -> "1,234.5"; 37.0 -> "37"; 12.25 -> "12.25"."""
    if abs(value - round(value)) < 1e-9:
        return f"{round(value):,}"
    return f"{value:,.6f}".rstrip("0").rstrip(".")


_SYMBOLS = {"EUR": "€", "USD": "$", "GBP": "£", "JPY": "¥", "INR": "₹"}


def amount_text(value: float, unit: str = "") -> str:
    """A value with its unit as a reader writes it: "€4,247.25", "-€12.5", "110 mg", "20 %", "3"."""
    if unit in _SYMBOLS:
        money = f"{abs(value):,.2f}" if abs(value - round(value, 2)) < 1e-9 and value != round(value) else number_text(abs(value))
        return ("-" if value < 0 else "") + _SYMBOLS[unit] + money
    return number_text(value) + (f" {unit}" if unit else "")


_WORDS_NUMBERS = {w: n for n, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                             "thirteen fourteen fifteen sixteen seventeen eighteen nineteen "
                                             "twenty".split())}
_COUNT_NEAR = re.compile(r"\b(?:there\s+(?:are|were|is)|total\s+of|found|lists?|listed|contains?|holds?|has|have|had|"
                         r"counted|names?|named|employs?|employed|in\s+all|in\s+total|altogether)\b", re.I)
_TOTAL_NEAR = re.compile(r"\b(?:total\w*|sum|net|comes?\s+to|came\s+to|amounts?\s+to|adds?\s+up\s+to|added\s+up\s+to|"
                         r"in\s+all|altogether|combined|overall)\b", re.I)


def model_figure(text: str, summary: dict, question: str = "") -> float | None:
    """The figure the model's answer gives for what the app computes (None when it gives none): for a
    count, a number that counts the target ("There are 4 vault codes", "Northwind has 250 employees",
    "twelve codes"; never a year, a date, an id or a chunk number); for a total or an average, the
    amount in the unit computed that the answer ties to the question: the words before it (since the
    amount before) share the question's words or say "total", "net", "in all"; never a figure for each
    item ("280 mg each"), never one of several units' totals."""
    op, target = summary.get("op"), summary.get("target") or ""
    if op == "count":
        return _model_count(text, target)
    if op not in ("total", "average") or len(summary.get("totals") or {}) > 1:
        return None
    if not summary.get("totals") and not summary.get("file_states"):
        return None                                           # nothing the app states to set it beside
    units = set(summary.get("totals") or {}) | {s.get("unit", "") for s in summary.get("file_states") or []}
    clean = _without_citations(text)
    found = [q for q in quantities.amounts(clean) if q.unit in units or (not units and q.unit)]
    asked_words = {w.rstrip("s") for w in _norm(question).split() if len(w) > 2} - _COMMON
    target = (summary.get("target") or "").split()
    counted = re.compile(rf"^\s+(?:[\w-]+\s+)?{re.escape(target[0].rstrip('s')[:5])}", re.I) \
        if target and target[0] != "amounts" else None
    best, best_score = None, 0
    for q in found:
        before = _BOUNDARY.split(clean[:q.start])[-1]
        after = _BOUNDARY.split(clean[q.end:])[0]
        if op == "total" and _PER_ITEM.match(after):
            continue                                          # "280 mg each": one item's figure
        if not q.unit and counted is not None and not counted.match(clean[q.end:q.end + 30]):
            continue                                          # "house 1" counts no eggs; "273 eggs" does
        words = {w.rstrip("s") for w in _norm(before + " " + after).split()}
        said = (_AVERAGE_NEAR.search(before[-40:]) or _AVERAGE_AFTER.match(after)) if op == "average" \
            else (_TOTAL_NEAR.search(before[-40:]) or _TOTAL_AFTER.match(after))
        score = 100 * bool(said) + len(words & asked_words)        # "in all", "an average of" first; then the question's words
        if score > best_score:
            best, best_score = q.value, score
    return best


_BOUNDARY = re.compile(r"[.;:!?(),\n]\s*|\s(?:and|plus|but|while|then|including|excluding)\s", re.I)


_COMMON = {"what", "was", "were", "the", "how", "much", "many", "did", "does", "for", "and", "with", "from", "into",
           "over", "this", "that", "total", "all", "give", "tell"}
_PER_ITEM = re.compile(r"^\s*(?:each|apiece|per\s+(?:item|person|head|piece|dose|unit|invoice)|a\s+(?:head|piece|dose))\b",
                       re.I)
_AVERAGE_NEAR = re.compile(r"\b(?:average|mean|averag\w+|typically|on\s+average)\b[^.;]{0,12}$", re.I)
_AVERAGE_AFTER = re.compile(r"^\s*(?:on\s+average|average|a\s+(?:day|week|month)|per\s+(?:day|week|month))\b", re.I)


_TOTAL_AFTER = re.compile(r"^\s*(?:in\s+(?:all|total)|altogether|all\s+told|combined|overall|so\s+far|total)\b",
                          re.I)


def _without_citations(text: str) -> str:
    """The answer without its [3] chunk markers (same length: offsets kept)."""
    return re.sub(r"\[\d+(?:\s*[,–-]\s*\d+)*\]", lambda m: " " * len(m.group(0)), text)


def _model_count(text: str, target: str) -> float | None:
    stems = {w.casefold().rstrip("s") for w in _WORD.findall(target) if len(w) > 2}
    stems |= {w[:-3] for w in stems if w.endswith("ie")} | {"item", "entr", "entrie", "record", "one", "people",
                                                            "person", "member", "staff"}
    clean = _without_citations(text)
    candidates = [(q.start, q.end, q.value) for q in quantities.quantities(clean) if q.kind == "amount" and not q.unit]
    candidates += [(m.start(), m.end(), float(_WORDS_NUMBERS[m.group(0).casefold()]))
                   for m in re.finditer(r"\b(?:" + "|".join(_WORDS_NUMBERS) + r")\b", clean, re.I)]
    for start, end, value in sorted(candidates):
        if value < 0 or value != int(value) or re.search(r"(?:chunks?|sections?|pages?|passages?)\s*$",
                                                         clean[max(0, start - 12):start], re.I):
            continue
        after = [w.casefold() for w in _WORD.findall(clean[end:end + 60])[:4]]
        nouns = [w for w in after if w.rstrip("s") in stems or w.removesuffix("ies") in stems
                 or w.removesuffix("es") in stems]
        if nouns or _COUNT_NEAR.search(clean[max(0, start - 30):start]) and after and after[0].rstrip("s") in stems:
            return value
    return None


def plural(target: str, n: int) -> str:
    """"vault code" -> "vault codes" when n is not 1 (a target given in the plural stays as it is)."""
    if n == 1 or target.endswith("s") or not target[-1:].isalpha():
        return target
    if target.endswith("y") and target[-2:-1] not in "aeiou":
        return target[:-1] + "ies"
    return target + ("es" if target.endswith(("sh", "ch", "x", "z")) else "s")


LIST_REPLY_ITEMS = 200      # items a list answer in the chat writes out (the table holds them all)


def list_reply(items: list[dict], target: str, file: str, cut: int = 0) -> str:
    """The answer to a list question on a file read in one call (issue 45): the items the model listed,
    each with the file's line and the value the app read, in the file's order; no model wrote these
    words, so they claim nothing the items do not show (the count and totals are the figures' lines)."""
    n = len(items)
    if not n:
        return f"The model found no {plural(target or 'item', 2)} in `{file}`."
    lines = [f"The {plural(target or 'item', n)} the model found in `{file}`:", ""]
    for it in items[:LIST_REPLY_ITEMS]:
        value = it.get("value")
        amount = f": {amount_text(value, it.get('unit') or '')}" if isinstance(value, (int, float)) else ""
        where = f" (line {it['line']:,})" if it.get("line") else ""
        lines.append(f"- {_markdown_safe(it.get('text') or it.get('quote') or '')}{amount}{where}")
    more = n - LIST_REPLY_ITEMS + cut
    if more > 0:
        lines += ["", f"… and {more:,} more: the table below holds every one."]
    return "\n".join(lines)


_MARKDOWN = re.compile(r"([\\`*_\[\]<>#|])")


def _markdown_safe(text: str) -> str:
    """An item's words as literal text in a Markdown list (a `*` or `_` in a name is no emphasis)."""
    return _MARKDOWN.sub(r"\\\1", " ".join(text.split()))


def count_line(count: int, target: str, total: float | None, valued: int, stated: int | None, cut: int) -> str:
    """The count line of an answer recorded before issue 40 (its ``chunk-count`` note has no "op")."""
    line = f"{count:,} {plural(target or 'item', count)}" + (f" (and {cut:,} more not kept)" if cut else "")
    if total is not None:
        line += f"; total {number_text(total)}" + (f" over the {valued:,} that carry a number" if valued < count else "")
    if stated is not None and stated != count:
        line += f". The model's summary says {stated:,}; the app counted {count:,} in the chunks' answers"
    return line


def figure_lines(summary: dict) -> list[tuple[str, str]]:
    """What the answer's box says of a summary (``summarize``), as (label, words) lines: what the file
    states, what the app counted or computed and over what, and the model's own figure when it
    differs, with why.  Nothing is stated that the app could not type; a partial read says so."""
    op, target, count = summary.get("op"), summary.get("target") or "item", int(summary.get("count") or 0)
    read, chunks = int(summary.get("read") or 0), int(summary.get("chunks") or 0)
    where = (f"in the {read:,} of {chunks:,} chunks read" if read < chunks else
             f"in all {chunks:,} chunks of the file" if chunks > 1 else "in the whole file") if chunks else "in the file"
    things = plural(target, count)
    lines: list[tuple[str, str]] = []
    states = summary.get("file_states") or []
    for s in states:
        lines.append(("The file states", f"{amount_text(s['value'], s.get('unit', ''))} (chunk {s.get('chunk')}: "
                                         f"“{s.get('quote', '')}”)"))
    cut = int(summary.get("cut") or 0)
    more = f" (and {cut:,} more not kept)" if cut else ""
    words = summary.get("words") or ""
    why = f"; the question says “{words}”" if words and words not in ("list",) else ""
    reference = states[0]["value"] if states else None
    if op == "count" or op == "list":
        if states:
            lines.append(("Listed", f"{count:,} {things} are named {where}{more}"))
        elif op == "count":
            lines.append(("Counted by the app", f"{count:,} {things} {where}{more}{why}"))
            reference = count
    elif op in ("total", "average"):
        lines.append(("Listed", f"{count:,} {things} {where}{more}"))
        untyped = int(summary.get("untyped") or 0)
        totals = summary.get("totals") or {}
        if untyped:
            lines.append(("No " + ("total" if op == "total" else "average"),
                          f"{untyped:,} of the {count:,} {things} carry no value the app could read"))
        elif totals:
            what = "sum" if op == "total" else "mean"
            said = [f"{'total' if op == 'total' else 'average'} {amount_text(v, u)} ({what} of "
                    f"{summary['values'].get(u, 0):,} value{'s' if summary['values'].get(u, 0) != 1 else ''}"
                    f"{' in ' + u if u else ''})" for u, v in totals.items()]
            label = "Computed by the app" if not states else "The items listed add up to"
            lines.append((label, "; ".join(said) + ("; not added together: different units" if len(totals) > 1 else "")
                          + (why if not states else "")))
            if reference is None and len(totals) == 1:
                reference = next(iter(totals.values()))
    says = summary.get("model_says")
    if says is not None and reference is not None and not math.isclose(abs(says), abs(reference), rel_tol=1e-9,
                                                                          abs_tol=1e-6):
        basis = (f"the file states {number_text(reference)}" if states else
                 f"the app {'counted' if op == 'count' else 'computed'} {number_text(reference)} {where}")
        lines.append(("The model's answer says", f"{number_text(says)}; {basis}"))
    return lines


# -- disagreeing answers ---------------------------------------------------------------------------

@dataclass
class Version:
    """One answer to a point question, the chunks (1-based) that gave it and their best confidence."""

    answer: str
    chunks: list[int] = field(default_factory=list)
    confidence: int | None = None


def versions(results) -> list[Version]:
    """The different short answers the relevant chunks gave (the same answer written differently merged:
    ``same_answer``), most confident first; one version (or none) means they agree."""
    out: list[Version] = []
    for r in results:
        answer = " ".join(str(getattr(r, "answer", "") or "").split())
        if not getattr(r, "relevant", True) or not answer:
            continue
        same = next((v for v in out if same_answer(v.answer, answer)), None)
        if same is None:
            out.append(Version(answer, [r.index + 1], r.confidence))
        else:
            same.chunks.append(r.index + 1)
            if r.confidence is not None and (same.confidence is None or r.confidence > same.confidence):
                same.confidence = r.confidence
    return sorted(out, key=lambda v: -(v.confidence if v.confidence is not None else -1))


def same_answer(a: str, b: str) -> bool:
    """Two short answers that say one thing written two ways: the same date ("3 March 2021", "March 3,
    2021", "2021-03-03"), the same amount ("1,200" and "1200", "£1.2m" and "£1,200,000"), the same words
    (case, spacing, punctuation aside, or nearly so), or one the other's head before a qualifier
    ("Paris" and "Paris, France")."""
    da, db = dates_in(a), dates_in(b)
    if da and db and not da & db:
        return False                                  # different days, however alike the words
    qa, qb = _figures_of(a), _figures_of(b)
    if qa and qb:
        return qa == qb                               # the same figures: one answer ("Net 30", "within 30 days")
    if da and db:
        return True
    if near(a, b, ratio=0.85):
        return True
    ka, kb = name_key(a), name_key(b)
    if ka and ka == kb:
        return True
    pa, pb = _parts(a), _parts(b)                     # "Lyon" and "Centre de Congrès, …, Lyon, France"
    return bool(pa and pb) and (pa <= pb or pb <= pa)


def _parts(text: str) -> set[str]:
    """An answer's comma- or bracket-separated parts, each folded."""
    return {p for p in (_norm(x) for x in re.split(r"[,;()]", text)) if p}


def _figures_of(text: str) -> list[float]:
    """The amounts an answer writes (not its dates), sorted: what two answers must agree on."""
    return sorted(round(q.value, 6) for q in quantities.amounts(text))


_MONTH_NUMBERS = {m: i for i, names in enumerate((("jan", "january"), ("feb", "february"), ("mar", "march"),
                  ("apr", "april"), ("may",), ("jun", "june"), ("jul", "july"), ("aug", "august"),
                  ("sep", "sept", "september"), ("oct", "october"), ("nov", "november"), ("dec", "december")), 1)
                  for m in names}
_D_MONTH_Y = re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\.?\s+([A-Za-z]+)\.?,?\s+(\d{4})\b")
_MONTH_D_Y = re.compile(r"\b([A-Za-z]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b")
_ISO = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_NUMERIC = re.compile(r"\b(\d{1,2})[./](\d{1,2})[./](\d{4})\b")


def dates_in(text: str, whole: bool = False) -> set[str]:
    """The dates ``text`` writes, as ISO days (a numeric day/month gives both readings); with ``whole``,
    only when the text is one date and little else (a short answer)."""
    found: set[str] = set()
    spans = []
    for m in _D_MONTH_Y.finditer(text):
        if (mo := _MONTH_NUMBERS.get(m.group(2).lower())):
            found.add(f"{m.group(3)}-{mo:02d}-{int(m.group(1)):02d}")
            spans.append(m.span())
    for m in _MONTH_D_Y.finditer(text):
        if (mo := _MONTH_NUMBERS.get(m.group(1).lower())):
            found.add(f"{m.group(3)}-{mo:02d}-{int(m.group(2)):02d}")
            spans.append(m.span())
    for m in _ISO.finditer(text):
        found.add(f"{m.group(1)}-{int(m.group(2)):02d}-{int(m.group(3)):02d}")
        spans.append(m.span())
    for m in _NUMERIC.finditer(text):
        d, mo, y = int(m.group(1)), int(m.group(2)), m.group(3)
        found |= {f"{y}-{mo:02d}-{d:02d}" if mo <= 12 else "", f"{y}-{d:02d}-{mo:02d}" if d <= 12 else ""} - {""}
        spans.append(m.span())
    if whole and found:
        rest = text
        for a, b in sorted(spans, reverse=True):
            rest = rest[:a] + rest[b:]
        if len(_WORD.findall(rest)) > 3:
            return set()
    return found


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


# -- reading the most relevant chunks first (issue 42) -----------------------------------------------

CONFIDENT = 4            # of 5: a chunk's answer this sure may end a relevance-first read
CONFIRM = 2              # ranked chunks read after the last new answer, to see that they add nothing
SHARE = 0.25             # a relevance-first read that finds no sure answer stops after this share of the file


def enough(read: list, total: int) -> str:
    """Whether a relevance-first read may stop, from its results in the order read (most relevant
    first): "answered" when a chunk answered with confidence ``CONFIDENT`` or more and the ``CONFIRM``
    chunks read after the last new answer added no other answer; "share" when ``SHARE`` of the file
    (three chunks at least) was read without a sure answer; "" to read on.  Never for a list, a count
    or a total: there completeness is the task (the card reads those whole)."""
    answers_seen: list[str] = []
    last_new = -1
    sure = False
    for i, r in enumerate(read):
        if getattr(r, "status", "ok") != "ok" or not getattr(r, "relevant", False):
            continue
        answer = " ".join(str(getattr(r, "answer", "") or "").split()) or " ".join(
            str(p.get("point", "")) for p in getattr(r, "points", [])[:1])
        confident = (getattr(r, "confidence", None) or 0) >= CONFIDENT
        if answer and not any(same_answer(answer, a) for a in answers_seen):
            answers_seen.append(answer)
            last_new = i
        sure = sure or (confident and bool(answer))
    if sure and last_new >= 0 and len(read) - 1 - last_new >= CONFIRM:
        return "answered"
    if not sure and len(read) >= max(3, math.ceil(SHARE * total)):
        return "share"
    return ""


# -- coverage ---------------------------------------------------------------------------------------

def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' if n != 1 else ''}"


def read_coverage(read: int, chunks: int, lines: list, irrelevant: int, unread: str = "",
                  max_ranges: int = 4) -> str:
    """A read's coverage: "read 41 of 41 chunks (lines 1–6,592); 3 had nothing relevant"; a partial read
    names the lines it read, never the whole file's (issue 45): "read 4 of 47 chunks (lines 1–621); not
    read: lines 622–6,425".  ``lines``: the (first, last) line of each chunk read."""
    line = f"read {read:,} of {_plural(chunks, 'chunk')} (lines {_spans(lines, max_ranges)})"
    if irrelevant:
        line += f"; {irrelevant:,} had nothing relevant"
    if unread:
        line += f"; not read: {unread}"
    return line


def _spans(lines: list, max_ranges: int) -> str:
    """Line ranges, touching ones merged: "120–180, 2,300–2,410" (at most ``max_ranges``, then "…")."""
    merged: list[list[int]] = []
    for a, b in sorted((int(a), int(b)) for a, b in lines):
        if merged and a <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return ", ".join(f"{a:,}–{b:,}" for a, b in merged[:max_ranges]) + (", …" if len(merged) > max_ranges else "")


def relevant_coverage(lines: list, chunks: int, why: str, irrelevant: int = 0, max_ranges: int = 4) -> str:
    """A relevance-first read's coverage (issue 42): "read 4 of 59 chunks, the most relevant (lines 120–180,
    2,300–2,410); reading stopped when they answered the question; the rest not read"."""
    line = f"read {len(lines):,} of {_plural(chunks, 'chunk')}, the most relevant (lines {_spans(lines, max_ranges)})"
    if irrelevant:
        line += f"; {irrelevant:,} had nothing relevant"
    if why == "answered":
        line += "; reading stopped when they answered the question"
    elif why == "share":
        line += f"; none answered it surely, so reading stopped at the most relevant {round(SHARE * 100)} %"
    return line + ("; the rest not read" if len(lines) < chunks else "")


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
