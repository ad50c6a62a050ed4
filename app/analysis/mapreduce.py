"""Map prompts and the combine/reduce step, with a progress guarantee.

The reduce step combines the partial answers in one synthesis request when they
fit.  When they do not, it combines them in rounds of batches (LangChain's
"collapse"), and every round makes progress by construction:

* each part is cut to at most half of a batch's room, so every batch that is
  sent holds at least two parts (a lone last part is carried over as it is):
  a round of n parts leaves at most ceil(n / 2);
* each combined part's reply is capped (``num_predict``) at half of what its
  batch held and at the map reply size, and cut to that cap if a server
  ignores it: the parts also get shorter in total.

A round that would not shrink (a window too small to hold two parts and a reply)
stops the job with a clear ``CombineError`` instead of looping.

Cited answers (issue #15, after LLM×MapReduce, arXiv 2410.09342): each map call
asks through Ollama's ``format`` for a small JSON object (``MAP_SCHEMA``: is the
chunk relevant, short points each resting on a quote, a confidence 0-5), read
strictly by ``read_map_reply``; anything else is today's free text.  Each part
given to the reduce carries its chunk number, every point as ``[n] point``; a
combined part's label names the chunks it merged, and the synthesis cites them as
``[12]`` or ``[12, 40]``.  ``resolve_citations`` then keeps only numbers of chunks
that had something relevant, so every citation opens a real passage.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Callable

from .. import chunking
from ..chunking.document import _utf8_len
from ..budget import estimate_messages, estimate_tokens, reduce_batches
from ..errors import Refused
from ..render import documents_own
from .quotes import Squashed

log = logging.getLogger(__name__)

MAP_SYSTEM = ("Answer the instruction from this chunk of a longer document only. "
              "If nothing in it is relevant, say so in one line.")
MAX_POINTS = 4            # points a structured partial answer may give
MAP_JSON_SYSTEM = ("Answer the instruction from this chunk of a longer document only, in JSON: relevant "
                   f"(true or false), at most {MAX_POINTS} points each with a quote of the chunk's exact words, "
                   "confidence 0-5.")
# A structured map request is one user message: what the reply must be comes after the chunk, where a
# small model still sees it, instead of in a system line before the instruction. Measured (issue 30,
# bench/RESULTS.md): qwen2.5-coder 0.5B's quotes found in the chunk 41 % of 39 points, was 24 % of 38;
# 90 tokens around a chunk, was 108, which brings the map prompts under 1.05x LangChain's plus the overlap.
MAP_JSON_ASK = ("Answer from this chunk only, in JSON: relevant (true/false), "
                f"up to {MAX_POINTS} points each quoting its exact words, confidence 0-5.")
MAP_SCHEMA = {
    "type": "object",
    "properties": {
        "relevant": {"type": "boolean"},
        "points": {"type": "array", "maxItems": MAX_POINTS, "items": {
            "type": "object",
            "properties": {"point": {"type": "string"}, "quote": {"type": "string"}},
            "required": ["point", "quote"]}},
        "confidence": {"type": "integer", "minimum": 0, "maximum": 5},
    },
    "required": ["relevant", "points", "confidence"],
}
REDUCE_SYSTEM = ("You combine partial answers, each written from one chunk of a longer document, into one answer "
                 "to the user's instruction. Keep what matters, merge repeats, and say if parts are missing. "
                 "Cite the chunks of each claim as [12] or [12, 40]. Where parts disagree, weigh their confidence "
                 "and say so: \"chunk 12 says X, chunk 40 says Y\".")
CITE_LINE = "Keep each point's chunk number as its citation."
ROUND_NOTE = "\nYour answer is combined again: keep every chunk number in square brackets."
MAX_QUOTE_CHARS = 300      # a "quote" of a whole chunk would bloat the record: its start marks the place
MIN_PART_TOKENS = 32      # below this a combined part says nothing useful
MAX_ROUNDS = 12           # 2**12 parts: far beyond any max_chunks


class CombineError(Refused):
    """The partial answers cannot be combined within the model's window."""


def map_prompt(task: str, chunk: chunking.Chunk, total: int, reply_words: int | None = None,
               pages: tuple[int, int] | None = None) -> str:
    """The user message of one free-text map call (seed 000's layout, with the label and, when the
    instruction allows a short answer, a length limit after the text, where a small model
    still sees it)::

        <task>\\n\\n---\\nChunk i of N (in: A › B):\\n<chunk text>[\\n\\n---\\nAnswer ... words.]
    """
    tail = "" if reply_words is None else f"\n---\nAnswer in at most {reply_words} words."
    return _labelled(task, chunk, total, pages) + tail


def map_json_prompt(task: str, chunk: chunking.Chunk, total: int, reply_words: int | None = None,
                    pages: tuple[int, int] | None = None) -> str:
    """The one message of a structured map call: seed 000's layout, then what the reply must be
    (``MAP_JSON_ASK``) and its length::

        <task>\\n\\n---\\nChunk i of N (in: A › B):\\n<chunk text>---\\nAnswer from this chunk only, in JSON: … At most … words.
    """
    length = "" if reply_words is None else f" At most {reply_words} words."
    return f"{_labelled(task, chunk, total, pages)}---\n{MAP_JSON_ASK}{length}"


def _labelled(task: str, chunk: chunking.Chunk, total: int, pages: tuple[int, int] | None) -> str:
    """The instruction, the chunk's label and its text (ending in a newline)."""
    label = chunking.chunk_label(chunk, total, pages=pages)
    body = chunk.text if chunk.text.endswith("\n") else chunk.text + "\n"
    return f"{task}\n\n---\n{label}:\n{body}"


def without_closing(text: str) -> str:
    """A map prompt's text after its label without the line that closes it (a length limit or
    ``MAP_JSON_ASK``): the chunk as sent, for the tests and benches that read the requests."""
    for closing in (f"---\n{MAP_JSON_ASK}", "\n---\nAnswer in at most "):
        if closing in text:
            return text.rsplit(closing, 1)[0]
    return text


def map_prompt_overhead(task: str, total: int = 9999, reply_words: int | None = None) -> str:
    """The longest the map prompt is apart from the chunk text: a label of LABEL_MAX_BYTES and
    the length line.  Estimate it with the system prompt to size chunks so every map request
    fits the window whatever the chunk's sections."""
    fake = chunking.Chunk(index=total - 1, start=0, body_start=0, end=0, text="\n", heading_path=(),
                          kind="text", tokens=0, id="", fingerprint="")
    base = map_prompt(task, fake, total, reply_words)
    return base + "x" * (chunking.LABEL_MAX_BYTES - _utf8_len(f"Chunk {total} of {total}"))


def map_messages(task: str, chunk, total: int, reply_words: int | None = None,
                 pages: tuple[int, int] | None = None, structured: bool = False) -> list[dict]:
    """One map request: seed 000's prompt with the chunk's label (where it starts: its section,
    lines or pages) and, when the instruction allows a short answer, the word limit.
    ``structured`` (the request sends ``MAP_SCHEMA``): one user message that closes with the JSON
    shape (``map_json_prompt``); else ``MAP_SYSTEM`` and ``map_prompt``."""
    if structured:
        return [{"role": "user", "content": map_json_prompt(task, chunk, total, reply_words, pages)}]
    return [{"role": "system", "content": MAP_SYSTEM},
            {"role": "user", "content": map_prompt(task, chunk, total, reply_words=reply_words, pages=pages)}]


# -- reading a partial answer -------------------------------------------------------------

@dataclass
class MapAnswer:
    """A partial answer read: structured (confidence set) or free text (confidence None)."""

    relevant: bool
    text: str
    points: list[dict] = field(default_factory=list)
    confidence: int | None = None
    answer: str = ""           # a point question's short answer (issue 32), "" otherwise


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)
_NEGATION = re.compile(r"^\W*(?:(?:there is |there's |there are )?(?:nothing|no|none)\b|n/?a\b|not relevant\b|"
                       r"(?:this|the) (?:chunk|part|section|text|passage|excerpt)\b[^.]{0,30}?\b"
                       r"(?:does not|doesn't|has no|contains no|holds no|is not|isn't)\b)", re.I)
_RELEVANCE_WORD = re.compile(r"nothing|relevant|related|information|mention|pertinent|applicable|n/?a\b", re.I)
_ELLIPSIS = re.compile(r"^\s*(?:\.\.\.|…)\s*|\s*(?:\.\.\.|…)\s*$")
_QUOTE_MARKS = "\"'“”‘’«»„ "


def nothing_relevant(text: str) -> bool:
    """A free-text answer that says, on one short line, that the chunk had nothing for the instruction."""
    text = text.strip()
    if not text:
        return True
    return ("\n" not in text and len(text) <= 160 and _NEGATION.search(text) is not None
            and _RELEVANCE_WORD.search(text) is not None)


def found_quote(quote: str, chunk: Squashed) -> str:
    """The quote, trimmed of quote marks and ellipses, as the chunk words it, if the chunk holds
    it; "" for a quote the model made up (or one too short to mean anything)."""
    q = _ELLIPSIS.sub("", quote.strip().strip(_QUOTE_MARKS)).strip(_QUOTE_MARKS)
    found = chunk.find(q) if len(q) >= 4 else ""
    return found if len(found) <= MAX_QUOTE_CHARS else found[:MAX_QUOTE_CHARS].rsplit(" ", 1)[0]


def _structured(reply: str) -> dict | None:
    """The reply's JSON object when it has MAP_SCHEMA's shape exactly; None otherwise."""
    text = reply.strip()
    fenced = _FENCE.match(text)
    try:
        data = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return _salvaged(text)
    if not isinstance(data, dict) or not isinstance(data.get("relevant"), bool):
        return None
    points, confidence = data.get("points"), data.get("confidence")
    if not isinstance(points, list) or isinstance(confidence, bool) or not isinstance(confidence, int):
        return None
    if not 0 <= confidence <= 5:
        return None
    for p in points:
        if not isinstance(p, dict) or not isinstance(p.get("point"), str) or not isinstance(p.get("quote", ""), str):
            return None
    return data


_RELEVANT = re.compile(r'^\{\s*"relevant"\s*:\s*(true|false)')
_POINT_START = re.compile(r'\{\s*"point"\s*:')


def _salvaged(text: str) -> dict | None:
    """The whole points of a JSON reply cut off by its ``num_predict`` (small models may loop
    until the cap): what it said before the cut is kept, with no confidence; None if nothing is whole."""
    return _salvaged_objects(text, _POINT_START, "points", lambda point: isinstance(point.get("point"), str)
                             and isinstance(point.get("quote", ""), str))


def _salvaged_objects(text: str, start: re.Pattern, key: str, keep) -> dict | None:
    """A cut-off map reply's ``relevant`` and the whole objects under ``key`` (each beginning where
    ``start`` matches, kept when ``keep`` says so); None if it is not one or nothing is whole."""
    relevant = _RELEVANT.match(text)
    if relevant is None:
        return None
    decoder, found = json.JSONDecoder(), []
    for begin in start.finditer(text):
        try:
            obj, _ = decoder.raw_decode(text, begin.start())
        except ValueError:
            continue
        if isinstance(obj, dict) and keep(obj):
            found.append(obj)
    if relevant.group(1) == "true" and not found:
        return None
    return {"relevant": relevant.group(1) == "true", key: found, "confidence": None}


def read_map_reply(reply: str, chunk_text: str) -> MapAnswer:
    """A map reply read strictly: MAP_SCHEMA's JSON (quotes kept only where the chunk holds
    them), else free text, relevant unless it says in one line that nothing is."""
    data = _structured(reply)
    if data is None:
        return MapAnswer(relevant=not nothing_relevant(reply), text=reply.strip())
    squashed = Squashed(chunk_text)
    points = [{"point": " ".join(p["point"].split()), "quote": found_quote(p.get("quote", ""), squashed)}
              for p in data["points"] if p["point"].strip()][:MAX_POINTS]
    relevant = data["relevant"] and bool(points)
    return MapAnswer(relevant=relevant, text=render_points(points, data["confidence"]) if relevant
                     else "Nothing relevant in this chunk.", points=points if relevant else [],
                     confidence=data["confidence"])


def _line(text: str) -> str:
    return " ".join(text.split())


def render_points(points: list[dict], confidence: int | None) -> str:
    """Points as plain lines (the card's partial answer)."""
    lines = [f"- the chunk states: “{_line(p['quote'])}”" if p.get("stated") else
             f"- {p['point']}" + (f" (“{_line(p['quote'])}”)" if p.get("quote") else "") for p in points]
    if confidence is not None:
        lines.append(f"Confidence {confidence} of 5.")
    return "\n".join(lines)


# -- the reduce's parts and citations ----------------------------------------------------------

def label(index: int, total: int, heading: str, text: str) -> str:
    where = f" ({heading})" if heading else ""
    return f"[Chunk {index + 1} of {total}{where}]\n{text}"


def part(index: int, total: int, heading: str, text: str, points: list[dict] | None = None,
         confidence: int | None = None) -> str:
    """A relevant chunk's partial answer for the reduce: its label, then each point (or the
    free text) after its citation number ``[n]``, with its quote and the confidence."""
    n = index + 1
    if not points:
        return label(index, total, heading, f"[{n}] {text}")
    lines = [f"Confidence {confidence} of 5." if confidence is not None else ""]
    lines += [f'- [{n}] the chunk states: "{_line(p["quote"])}"' if p.get("stated") else
              f"- [{n}] {p['point']}" + (f' (quote: "{_line(p["quote"])}")' if p.get("quote") else "")
              for p in points]
    return label(index, total, heading, "\n".join(line for line in lines if line))


_LABEL_CHUNK = re.compile(r"^\[Chunk (\d+) of \d+")
_LABEL_COMBINED = re.compile(r"^\[Combined answer \d+ of \d+, chunks ([\d, -]+)\]")


def part_chunks(text: str) -> list[int]:
    """The chunk numbers a part stands for, from its label (a combined part names its chunks)."""
    if m := _LABEL_CHUNK.match(text):
        return [int(m.group(1))]
    if m := _LABEL_COMBINED.match(text):
        return unranges(m.group(1))
    return []


def unranges(text: str) -> list[int]:
    """'1-3, 5' -> [1, 2, 3, 5] (``ranges`` undone)."""
    out: list[int] = []
    for token in text.split(","):
        a, _, b = token.strip().partition("-")
        if a.isdigit():
            out.extend(range(int(a), int(b) + 1) if b.isdigit() else [int(a)])
    return out


_CITED = r"\d+(?:\s*[-–]\s*\d+)?"          # 12, or a range 12-14
_CITATION = re.compile(rf"(\s?)(?<![\w\]])\[\s*(?:chunks?\s+)?({_CITED}(?:\s*,\s*(?:and\s+)?{_CITED})*)\s*\](?![(:])", re.I)
MAX_RANGE = 200           # a cited range longer than this is read as its two ends


def _cited(numbers: str) -> list[int]:
    out: list[int] = []
    for token in numbers.split(","):
        a, _, b = token.replace("and", "").replace("–", "-").strip().partition("-")
        a, b = int(a), int(b) if b.strip() else None
        out.extend(range(a, b + 1) if b is not None and 0 <= b - a <= MAX_RANGE else [a] + ([b] if b else []))
    return out


def resolve_citations(answer: str, valid: set[int]) -> tuple[str, int]:
    """The answer with every citation reduced to chunks in ``valid`` (written ``[12, 40]``);
    a citation of no valid chunk goes. A bracketed number that is the document's (in code, a
    quotation, a reference list: ``render.documents_own``) is no citation and stays as it is.
    Returns the text and how many numbers were removed."""
    removed, out, last = 0, [], 0
    for m in _markers(answer):
        cited = _cited(m.group(2))
        keep = sorted({n for n in cited if n in valid})
        removed += len(set(cited)) - len(keep)
        out += [answer[last:m.start()], f"{m.group(1)}[{', '.join(map(str, keep))}]" if keep else ""]
        last = m.end()
    return "".join(out + [answer[last:]]), removed


_CODE = re.compile(r"^(```|~~~)[^\n]*\n.*?(?:^\1[^\n]*$|\Z)|(`+)[^`\n]*?\2", re.S | re.M)


def _masked(text: str) -> str:
    """``text`` with its code fences and spans blanked to the same length (newlines kept): ``argv[1]``
    in code is an index, not a citation, and offsets still point into the original."""
    return _CODE.sub(lambda m: re.sub(r"[^\n]", "·", m.group(0)), text)


def _markers(answer: str) -> list[re.Match]:
    """The synthesis's own citation markers (matches in the code-masked text, same offsets)."""
    masked, found = _masked(answer), []
    for m in _CITATION.finditer(masked):
        at = m.start() + len(m.group(1))                 # the bracket
        line_start = masked.rfind("\n", 0, at) + 1
        line_end = len(masked) if (e := masked.find("\n", m.end())) < 0 else e
        if not documents_own(masked[line_start:at], masked[m.end():line_end]):
            found.append(m)
    return found


def citations(answer: str) -> list[int]:
    """Every chunk number the answer cites, in order of first use."""
    seen: dict[int, None] = {}
    for m in _markers(answer):
        seen.update(dict.fromkeys(_cited(m.group(2))))
    return list(seen)


MAX_ANSWER_WORDS = 1200   # the longest answer a synthesis or a passages answer is asked for (minutes on a Pi)


def answer_words(tokens: int) -> int:
    """The words an answer of ``tokens`` is asked to keep within: about 3 words per 4 tokens of English,
    less a fifth for Markdown and citation marks, so the model ends by itself before its cap; at
    most ``MAX_ANSWER_WORDS``, rounded to tens."""
    return max(20, min(MAX_ANSWER_WORDS, tokens * 3 // 5) // 10 * 10)


def length_line(words: int | None) -> str:
    """The sentence that tells an answer its length (nothing when no length is given)."""
    return "" if words is None else f"\nAnswer in at most {words} words, and finish your last sentence."


def reduce_prompt(instruction: str, parts: list[str], note: str, words: int | None = None) -> str:
    body = "\n\n".join(parts)
    return (f"Instruction: {instruction}\n\nThe partial answers below were written from the chunks of one "
            f"document, in order. Combine them into one answer to the instruction. {CITE_LINE}{note}"
            f"{length_line(words)}\n\n---\n{body}")


def reduce_messages(instruction: str, parts: list[str], note: str, words: int | None = None) -> list[dict]:
    return [{"role": "system", "content": REDUCE_SYSTEM},
            {"role": "user", "content": reduce_prompt(instruction, parts, note, words)}]


def cut(text: str, tokens: int, bpt: float) -> str:
    """``text`` shortened to about ``tokens`` (estimated), marked when cut."""
    if estimate_tokens(text, bpt) <= tokens:
        return text
    return text.encode()[: max(0, int(tokens * bpt) - 16)].decode("utf-8", "ignore") + " […]"


def batches(parts: list[str], room: int, bpt: float) -> list[list[str]]:
    """Consecutive groups of parts whose estimate fits ``room`` (each part must fit alone),
    by ``budget.reduce_batches``, the rule the card's estimate plans with."""
    groups = reduce_batches([estimate_tokens(part + "\n\n", bpt) for part in parts], room)
    return [[parts[i] for i in group] for group in groups]


def ranges(numbers: list[int]) -> str:
    """1, 2, 3, 5 -> '1-3, 5': short even when most chunks were not run."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)


class Combiner:
    """Reduce partial answers to one answer with ``call(messages, num_predict) -> text``."""

    def __init__(self, call: Callable[[list[dict], int], str], *, effective: int, safety: int, bpt: float,
                 reply_tokens: int, part_reply_tokens: int, progress: Callable[[str], None] = lambda s: None,
                 answer_cap: int = 0):
        self.call, self.bpt, self.progress = call, bpt, progress
        self.effective, self.safety = effective, safety
        self.reply_tokens, self.part_reply_tokens = reply_tokens, part_reply_tokens
        self.answer_cap = answer_cap        # the synthesis's own cap (chat.reply_tokens; 0: the room)
        self.rounds: list[int] = []          # how many parts each combining round started with
        self.final_reply = 0                 # the synthesis' reply cap (the room its window left)

    def _tokens(self, parts: list[str]) -> int:
        return sum(estimate_tokens(p + "\n\n", self.bpt) for p in parts)

    def _room(self, instruction: str, note: str, reply: int, words: int | None = None) -> int:
        """Tokens left for the parts in one request that reserves ``reply`` for the answer."""
        fixed = estimate_messages(reduce_messages(instruction, [], note, words), self.bpt)
        return self.effective - fixed - self.safety - reply

    def combine(self, instruction: str, parts: list[str], note: str) -> str:
        """The synthesis: parts combined in rounds until they fit one request, which is told its
        length (``answer_words``) and may generate all the room the window leaves after the parts
        (at least ``reply_tokens``), never more than its own cap (``answer_cap``, issue 44: a looping small
        model would hold the slot for a quarter of an hour): ``final_reply`` is that cap, for a caller
        that reports a cut."""
        final_room = self._room(instruction, note, self.reply_tokens, MAX_ANSWER_WORDS)
        if final_room < MIN_PART_TOKENS:
            raise CombineError(
                f"The synthesis cannot run: the model's usable context ({self.effective:,} tokens) leaves "
                f"{max(0, final_room):,} tokens for the partial answers once the instruction and the "
                f"{self.reply_tokens:,}-token reply are reserved. Use a model with a larger window.")
        for level in range(1, MAX_ROUNDS + 1):
            if len(parts) <= 1 or self._tokens(parts) <= final_room:
                parts = [cut(p, final_room - 2, self.bpt) for p in parts]   # (a lone part may be too long)
                self.final_reply = self.reply_tokens + max(0, final_room - self._tokens(parts))
                if self.answer_cap:
                    self.final_reply = min(self.final_reply, max(self.answer_cap, 1))
                words = answer_words(self.final_reply)
                return self.call(reduce_messages(instruction, parts, note, words), self.final_reply)
            parts = self._round(instruction, parts, level)
        raise CombineError(f"The partial answers could not be combined in {MAX_ROUNDS} rounds.")

    def _round(self, instruction: str, parts: list[str], level: int) -> list[str]:
        """One combining round: strictly fewer and shorter parts, or CombineError.

        A combined part's label names the chunks it merged, and the request asks to keep
        their citation numbers, so the final synthesis can still cite them."""
        available = self._room(instruction, ROUND_NOTE, 0)
        cap = min(self.part_reply_tokens, available // 3)
        room = available - cap
        per_part = room // 2
        if cap < MIN_PART_TOKENS or per_part < MIN_PART_TOKENS:
            raise CombineError(
                f"The {len(parts)} partial answers do not fit one synthesis request, and the model's usable "
                f"context ({self.effective:,} tokens) is too small to combine them in batches. Use a model "
                "with a larger window, or analyse fewer chunks.")
        before = self._tokens(parts)
        parts = [cut(p, per_part - 2, self.bpt) for p in parts]
        groups = batches(parts, room, self.bpt)
        self.rounds.append(len(parts))
        log.info("combining %d partials in %d batches (round %d)", len(parts), len(groups), level)
        self.progress(f"Combining {len(parts)} partial answers in {len(groups)} batches (round {level})…")
        combined = []
        for n, group in enumerate(groups):
            if len(group) == 1:          # the lone last part: nothing to combine it with
                combined.append(group[0])
                continue
            reply = max(MIN_PART_TOKENS // 2, min(cap, self._tokens(group) // 2))
            text = cut(self.call(reduce_messages(instruction, group, ROUND_NOTE), reply), reply, self.bpt)
            merged = sorted({c for p in group for c in part_chunks(p)})
            chunks = f", chunks {ranges(merged)}" if merged else ""
            combined.append(f"[Combined answer {n + 1} of {len(groups)}{chunks}]\n{text}")
        if len(combined) >= len(parts) or self._tokens(combined) >= before:
            raise CombineError(
                f"Combining the partial answers made no progress (round {level}: {len(parts)} parts of "
                f"{before:,} tokens became {len(combined)} of {self._tokens(combined):,}).")
        return combined


def safety_tokens(margin: float, effective: int) -> int:
    return math.ceil(margin * effective)


# -- issue 32: lists computed by the app, and short answers that may disagree ---------------------
#
# New functions, so the prompt-length changes elsewhere in this module merge cleanly.  A list
# instruction ("list every X", "how many X", "the total of X") asks each chunk for every item it
# holds, each with the exact words it rests on and, when it carries one, its number: the app then
# merges, counts and sums them (``answers.merge_items``).  A point question's partial answer also
# carries its short answer, so chunks that disagree can be shown side by side (``answers.versions``).

MAX_LIST_ITEMS = 200      # items one chunk's list may give
MAX_STATED = 5          # figures one chunk may state as the answer
LIST_SYSTEM = ("List, from this chunk of a longer document only, every item the instruction asks for, in JSON: "
               "relevant (true or false), items: each with item (its name), quote (the chunk's exact words for "
               "it), value (the number it carries as you read it, negative for a refund, credit or deduction; "
               "null if none) and unit (such as mg, €, %, km; null if none); stated: each figure the chunk "
               "itself gives as the answer (a stated count or total) with its value, unit and quote; "
               "confidence 0-5. Leave no item out; a total or subtotal line is not an item.")
LIST_SCHEMA = {
    "type": "object",
    "properties": {
        "relevant": {"type": "boolean"},
        "items": {"type": "array", "maxItems": MAX_LIST_ITEMS, "items": {
            "type": "object",
            "properties": {"item": {"type": "string"}, "quote": {"type": "string"},
                           "value": {"type": ["number", "null"]}, "unit": {"type": ["string", "null"]}},
            "required": ["item", "quote", "value", "unit"]}},
        "stated": {"type": "array", "maxItems": MAX_STATED, "items": {
            "type": "object",
            "properties": {"quote": {"type": "string"}, "value": {"type": "number"},
                           "unit": {"type": ["string", "null"]}},
            "required": ["quote", "value", "unit"]}},
        "confidence": {"type": "integer", "minimum": 0, "maximum": 5},
    },
    "required": ["relevant", "items", "stated", "confidence"],
}
POINT_SYSTEM = (MAP_JSON_SYSTEM.rstrip(".") + ", and answer: the chunk's short answer to the question "
                "(a few words), or \"\" if it has none.")
POINT_SCHEMA = {**MAP_SCHEMA, "properties": {**MAP_SCHEMA["properties"], "answer": {"type": "string"}},
                "required": [*MAP_SCHEMA["required"], "answer"]}
MAX_ANSWER_CHARS = 200


def list_messages(task: str, target: str, chunk, total: int, pages: tuple[int, int] | None = None) -> list[dict]:
    """One map request of a list instruction: the instruction, what to list, the chunk (no word limit:
    the list grows with the chunk)."""
    prompt = map_prompt(task, chunk, total, pages=pages)
    prompt += f"\n---\nList every {target} in this chunk, each with its exact words, its number and unit."
    return [{"role": "system", "content": LIST_SYSTEM}, {"role": "user", "content": prompt}]


def point_messages(task: str, chunk, total: int, reply_words: int | None = None,
                   pages: tuple[int, int] | None = None) -> list[dict]:
    """One map request of a point question: the JSON shape and the short answer asked in the system
    line (``POINT_SYSTEM``), the free-text map prompt (``POINT_SCHEMA`` is sent)."""
    return [{"role": "system", "content": POINT_SYSTEM},
            {"role": "user", "content": map_prompt(task, chunk, total, reply_words=reply_words, pages=pages)}]


_LIST_LINE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(?P<item>.+?)\s*$")


def read_list_reply(reply: str, chunk_text: str) -> MapAnswer:
    """A list map reply: LIST_SCHEMA's JSON, else free text whose bullet lines are the items.  An item
    is kept only when it rests on the chunk's words: its quote, or else its name, found in the chunk
    (that is its quote then); an item the chunk holds neither way was made up and is left out, so the
    app's count is of items the file holds.  Its value is kept as given (``answers`` keeps it only
    where its quote writes it)."""
    data = _list_data(reply)
    squashed = Squashed(chunk_text)
    if data is None:
        text = reply.strip()
        if nothing_relevant(text):
            return MapAnswer(relevant=False, text=text)
        lines = [m["item"] for line in text.splitlines() if (m := _LIST_LINE.match(line))]
        points = [{"point": _line(item), "quote": quote, "value": None}
                  for item in lines[:MAX_LIST_ITEMS] if (quote := found_quote(item, squashed))]
        return MapAnswer(relevant=True, text=text, points=points)     # (its text still goes to the synthesis)
    points = []
    for item in data["items"][:MAX_LIST_ITEMS]:
        words = _line(str(item.get("item") or ""))
        quote = found_quote(str(item.get("quote") or ""), squashed) or found_quote(words, squashed)
        if not quote:           # an item the chunk does not hold, in its quote or its name: made up
            continue
        points.append({"point": words or quote, "quote": quote, "value": _number(item.get("value")),
                       "unit": _unit(item.get("unit"))})
    for stated in data.get("stated", [])[:MAX_STATED] if isinstance(data.get("stated"), list) else []:
        quote = found_quote(str(stated.get("quote") or ""), squashed) if isinstance(stated, dict) else ""
        if quote and _number(stated.get("value")) is not None:      # the file's own words, or nothing
            points.append({"point": "stated", "quote": quote, "value": _number(stated.get("value")),
                           "unit": _unit(stated.get("unit")), "stated": True})
    relevant = bool(data["relevant"]) and bool(points)      # (a chunk that only states the answer is relevant)
    return MapAnswer(relevant=relevant, text=render_points(points, data.get("confidence")) if relevant
                     else "Nothing relevant in this chunk.", points=points if relevant else [],
                     confidence=data.get("confidence"))


def _number(value) -> float | int | None:
    """A JSON value that is a number (never a bool)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _unit(unit) -> str:
    """A unit as the model wrote it ("" for none), one short line."""
    return " ".join(str(unit).split())[:20] if isinstance(unit, str) else ""


def _list_data(reply: str) -> dict | None:
    """The reply's JSON object when it has LIST_SCHEMA's shape; the whole items of one cut off by its
    ``num_predict``; None otherwise."""
    text = reply.strip()
    fenced = _FENCE.match(text)
    try:
        data = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        return _salvaged_items(text)
    if not isinstance(data, dict) or not isinstance(data.get("relevant"), bool) or not isinstance(data.get("items"), list):
        return None
    confidence = data.get("confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, int) or not 0 <= confidence <= 5:
        data["confidence"] = None
    data["items"] = [i for i in data["items"] if isinstance(i, dict)]
    return data


_ITEM_START = re.compile(r'\{\s*"item"\s*:')


def _salvaged_items(text: str) -> dict | None:
    """The whole items of a list reply cut off by its cap (``_salvaged_objects``)."""
    return _salvaged_objects(text, _ITEM_START, "items", lambda item: True)


def read_point_reply(reply: str, chunk_text: str) -> MapAnswer:
    """A point question's map reply: ``read_map_reply``, with the short answer kept (when relevant)."""
    answer = read_map_reply(reply, chunk_text)
    data = _structured(reply)
    short = data.get("answer") if data else None
    if answer.relevant and isinstance(short, str) and short.strip():
        answer.answer = _line(short)[:MAX_ANSWER_CHARS]
    return answer


def list_reduce_task(task: str, target: str, count: int, read: int = 0, chunks: int = 0) -> str:
    """The synthesis instruction of a list: the app lists and counts the items itself, so the model
    writes only a short summary of them (and is told when the count is of part of the file)."""
    where = f"in the {read} of {chunks} chunks read" if read and read < chunks else "in all"
    return (f"{task}\n(The app itself lists and counts the {target or 'items'}: {count} {where}. Do not list them; "
            f"write only a short summary of them in at most three sentences.)")


def map_system_for(task: str) -> str:
    """The longest text a map request of ``task`` carries besides ``map_prompt_overhead``, for sizing its
    chunks (``plan.map_fixed_tokens``): the system line of a list (with its closing line, for the
    longest "list every" the card takes) or a point question, else the JSON closing line (sized as a
    message of its own: a few tokens to spare)."""
    from .answers import list_target, point_question     # (answers imports nothing of this module)
    if list_target(task):
        return LIST_SYSTEM + "\n---\nList every " + "x" * 120 + " in this chunk, each with its exact words."
    return POINT_SYSTEM if point_question(task) else MAP_JSON_ASK
