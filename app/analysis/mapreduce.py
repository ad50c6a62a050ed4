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
"""

from __future__ import annotations

import logging
import math
from typing import Callable

from .. import chunking
from ..budget import estimate_messages, estimate_tokens, reduce_batches
from ..errors import Refused

log = logging.getLogger(__name__)

MAP_SYSTEM = ("Answer the instruction from this chunk of a longer document only. "
              "If nothing in it is relevant, say so in one line.")
REDUCE_SYSTEM = ("You combine partial answers, each written from one chunk of a longer document, into one answer "
                 "to the user's instruction. Keep what matters, merge repeats, and say if parts are missing.")
MIN_PART_TOKENS = 32      # below this a combined part says nothing useful
MAX_ROUNDS = 12           # 2**12 parts: far beyond any max_chunks


class CombineError(Refused):
    """The partial answers cannot be combined within the model's window."""


def map_messages(task: str, chunk, total: int, reply_words: int | None = None,
                 pages: tuple[int, int] | None = None) -> list[dict]:
    """One map request: seed 000's prompt with the chunk's label (sections, lines or pages) and,
    when the instruction allows a short answer, the word limit (``chunking.map_prompt``)."""
    prompt = chunking.map_prompt(task, chunk, total, reply_words=reply_words, pages=pages)
    return [{"role": "system", "content": MAP_SYSTEM}, {"role": "user", "content": prompt}]


def label(index: int, total: int, heading: str, text: str) -> str:
    where = f" ({heading})" if heading else ""
    return f"[Chunk {index + 1} of {total}{where}]\n{text}"


def reduce_prompt(instruction: str, parts: list[str], note: str) -> str:
    body = "\n\n".join(parts)
    return (f"Instruction: {instruction}\n\nThe partial answers below were written from the chunks of one "
            f"document, in order. Combine them into one answer to the instruction.{note}\n\n---\n{body}")


def reduce_messages(instruction: str, parts: list[str], note: str) -> list[dict]:
    return [{"role": "system", "content": REDUCE_SYSTEM},
            {"role": "user", "content": reduce_prompt(instruction, parts, note)}]


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
                 reply_tokens: int, part_reply_tokens: int, progress: Callable[[str], None] = lambda s: None):
        self.call, self.bpt, self.progress = call, bpt, progress
        self.effective, self.safety = effective, safety
        self.reply_tokens, self.part_reply_tokens = reply_tokens, part_reply_tokens
        self.rounds: list[int] = []          # how many parts each combining round started with

    def _tokens(self, parts: list[str]) -> int:
        return sum(estimate_tokens(p + "\n\n", self.bpt) for p in parts)

    def _room(self, instruction: str, note: str, reply: int) -> int:
        """Tokens left for the parts in one request that reserves ``reply`` for the answer."""
        fixed = estimate_messages(reduce_messages(instruction, [], note), self.bpt)
        return self.effective - fixed - self.safety - reply

    def combine(self, instruction: str, parts: list[str], note: str) -> str:
        final_room = self._room(instruction, note, self.reply_tokens)
        if final_room < MIN_PART_TOKENS:
            raise CombineError(
                f"The synthesis cannot run: the model's usable context ({self.effective:,} tokens) leaves "
                f"{max(0, final_room):,} tokens for the partial answers once the instruction and the "
                f"{self.reply_tokens:,}-token reply are reserved. Use a model with a larger window.")
        for level in range(1, MAX_ROUNDS + 1):
            if len(parts) <= 1 or self._tokens(parts) <= final_room:
                parts = [cut(p, final_room - 2, self.bpt) for p in parts]   # (a lone part may be too long)
                return self.call(reduce_messages(instruction, parts, note), self.reply_tokens)
            parts = self._round(instruction, parts, level)
        raise CombineError(f"The partial answers could not be combined in {MAX_ROUNDS} rounds.")

    def _round(self, instruction: str, parts: list[str], level: int) -> list[str]:
        """One combining round: strictly fewer and shorter parts, or CombineError."""
        available = self._room(instruction, "", 0)
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
            text = cut(self.call(reduce_messages(instruction, group, ""), reply), reply, self.bpt)
            combined.append(f"[Combined answer {n + 1} of {len(groups)}]\n{text}")
        if len(combined) >= len(parts) or self._tokens(combined) >= before:
            raise CombineError(
                f"Combining the partial answers made no progress (round {level}: {len(parts)} parts of "
                f"{before:,} tokens became {len(combined)} of {self._tokens(combined):,}).")
        return combined


def safety_tokens(margin: float, effective: int) -> int:
    return math.ceil(margin * effective)
