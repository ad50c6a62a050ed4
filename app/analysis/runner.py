"""Chunked analysis: a file too large for the context, processed chunk by chunk.

When a file the user asks about would overflow the remaining context, nothing
of it goes to the model. HARVEY answers with an alert card (seed 000 D1, D2);
the user writes the chunk instruction (optionally ``@model``) or says "no".
A background worker then splits the file at structure boundaries (``chunking``),
runs the instruction on each chunk (map), synthesizes the partial answers
(reduce, in batches when they do not fit one request), and records the answer
in the session as the reply to the user's message (D4, D5).

Jobs are durable: ``job.json`` holds the job's state and each partial answer is
appended (and fsynced) to ``results.jsonl`` as it arrives, so a restart loses no
finished chunk and a Resume continues from the first unfinished one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import queue
import secrets
import shutil
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from flask import render_template

from .. import chunking
from ..budget import context_window, estimate_messages, estimate_tokens
from ..chat import prepare as conversation
from ..errors import Refused
from ..events import EventLog
from ..ollama import ChatStream, OllamaError
from ..sessions import fountain, notes
from ..sessions.store import SessionNotFound
from ..storage import atomic_write_text

log = logging.getLogger(__name__)

MAP_SYSTEM = ("Answer the instruction from this chunk of a longer document only. "
              "If nothing in it is relevant, say so in one line.")
REDUCE_SYSTEM = ("You combine partial answers, each written from one chunk of a longer document, into one answer "
                 "to the user's instruction. Keep what matters, merge repeats, and say if parts are missing.")
OVERFLOW_TEXT = ('Context overflow: {file} is approximately {tokens:,} tokens;\n{remaining:,} tokens remain in '
                 'current context.\nEnter instructions to process each chunk in turn, or "no" to\nreturn to the '
                 'conversation.')
ACTIVE = ("queued", "running", "cancelling", "synthesizing")
RETRIES = 1


def without_directive(instruction: str) -> str:
    return conversation.MENTION_ANYWHERE.sub("", instruction).strip()


class JobError(Refused):
    """The job cannot do what was asked; the message is for the card."""


@dataclass
class ChunkResult:
    index: int                 # 0-based
    status: str                # ok | error | cancelled
    text: str = ""
    error: str = ""
    seconds: float = 0.0
    heading: str = ""


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
    state: str = "proposed"    # proposed | queued | running | cancelling | choose | synthesizing
    #                            | done | declined | dropped | interrupted | failed
    selected: int = 0          # how many chunks to run (0: not chosen yet)
    message: str = ""          # shown on the card (e.g. an unknown @model)
    created: str = field(default_factory=lambda: datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
    started: float = 0.0
    finished: float = 0.0
    seconds_per_chunk: float = 0.0   # estimate before any chunk has run
    results: dict[int, ChunkResult] = field(default_factory=dict, repr=False)
    synthesis: str = ""
    answer: str | None = None        # kept until it is in the session file
    turn_text: str | None = None     # the asking turn's user text, checked before writing into it

    @property
    def asked(self) -> str:
        """What the turn that asked says (a direct analysis records "/read-chunks FILE")."""
        return self.turn_text if self.turn_text is not None else self.user_text

    @property
    def task(self) -> str:
        """The instruction the model sees: the user's words without the @model directive."""
        return without_directive(self.instruction)

    @property
    def done_count(self) -> int:
        return sum(1 for i in range(self.selected or self.chunks) if i in self.results)

    @property
    def total(self) -> int:
        return self.selected or self.chunks

    def eta_seconds(self) -> float | None:
        """Time left, from the chunks done so far (or the model's measured speed)."""
        timed = [r.seconds for r in self.results.values() if r.status == "ok" and r.seconds]
        per = sum(timed) / len(timed) if timed else self.seconds_per_chunk
        return per * (self.total - self.done_count) if per else None

    def public(self) -> dict:
        data = dataclasses.asdict(self)
        data.pop("results")
        return data


class JobStore:
    """job.json + results.jsonl per job, under data_dir/jobs."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._lock = threading.Lock()
        folder.mkdir(parents=True, exist_ok=True)

    def save(self, job: Job) -> None:
        """Atomic write of the job's state (the worker and a request may both save)."""
        path = self.folder / job.id / "job.json"
        with self._lock:
            path.parent.mkdir(exist_ok=True)
            atomic_write_text(path, json.dumps(job.public(), indent=1))

    def add_result(self, job: Job, result: ChunkResult) -> None:
        """Append one partial answer and fsync: a crash keeps every finished chunk."""
        job.results[result.index] = result
        with open(self.folder / job.id / "results.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(dataclasses.asdict(result)) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def remove(self, job: Job) -> None:
        """Forget a job whose outcome is in the session file: nothing left to recover."""
        with self._lock:
            shutil.rmtree(self.folder / job.id, ignore_errors=True)

    def load_all(self) -> list[Job]:
        jobs = []
        for path in sorted(self.folder.glob("*/job.json")):
            try:
                data = json.loads(path.read_text())
                job = Job(**{k: v for k, v in data.items() if k in Job.__dataclass_fields__})
            except (OSError, ValueError, TypeError) as exc:
                log.warning("skipping unreadable job %s: %s", path, exc)
                continue
            job.results = self._results(path.parent / "results.jsonl")
            jobs.append(job)
        return jobs

    @staticmethod
    def _results(path: Path) -> dict[int, ChunkResult]:
        """Read partial answers; a torn last line (crash mid-write) is skipped."""
        results: dict[int, ChunkResult] = {}
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return results
        for line in lines:
            try:
                r = ChunkResult(**json.loads(line))
            except (ValueError, TypeError):
                continue
            results[r.index] = r
        return results


class JobRunner:
    """Holds every job; runs one at a time in a worker thread, the rest queue."""

    def __init__(self, svc):
        self.svc = svc
        self.store = JobStore(svc.config.data_path / "jobs")
        self.jobs: dict[str, Job] = {}
        self.logs: dict[str, EventLog] = {}
        self._queue: queue.Queue[str] = queue.Queue()
        self._lock = threading.RLock()
        self._worker: threading.Thread | None = None
        self._current_stream: ChatStream | None = None
        self._cancel: set[str] = set()
        self.closed_logs: dict[str, EventLog] = {}
        self._stopping = False
        for job in self.store.load_all():
            if job.state in ACTIVE:
                job.state = "interrupted"
                self.store.save(job)
            elif job.state in ("done", "dropped", "declined"):
                self._settle(job)      # a crash came between the decision and the record
            self.jobs[job.id] = job

    def _settle(self, job: Job) -> None:
        """Finish recording a job whose outcome was decided but maybe not written."""
        try:
            turns = self.svc.store.load(job.session).turns
        except SessionNotFound:
            return self.store.remove(job)
        if job.state != "declined" and (job.turn >= len(turns) or turns[job.turn].analysis is None):
            self._record(job, job.answer, "ok" if job.state == "done" else "cancelled")
        self.store.remove(job)

    # -- lookups -----------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(job_id)
        return job

    def for_session(self, session: str) -> list[Job]:
        return [j for j in self.jobs.values() if j.session == session]

    def open_for(self, session: str) -> Job | None:
        """The session's job that still needs the user or is still working."""
        for job in self.for_session(session):
            if job.state in ("proposed", "choose", "interrupted", *ACTIVE):
                return job
        return None

    def busy(self, session: str) -> bool:
        job = self.open_for(session)
        return job is not None and job.state in ACTIVE

    def log_for(self, job: Job) -> EventLog:
        """The job's current event log (a closed one until the job runs again)."""
        with self._lock:
            if job.id in self.logs:
                return self.logs[job.id]
            if job.state in ACTIVE or job.id not in self.closed_logs:
                return self.logs.setdefault(job.id, EventLog())
            return self.closed_logs[job.id]

    def decorate(self, session, views) -> None:
        """Put each open job's card on the turn it belongs to."""
        for job in self.for_session(session.name):
            if job.turn < len(views) and job.state not in ("done", "declined", "dropped"):
                views[job.turn].alert = job
                views[job.turn].harvey_text = ""

    # -- the overflow alert ---------------------------------------------------------------

    def overflow(self, session: str, index: int, turn: fountain.Turn, prepared) -> Job:
        """Propose the analysis for turn ``index`` (about to be written) and put HARVEY's alert in the turn."""
        wf = prepared.overflow[0]
        job = self.propose(session, index, wf.name, turn.user_text, prepared.model,
                           remaining=prepared.budget.remaining)
        turn.harvey = OVERFLOW_TEXT.format(file=wf.name, tokens=job.file_tokens, remaining=job.remaining)
        if len(prepared.overflow) > 1:
            others = ", ".join(f.name for f in prepared.overflow[1:])
            turn.notes.append(notes.notice(f"also too large for the context: {others} (analyse them from the file list)"))
        return job

    def propose(self, session: str, turn: int, file: str, user_text: str, model: str, remaining: int,
                turn_text: str | None = None) -> Job:
        """Plan the chunks of ``file`` for the card; nothing is sent to a model."""
        from ..workspace import Workspace

        wf = Workspace(self.svc.config.workspace_path).resolve(file)
        job = Job(id=secrets.token_hex(6), session=session, turn=turn, file=wf.name, user_text=user_text,
                  instruction=user_text, model=model, file_tokens=0, remaining=remaining, chunks=0,
                  size_tokens=0, boundary="", kind="", fingerprint="", window=0, bytes_per_token=4.0,
                  turn_text=turn_text)
        self._plan(job, model)
        with self._lock:
            self.jobs[job.id] = job
        self.store.save(job)
        return job

    def _plan(self, job: Job, model: str) -> None:
        """Chunk plan for ``model``: its window and calibration decide the chunk size."""
        config = self.svc.config
        window = context_window(config, model, self.svc.client.show(model).context_length)
        bpt = self.svc.calibration.bytes_per_token(model)
        settings = self._settings(model, window, bpt, job.instruction)
        doc = self._document(job, settings)
        job.model, job.window, job.bytes_per_token = model, window, bpt
        job.chunks, job.size_tokens = chunking.plan_document(doc).chunks, settings.size_tokens
        job.boundary, job.kind, job.fingerprint = doc.boundary, doc.kind, doc.fingerprint
        job.file_tokens = doc.tokens          # of the text (a PDF's bytes say little about its text)
        job.seconds_per_chunk = self._seconds_per_chunk(model, settings.size_tokens)
        job.selected = job.chunks if job.chunks <= config.chunking.max_chunks else 0

    def _settings(self, model: str, window: int, bpt: float, instruction: str) -> chunking.ChunkSettings:
        """Chunk size from the config, shrunk if a map request would not fit the window."""
        config = self.svc.config
        effective = min(config.model(model).effective_context or window, window)
        fixed = (estimate_messages([{"content": MAP_SYSTEM}, {"content": instruction + "\n\n---\nChunk 99 of 99:\n"}],
                                   bpt) + config.chunking.map_reply_tokens
                 + math.ceil(config.budget.safety_margin * effective))
        size = max(64, min(config.chunking.chunk_size_tokens, effective - fixed))
        return chunking.ChunkSettings(size_tokens=size, overlap=config.chunking.overlap, bytes_per_token=bpt)

    def _seconds_per_chunk(self, model: str, size_tokens: int) -> float:
        """From the model's measured speed, once known (0 = unknown)."""
        speed = self.svc.calibration.speed(model)
        if not speed:
            return 0.0
        prompt_tps, eval_tps = speed
        return size_tokens / prompt_tps + self.svc.config.chunking.map_reply_tokens / eval_tps

    # -- user decisions ---------------------------------------------------------------------

    def start(self, job: Job, instruction: str, scope: str) -> None:
        """Validate the instruction and scope, then queue the job."""
        model, text = self._route(instruction, job.model)
        if not text.strip():
            raise JobError("Write what to do with each chunk (or \"no\" to cancel).")
        if model != job.model:      # another window and calibration: plan the chunks again
            chunks_before = job.chunks
            self._plan(job, model)
            if job.chunks != chunks_before and job.chunks > self.svc.config.chunking.max_chunks:
                self.store.save(job)
                raise JobError(f"With {model} the file makes {job.chunks} chunks: choose again.")
        max_chunks = self.svc.config.chunking.max_chunks
        if job.chunks > max_chunks:
            if scope not in ("all", "first"):
                raise JobError(f"Choose whether to analyse all {job.chunks} chunks or only the first {max_chunks}.")
            job.selected = job.chunks if scope == "all" else max_chunks
        job.instruction, job.message = instruction, ""
        self._enqueue(job)

    def _route(self, instruction: str, default: str) -> tuple[str, str]:
        """``@name`` anywhere routes to that installed model; the directive is removed."""
        mentions = conversation.MENTION_ANYWHERE.findall(instruction)
        text = without_directive(instruction)
        if not mentions:
            return default, text
        installed = self.svc.client.list_models()
        try:
            return conversation.resolve_model(mentions[-1], installed), text
        except conversation.TurnRefused as exc:
            raise JobError(f"{exc} Install it with: ollama pull {mentions[-1]}") from None

    def decline(self, job: Job) -> None:
        """"no": back to the conversation; nothing is sent to any model."""
        job.state = "declined"
        self.store.save(job)
        self._record_decline(job)
        self.store.remove(job)

    def cancel(self, job: Job) -> None:
        """Stop the run: close the request in flight; no new chunk starts."""
        with self._lock:
            if job.state == "queued":
                job.state = "choose"
                self.store.save(job)
                self._emit_state(job)
                return
            if job.state not in ("running", "synthesizing"):
                return
            self._cancel.add(job.id)
            job.state = "cancelling"
            stream = self._current_stream
        if stream is not None:
            stream.cancel()

    def after_cancel(self, job: Job, keep: bool) -> None:
        """Synthesize the partial answers collected so far, or drop them."""
        if keep and any(r.status == "ok" for r in job.results.values()):
            self._enqueue(job, synthesize_only=True)
            return
        job.state = "dropped"
        self.store.save(job)
        self._record(job, answer=None, synthesis="cancelled")

    def resume(self, job: Job) -> None:
        """Continue an interrupted job from its first unfinished chunk."""
        doc = self._document(job)
        if doc.fingerprint != job.fingerprint:
            raise JobError(f"{job.file} has changed since the analysis started, so finished chunks no longer "
                           "match it. Start a new analysis instead.")
        self._enqueue(job)

    # -- the worker --------------------------------------------------------------------

    def _enqueue(self, job: Job, synthesize_only: bool = False) -> None:
        job.state = "queued"
        job.synthesis = "pending" if synthesize_only else ""
        self.store.save(job)
        self.log_for(job).append("progress", self._progress_html(job))
        self._queue.put(job.id)
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="analysis", daemon=True)
                self._worker.start()

    def _work(self) -> None:
        """One job at a time, so the Pi's model is never asked for two things."""
        while True:
            try:
                job_id = self._queue.get(timeout=30)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._worker = None
                        return
                continue
            job = self.jobs.get(job_id)
            if job is None or job.state != "queued":
                continue
            try:
                self._run(job)
            except Exception as exc:  # a job must never kill the worker
                log.exception("analysis %s failed", job.id)
                job.state, job.message = "failed", f"The analysis failed: {exc}"
                self.store.save(job)
                self._emit_state(job)
            finally:
                with self._lock:
                    self._cancel.discard(job.id)

    def _run(self, job: Job) -> None:
        job.state, job.started = "running", job.started or time.time()
        self.store.save(job)
        doc = self._document(job)
        if doc.fingerprint != job.fingerprint:
            job.state, job.message = "failed", f"{job.file} changed before the analysis started."
            self.store.save(job)
            self._emit_state(job)
            return
        chunks = chunking.chunk_document(doc)[:job.total]
        if job.synthesis != "pending":
            for chunk in chunks:
                if chunk.index in job.results:
                    continue  # finished before a restart: never redone
                if job.id in self._cancel:
                    break
                self._map_one(job, chunk)
        if job.id in self._cancel:
            return self._to_choice(job)
        self._reduce(job)

    def _to_choice(self, job: Job) -> None:
        """After a cancel the user chooses; after a shutdown the job stays for Resume."""
        if self._stopping:
            return
        job.state = "choose"
        self.store.save(job)
        self._emit_state(job)

    def _map_one(self, job: Job, chunk: chunking.Chunk) -> None:
        """Run the instruction on one chunk; retry once; record the result."""
        self.log_for(job).append("progress", self._progress_html(job, current=chunk.index))
        prompt = f"{job.task}\n\n---\nChunk {chunk.index + 1} of {job.total}:\n{chunk.text}"
        messages = [{"role": "system", "content": MAP_SYSTEM}, {"role": "user", "content": prompt}]
        heading = " › ".join(chunk.heading_path)
        result = None
        for attempt in range(RETRIES + 1):
            started = time.monotonic()
            try:
                text = self._call(job, messages, self.svc.config.chunking.map_reply_tokens)
                result = ChunkResult(chunk.index, "ok", text, seconds=time.monotonic() - started, heading=heading)
                break
            except OllamaError as exc:
                if job.id in self._cancel:
                    return
                log.warning("chunk %d/%d of %s failed (attempt %d): %s", chunk.index + 1, job.total, job.file,
                            attempt + 1, exc)
                result = ChunkResult(chunk.index, "error", error=" ".join(str(exc).split()), heading=heading)
        if job.id in self._cancel and result.status != "ok":
            return
        self.store.add_result(job, result)
        self.log_for(job).append("partial", self._render("analysis/_partial.html", job=job, result=result))
        self.log_for(job).append("progress", self._progress_html(job))

    def _call(self, job: Job, messages: list[dict], num_predict: int) -> str:
        """One model call with the chat's num_ctx; refuses anything over the window."""
        estimate = estimate_messages(messages, job.bytes_per_token) + num_predict
        if estimate > job.window:
            raise OllamaError(f"internal: a request of ~{estimate} tokens would exceed the window {job.window}")
        stream = self.svc.client.chat(job.model, messages, num_ctx=job.window,
                                      options={"num_predict": num_predict})
        with self._lock:
            self._current_stream = stream
        try:
            text = "".join(stream)
        finally:
            with self._lock:
                self._current_stream = None
        if stream.cancelled:
            raise OllamaError("cancelled")
        self.svc.calibration.observe(job.model, messages, stream.final)
        return text.strip()

    def _reduce(self, job: Job) -> None:
        """Synthesize; combine in batches first when the partials do not fit one request."""
        job.state = "synthesizing"
        self.store.save(job)
        self.log_for(job).append("progress", self._progress_html(job))
        instruction = job.task
        parts = [self._label(job, r) for i, r in sorted(job.results.items()) if r.status == "ok" and i < job.total]
        missing = [i + 1 for i in range(job.total) if job.results.get(i) is None or job.results[i].status != "ok"]
        note = f"\nChunks with no answer (failed or not run): {_ranges(missing)}." if missing else ""
        try:
            answer = self._combine(job, instruction, parts, note)
        except OllamaError as exc:
            if job.id in self._cancel:
                return self._to_choice(job)
            job.state, job.message = "failed", f"The synthesis failed: {exc}"
            self.store.save(job)
            self._record(job, answer=None, synthesis=f"error: {' '.join(str(exc).split())}")
            return
        if missing:
            answer += f"\n\n_Note: chunk{'s' if len(missing) > 1 else ''} {_ranges(missing)} of {job.total} " \
                      "had no answer, so this synthesis does not cover them._"
        job.state, job.finished, job.answer = "done", time.time(), answer
        self.store.save(job)
        self._record(job, answer=answer, synthesis="ok")

    def _label(self, job: Job, r: ChunkResult) -> str:
        where = f" ({r.heading})" if r.heading else ""
        return f"[Chunk {r.index + 1} of {job.total}{where}]\n{r.text}"

    def _combine(self, job: Job, instruction: str, parts: list[str], note: str) -> str:
        """LangChain's collapse: batch partials into requests that fit, repeat until one does."""
        reply_tokens = self.svc.config.budget.reply_tokens
        room = self._reduce_room(job, instruction, note, reply_tokens)
        level = 0
        while True:
            batches = self._batches(parts, room, job.bytes_per_token)
            if len(batches) <= 1:
                return self._synthesize(job, instruction, batches[0] if batches else [], note, reply_tokens)
            level += 1
            log.info("analysis %s: combining %d partials in %d batches (level %d)", job.id, len(parts),
                     len(batches), level)
            self.log_for(job).append("progress", self._progress_html(
                job, stage=f"Combining partial answers in {len(batches)} batches (round {level})…"))
            parts = [f"[Combined answer {n + 1} of {len(batches)}]\n"
                     + self._synthesize(job, instruction, batch, "", self.svc.config.chunking.map_reply_tokens)
                     for n, batch in enumerate(batches)]

    def _reduce_room(self, job: Job, instruction: str, note: str, reply_tokens: int) -> int:
        effective = min(self.svc.config.model(job.model).effective_context or job.window, job.window)
        fixed = estimate_messages([{"content": REDUCE_SYSTEM}, {"content": self._reduce_prompt(instruction, [], note)}],
                                  job.bytes_per_token)
        return max(64, effective - fixed - reply_tokens - math.ceil(self.svc.config.budget.safety_margin * effective))

    @staticmethod
    def _batches(parts: list[str], room: int, bpt: float) -> list[list[str]]:
        """Consecutive groups of parts whose estimate fits ``room``; an oversize part is cut."""
        batches: list[list[str]] = [[]]
        used = 0
        for part in parts:
            cost = estimate_tokens(part + "\n\n", bpt)
            if cost > room:
                part = part.encode()[: int(room * bpt) - 16].decode("utf-8", "ignore") + " […]"
                cost = estimate_tokens(part + "\n\n", bpt)
            if used + cost > room and batches[-1]:
                batches.append([])
                used = 0
            batches[-1].append(part)
            used += cost
        return [b for b in batches if b]

    @staticmethod
    def _reduce_prompt(instruction: str, parts: list[str], note: str) -> str:
        body = "\n\n".join(parts)
        return (f"Instruction: {instruction}\n\nThe partial answers below were written from the chunks of one "
                f"document, in order. Combine them into one answer to the instruction.{note}\n\n---\n{body}")

    def _synthesize(self, job: Job, instruction: str, parts: list[str], note: str, reply_tokens: int) -> str:
        messages = [{"role": "system", "content": REDUCE_SYSTEM},
                    {"role": "user", "content": self._reduce_prompt(instruction, parts, note)}]
        return self._call(job, messages, reply_tokens)

    def _document(self, job: Job, settings: chunking.ChunkSettings | None = None) -> chunking.Document:
        """The job's file read with the job's settings (or new ones while planning)."""
        from ..workspace import Workspace

        wf = Workspace(self.svc.config.workspace_path).resolve(job.file)
        settings = settings or chunking.ChunkSettings(size_tokens=job.size_tokens,
                                                      overlap=self.svc.config.chunking.overlap,
                                                      bytes_per_token=job.bytes_per_token)
        return chunking.read_document(wf.path, settings)

    # -- the session record ---------------------------------------------------------------

    def _analysis_record(self, job: Job, synthesis: str | None) -> fountain.ChunkAnalysis:
        results = []
        for i in range(job.total):
            r = job.results.get(i)
            if r is None:
                results.append("cancelled")
            elif r.status == "ok":
                results.append("ok")
            else:
                results.append(f"error: {r.error}")
        return fountain.ChunkAnalysis(file=job.file, chunks=job.total, model=fountain.model_cue(job.model),
                                      boundary=job.boundary, chunk_size=job.size_tokens,
                                      instruction=job.instruction, when=datetime.now().replace(microsecond=0),
                                      results=results, synthesis=synthesis)

    def _record(self, job: Job, answer: str | None, synthesis: str) -> None:
        """The CHUNK ANALYSIS scene and the answer, written right after the turn that asked."""
        record = self._analysis_record(job, synthesis)

        def add(turn: fountain.Turn) -> None:
            turn.analysis = record
            if answer is not None:
                turn.reply, turn.model = answer, job.model

        self.svc.store.update_turn(job.session, job.turn, add, expect=job.asked)
        if job.state in ("done", "dropped"):
            self.store.remove(job)
        self._emit_state(job)

    def _record_decline(self, job: Job) -> None:
        self.svc.store.update_turn(job.session, job.turn, lambda turn: turn.notes.append(notes.declined()),
                                   expect=job.asked)

    # -- progress events -----------------------------------------------------------------

    def _render(self, template: str, **ctx) -> str:
        """Render in the worker thread: an app context, no request (no url_for)."""
        with self.svc.extra["app"].app_context():
            return render_template(template, **ctx)

    def _progress_html(self, job: Job, current: int | None = None, stage: str = "") -> str:
        return self._render("analysis/_progress.html", job=job, current=current, stage=stage, now=time.time())

    def _emit_state(self, job: Job) -> None:
        """Tell followers the card changed state; the stream ends (a new card opens its own)."""
        events = self.log_for(job)
        events.append("state", "")
        events.close()
        with self._lock:
            self.logs.pop(job.id, None)
            self.closed_logs[job.id] = events

    def shutdown(self) -> None:
        """Stop the request in flight; the job stays 'running' on disk, so a restart offers Resume."""
        with self._lock:
            self._stopping = True
            for job in self.jobs.values():
                if job.state in ACTIVE:
                    self._cancel.add(job.id)
            stream = self._current_stream
        if stream is not None:
            stream.cancel()


def _ranges(numbers: list[int]) -> str:
    """1, 2, 3, 5 -> '1-3, 5': short even when most chunks were not run."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in spans)
