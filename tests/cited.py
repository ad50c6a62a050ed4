"""A session with a cited analysis answer, written as the analysis records one (issue #15).

The workspace file is real and chunked by the real chunker; the passages are the chunks'
own ranges, so a test can change or delete the file afterwards and see what the reader sees.
"""

from datetime import datetime
from pathlib import Path

from app import chunking
from app.chunking import source_of
from app.sessions import fountain

SETTINGS = chunking.ChunkSettings(size_tokens=120, overlap="none")

SECTIONS = [
    ("Setup", "The installer asks for a language first. Then it asks for a disk."),
    ("Keys", "The vault code is 4471 and it opens\nthe north door. Nobody else knows it."),
    ("Weather", "It rained on the Tuesday of the audit. The audit went on regardless."),
    ("Staff", "Forty people work on the third floor. The canteen closes at two."),
]


def write_notes(workspace: Path, name: str = "notes.md") -> Path:
    """A Markdown file with a section per fact, long enough to make several chunks."""
    workspace.mkdir(parents=True, exist_ok=True)
    filler = " ".join(["This sentence is ordinary filler text about nothing in particular."] * 6)
    body = "".join(f"# {title}\n\n{filler}\n\n{fact}\n\n{filler}\n\n" for title, fact in SECTIONS)
    path = workspace / name
    path.write_text(body, encoding="utf-8")
    return path


def chunk_holding(doc: chunking.Document, words: str) -> chunking.Chunk:
    """The first chunk whose own text holds ``words``."""
    at = doc.text.index(words)
    return next(c for c in chunking.chunk_document(doc) if c.start <= at < c.end)


def passage_for(doc: chunking.Document, chunk: chunking.Chunk, quotes: list[str]) -> fountain.CitedPassage:
    """The passage the analysis records for ``chunk`` (its range, lines, pages, heading path)."""
    pages = doc.source.pages_of(chunk.start, chunk.end) if doc.source is not None else None
    return fountain.CitedPassage(chunk.index + 1, chunk.start, chunk.end, (chunk.first_line, chunk.last_line), pages,
                                  " › ".join(chunk.heading_path), quotes)


def analysis_of(doc: chunking.Document, file: str, passages: list[fountain.CitedPassage]) -> fountain.ChunkAnalysis:
    total = len(chunking.chunk_document(doc))
    return fountain.ChunkAnalysis(file=file, chunks=total, model="TINY:1B", boundary=doc.boundary,
                                  chunk_size=SETTINGS.size_tokens, instruction="Find the codes.",
                                  when=datetime(2026, 3, 1, 9, 0), results=["ok"] * total, synthesis="ok",
                                  passages={p.chunk: p for p in passages}, source=source_of(doc),
                                  relevant=len(passages))


def record_cited_turn(store, name: str, analysis: fountain.ChunkAnalysis, reply: str) -> int:
    """Append the turn (message, analysis, cited answer) through the store; its index."""
    turn = fountain.Turn(when=datetime(2026, 3, 1, 9, 0), user_text=f"Find the codes in {analysis.file}",
                         model="tiny:1b", reply=reply, analysis=analysis)
    _, index = store.append_turn(name, turn)
    return index


def cited_session(live, quotes=("vault code is 4471", "it opens the  NORTH door")) -> dict:
    """A session whose answer cites the Keys chunk (with ``quotes``), a number without a passage, and text."""
    path = write_notes(live.config.workspace_path)
    doc = chunking.read_document(path, SETTINGS)
    keys = chunk_holding(doc, "vault code")
    staff = chunk_holding(doc, "Forty people")
    assert keys.index != staff.index
    missing = 999
    passages = [passage_for(doc, keys, list(quotes)), passage_for(doc, staff, ["forty people"])]
    k, s = keys.index + 1, staff.index + 1
    reply = (f"The vault code is 4471 [{k}]. Forty people work there [{k}, {s}]. "
             f"The weather is not cited [{missing}]. Code `[{k}]` stays code.")
    name = live.open_session()
    index = record_cited_turn(live.services.store, name, analysis_of(doc, path.name, passages), reply)
    return {"name": name, "turn": index, "keys": k, "staff": s, "missing": missing, "path": path, "doc": doc,
            "reply": reply}
