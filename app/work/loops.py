"""Is a reply repeating itself? (issue 44)

Small models loop: a sentence, a line or a phrase again and again until the reply's cap, which on a Pi
is a quarter of an hour of the one model slot.  A loop is stopped as soon as it is clear, and the reply
kept up to the loop's first turn (the first time the repeated span was written whole).

The measure: the reply's words (folded: case, and punctuation apart from the words) end in the same span
of words written over and over, back to back: a span of ``LONG_SPAN`` words or more three times, or a
shorter one ``SHORT_REPEATS`` times (and at least ``MIN_LOOP_WORDS`` words of repetition in all).  What a
legitimate answer repeats does not end in that: a table's rows and a numbered list's items differ in
their cells and numbers; a poem's refrain comes back between verses, not back to back.  It is tested on
recorded looping replies of the bundled models and on legitimate repetitive replies
(``tests/test_loops.py``, ``tests/data/loops/``).

Two more shapes a small model loops in are found with stricter rules.  A *counted* loop: the same
sentence again and again with only a counting number changed ("25. The Moon's orbit …", "[9] This vault
code …", "Paragraph 3 of section 4 …"): ``COUNTED_REPEATS`` turns back to back, of at least four
different words, whose numbers each step by at most ``COUNT_STEP`` (up or down) from turn to turn, with a
rare jump (a count that starts again), and where one number counts (the item's marker) or the count
starts again.  A log's lines, a table's rows or a tide table differ in numbers that do not count (times,
readings), or repeat fewer times; a list whose items' numbers count together ("chunk 7: code VC-007 opens
locker 7") is data.  Known limit: ten or more back-to-back
sentences that differ only in a counting number are stopped even when meant.  A *run*: one character
``RUN_CHARS`` times or more in a row ("6000000000…"), which no answer means.

``LoopWatch`` takes a streamed reply's pieces as they come and looks again every ``CHECK_EVERY`` words,
so a 1,000-token reply costs a few milliseconds.  Pure: it reads text, nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LONG_SPAN = 6            # words: a span this long or longer is a loop at three back-to-back times
LONG_REPEATS = 3
SHORT_REPEATS = 8        # a shorter span ("the the the", "no, no, no") needs this many
MIN_LOOP_WORDS = 18      # words of repetition in all before anything is called a loop
MAX_SPAN = 120           # the longest span looked for (a paragraph)
CHECK_EVERY = 12         # words between two looks at a streamed reply
CHECK_CHARS = 100        # or characters, for a reply that writes no spaces
COUNTED_REPEATS = 10     # turns differing only in counting numbers
COUNT_STEP = 2           # a counting number steps by this much at most from one turn to the next
MIN_DISTINCT_WORDS = 4   # a counted turn is a sentence, not a label ("Locker 3: open")
RUN_CHARS = 200          # one character this many times in a row
TAIL_CHARS = 6_000       # the reply's end that is looked at (more than MAX_SPAN words, three times)

_WORD = re.compile(r"\w+|[^\w\s]")
_SENTENCE_END = re.compile(r"[.!?:;](?=\s|$)|\n")
_RUN = re.compile(r"(\w)\1{%d,}" % (RUN_CHARS - 1))


@dataclass(frozen=True)
class Loop:
    """A reply that ends in a loop: ``keep`` characters of it are kept (up to the loop's first turn
    written whole); ``span`` the repeated words, ``times`` how often they came back to back."""

    keep: int
    span: str
    times: int


def find_loop(text: str) -> Loop | None:
    """The loop ``text`` ends in, or None."""
    run = _run(text)
    if run is not None:
        return run
    words = [(m.group(0).casefold(), m.start(), m.end()) for m in _WORD.finditer(text) if m.group(0).strip()]
    tokens = [w for w, _, _ in words if w.isalnum() or w in "?!"]       # punctuation aside, but for ? and !
    if len(tokens) < MIN_LOOP_WORDS:
        return None
    places = [(s, e) for w, s, e in words if w.isalnum() or w in "?!"]
    return _exact(text, tokens, places) or _counted(text, tokens, places)


def _run(text: str) -> Loop | None:
    """One character ``RUN_CHARS`` times or more in a row: kept up to its first ten."""
    run = _RUN.search(text)
    if run is None:
        return None
    return Loop(run.start() + 10, run.group(1) * 10 + "…", len(run.group(0)))


def _exact(text: str, tokens: list[str], places: list[tuple[int, int]]) -> Loop | None:
    """The same words over and over, back to back."""
    n = len(tokens)
    for span in range(1, min(MAX_SPAN, n // 2) + 1):
        need = LONG_REPEATS if span >= LONG_SPAN else SHORT_REPEATS
        if span * need > n:
            break
        times = 1
        while (times + 1) * span <= n and tokens[n - (times + 1) * span:n - times * span] == tokens[n - span:]:
            times += 1
        if times < need or span * times < MIN_LOOP_WORDS:
            continue
        if not any(t.isalpha() for t in tokens[n - span:]):
            continue                                   # "0 0 0 0": a matrix of zeros may be meant
        first = n - times * span                       # where the repetition begins: back to where the
        while first > 0 and tokens[first - 1] == tokens[first - 1 + span]:    # words stopped repeating
            first -= 1
        # A span that is itself a repetition of a shorter one was found at that shorter span already.
        return Loop(_turn_end(text, places, first + span - 1, span), " ".join(tokens[n - span:]), times)
    return None


def _counted(text: str, tokens: list[str], places: list[tuple[int, int]]) -> Loop | None:
    """The same sentence over and over with only counting numbers changed."""
    folded = ["#" if t.isdigit() else t for t in tokens]
    n = len(tokens)
    for span in range(LONG_SPAN, min(MAX_SPAN, n // COUNTED_REPEATS) + 1):
        tail = folded[n - span:]
        if "#" not in tail or len({t for t in tail if t.isalpha()}) < MIN_DISTINCT_WORDS:
            continue
        times = 1
        while (times + 1) * span <= n and folded[n - (times + 1) * span:n - times * span] == tail:
            times += 1
        if times < COUNTED_REPEATS:
            continue
        first = n - times * span
        turns = [tokens[first + k * span:first + (k + 1) * span] for k in range(times)]
        numbers = [[int(turn[j]) for turn in turns] for j, t in enumerate(tail) if t == "#"]
        changing = [values for values in numbers if len(set(values)) > 1]
        if not all(_counts(values) for values in changing):
            continue
        # One counting number is an item's marker; several counting together are an item's data (chunk 7,
        # code VC-007, locker 7), a list, unless the count starts again.
        if len(changing) == 1 or any(_starts_again(values) for values in changing):
            return Loop(_turn_end(text, places, first + span - 1, span), " ".join(tail), times)
    return None


def _counts(values: list[int]) -> bool:
    """Do these numbers, one per turn, count (up or down, by small steps, starting again now and then)?"""
    steps = [b - a for a, b in zip(values, values[1:])]
    jumps = sum(1 for d in steps if abs(d) > COUNT_STEP)
    return jumps * 4 <= len(steps)


def _starts_again(values: list[int]) -> bool:
    return any(b < a - COUNT_STEP for a, b in zip(values, values[1:]))


def _turn_end(text: str, places: list[tuple[int, int]], last: int, span: int) -> int:
    """Where the first turn written whole ends: its last word, with its closing punctuation, and on to
    the end of that sentence when one ends within the next turn (a turn found from the reply's end may
    start mid-sentence)."""
    keep = places[last][1]
    if not _SENTENCE_END.match(text, keep):
        limit = places[min(last + span, len(places) - 1)][1]
        end = _SENTENCE_END.search(text, keep, limit)
        if end is not None:
            keep = end.start()
    while keep < len(text) and not text[keep].isspace() and not text[keep].isalnum():
        keep += 1
    return keep


class LoopWatch:
    """A streamed reply's pieces, looked at every ``CHECK_EVERY`` words (or ``CHECK_CHARS`` characters
    with no space, a run): ``feed`` returns the loop as soon as the reply ends in one."""

    def __init__(self) -> None:
        self.text = ""
        self._words = 0
        self._at_look = (0, 0)                 # words and characters at the last look

    def feed(self, piece: str) -> Loop | None:
        self.text += piece
        self._words += piece.count(" ") + piece.count("\n")
        words_at, chars_at = self._at_look
        if self._words - words_at < CHECK_EVERY and len(self.text) - chars_at < CHECK_CHARS:
            return None
        self._at_look = (self._words, len(self.text))
        return find_loop_in_whole(self.text, streaming=True)


def find_loop_in_whole(text: str, streaming: bool = False) -> Loop | None:
    """``find_loop`` over the last part of a long text, its ``keep`` an offset into the whole.  While the
    text is ``streaming`` its last word may be half written, which would break a repetition: words are
    looked at up to the last space (a run of one character, up to the end)."""
    tail_at = max(0, len(text) - TAIL_CHARS)
    tail = text[tail_at:]
    found = _run(tail)
    if found is None:
        whole = max(tail.rfind(" "), tail.rfind("\n")) if streaming else len(tail)
        found = find_loop(tail[:max(whole, 0)])
    if found is None:
        return None
    return Loop(found.keep + tail_at, found.span, found.times)
