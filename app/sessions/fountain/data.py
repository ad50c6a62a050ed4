"""The session file's data: elements, scenes, the screenplay, turns and chunk analyses (no parsing here).

Every class has ``slots``: a long session holds hundreds of thousands of these objects (a
100,000-scene file: 300,000 elements and 100,000 turns), and without a per-instance dict its
parsed play took 49.5 MB instead of 70.7 MB (issue 23, item 8).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime

TS_FORMAT = "%Y-%m-%d %H:%M:%S"
HARVEY = "HARVEY"
# fountain-py reports Harvey's plain "THE END." as a character cue without
# dialogue; centred text is the Fountain way and every tool shows it.  Harvey
# only ever reads TALKING scenes' dialogue and never appends to an old file,
# so the centred form costs it nothing.  The reader accepts both.
END_MARKER = ">THE END.<"
CHUNK_DONE = "Chunk analysis complete. Synthesized result injected into conversation."


@dataclass(slots=True)
class Element:
    """One element inside a scene.

    ``kind`` is "action", "dialogue" or "note".  ``text`` is the exact text
    (unescaped); for a note, the text between ``[[`` and ``]]``.  ``character``
    is the cue of a dialogue without any ``@``.  ``paren``: a dialogue's parenthetical line
    (Harvey's ``(chunk 1/3)``, ``(synthesis)``) without its parentheses.
    """

    kind: str
    text: str
    character: str = ""
    paren: str = ""


@dataclass(slots=True)
class Scene:
    """A scene heading and its elements; heading "" holds text before the first heading."""

    heading: str
    elements: list[Element] = field(default_factory=list)


@dataclass(slots=True)
class Screenplay:
    """A whole session file: ordered title page and scenes."""

    title_page: dict[str, str] = field(default_factory=dict)
    scenes: list[Scene] = field(default_factory=list)


@dataclass(slots=True)
class ChunkAnalysis:
    """One chunked analysis of a file that overflowed the context (seed 000).

    ``results`` holds one status per chunk in order: "ok", "error: msg" or
    "cancelled".  ``synthesis`` is the same for the reduce step, None while it
    has not run.  ``replies`` (chunk number -> text) and ``answer`` are what the
    model said for each chunk and for the synthesis, when the file records them
    (the terminal Harvey's recorder does; seed 000's design and this app do not).
    """

    file: str
    chunks: int
    model: str
    boundary: str
    chunk_size: int
    instruction: str
    when: datetime | None = None
    results: list[str] = field(default_factory=list)
    synthesis: str | None = None
    replies: dict[int, str] = field(default_factory=dict)
    answer: str | None = None
    # Issue #15, cited answers: where each cited chunk lies in the file as analysed (chunk number
    # -> CitedPassage), the file's text fingerprint then, and how many chunks had something relevant.
    passages: dict[int, "CitedPassage"] = field(default_factory=dict)
    source: str | None = None
    relevant: int | None = None
    # The terminal Harvey sizes chunks in bytes and names the file's type ("prose"): ``chunk_size``
    # is in tokens (this app's unit; 0 when a file does not say), ``chunk_bytes`` in bytes.
    chunk_bytes: int | None = None
    kind: str = "prose"
    # Issue 22: each part of the file no answered chunk covers, as its note (notes.unread builds and reads it).
    unread: list[str] = field(default_factory=list)
    # Issue 25: an answer from the most relevant passages (retrieval), as the terminal Harvey notes it:
    # "rag: N chunks from FILE, top score 0.87" (None: every chunk was read).
    rag: str | None = None
    # Issue 32: what the app computed for the answer (the list, its count, disagreeing answers, the
    # coverage, Self-Route's verdict), as note texts (``notes`` builds and reads them).
    computed: list[str] = field(default_factory=list)

    @property
    def in_chat(self) -> bool:
        """A list question asked in the chat of a file that fit, read in one call (issue 45)."""
        return any(note.startswith("chunk-in-chat:") for note in self.computed)


@dataclass(slots=True)
class CitedPassage:
    """Where chunk ``chunk`` (1-based) of an analysed file lies, and the words its partial answer quoted.

    ``start``/``end`` are character offsets into the document's text as the chunker read it
    (a PDF's or Word file's extracted text); ``lines`` are its 1-based first and last lines
    there; ``pages`` a PDF's pages.  Written as ``[[chunk-passage: …]]`` and ``[[chunk-quote: …]]``
    notes in the CHUNK ANALYSIS scene, so a citation [n] in the answer can be opened from the
    session file alone, after a restart, in the terminal Harvey's reader too (it ignores them).
    """

    chunk: int
    start: int
    end: int
    lines: tuple[int, int]
    pages: tuple[int, int] | None = None
    heading: str = ""
    quotes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Answer:
    """A further model's reply to the same message (FOUNTAIN_FORMAT.md's multi-model scene)."""

    model: str
    text: str


@dataclass(slots=True)
class Turn:
    """One chat exchange as the web app shows it.

    ``user_text`` None: the scene had no user line (a continuation that
    :func:`turns` attaches to the turn before).  ``model``: the exact name when
    a stats line records it, else the cue.  ``reply`` None: no model reply is
    recorded (pending, crashed, or HARVEY answered itself).  ``harvey``: what
    HARVEY said itself (overflow alert, error card), never the "Forwarding to"
    line.  ``notes``: the scene's ``[[...]]`` notes (stopped, error, model
    switch).  ``analysis``: the chunk analysis between message and reply.
    ``more``: replies of further models to the same message, in order.
    ``user``: the user's cue as the file names it (None: the app's configured user).
    """

    when: datetime | None
    user_text: str | None
    model: str | None = None
    reply: str | None = None
    stats: str | None = None
    notes: list[str] = field(default_factory=list)
    harvey: str | None = None
    analysis: ChunkAnalysis | None = None
    more: list[Answer] = field(default_factory=list)
    user: str | None = field(default=None, compare=False, repr=False)
    # Where the turn stands in the file: (first scene, last scene), set by ``turns``;
    # ``shared`` when another turn has text in one of those scenes (Harvey's own files).
    scenes: tuple[int, int] | None = field(default=None, compare=False, repr=False)
    shared: bool = field(default=False, compare=False, repr=False)
    # A later turn asks this one again (regenerate, edit): the store sets it, the heading keeps it.
    superseded: bool = field(default=False, compare=False, repr=False)

    @property
    def key(self) -> str:
        """A short name for the turn as it was sent (its time and message), which its reply, notes, stats
        and model (the cue's name until the stats line gives the exact one) leave as it is: a message sent
        again in a failed turn's place (``resend``) has another, so a page showing the failed one can
        tell (issue 45's watch stream).  The same message sent again within the same second has the same
        key, and that page keeps the failed turn until it is reloaded."""
        sent = f"{self.when.isoformat() if self.when else ''}\n{self.user_text or ''}"
        return hashlib.sha1(sent.encode("utf-8", "surrogatepass")).hexdigest()[:10]


# ------------------------------------------------------------ line escaping
