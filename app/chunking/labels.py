"""A chunk's label for the map prompt: its number, and its heading paths, lines or pages."""
from __future__ import annotations

from typing import Iterable

from .document import Chunk, _utf8_len


# ---------------------------------------------------------------- labels

LABEL_MAX_BYTES = 300        # a chunk label never grows past this (it is budgeted as fixed)
PATH_SEP = " › "
SIBLING_SEP = " · "


def _label_groups(sections: Iterable[tuple[str, ...]]) -> list[tuple[tuple[str, ...], list[str]]]:
    """Heading paths grouped by parent, in order: siblings share one ``A › B › x · y``."""
    groups: list[tuple[tuple[str, ...], list[str]]] = []
    for path in sections:
        if not path:
            continue
        parent, leaf = path[:-1], path[-1]
        if groups and groups[-1][0] == parent:
            groups[-1][1].append(leaf)
        else:
            groups.append((parent, [leaf]))
    return groups


def _clip(text: str, nbytes: int) -> str:
    """text cut to nbytes of UTF-8 (with an ellipsis when cut)."""
    if _utf8_len(text) <= nbytes:
        return text
    return text.encode("utf-8")[: max(0, nbytes - 3)].decode("utf-8", "ignore") + "…"


def chunk_label(chunk: Chunk, total: int, max_bytes: int = LABEL_MAX_BYTES,
                pages: tuple[int, int] | None = None) -> str:
    """The chunk's label for the map prompt: ``Chunk i of N`` plus, when the document has
    headings, the heading path of every section the chunk holds, e.g.::

        Chunk 3 of 12 (sections: fs › Promises API › filehandle.read() · filehandle.write(); fs › Callback API)

    Sections that do not fit ``max_bytes`` (UTF-8) are left out with "… N more", so the label's
    cost is bounded and can be reserved when chunks are sized (``map_prompt_overhead``).  A
    chunk without headings (source code, plain prose) is labelled with its lines instead:
    ``Chunk 3 of 12 (lines 120–245)``.
    """
    head = f"Chunk {chunk.index + 1} of {total}"
    groups = _label_groups(chunk.sections or (chunk.heading_path,))
    if pages:                      # a PDF's chunk: its pages say where it is (its lines are the extractor's)
        where = f"page {pages[0]}" if pages[0] == pages[1] else f"pages {pages[0]}–{pages[1]}"
        if not groups:
            return f"{head} ({where})"
        head = f"{head} ({where})"
    if not groups:
        if chunk.first_line:
            return f"{head} (lines {chunk.first_line}–{chunk.last_line})"
        return head
    room = max_bytes - _utf8_len(head) - len(" (sections: )")
    left = sum(len(leaves) for _, leaves in groups)
    reserve = len("; … 9999 more")
    out = ""
    for parent, leaves in groups:
        prefix = ("; " if out else "") + "".join(p + PATH_SEP for p in parent)
        piece = ""
        for leaf in leaves:
            add = (SIBLING_SEP if piece else prefix) + leaf
            if _utf8_len(out + piece + add) + (reserve if left > 1 else 0) > room:
                if not out and not piece:          # not even one section: clip it
                    piece = _clip(add, room - reserve)
                    left -= 1
                out += piece
                return f"{head} (sections: {out}{'; … %d more' % left if left else ''})"
            piece += add
            left -= 1
        out += piece
    return f"{head} (sections: {out})"
