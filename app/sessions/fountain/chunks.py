"""The INT. CHUNK ANALYSIS scene (seed 000, and the terminal Harvey's recorder) <-> :class:`ChunkAnalysis`."""

from __future__ import annotations

import json
import re

from .codec import _user_cue, metadata_line, model_cue
from .data import CHUNK_DONE, HARVEY, TS_FORMAT, ChunkAnalysis, CitedPassage, Element, Scene
from .parser import _CHUNK_HEADING, _TIMESTAMP, _timestamp


# ----------------------------------------------------------- chunk analysis

_CHUNK_NOTE = re.compile(
    r"chunk:\s*file=(?P<file>.*?),\s*chunks=(?P<chunks>\d+),\s*model=(?P<model>.*?),"
    r"\s*boundary=(?P<boundary>.*?)(?:,\s*chunk-size=(?P<size>\d+))?(?:,\s*chunk-tokens=(?P<tokens>\d+))?"
)
_RESULT_NOTE = re.compile(r"chunk-result:\s*\d+\s*/\s*\d+\s+(?:—|–|--?)\s+(?P<status>.*)")
_PASSAGE_NOTE = re.compile(
    r"chunk-passage:\s*(?P<n>\d+)\s*/\s*\d+\s+—\s+lines (?P<l1>\d+)-(?P<l2>\d+), chars (?P<c1>\d+)-(?P<c2>\d+)"
    r"(?:, pages (?P<p1>\d+)-(?P<p2>\d+))?(?:\s+—\s+(?P<heading>.*))?")
_QUOTE_NOTE = re.compile(r"chunk-quote:\s*(?P<n>\d+)\s*/\s*\d+\s+—\s+(?P<quote>.*)")
_SOURCE_NOTE = re.compile(r"chunk-source:\s*(?P<source>\S+)")
_RELEVANT_NOTE = re.compile(r"chunk-relevant:\s*(?P<n>\d+)\s*/\s*\d+")
_SYNTHESIS_NOTE = re.compile(r"synthesis:\s*model=(?P<model>.*?)\s+(?:—|–|--?)\s+(?P<status>.*)")
_CHUNK_PAREN = re.compile(r"chunk\s+(\d+)\s*/\s*\d+")
_CHUNK_ACTION = re.compile(r"Harvey processes .+ as \d+ chunks of type (?P<kind>\S+)\.")
SYNTHESIZING = "Synthesizing results."
# Issue 32's computed notes (``sessions.notes`` builds and reads them): kept in order, as written.
COMPUTED = ("chunk-item:", "chunk-count:", "chunk-conflict:", "chunk-coverage:", "rag-answerable:",
            "chunk-replaces:", "chunk-partial:", "chunk-in-chat:")


def chunk_scene(analysis: ChunkAnalysis, user_name: str, before: bool = False) -> Scene:
    """The INT. CHUNK ANALYSIS scene of seed 000 (status only, never chunk content).

    Replies the analysis holds (read from the terminal Harvey's file) are
    written the way its recorder writes them: the model's cue with
    ``(chunk i/N)`` before each result note, HARVEY's "Synthesizing results."
    and ``(synthesis)`` before the synthesis note.  ``before``: the scene stands before the
    turn that asked (the terminal Harvey's order, for an answered analysis); it then opens with
    Harvey's "Harvey processes FILE as N chunks of type KIND." line, which tells the reader so.
    The chunk note gives ``chunk-size`` in bytes as Harvey does, and this app's tokens as
    ``chunk-tokens``.
    """
    a = analysis
    when = a.when.strftime(TS_FORMAT) if a.when else ""
    user = _user_cue(user_name)
    cue = model_cue(a.model)
    size = f", chunk-size={a.chunk_bytes}" if a.chunk_bytes is not None else ""
    els = [Element("action", f"Harvey processes {a.file} as {a.chunks} chunks of type {a.kind}.")] if before else []
    els += [
        Element("note", f"chunk: file={a.file}, chunks={a.chunks}, model={a.model}, "
                        f"boundary={a.boundary}{size}, chunk-tokens={a.chunk_size}"),
        Element("dialogue", a.instruction, user),
    ]
    if metadata_line(a.file) != a.file or _FILE_UNSAFE.search(a.file):
        els.insert(len(els) - 1, Element("note", file_note(a.file)))
    if a.rag:
        els.append(Element("note", a.rag))
    if a.source:
        els.append(Element("note", f"chunk-source: {a.source}"))
    for i, status in enumerate(a.results, 1):
        if i in a.replies:
            els.append(Element("dialogue", a.replies[i], cue, f"chunk {i}/{a.chunks}"))
        els.append(Element("note", f"chunk-result: {i}/{a.chunks} — {status}"))
        if i in a.passages:
            els.extend(Element("note", text) for text in passage_notes(a.passages[i], a.chunks))
    for n in sorted(a.passages):
        if n > len(a.results):        # a retrieval answer's passages (issue 25): no chunk was run
            els.extend(Element("note", text) for text in passage_notes(a.passages[n], a.chunks))
    if a.relevant is not None:
        els.append(Element("note", f"chunk-relevant: {a.relevant}/{a.chunks}"))
    els.extend(Element("note", text) for text in a.unread)
    els.extend(Element("note", text) for text in a.computed)
    if a.synthesis is not None:
        if a.answer is not None:
            els.append(Element("dialogue", SYNTHESIZING, HARVEY))
            els.append(Element("dialogue", a.answer, cue, "synthesis"))
        els.append(Element("note", f"synthesis: model={a.model} — {a.synthesis}"))
        els.append(Element("dialogue", _closing_line(a), HARVEY))
    return Scene(f"INT. CHUNK ANALYSIS — {a.file} {when}".rstrip(), els)


# A file name the notes and the heading cannot hold as it is: whitespace other than single spaces
# (flattened), "[[", "]]" or "/*" (broken apart), or the chunk note's own ", " separator.
_FILE_UNSAFE = re.compile(r"\[\[|\]\]|/\*|,|\s\s|[^\S ]")
_FILE_NOTE = re.compile(r"chunk-file:\s*(?P<name>\".*\")")


def file_note(name: str) -> str:
    """``chunk-file: "…"``: the file's exact name as JSON with spaces, brackets and slashes escaped,
    so it survives the note (one line, whitespace runs flattened, no ``[[``/``]]``/``/*``) and a
    citation opens the file whose name has two spaces, a tab or ``[[`` (issue 35)."""
    text = json.dumps(name).replace(" ", "\\u0020").replace("[", "\\u005b").replace("]", "\\u005d")
    return "chunk-file: " + text.replace("*", "\\u002a")


def _note_safe(text: str) -> str:
    """One line that cannot close its note early (``]]``) or open another (``[[``)."""
    return " ".join(text.split()).replace("]]", "] ]").replace("[[", "[ [")


def passage_notes(p: CitedPassage, chunks: int) -> list[str]:
    """A passage as note texts: its range (and heading path, last, so it may hold anything), then each quote."""
    pages = f", pages {p.pages[0]}-{p.pages[1]}" if p.pages else ""
    heading = f" — {_note_safe(p.heading)}" if p.heading.strip() else ""
    out = [f"chunk-passage: {p.chunk}/{chunks} — lines {p.lines[0]}-{p.lines[1]}, chars {p.start}-{p.end}"
           f"{pages}{heading}"]
    out += [f"chunk-quote: {p.chunk}/{chunks} — {_note_safe(q)}" for q in p.quotes if q.strip()]
    return out


def _closing_line(a: ChunkAnalysis) -> str:
    if a.synthesis == "ok":
        return CHUNK_DONE
    if a.synthesis == "cancelled" or "cancelled" in a.results:
        return "Chunk analysis cancelled. Nothing was injected into the conversation."
    return "Chunk analysis failed. Nothing was injected into the conversation."


def read_chunk_scene(scene: Scene) -> ChunkAnalysis | None:
    """The analysis a CHUNK ANALYSIS scene records, or None for any other scene.

    Both layouts: seed 000's (the user's instruction, status notes only) and the
    terminal Harvey recorder's (no instruction; each chunk's reply under the
    model's cue with ``(chunk i/N)``, the synthesis with ``(synthesis)``, their
    paragraphs cut at blank lines, which are joined again).
    """
    read = _read_chunk(scene)
    return read[0] if read else None


def _read_chunk(scene: Scene) -> tuple[ChunkAnalysis, bool, bool] | None:
    """The analysis, whether the scene holds the user's instruction (seed 000's layout, ours), and
    whether it opens with Harvey's "Harvey processes ..." line (it stands before its turn)."""
    m = _CHUNK_HEADING.fullmatch(scene.heading)
    if not m:
        return None
    when = _timestamp(m["rest"])
    heading_file = _TIMESTAMP.sub("", m["rest"]).strip()
    a = ChunkAnalysis(heading_file, 0, "", "", 0, "", when)
    asked = first = False
    sizes: dict[str, int] = {}     # the chunk note's chunk-size and chunk-tokens, as given
    last: int | str | None = None  # the reply a cut-off paragraph continues
    for el in scene.elements:
        if el.kind == "action" and (processes := _CHUNK_ACTION.fullmatch(el.text)):
            first, a.kind = True, processes["kind"]
            continue
        if el.kind == "note":
            _read_chunk_note(a, " ".join(el.text.split()), sizes)
            last = None
        elif el.kind == "dialogue":
            paren, last = " ".join(el.paren.split()).lower(), None
            if chunk := _CHUNK_PAREN.fullmatch(paren):
                last = int(chunk[1])
                a.replies[last] = el.text
            elif paren == "synthesis":
                a.answer, last = el.text, "answer"
            elif el.character.upper() != HARVEY and not asked:
                a.instruction, asked = el.text, True
        elif last is not None and not _CHUNK_ACTION.fullmatch(el.text):
            if last == "answer":
                a.answer += "\n\n" + el.text
            else:
                a.replies[last] += "\n\n" + el.text
    _settle_units(a, asked, sizes)
    return a, asked, first


def _settle_units(a: ChunkAnalysis, asked: bool, sizes: dict[str, int]) -> None:
    """Which unit the note's ``chunk-size`` is in: with ``chunk-tokens`` beside it, bytes (ours since
    issue 26); without, tokens in a scene holding an instruction (seed 000, our older files) and bytes
    in the terminal Harvey's (its recorder writes ``ChunkConfig`` sizes in bytes)."""
    if "tokens" in sizes:
        a.chunk_size, a.chunk_bytes = sizes["tokens"], sizes.get("size")
    elif "size" in sizes and not asked:
        a.chunk_size, a.chunk_bytes = 0, sizes["size"]
    else:
        a.chunk_size = sizes.get("size", 0)


def _read_chunk_note(a: ChunkAnalysis, note: str, sizes: dict[str, int]) -> None:
    if m := _CHUNK_NOTE.fullmatch(note):
        a.file, a.chunks, a.model, a.boundary = m["file"], int(m["chunks"]), m["model"], m["boundary"]
        sizes.clear()
        sizes.update({key: int(m[key]) for key in ("size", "tokens") if m[key] is not None})
    elif m := _RESULT_NOTE.fullmatch(note):
        a.results.append(m["status"])
    elif m := _FILE_NOTE.fullmatch(note):
        try:
            name = json.loads(m["name"])
        except ValueError:
            return
        if isinstance(name, str) and name:
            a.file = name
    elif m := _PASSAGE_NOTE.fullmatch(note):
        pages = (int(m["p1"]), int(m["p2"])) if m["p1"] else None
        quotes = a.passages[int(m["n"])].quotes if int(m["n"]) in a.passages else []
        a.passages[int(m["n"])] = CitedPassage(int(m["n"]), int(m["c1"]), int(m["c2"]), (int(m["l1"]), int(m["l2"])),
                                                pages, (m["heading"] or "").strip(), quotes)
    elif m := _QUOTE_NOTE.fullmatch(note):
        if int(m["n"]) in a.passages:
            a.passages[int(m["n"])].quotes.append(m["quote"].strip())
    elif m := _SOURCE_NOTE.fullmatch(note):
        a.source = m["source"]
    elif m := _RELEVANT_NOTE.fullmatch(note):
        a.relevant = int(m["n"])
    elif m := _SYNTHESIS_NOTE.fullmatch(note):
        a.synthesis = m["status"]
    elif note.startswith("chunk-unread:"):
        a.unread.append(note)
    elif note.startswith("rag:"):
        a.rag = note
    elif note.startswith(COMPUTED):
        a.computed.append(note)
