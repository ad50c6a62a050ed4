"""A chunk's label for the map prompt: its number, and the heading path it starts in, its lines or pages."""
from __future__ import annotations

from .document import Chunk, _utf8_len


# ---------------------------------------------------------------- labels

LABEL_MAX_BYTES = 300        # a chunk label never grows past this (it is budgeted as fixed)
PATH_SEP = " › "


def chunk_label(chunk: Chunk, total: int, max_bytes: int = LABEL_MAX_BYTES,
                pages: tuple[int, int] | None = None) -> str:
    """The chunk's label for the map prompt: ``Chunk i of N`` plus where it starts: the heading
    path of the section it starts in, e.g.::

        Chunk 3 of 12 (in: fs › Promises API › filehandle.read())

    The headings of the sections it goes on into are in its text, each under a parent that is
    either in the text too or on this path: listing them again (as the label did) cost a map call
    71 tokens on average for Node's fs.md, half of what a call sends around its chunk (issue 30,
    bench/bench_vs_langchain.py).  A path longer than ``max_bytes`` (UTF-8) is cut from the left,
    keeping the nearest headings, so the label's cost is bounded and reserved when chunks are sized
    (``map_prompt_overhead``).  A chunk without headings (source code, plain prose) is labelled
    with its lines instead: ``Chunk 3 of 12 (lines 120–245)``; a PDF's chunk with its pages.
    """
    head = f"Chunk {chunk.index + 1} of {total}"
    path = chunk.heading_path or next((p for p in chunk.sections if p), ())
    if pages:                      # a PDF's chunk: its pages say where it is (its lines are the extractor's)
        where = f"page {pages[0]}" if pages[0] == pages[1] else f"pages {pages[0]}–{pages[1]}"
        head = f"{head} ({where})"
        if not path:
            return head
    if not path:
        if chunk.first_line:
            return f"{head} (lines {chunk.first_line}–{chunk.last_line})"
        return head
    room = max_bytes - _utf8_len(head) - len(" (in: )")
    return f"{head} (in: {_clip_left(PATH_SEP.join(path), room)})"


def _clip_left(text: str, nbytes: int) -> str:
    """text cut from the left to nbytes of UTF-8 (with an ellipsis when cut)."""
    if _utf8_len(text) <= nbytes:
        return text
    data = text.encode("utf-8")
    return "…" + data[len(data) - max(0, nbytes - 3):].decode("utf-8", "ignore")
