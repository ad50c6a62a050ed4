"""A quote found in a text, case and whitespace aside, in the text's own words.

The map step keeps only the quotes its chunk holds (``mapreduce.read_map_reply``) and the
passage view marks them in the file (``passages``): one matcher serves both, so a quote kept
when the chunk was analysed is a quote found when its citation is opened.
"""

from __future__ import annotations


class Squashed:
    """A text folded for matching (case folded, runs of whitespace as one space), with the
    offset in the original of every folded character: a quote found here maps back to the
    chunk's exact words."""

    def __init__(self, text: str):
        chars: list[str] = []
        where: list[int] = []
        for i, ch in enumerate(text):
            if ch.isspace():
                if chars and chars[-1] != " ":
                    chars.append(" ")
                    where.append(i)
                continue
            for folded in ch.casefold():
                chars.append(folded)
                where.append(i)
        self.text, self.folded, self.where = text, "".join(chars), where

    def spans(self, quote: str) -> list[tuple[int, int]]:
        """Every place the text holds ``quote`` (case and whitespace aside), as offsets into it."""
        needle = " ".join(quote.casefold().split())
        out: list[tuple[int, int]] = []
        at = self.folded.find(needle) if needle else -1
        while at >= 0:
            out.append((self.where[at], self.where[at + len(needle) - 1] + 1))
            at = self.folded.find(needle, at + 1)
        return out

    def find(self, quote: str) -> str:
        """The text's own words for ``quote`` (its first place, case and whitespace aside), or ""."""
        found = self.spans(quote)
        return self.text[found[0][0]:found[0][1]] if found else ""
