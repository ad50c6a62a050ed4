"""An analysis job: its data, its states, and the one way its state changes.

The states and the allowed transitions are written down here, in ``TRANSITIONS``.
Every change of a job's state goes through ``StateMachine.transition``: it checks
the move against the table (and against what the caller expects to find), applies
the changes and saves ``job.json``, all under one lock, the runner's.  A view and
the worker can therefore race (a double tap on Start, a Cancel while the worker
picks the job up) and the loser gets ``InvalidTransition`` instead of undoing the
winner's change.

    state         meaning                                          -> next states
    proposed      the card asks for the instruction                -> queued, declined, discarded
    queued        waiting for the worker                           -> running, choose, interrupted, failed, discarded
    running       map calls (model_server.parallel at a time)      -> cancelling, synthesizing, confirm, interrupted,
                                                                      failed, discarded
    cancelling    Cancel pressed; the request in flight is closed   -> choose, interrupted, failed, discarded
    synthesizing  combining the partial answers                    -> cancelling, done, interrupted, failed, discarded
    choose        after a cancel: synthesize what came, or drop it  -> queued, dropped, discarded
    confirm       the whole file was chosen, but a re-plan needs    -> queued (read the rest, or synthesize what
                  more calls than agreed: every agreed chunk has       was read), discarded
                  run; the card asks before spending more
    interrupted   Ollama away, or the server stopped: Resume/Retry  -> queued, discarded
    failed        cannot finish (nothing answered, turn moved, ...) -> discarded
    done          answer decided, being written into the session    -> failed (the turn moved)
    dropped       partial answers dropped, being recorded           -> failed (the turn moved)
    declined      "no": nothing sent to a model                    -> (end)
    discarded     the user (or a session delete) threw it away      -> (end)

``confirm`` is not active: like ``choose`` it waits for the user, so a restart keeps the question
(only active jobs become ``interrupted``) and Resume does not apply to it.

Every other write to a job (a note on its card, a re-plan, a cost figure the worker keeps)
goes through ``StateMachine.update`` with the state its writer expects: a write that finds
the job moved on (a second device's Start found it running) is refused, never applied.
``results`` (the partial answers) is filled by the worker through ``StateMachine.add_result``
and read by request threads through ``StateMachine.results``, both under the one lock.

``done``, ``dropped``, ``declined`` and ``discarded`` are settled: once the outcome
is in the session file the job's folder goes and the runner forgets it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Iterable

from ..storage import why_unwritten
from ..errors import Conflict, Refused
from ..routing import without_mentions

log = logging.getLogger(__name__)

TRANSITIONS: dict[str, frozenset[str]] = {
    "proposed": frozenset({"queued", "declined", "discarded"}),
    "queued": frozenset({"running", "choose", "interrupted", "failed", "discarded"}),
    "running": frozenset({"cancelling", "synthesizing", "confirm", "interrupted", "failed", "discarded"}),
    "cancelling": frozenset({"choose", "interrupted", "failed", "discarded"}),
    "synthesizing": frozenset({"cancelling", "done", "interrupted", "failed", "discarded"}),
    "choose": frozenset({"queued", "dropped", "discarded"}),
    "confirm": frozenset({"queued", "discarded"}),
    "interrupted": frozenset({"queued", "discarded"}),
    "failed": frozenset({"discarded"}),
    "done": frozenset({"failed"}),
    "dropped": frozenset({"failed"}),
    "declined": frozenset(),
    "discarded": frozenset(),
}
STATES = tuple(TRANSITIONS)
ACTIVE = ("queued", "running", "cancelling", "synthesizing")     # the worker owns the job
WORKING = ("running", "synthesizing")                            # a stop request ends these
SETTLED = ("done", "dropped", "declined", "discarded")          # outcome decided; forgotten once recorded
OPEN = ("proposed", "choose", "confirm", "interrupted", *ACTIVE)  # still needs the user or the worker
DISCARDABLE = ("proposed", "choose", "confirm", "interrupted", "failed")   # a card offers Discard


disk_trouble = why_unwritten          # (the one wording, app.storage)


def without_directive(instruction: str) -> str:
    """The instruction as the model sees it: the ``@model`` directive removed."""
    return without_mentions(instruction)


class JobError(Refused):
    """The job cannot do what was asked; the message is for the card."""


class InvalidTransition(Conflict):
    """The job is not in a state that allows the change (someone else changed it first)."""


@dataclass
class ChunkResult:
    """One chunk's partial answer, as ``results.jsonl`` keeps it (a line from before issue #15,
    without the fields below ``heading``, still loads: a free-text answer, relevant)."""

    index: int                 # 0-based
    status: str                # ok | error
    text: str = ""             # the partial answer as the card and the reduce show it
    error: str = ""
    seconds: float = 0.0
    heading: str = ""          # the card's label: pages and heading path
    relevant: bool = True      # the chunk had something for the instruction (else: left out of the reduce)
    points: list[dict] = field(default_factory=list)   # [{"point", "quote"}]; a quote occurs in the chunk
    confidence: int | None = None                       # 0-5 from a structured answer; None: free text
    answer: str = ""                    # a point question's short answer (issue 32); "" otherwise
    # where the chunk lies in the document's text, for the record's passage (issue #15)
    start: int = 0
    end: int = 0
    lines: list[int] | None = None      # [first, last], 1-based
    pages: list[int] | None = None      # [first, last] of a PDF
    section: str = ""                   # heading path joined " › "

    @property
    def quotes(self) -> list[str]:
        return [p["quote"] for p in self.points if p.get("quote")]


@dataclass
class Job:
    id: str
    session: str
    turn: int
    file: str
    user_text: str
    instruction: str
    model: str
    file_tokens: int
    remaining: int
    chunks: int
    size_tokens: int
    boundary: str
    kind: str
    fingerprint: str
    window: int
    bytes_per_token: float
    state: str = "proposed"    # one of STATES; changed only through StateMachine.transition
    selected: int = 0          # how many chunks to run (0: not chosen yet)
    message: str = ""          # shown on the card (e.g. an unknown @model, why it was interrupted)
    created: str = field(default_factory=lambda: datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
    started: float = 0.0
    finished: float = 0.0
    seconds_per_chunk: float = 0.0   # estimate before any chunk has run
    results: dict[int, ChunkResult] = field(default_factory=dict, repr=False)
    synthesis: str = ""              # "pending": synthesize what was collected, run no more chunks
    answer: str | None = None        # kept until it is in the session file
    turn_text: str | None = None     # the asking turn's user text, checked before writing into it
    text_kind: str = ""              # the calibration kind of the file's text (budget.calibration_kind)
    pages: int = 0                   # a PDF's pages (0: not a PDF)
    image_pages: str = ""            # a PDF's pages that hold only images ("3, 7-9")
    estimated_calls: int = 0         # model calls the plan expects (map + reduce)
    estimated_seconds: float = 0.0   # the plan's time from the measured speeds (0: unknown yet)
    model_calls: int = 0             # what the run has cost so far, from the server's own counts
    prompt_tokens: int = 0
    generated_tokens: int = 0
    model_seconds: float = 0.0
    # The file's own bytes per token, measured by the map calls (the smallest figure seen), and
    # the re-plans it led to, in order: [at, offset, bpt, size] = chunks from number ``at``
    # (0-based) on cover the text from ``offset``, sized at ``bpt`` and ``size`` tokens.
    # (measured_bpt is a running cost figure like model_calls: the worker's calls update it and the
    # next saved change keeps it; losing it in a crash only delays a re-plan. ``replans`` changes
    # only through StateMachine.update, so a resume replays the same chunks.)
    measured_bpt: float = 0.0
    replans: list[list] = field(default_factory=list)
    source: str = ""                 # "sha256:" + the document's content hash [:16] (the record's chunk-source)
    format_refused: bool = False     # the server refused a JSON schema: map calls go as free text
    # What the user chose on the card: "all" (the whole file; a re-plan that needs more calls than
    # agreed asks first, state "confirm") or "first" (the first ``selected`` chunks). "" in a
    # job.json from before: read from ``selected`` as before.
    scope: str = ""
    # The parts of the file no answered chunk covers, decided with the answer: [{"lines": [a, b],
    # "pages": [p, q] or None, "section": "..."}] (``plan.unread``); the answer and the scene name them.
    unread: list[dict] = field(default_factory=list)
    # Issue 25: how the user chose to answer: "read" (every chunk, map/reduce) or "retrieve" (one chat
    # request over the most relevant passages, app.analysis.retrieve); for "retrieve", the passages
    # sent ([{"chunk", "start", "end", "lines", "pages", "section", "score"}], document order) and how
    # they were found ("hybrid search with MODEL" or "keyword search").
    way: str = "read"
    rag: list[dict] = field(default_factory=list)
    # Issue 30: ``file_tokens`` is the model's own count of the file's text (its tokenizer was known
    # and the text read), not an estimate: the card says "82,872 tokens", not "about".
    tokens_counted: bool = False
    # Issue 30: the token counter the chunks were packed by, in words (``Counter.name``: "byte-level BPE
    # (smollm) from the model's own vocabulary (…)", "MODEL's own tokenizer at llama-server's
    # /tokenize"; ``ChunkSettings.counter``; "": bytes over ``bytes_per_token``): the card says what
    # counted, and the worker packs the file again with it and gets the card's very chunks.
    counter: str = ""
    # The chunks the user agreed to run when they started it (the card's count, or the first N; after
    # "read the rest", the file's): a re-plan runs up to this many before it asks, not up to max_chunks
    # (issue 30). 0 in a job.json from before: ``max_chunks`` as before.
    agreed: int = 0
    rag_search: str = ""
    rag_chunks: int = 0              # the chunks of the file's retrieval index (the passages' "of N")
    # Issue 32, what the app computes beside the model's words (recorded as notes, shown at view time):
    # ``list_of``: what a list instruction lists ("vault codes"; "" none), as the card shows it to edit;
    # ``items``: the merged items ({"text", "quote", "value", "chunks", "at"}), ``items_cut`` those over
    # the limit, ``stated``: the count the model's text gave (None: none); ``versions``: a point
    # question's different answers ({"answer", "chunks", "confidence"}, two or more); ``coverage``: how
    # much of the file the answer rests on, in words.
    list_of: str = ""
    items: list[dict] = field(default_factory=list)
    items_cut: int = 0
    stated: int | None = None        # (before issue 40; ``figures["model_says"]`` since)
    versions: list[dict] = field(default_factory=list)
    # Issue 40: what the app states beside the answer (``answers.summarize``): the ask, the count, the
    # totals per unit, the file's own stated figures, how much was read, the model's own figure.
    figures: dict = field(default_factory=dict)
    # Issue 42, a relevance-first read ("relevant" way): how its chunks were ranked, and why it stopped
    # ("answered", "share", or "" when it read every chunk).
    ranked_by: str = ""
    read_until: str = ""
    # "Read the rest" of a partial list answer (issue 40): the chunks its scene answered, as results to
    # take instead of reading them again ({"source", "chunks", "size", "results": [ChunkResult fields]});
    # taken when the run finds the same text cut into the same chunks (else read like the others).
    seeds: dict = field(default_factory=dict)
    coverage: str = ""
    # Self-Route (issue 32): whether the passages held the answer (the model's own verdict), and for a
    # whole-file read that replaces a passages answer, that answer's words (kept in the record).
    rag_answerable: bool = True
    replaces: str = ""
    # Issue 45: a list, count or total question asked in the chat of a file that fits the window: started
    # without a card, the whole file in one map call, the app's list the answer (no synthesis call).
    in_chat: bool = False

    @property
    def asked(self) -> str:
        """What the turn that asked says (a direct analysis records "/read-chunks FILE")."""
        return self.turn_text if self.turn_text is not None else self.user_text

    @property
    def task(self) -> str:
        """The instruction the model sees: the user's words without the @model directive."""
        return without_directive(self.instruction)

    @property
    def map_bpt(self) -> float:
        """The bytes-per-token figure the map requests are sized and checked with."""
        return self.replans[-1][2] if self.replans else self.bytes_per_token

    @property
    def total(self) -> int:
        """The chunks this run reads (the first ``selected``); ``chunks`` is what the whole file needs."""
        return self.selected or self.chunks

    @property
    def wants_all(self) -> bool:
        """The user chose the whole file (or it was under the limit): a re-plan past the agreed
        calls pauses the job to ask rather than cutting it."""
        if self.scope:
            return self.scope == "all"
        return self.selected in (0, self.chunks)

    @property
    def file_chunks(self) -> int:
        """The chunks the whole file needs: every count a card, an answer or a scene shows is "of" this."""
        return max(self.chunks, self.total)

    @property
    def left_out(self) -> int:
        """Chunks of the file this run does not read (a "first N" choice, or a re-plan past the limit)."""
        return self.file_chunks - self.total

    @property
    def done_count(self) -> int:
        """Chunks with an answer."""
        return sum(1 for i in range(self.total) if (r := self.results.get(i)) is not None and r.status == "ok")

    @property
    def processed(self) -> int:
        """Chunks run so far, with an answer or an error (the progress bar)."""
        return sum(1 for i in range(self.total) if i in self.results)

    @property
    def relevant_count(self) -> int:
        """Answered chunks that had something relevant (the others stay out of the reduce)."""
        return sum(1 for i in range(self.total) if (r := self.results.get(i)) is not None and r.status == "ok"
                   and r.relevant)

    @property
    def error_count(self) -> int:
        return sum(1 for i in range(self.total) if (r := self.results.get(i)) is not None and r.status != "ok")

    @property
    def next_chunk(self) -> int:
        """The first chunk without an answer (0-based): where a Resume starts."""
        return next((i for i in range(self.total) if (r := self.results.get(i)) is None or r.status != "ok"),
                    self.total)

    def run_seconds(self, chunks: int | None = None) -> float:
        """The plan's time for a run of ``chunks`` of the file's chunks (all: None): its whole estimate (map
        calls, combines, the synthesis) pro rata, else the per-chunk figure (0: unknown).  The card and the
        session's note both say it (issue 45: timed by the map calls alone, the card said 0.2 minutes for
        a run of 1.3)."""
        n = self.chunks if chunks is None else chunks
        if self.estimated_seconds and self.chunks:
            return self.estimated_seconds * n / self.chunks
        return self.seconds_per_chunk * n

    def chunk_seconds(self) -> float:
        """Seconds per chunk, from the chunks done so far (or the model's measured speed; 0: unknown)."""
        results = [self.results.get(i) for i in range(self.total)]     # (.get: no iteration the worker can break)
        timed = [r.seconds for r in results if r is not None and r.status == "ok" and r.seconds]
        return sum(timed) / len(timed) if timed else self.seconds_per_chunk

    def eta_seconds(self) -> float | None:
        """Time left, from the chunks done so far (or the model's measured speed)."""
        per = self.chunk_seconds()
        return per * (self.total - self.processed) if per else None

    def add_cost(self, usage, measured_bpt: float | None = None) -> None:
        """What one model call cost (``usage``: the server's own counts and time), added to the run's
        figures: the one place they grow, whichever way the job answers (map and reduce calls, or the
        passages answer).  ``measured_bpt``: the file's bytes per token a map call measured (the
        smallest figure seen is kept; a re-plan sizes the rest with it).  Not locked: a run with
        several calls in flight adds under its own lock."""
        self.model_calls += 1
        self.prompt_tokens += usage.prompt_tokens or 0
        self.generated_tokens += usage.generated_tokens or 0
        self.model_seconds += usage.seconds or 0.0
        if measured_bpt:
            self.measured_bpt = min(self.measured_bpt or measured_bpt, measured_bpt)

    def public(self) -> dict:
        data = dataclasses.asdict(self)
        data.pop("results")
        return data


class StateMachine:
    """Changes job states by the table, under one lock, and saves each change."""

    def __init__(self, save: Callable[[Job], None], append: Callable[[Job, ChunkResult], None] | None = None):
        self.lock = threading.RLock()
        self._save = save
        self._append = append     # persists one result and puts it in job.results (JobStore.add_result)

    def transition(self, job: Job, new_state: str, *, expect: str | Iterable[str] | None = None,
                   **changes) -> Job:
        """Move ``job`` to ``new_state`` with ``changes`` applied, saved; or raise InvalidTransition.

        ``expect``: the state(s) the caller believes the job is in; anything else is refused
        even when the table would allow the move (a Start must find "proposed").
        """
        if new_state not in TRANSITIONS:
            raise ValueError(f"unknown job state {new_state!r}")
        allowed = {expect} if isinstance(expect, str) else set(expect) if expect is not None else None
        with self.lock:
            current = job.state
            if new_state not in TRANSITIONS[current] or (allowed is not None and current not in allowed):
                raise InvalidTransition(f"The analysis of {job.file} is {current} now; it cannot become "
                                        f"{new_state}.")
            self._apply(job, {**changes, "state": new_state})
            return job

    def update(self, job: Job, *, expect: str | Iterable[str], **changes) -> Job:
        """Change fields other than the state (a message on the card, a re-plan), under the same lock,
        saved; only in the state(s) ``expect`` names, which every writer must say: a write meant for
        a card still asking (a refused Start's message) never lands on a job another device started."""
        if "state" in changes:
            raise ValueError("use transition() to change the state")
        allowed = {expect} if isinstance(expect, str) else set(expect)
        with self.lock:
            if job.state not in allowed:
                raise InvalidTransition(f"The analysis of {job.file} is {job.state} now.")
            self._apply(job, changes)
            return job

    def unsaved(self, job: Job, new_state: str, **changes) -> Job:
        """Move ``job`` in memory when its state cannot be saved (a full or read-only disk): the
        table still decides, the save is tried once more and its failure only logged.  The file
        keeps the last state saved (an active one is read as interrupted at the next start)."""
        with self.lock:
            if new_state not in TRANSITIONS[job.state] and new_state != job.state:
                raise InvalidTransition(f"The analysis of {job.file} is {job.state} now; it cannot become "
                                        f"{new_state}.")
            for key, value in {**changes, "state": new_state}.items():
                setattr(job, key, value)
            try:
                self._save(job)
            except OSError as exc:
                log.warning("analysis %s is %s in memory only: %s", job.id, new_state, exc)
            return job

    def add_result(self, job: Job, result: ChunkResult) -> None:
        """The worker's one way to record a partial answer (saved, then in ``job.results``), under the lock."""
        with self.lock:
            if self._append is not None:
                self._append(job, result)
            else:
                job.results[result.index] = result

    def results(self, job: Job) -> list[ChunkResult]:
        """A snapshot of the run's partial answers in chunk order, for request threads: they never
        iterate ``job.results`` while the worker adds to it."""
        with self.lock:
            return [r for _, r in sorted(job.results.items()) if r.index < job.total]

    def _apply(self, job: Job, changes: dict) -> None:
        before = {key: getattr(job, key) for key in changes}
        for key, value in changes.items():
            setattr(job, key, value)
        try:
            self._save(job)
        except BaseException:
            for key, value in before.items():    # not saved: not changed
                setattr(job, key, value)
            raise
