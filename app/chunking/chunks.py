"""The public chunking calls: Chunk records from a Document's spans (``chunk_document``,
``chunks_from`` for a re-plan), and plans that count chunks without building their texts."""
from __future__ import annotations

import dataclasses
import math
import os
import re

from .document import Chunk, ChunkPlan, ChunkSettings, Document, make_document, read_document
from .packer import _Packer, _Span, _TokenPacker
from .units import _NONSPACE, _quoted_regions, _units


# ---------------------------------------------------------------- public

def _spans(doc: Document) -> list[_Span]:
    """Spans of a document; empty or whitespace-only text gives none."""
    if _NONSPACE.search(doc.text) is None:
        return []
    source = doc.kind == "source"
    regions = _quoted_regions(doc.text) if source else []
    if doc.token_starts is None:
        packer = _Packer(doc.text, doc.settings, source, regions)
        return packer.run(_units(doc.text, doc.kind, regions))
    packer = _TokenPacker(doc.text, doc.settings, source, doc.token_starts, doc.counter, regions)
    return _counted(doc, packer.run(_units(doc.text, doc.kind, regions)))


def _counted(doc: Document, spans: list[_Span]) -> list[_Span]:
    """A counted document's spans, each with its text's own count in place of the packer's size
    (``nbytes`` holds tokens then); a span over the size (a cut that tokenized worse than its
    token starts said) is split at the boundary nearest its middle until each part fits."""
    t, size, count = doc.text, doc.settings.size_tokens, doc.counter.count
    out: list[_Span] = []
    todo = list(reversed(spans))
    while todo:
        sp = todo.pop()
        n = count(sp.prefix + t[sp.start:sp.end])
        if n <= size:
            out.append(sp._replace(nbytes=n))
            continue
        cut = _middle_cut(t, sp.body_start, sp.end) or _word_cut(t, sp.body_start, sp.end)
        if cut is None:
            out.append(sp._replace(nbytes=n))        # one token-long "word": nothing to cut at
            continue
        todo.append(sp._replace(start=cut, body_start=cut, prefix=""))
        todo.append(sp._replace(end=cut))
    return out


def _word_cut(t: str, a: int, e: int) -> int | None:
    """The middle of t[a:e] when it has no boundary at all (one very long word)."""
    middle = (a + e) // 2
    return middle if a < middle < e else None


def _content_end_of(t: str, s: int, e: int) -> int:
    """End of t[s:e] without its trailing whitespace (a chunk's last line is its last text)."""
    k = e
    while k > s and t[k - 1] in " \t\n\r\f\v":
        k -= 1
    return k if k > s else e


def _size(doc: Document, sp: _Span) -> int:
    """A span's tokens: counted (``_counted``), else estimated from its bytes."""
    return sp.nbytes if doc.token_starts is not None else math.ceil(sp.nbytes / doc.settings.bytes_per_token)


def chunk_document(doc: Document) -> list[Chunk]:
    """Chunks of a Document with the settings it was made with."""
    t = doc.text
    sfp = doc.settings.fingerprint
    out = []
    line, pos = 1, 0                      # line number at pos, counted once over the text
    for i, sp in enumerate(_spans(doc)):
        line += t.count("\n", pos, sp.body_start)
        first = line
        last = first + t.count("\n", sp.body_start, _content_end_of(t, sp.body_start, sp.end))
        line, pos = first + t.count("\n", sp.body_start, sp.end), sp.end
        body = t[sp.start:sp.end]
        out.append(Chunk(
            index=i, start=sp.start, body_start=sp.body_start, end=sp.end,
            text=sp.prefix + body if sp.prefix else body,
            heading_path=sp.heading_path, kind=sp.kind,
            tokens=_size(doc, sp), id=f"{doc.fingerprint}-{i:04d}",
            fingerprint=sfp, sections=sp.sections, first_line=first, last_line=last))
    return out


def chunks_from(doc: Document, offset: int, first_index: int) -> list[Chunk]:
    """The chunks of ``doc`` (with its settings) that cover its text from ``offset`` on, numbered from
    ``first_index``; a chunk that straddles ``offset`` keeps only its part after it.

    A running analysis re-plans the rest of its file once a map call has measured the
    file's real bytes per token (``offset`` is where its finished chunks end), so the
    finished chunks stay exactly as they were and the rest is sized right.
    """
    t, out = doc.text, []
    for c in chunk_document(doc):
        if c.end <= offset:
            continue
        if c.body_start < offset:
            first = _NONSPACE.search(t, offset, c.end)
            if first is None:
                continue
            prefix = c.text[:len(c.text) - (c.end - c.start)]      # a continued table's header rows
            if "\n\n" in t[c.start:offset]:
                prefix = ""                                          # (the cut is past that table)
            body = prefix + t[offset:c.end]
            c = dataclasses.replace(c, start=offset, body_start=offset, text=body,
                                    tokens=math.ceil(len(body.encode()) / doc.settings.bytes_per_token),
                                    first_line=t.count("\n", 0, first.start()) + 1)
        index = first_index + len(out)
        out.append(dataclasses.replace(c, index=index, id=f"{doc.fingerprint}-r{index:04d}"))
    return out


def chunk_text(text: str, kind: str = "prose",
               settings: ChunkSettings | None = None) -> list[Chunk]:
    """Chunk a string.  Offsets refer to ``make_document(text, kind).text``
    (the same string unless it had CR line endings or is HTML)."""
    return chunk_document(make_document(text, kind, settings))


def chunk_file(path: str | os.PathLike, settings: ChunkSettings | None = None,
               kind: str | None = None) -> tuple[Document, list[Chunk]]:
    """Read and chunk a file; the kind comes from the extension unless given."""
    doc = read_document(path, settings, kind)
    return doc, chunk_document(doc)


def plan_document(doc: Document) -> ChunkPlan:
    """Count chunks without building their texts (cheap enough for the alert)."""
    spans = _spans(doc)
    sizes = tuple(_size(doc, sp) for sp in spans)
    return ChunkPlan(path=doc.path, kind=doc.kind, chunks=len(spans),
                     tokens=doc.tokens, size_tokens=doc.settings.size_tokens,
                     largest_tokens=max(sizes, default=0), chunk_tokens=sizes)


def plan_text(text: str, kind: str = "prose",
              settings: ChunkSettings | None = None) -> ChunkPlan:
    """plan_document for a string."""
    return plan_document(make_document(text, kind, settings))


def plan_file(path: str | os.PathLike, settings: ChunkSettings | None = None,
              kind: str | None = None) -> ChunkPlan:
    """plan_document for a file (raises ChunkingError like chunk_file)."""
    return plan_document(read_document(path, settings, kind))


# The boundaries a refused chunk is split at, best first: a paragraph end, a sentence end, a line
# end, then between words (never inside one). A cut is taken from the first level that has one in
# the middle half of the chunk's own text; else the cut nearest the middle of any level.
_HALF_LEVELS = (re.compile(r"\n[ \t]*\n\s*"), re.compile(r"[.!?\u2026\u3002][\"'\u201d\u2019)\]]*\s+"),
                re.compile(r"\n"), re.compile(r"\s+"))


def _middle_cut(t: str, a: int, e: int) -> int | None:
    """The offset in (a, e) to split ``t[a:e]`` at: a boundary's end near the middle, or None."""
    middle, quarter = (a + e) // 2, (e - a) // 4
    best = None
    for level in _HALF_LEVELS:
        ends = [m.end() for m in level.finditer(t, a, e) if a < m.end() < e and _NONSPACE.search(t, m.end(), e)]
        if not ends:
            continue
        near = min(ends, key=lambda p: abs(p - middle))
        if abs(near - middle) <= quarter:
            return near
        if best is None or abs(near - middle) < abs(best - middle):
            best = near
    return best


def halve(text: str) -> tuple[str, str]:
    """``text`` in two at the structure boundary nearest its middle (paragraph, sentence, line, word),
    or mid-text when it has none (one long word): what a piece a server refused is sent again as."""
    cut = _middle_cut(text, 0, len(text)) or max(1, len(text) // 2)
    return text[:cut], text[cut:]


def split_to_fit(text: str, max_bytes: int) -> list[str]:
    """``text`` as consecutive pieces of at most ``max_bytes`` UTF-8 bytes (joined, they are the
    text), each too-long piece halved at its best boundary until it fits.  An embedding model reads
    a few hundred tokens and drops the rest, so a passage is embedded as pieces it reads whole;
    halving keeps the pieces of one passage near one size.  Ends: every cut shortens a piece."""
    if max_bytes < 1:
        raise ValueError("max_bytes must be positive")
    out, todo = [], [text]
    while todo:
        piece = todo.pop()
        if len(piece) < 2 or len(piece.encode("utf-8", "surrogatepass")) <= max_bytes:
            out.append(piece)
            continue
        first, second = halve(piece)
        todo += [second, first]
    return out


def split_chunk(text: str, chunk: Chunk, bytes_per_token: float) -> tuple[Chunk, Chunk] | None:
    """Two halves of ``chunk`` (offsets into ``text``, the document's text), cut at the structure
    boundary nearest its middle; None when its own text has no boundary at all (one long word).

    A map call the server refused for its window (a calibration that under-counted, a server's
    own limit) is sent again as two smaller calls, never as it was; the halves keep the chunk's
    index, so its result stays the chunk's. The first half keeps the chunk's overlap and prefix;
    the second starts at the cut.
    """
    cut = _middle_cut(text, chunk.body_start, chunk.end)
    if cut is None:
        return None
    prefix = chunk.text[:len(chunk.text) - (chunk.end - chunk.start)]
    first_text, second_text = prefix + text[chunk.start:cut], text[cut:chunk.end]
    cut_line = text.count("\n", 0, cut) + 1
    last_line = text.count("\n", 0, _content_end_of(text, chunk.body_start, cut)) + 1
    first = dataclasses.replace(chunk, end=cut, text=first_text, id=f"{chunk.id}a",
                                tokens=math.ceil(len(first_text.encode()) / bytes_per_token),
                                last_line=max(chunk.first_line, last_line))
    second = dataclasses.replace(chunk, start=cut, body_start=cut, text=second_text, id=f"{chunk.id}b",
                                 tokens=math.ceil(len(second_text.encode()) / bytes_per_token), first_line=cut_line)
    return first, second
