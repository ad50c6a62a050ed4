"""Every ``[[note]]`` the app writes into a turn, built and read in this one module.

A note is how a session file remembers what is not dialogue: a reply that was
stopped or failed, a notice shown in the chat, files offered for analysis, a
compaction, a declined analysis, a model switch. The page, the history sent to
the model and a reload after a crash all read notes back through ``read``, so
the words written and the words parsed can never drift apart.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from .fountain import model_switch_note  # noqa: F401 (Harvey's own note; built by the codec)

STOPPED = "reply: stopped by the user"
INTERRUPTED = "reply: interrupted"
DECLINED = "chunk analysis declined: back to the conversation, nothing was sent to the model"
_COMPACT = re.compile(r"compact: (\d+) ")


def stopped() -> str:
    return STOPPED


LOOPED = "reply: stopped: the model was repeating itself"


def looped() -> str:
    """A reply the app stopped because it repeated itself (issue 44): kept up to the loop's first turn."""
    return LOOPED


def is_looped(note: str) -> bool:
    return _body(note).startswith(LOOPED)


CUT = "reply: cut at"
_CUT = re.compile(r"reply: cut at (\d+) tokens")


def cut(tokens: int) -> str:
    """A reply that ended at its cap (``num_predict``), not by itself: its end is missing (Continue asks for it)."""
    return f"{CUT} {tokens} tokens (its cap): the model had more to write"


def is_cut(note: str) -> bool:
    return _body(note).startswith(CUT)


def error(kind: str, detail: str) -> str:
    """A reply that failed: the error card's kind and its text, on one line."""
    return f"reply: error: {kind} — {' '.join(str(detail).split())}"


def interrupted(reason: str) -> str:
    """A reply cut off by a shutdown or a crash: what arrived is kept, Re-send is offered."""
    return f"{INTERRUPTED} — {' '.join(reason.split())}"


def notice(text: str) -> str:
    return f"notice: {' '.join(text.split())}"


def says_how_it_ended(note: str) -> bool:
    """A note that says a reply did not end by itself: stopped, stopped as a loop, interrupted, failed."""
    return _body(note).startswith((STOPPED, LOOPED, INTERRUPTED, "reply: error:"))


def is_notice(note: str) -> bool:
    return _body(note).startswith("notice:")


def offer_chunks(files: list[str]) -> str:
    return f"offer-chunks: {', '.join(files)}"


def compact(replaced: int, model: str, left_out: int = 0) -> str:
    extra = f"; the {left_out} oldest did not fit the summary request" if left_out else ""
    return f"compact: {replaced} earlier turns replaced by this summary from {model}{extra}"


def declined() -> str:
    return DECLINED


def included(files: list[tuple[str, int]]) -> str:
    """The files a message included, with their tokens: the turn's file chips."""
    return "files: " + ", ".join(f"{name} ({tokens} tokens)" for name, tokens in files)


_INCLUDED = re.compile(r"(.+?) \((\d+) tokens\)(?:, |$)")


# A part of an analysed file that no answered chunk covers (issue 22): a note of the CHUNK ANALYSIS
# scene (fountain.ChunkAnalysis.unread carries it as written), so an answer never claims more than was read.
_UNREAD = re.compile(r"chunk-unread:\s*lines (?P<l1>\d+)-(?P<l2>\d+)(?:, pages (?P<p1>\d+)-(?P<p2>\d+))?"
                     r"(?:\s+—\s+(?P<section>.*))?")


def unread(span: dict) -> str:
    """``chunk-unread: lines 1201-1500, pages 40-52 — Section 9 … Section 12`` (pages and section when known)."""
    (first, last), pages = span["lines"], span.get("pages")
    section = " ".join(str(span.get("section") or "").split()).replace("]]", "] ]").replace("[[", "[ [")
    return (f"chunk-unread: lines {first}-{last}" + (f", pages {pages[0]}-{pages[1]}" if pages else "")
            + (f" — {section}" if section else ""))


def read_unread(note: str) -> dict | None:
    """An unread span back from its note (None: not one)."""
    m = _UNREAD.fullmatch(" ".join(_body(note).split()))
    if m is None:
        return None
    return {"lines": [int(m["l1"]), int(m["l2"])], "pages": [int(m["p1"]), int(m["p2"])] if m["p1"] else None,
            "section": (m["section"] or "").strip()}


def where(span: dict) -> str:
    """An unread span for a reader: "lines 1201–1500 (pages 40–52, Section 9 … Section 12)"."""
    (first, last), pages = span["lines"], span.get("pages")
    text = f"lines {first}–{last}" if last != first else f"line {first}"
    extra = [f"pages {pages[0]}–{pages[1]}" if pages[1] != pages[0] else f"page {pages[0]}"] if pages else []
    extra += [span["section"]] if span.get("section") else []
    return text + (f" ({', '.join(extra)})" if extra else "")


RETRY = "retry: this turn replaces the one before it"


def retry(edited: bool) -> str:
    """The last turn asked again (its reply regenerated, or its message edited): both stay in the file,
    and the history sent to the model keeps only the new one."""
    return f"{RETRY} ({'message edited' if edited else 'reply regenerated'})"


def is_retry(notes: list[str]) -> bool:
    return any(_body(note).startswith("retry:") for note in notes)


def _body(note: str) -> str:
    return note.strip().removeprefix("[[").removesuffix("]]").strip()


def compacted(notes: list[str]) -> int | None:
    """How many earlier history entries a compact note's summary replaces (None: not a compact note)."""
    for note in notes:
        found = _COMPACT.match(_body(note))
        if found:
            return int(found.group(1))
    return None


@dataclass
class Read:
    """What a turn's notes say, for the page and for the history."""

    stopped: bool = False
    looped: bool = False                      # stopped by the app: the model was repeating itself
    interrupted: str = ""
    error: tuple[str, str] | None = None      # (kind, detail)
    notices: list[str] = field(default_factory=list)
    offers: list[str] = field(default_factory=list)
    compacted: int | None = None
    declined: bool = False
    files: list[tuple[str, int]] = field(default_factory=list)   # (name, tokens) a message included
    cut: int = 0                              # the reply ended at its cap of this many tokens (0: not cut)


def read(notes: list[str]) -> Read:
    """Parse a turn's notes (unknown notes, e.g. Harvey's own, are left alone)."""
    out = Read()
    for note in notes:
        body = _body(note)
        if body.startswith(LOOPED):
            out.looped = True
        elif body.startswith("reply: stopped"):
            out.stopped = True
        elif (found := _CUT.match(body)) is not None:
            out.cut = int(found.group(1))
        elif body.startswith(INTERRUPTED):
            out.interrupted = body.removeprefix(INTERRUPTED).lstrip(" —-").strip() or "the server stopped"
        elif body.startswith("reply: error:"):
            kind, _, detail = body.removeprefix("reply: error:").partition("—")
            out.error = (kind.strip(), detail.strip())
        elif body.startswith("notice:"):
            out.notices.append(body.removeprefix("notice:").strip())
        elif body.startswith("offer-chunks:"):
            out.offers = [f.strip() for f in body.removeprefix("offer-chunks:").split(",") if f.strip()]
        elif body.startswith("compact:"):
            out.compacted = compacted([body])
            out.notices.append(f"Compacted: {body.removeprefix('compact:').strip()}.")
        elif body.startswith("chunk analysis declined"):
            out.declined = True
            out.notices.append("Chunk analysis declined: nothing was sent to the model.")
        elif body.startswith("files:"):
            out.files = [(m.group(1), int(m.group(2))) for m in _INCLUDED.finditer(body.removeprefix("files:").strip())]
        elif body.startswith("retry:"):
            out.notices.append("Edited and sent again: this turn replaces the one above." if "edited" in body
                               else "Regenerated: this reply replaces the one above.")
        elif body.startswith("model switch:"):
            out.notices.append(f"Switched model: {body.removeprefix('model switch:').strip()}")
    return out


# Issue 32: what the app computed for an analysis answer, kept as notes of its CHUNK ANALYSIS scene
# (``fountain.ChunkAnalysis.computed`` carries them as written) and shown at view time, so the reply
# stays the model's own words.  Each holds one JSON object without arrays, its brackets escaped, so
# no quoted text can close the note early.


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _packed(obj: dict) -> str:
    """``obj`` as one line of JSON that never holds "[[" or "]]" (a note's own brackets): brackets inside
    its strings escaped, a list's own brackets apart."""
    text = " ".join(json.dumps(obj, ensure_ascii=False, separators=(", ", ": ")).split())
    text = _JSON_STRING.sub(lambda m: m.group(0).replace("[", "\\u005b").replace("]", "\\u005d"), text)
    return text.replace("[[", "[ [").replace("]]", "] ]")


def _unpacked(text: str) -> dict | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def item(n: int, total: int, it: dict) -> str:
    """``chunk-item: 3/37 {"text": …, "quote": …, "value": …, "chunk": 5, "chunks": "5, 6"}``."""
    chunks = it.get("chunks") or []
    return f"chunk-item: {n}/{total} " + _packed({
        "text": it.get("text", ""), "quote": it.get("quote", ""), "value": it.get("value"), "unit": it.get("unit", ""),
        "line": it.get("line"), "chunk": chunks[0] if chunks else 0, "chunks": ", ".join(map(str, chunks))})


def count(target: str, count_: int, total: float | None, valued: int, stated: int | None, cut: int) -> str:
    return "chunk-count: " + _packed({"target": target, "count": count_, "total": total, "valued": valued,
                                      "stated": stated, "cut": cut})


def partial(kept: dict) -> str:
    """``chunk-partial: {"job": "…", "bpt": 3.9}``: the answer rests on part of its file; its chunk answers are
    kept under that job's id, and the file was cut at that many bytes per token (read the rest: the same cut)."""
    return "chunk-partial: " + _packed(kept)


def figures(summary: dict) -> str:
    """``chunk-count: {"op": "total", "count": 12, "totals": {"mg": 110}, …}``: what the app states beside a
    list answer (issue 40, ``analysis.answers.summarize``); a note without "op" is from before."""
    return "chunk-count: " + _packed(summary)


def conflict(version: dict) -> str:
    chunks = version.get("chunks") or []
    return "chunk-conflict: " + _packed({"answer": version.get("answer", ""), "chunk": chunks[0] if chunks else 0,
                                         "chunks": ", ".join(map(str, chunks)),
                                         "confidence": version.get("confidence")})


def coverage(text: str) -> str:
    return f"chunk-coverage: {' '.join(text.split())}".replace("]]", "] ]").replace("[[", "[ [")


def answerable(held: bool, cost: dict | None = None) -> str:
    """Self-Route: whether the passages held the answer, as the model judged; when they did not, what
    reading the whole file costs (``{"chunks", "calls", "minutes"}``, as the card said)."""
    if held:
        return "rag-answerable: yes"
    return "rag-answerable: no" + (f" {_packed(cost)}" if cost else "")


def replaces(answer: str) -> str:
    """A whole-file read's answer replaced this passages answer (kept here, in the model's words)."""
    return "chunk-replaces: " + _packed({"answer": answer})


def in_chat(target: str) -> str:
    """``chunk-in-chat: {"target": "functions"}``: the app took the chat message for a list question about a
    file that fits and answered it on the list path (issue 45); the answer offers a plain chat answer."""
    return "chunk-in-chat: " + _packed({"target": target})


@dataclass
class Computed:
    """The computed notes of one CHUNK ANALYSIS scene, read back."""

    items: list[dict] = field(default_factory=list)
    count: dict | None = None
    conflicts: list[dict] = field(default_factory=list)
    coverage: str = ""
    answerable: bool | None = None
    cost: dict | None = None          # the whole-file read's cost a Self-Route offer shows
    replaced: str = ""
    partial: dict | None = None       # the answer rests on part of its file: {"job", "bpt"} (read the rest)


def read_computed(notes_: list[str]) -> Computed:
    out = Computed()
    for note in notes_:
        body = _body(note)
        head, _, rest = body.partition(":")
        rest = rest.strip()
        if head == "chunk-item":
            data = _unpacked(rest.partition(" ")[2])
            if data is not None:
                out.items.append(data)
        elif head == "chunk-count":
            out.count = _unpacked(rest)
        elif head == "chunk-conflict":
            if (data := _unpacked(rest)) is not None:
                out.conflicts.append(data)
        elif head == "chunk-coverage":
            out.coverage = rest
        elif head == "rag-answerable":
            out.answerable = not rest.startswith("no")
            if not out.answerable and rest[2:].strip():
                out.cost = _unpacked(rest[2:].strip())
        elif head == "chunk-replaces":
            out.replaced = (_unpacked(rest) or {}).get("answer", "")
        elif head == "chunk-partial":
            out.partial = _unpacked(rest)
    return out
