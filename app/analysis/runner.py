"""Chunked analysis: the queue, the worker thread and the user's decisions.

When a file the user asks about would overflow the remaining context, nothing
of it goes to the model. HARVEY answers with an alert card (seed 000 D1, D2);
the user writes the chunk instruction (optionally ``@model``) or says "no".
A background worker then runs the instruction on each chunk (map), combines the
partial answers (``mapreduce``) and records the answer in the session as the
reply to the user's message (``record``; D4, D5).

Every state change goes through ``transition`` (``job.StateMachine``) under the
runner's lock; the worker and the views race only through it.  Failures are
sorted by what trying again can do:

* a transport failure (Ollama unreachable, the connection dropped, a timeout, a busy
  server: ``execute.retryable``) is retried after growing pauses, then the job pauses as
  "interrupted" with Retry; Resume runs every chunk not yet run and never redoes a
  finished one;
* a refusal that will repeat (the model not installed) is recorded for that chunk at
  once, never retried; a chunk refused for the window is read as two halves (split
  again, a few times at most), never sent again as it was;
* any other error is retried once, then recorded for that chunk.

A chunk recorded as failed is not run again by a Resume or a Read the rest (issue 43: the calls the
card names are the calls made); the answer names it as not read, and its "Read the rest" offers it
again with its cost.

A re-plan (the file denser than planned) never cuts the run: when the whole
file was chosen and it now needs more calls than the user agreed to, the agreed
chunks run and the job pauses in "confirm" to ask (read the rest, or synthesize
what was read). Whatever part of the file no answer covers is named in the
answer and in the scene (``plan.unread``, ``record.coverage_note``).

If no chunk produced an answer the job fails with a clear message and no
synthesis request is sent.  Each map call asks for a structured partial answer
(``mapreduce.MAP_SCHEMA`` through Ollama's ``format``); a server that refuses the
schema gets free-text map calls for the rest of the job (``job.format_refused``).
Chunks with nothing relevant stay out of the reduce; if none had anything, the
answer says so and no synthesis request is sent.  The answer's citations are
checked against the relevant chunks (``mapreduce.resolve_citations``).  The worker
appends small events (``progress``, ``partial`` with the chunk index, ``state``);
the SSE view renders them.
The map and reduce calls of one run are ``execute.Execution``'s; this module keeps the
jobs, the user's decisions, the session's activity, the lane and the settling.
Settled jobs are forgotten (a few stay for late followers): memory stays flat.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import secrets
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from .. import chunking
from .. import routing
from ..errors import Busy, HarveyError, ModelError
from ..errors import one_line as _one_line
from ..events import EventLog
from ..budget import Sizing
from ..work.activity import Activities, Activity
from ..sessions import fountain, notes
from ..sessions.store import SessionNotFound, SessionStore, TurnMoved
from . import answers, plan, record
from .execute import Execution
from .retrieve import Retrieval
from .steps import RunSteps
from .job import (ACTIVE, OPEN, SETTLED, WORKING, ChunkResult, InvalidTransition, Job, JobError,  # noqa: F401
                  StateMachine, disk_trouble, without_directive)
from .store import JobStore

if TYPE_CHECKING:
    from ..retrieval.indexer import Indexer
    from ..work.calls import ModelCalls
    from ..work.worker import Worker

log = logging.getLogger(__name__)

OVERFLOW_TEXT = ('Context overflow: {file} is approximately {tokens:,} tokens;\n{remaining:,} tokens remain in '
                 'current context.\nEnter instructions to process each chunk in turn, or "no" to\nreturn to the '
                 'conversation.')
# The states in which a job holds its session's activity: its card waits for the instruction, it
# runs, or its outcome is being written into the session.
HOLDING = ("proposed", *ACTIVE, "done", "dropped")
# The states a run leaves a job in for the user (Retry or Resume, keep or drop, read on): the
# "state" event that ends its followers' streams is logged in the same locked step as the change,
# so a Resume tapped the moment the card says "interrupted" starts a run whose followers never see
# the earlier run's end.
AWAITING = ("choose", "confirm", "interrupted", "failed")
KEEP_SETTLED = 8            # settled jobs kept for late event followers; older ones are forgotten


class JobRunner:
    """Holds every open job; runs one at a time in a worker thread, the rest queue."""

    def __init__(self, sizing: Sizing, sessions: SessionStore, activities: Activities, worker: Worker,
                 calls: ModelCalls, indexer: Indexer | None):
        # What the runner uses, each named (issue 34): the settings, model server and calibration;
        # the sessions its jobs' outcomes are written into; who holds each session; where the
        # analysis lane runs; the model calls and the passages index its run's steps use.
        self.sizing, self.sessions, self.activities = sizing, sessions, activities
        self.store = JobStore(sizing.config.data_path / "jobs")
        self.machine = StateMachine(self.store.save, self.store.add_result)
        self._lock = self.machine.lock          # the one lock of every job state change
        self.jobs: dict[str, Job] = {}
        self.logs: dict[str, EventLog] = {}
        self._settled: OrderedDict[str, tuple[Job, EventLog]] = OrderedDict()
        self._run_start: dict[str, int] = {}
        self._written: dict[str, str] = {}     # the answer a running job's model is writing now (issue 44)
        # The session's activity each open job holds (work.Activities owns them): a job holds
        # its session while its card waits for the instruction and while it runs.
        self._activities: dict[str, Activity] = {}
        self.lane = worker.lane("analysis", self._serve)
        # What a run's steps (the map queue, the calls, the passages answer) may ask of the runner,
        # and nothing else of it (issue 34).
        self.steps = RunSteps(sizing, calls, indexer, self.machine, transition=self.transition,
                              stopped=self._stopped,
                              progress=self._progress, partial=self._partial,
                              after_stop=self._after_stop, fail=self._fail, finish=self._finish,
                              activity_of=self._activity_of, writing=self._writing)
        self._stopping = False
        for job in self.store.load_all():
            self.jobs[job.id] = job
            self.logs[job.id] = EventLog(key=self._log_key(job))
            if job.state in SETTLED:
                self._recover(job)      # a crash came between the decision and the record
            elif not self.sessions.exists(job.session):
                self.discard(job)       # stale: its session was deleted while the server was down
            elif job.state in ACTIVE:
                self.transition(job, "interrupted", message=self._stopped_message(job))
            elif job.state == "proposed":
                try:
                    self._hold(job)     # its card waits again, holding the session
                except Busy:
                    pass                # (an older file with two cards: the newer one holds)

    def transition(self, job: Job, new_state: str, **changes) -> Job:
        """The one way a job's state changes: checked by job.TRANSITIONS, applied and saved under the lock.

        A job that leaves the states that hold its session (``HOLDING``) gives the session back, in
        the same step under the runner's lock: whoever sees the new state (a tap on Retry, a message)
        finds the session free already. A job left for the user (``AWAITING``) tells its followers in
        that step too."""
        with self._lock:
            self.machine.transition(job, new_state, **changes)
            self._changed(job, new_state)
        return job

    def _changed(self, job: Job, new_state: str) -> None:
        """What goes with every state change, saved or not, in the same locked step: the session
        given back when the job leaves ``HOLDING``, the followers told when it waits on the user."""
        self._written.pop(job.id, None)         # (a new state: the card is drawn again from the job)
        if new_state not in HOLDING:
            self._release(job)
        else:
            activity = self._activity_of(job)
            if activity is not None:
                activity.waiting = new_state == "proposed"
        if new_state in AWAITING:
            self._emit_state(job)

    def _unsaved(self, job: Job, new_state: str, exc: OSError) -> None:
        """The change to ``new_state`` when it cannot be saved (a full or read-only disk): made in
        memory, with the card saying why, and with everything ``transition`` does beside it."""
        with self._lock:
            self.machine.unsaved(job, new_state, message=self._unsaved_message(exc))
            self._changed(job, new_state)

    # -- the session's activity ---------------------------------------------------------

    def _hold(self, job: Job) -> Activity:
        """Take the job's session (Busy if a reply or a compact holds it); called under the session lock."""
        activity = self.activities.begin(job.session, "analysis", job.turn)
        activity.waiting = job.state == "proposed"
        with self._lock:
            self._activities[job.id] = activity
        return activity

    def _release(self, job: Job) -> None:
        with self._lock:
            activity = self._activities.pop(job.id, None)
        if activity is not None:
            self.activities.end(activity)

    def _activity_of(self, job: Job) -> Activity | None:
        with self._lock:
            return self._activities.get(job.id)

    def _retake(self, job: Job) -> None:
        """Hold the session again to run a job the user sent back to work (after a cancel or an
        interruption); a reply or compact running there refuses it, with the reason on the card."""
        try:
            self._hold(job)
        except Busy as exc:
            message = f"{exc} (The analysis waits; try again when that has finished.)"
            self.note(job, message, expect=job.state)
            raise JobError(message) from None

    def _log_key(self, job: Job) -> str:
        """Event ids of this process's log of a job: never taken for another process's (a restart)."""
        return f"{self.activities.boot}{job.id}"

    # -- lookups -----------------------------------------------------------------------

    def find(self, job_id: str) -> Job | None:
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None and job_id in self._settled:
                job = self._settled[job_id][0]
            return job

    def get(self, job_id: str) -> Job:
        job = self.find(job_id)
        if job is None:
            raise KeyError(job_id)
        return job

    def for_session(self, session: str) -> list[Job]:
        with self._lock:
            return [j for j in self.jobs.values() if j.session == session]

    def settled_for(self, session: str) -> list[Job]:
        """The session's recently settled jobs (the last few are kept: their partial answers stay openable)."""
        with self._lock:
            return [job for job, _ in self._settled.values() if job.session == session]

    def ahead(self, job: Job | None = None) -> Job | None:
        """The analysis the lane is running now (issue 44: a job waiting behind it names it), None when the
        lane is free or ``job`` is that one; only one runs at a time."""
        with self._lock:
            running = [j for j in self.jobs.values() if j.state in ("running", "synthesizing", "cancelling")
                       and (job is None or j.id != job.id)]
        return running[0] if running else None

    def open_for(self, session: str) -> Job | None:
        """The session's newest job that still needs the user or is still working."""
        for job in reversed(self.for_session(session)):
            if job.state in OPEN:
                return job
        return None

    def results(self, job: Job) -> list[ChunkResult]:
        """The run's partial answers as they are now, for a request thread (the worker adds to them)."""
        return self.machine.results(job)

    def busy(self, session: str) -> bool:
        return any(job.state in ACTIVE for job in self.for_session(session))

    def log_for(self, job: Job) -> EventLog:
        """The job's event log (one for its whole life; kept a little after it settles)."""
        with self._lock:
            if job.id in self.logs:
                return self.logs[job.id]
            if job.id in self._settled:
                return self._settled[job.id][1]
            return self.logs.setdefault(job.id, EventLog(key=self._log_key(job)))

    # -- the overflow alert ---------------------------------------------------------------

    def overflow(self, session: str, index: int, turn: fountain.Turn, prepared) -> Job:
        """Propose the analysis for turn ``index`` (about to be written) and put HARVEY's alert in the turn."""
        wf = prepared.overflow[0]
        job = self.propose(session, index, wf.name, turn.user_text, prepared.model,
                           remaining=prepared.budget.remaining, fields=prepared.plan)
        turn.harvey = OVERFLOW_TEXT.format(file=wf.name, tokens=job.file_tokens, remaining=job.remaining)
        if len(prepared.overflow) > 1:
            others = ", ".join(f.name for f in prepared.overflow[1:])
            turn.notes.append(notes.notice(f"also too large for the context: {others} (analyse them from the file list)"))
        return job

    def list_in_chat(self, session: str, index: int, turn: fountain.Turn, prepared, ask) -> Job:
        """A list, count or total question in the chat about a file that fits (issue 45): the list path
        without a card, started at once: the whole file in one map call (``plan(whole=True)``), the items
        the model lists counted by the app, which writes the answer (no synthesis call).  ``ask``: the
        guess (``answers.chat_list``) that took it there; its target is the job's ``list_of``."""
        wf = prepared.files[0].file
        fields = plan.plan(self.sizing, wf.name, prepared.model, prepared.prompt, whole=True)
        job = self.propose(session, index, wf.name, turn.user_text, prepared.model,
                           remaining=prepared.budget.remaining, fields=fields)
        try:
            self.transition(job, "queued", expect="proposed", selected=job.chunks, scope="all", agreed=job.chunks,
                            instruction=prepared.prompt, list_of=ask.target[:120], in_chat=True, message="",
                            synthesis="")
        except BaseException:
            self.discard(job)
            raise
        return job

    def submit(self, job: Job) -> None:
        """Queue a job already moved to "queued" (``list_in_chat``, once its turn is written)."""
        self._submit(job)

    def propose(self, session: str, turn: int, file: str, user_text: str, model: str, remaining: int,
                turn_text: str | None = None, fields: dict | None = None) -> Job:
        """Plan the chunks of ``file`` for the card (``fields``: planned already, outside the
        session's lock); nothing is sent to a model."""
        name, _ = plan.file_tokens(self.sizing, file, 4.0)       # refuses a path outside the workspace first
        fields = fields or plan.plan(self.sizing, name, model, user_text)   # file_tokens: of the text, not the bytes
        job = Job(id=secrets.token_hex(6), session=session, turn=turn, file=name, user_text=user_text,
                  instruction=user_text, remaining=remaining, turn_text=turn_text, **fields)
        self._hold(job)
        with self._lock:
            self.jobs[job.id] = job
            self.logs[job.id] = EventLog(key=self._log_key(job))
        try:
            self.store.save(job)
        except BaseException:
            self._release(job)
            with self._lock:
                self.jobs.pop(job.id, None)
                self.logs.pop(job.id, None)
            raise
        return job

    # -- user decisions ---------------------------------------------------------------------

    def start(self, job: Job, instruction: str, scope: str, way: str = "read", list_of: str | None = None) -> None:
        """Validate the instruction and scope, then queue the job (only from "proposed": a second tap is refused).
        ``way``: "read" every chunk, or "retrieve": one answer from the most relevant passages (issue 25).
        ``list_of``: what the card's "list every …" field says (issue 32: "" is no list; None, a form
        without the field: recognised from the instruction)."""
        if job.state != "proposed":
            raise InvalidTransition(f"The analysis of {job.file} is already {job.state}.")
        if self._activity_of(job) is None:        # (a second card of an older file, found at start-up)
            with self.sessions.lock(job.session):
                self._retake(job)
        model, text = self._route(instruction, job.model)
        if not text.strip():
            raise JobError("Write what to do with each chunk (or \"no\" to cancel).")
        max_chunks = self.sizing.config.chunking.max_chunks
        changes: dict = {}
        if model != job.model:      # another window and calibration: plan the chunks again
            changes = plan.plan(self.sizing, job.file, model, job.instruction)
            if way != "retrieve" and changes["chunks"] != job.chunks and changes["chunks"] > max_chunks:
                self.machine.update(job, expect="proposed", **changes)
                raise JobError(f"With {model} the file makes {job.chunks} chunks: choose again.")
        chunks, selected = changes.get("chunks", job.chunks), changes.get("selected", job.selected)
        chosen = "all"
        if way in ("retrieve", "relevant"):
            changes["way"] = way                # the relevant chunks first reads any of them: every chunk may run
            if way == "relevant":
                selected, list_of = chunks, ""
        elif chunks > max_chunks:
            if scope not in ("all", "first"):
                raise JobError(f"Choose whether to analyse all {chunks} chunks or only the first {max_chunks}.")
            selected, chosen = (chunks, "all") if scope == "all" else (max_chunks, "first")
        listed = answers.list_target(text) if list_of is None else " ".join(list_of.split())[:120]
        self.transition(job, "queued", expect="proposed", **{**changes, "selected": selected}, scope=chosen,
                        agreed=selected or chunks,
                        instruction=instruction, message="", synthesis="", list_of=listed)
        self._submit(job)

    def read_whole(self, session: str, index: int) -> Job:
        """Self-Route's whole-file read (issue 32): turn ``index`` holds a passages answer whose model said
        the passages do not hold the answer; propose a full read of its file with its instruction and
        start it at once (every chunk). Its answer replaces the passages answer, which its scene keeps."""
        with self.sessions.lock(session):
            turns = self.sessions.load(session).turns
            turn = turns[index] if 0 <= index < len(turns) else None
            analysis = turn.analysis if turn is not None else None
            if analysis is None or not analysis.rag or turn.user_text is None:
                raise JobError("That turn holds no answer from passages to read the whole file for.")
            if notes.read_computed(analysis.computed).answerable is not False:
                raise JobError("That answer says the passages hold it: there is nothing to read the whole file for.")
            job = self.propose(session, index, analysis.file, analysis.instruction, analysis.model, remaining=0,
                               turn_text=turn.user_text)
            self.machine.update(job, expect="proposed", replaces=turn.reply or "")
        try:
            self.start(job, analysis.instruction, "all", "read")
        except HarveyError as exc:
            self.note(job, str(exc), expect="proposed")
        return job

    def read_rest(self, session: str, index: int) -> Job:
        """A list answer that rests on part of its file (the first N chunks, a stop, failed chunks) read to the
        end (issue 40): the same question over every chunk, where the chunks the answer already read are taken
        from its scene rather than read again (``record.seeds``; used only if the run finds the same text cut
        the same way), and its answer replaces the partial one, which the new scene keeps."""
        with self.sessions.lock(session):
            turns = self.sessions.load(session).turns
            turn = turns[index] if 0 <= index < len(turns) else None
            analysis = turn.analysis if turn is not None else None
            computed = notes.read_computed(analysis.computed) if analysis is not None else None
            if analysis is None or analysis.rag or turn.user_text is None or not computed.partial:
                raise JobError("That answer rests on every chunk of its file already: there is no rest to read.")
            kept = computed.partial
            fields = plan.plan(self.sizing, analysis.file, analysis.model, analysis.instruction,
                               bpt=kept.get("bpt") or None)
            job = self.propose(session, index, analysis.file, analysis.instruction, analysis.model, remaining=0,
                               turn_text=turn.user_text, fields=fields)
            seeds = [dataclasses.asdict(r) for r in self.store.partial(str(kept.get("job") or "")).values()
                     if r.status == "ok"]
            self.machine.update(job, expect="proposed", replaces=turn.reply or "",
                                seeds={"source": analysis.source, "results": seeds})
        list_of = (computed.count or {}).get("target", "") if computed.count and "op" in computed.count else ""
        try:
            self.start(job, analysis.instruction, "all", "read", list_of=list_of)
        except HarveyError as exc:
            self.note(job, str(exc), expect="proposed")
        return job

    def note(self, job: Job, message: str, *, expect: str | tuple[str, ...], **changes) -> None:
        """Show ``message`` on the job's card (e.g. why Start was refused), if the job is still in the
        state the writer saw (``expect``): a second device's refused Start finds the job running and
        writes nothing onto it."""
        try:
            self.machine.update(job, expect=expect, message=message, **changes)
        except InvalidTransition:
            log.info("analysis %s: a note for a %s job dropped: it is %s now", job.id, expect, job.state)

    def _route(self, instruction: str, default: str) -> tuple[str, str]:
        """``@name`` anywhere routes to that installed model; the directive is removed."""
        mention = routing.last_mention(instruction)
        text = routing.without_mentions(instruction)
        if mention is None:
            return default, text
        try:
            return routing.resolve(mention, self.sizing.models.models()), text
        except routing.UnknownModel as exc:
            hint = f" Install it with: ollama pull {mention}" if self.sizing.config.model_server.api == "native" else ""
            raise JobError(f"{exc}{hint}") from None

    def decline(self, job: Job) -> None:
        """"no": back to the conversation; nothing is sent to any model."""
        self.transition(job, "declined", expect="proposed")
        try:
            record.write_decline(self.sessions, job)
        except (TurnMoved, SessionNotFound) as exc:
            log.warning("the decline of analysis %s could not be noted: %s", job.id, exc)
        self._settle(job)

    def cancel(self, job: Job) -> None:
        """Stop the run: close the request in flight; no new chunk starts."""
        activity = None
        with self._lock:
            if job.state == "queued":      # not picked up yet: the worker will find it is not queued
                self._move(job, "choose")
            elif job.state in WORKING:
                self._move(job, "cancelling")
                activity = self._activity_of(job)
            else:
                return
        if activity is not None:
            activity.stop()                # the call in flight ends now, whatever stage it is at

    def _move(self, job: Job, new_state: str) -> None:
        """A transition the user asked for (Cancel) that must happen even when the state cannot be
        saved: then it happens in memory, and the card says why."""
        try:
            self.transition(job, new_state)
        except OSError as exc:
            self._unsaved(job, new_state, exc)

    @staticmethod
    def _unsaved_message(exc: OSError) -> str:
        return (f"The analysis could not save its state: {disk_trouble(exc)}. Make room (or fix the disk), "
                "then Retry: every chunk saved so far is kept.")

    def _given_back(self, job: Job, exc: OSError) -> None:
        """The job's state cannot be saved: it becomes interrupted in memory (Retry when the disk has
        room), its session is given back, and the card says why."""
        log.error("analysis %s: its state cannot be saved (%s); interrupted, the session is given back", job.id, exc)
        try:
            self._unsaved(job, "interrupted", exc)
        except InvalidTransition:
            pass                     # settled or waiting on the user already

    def after_cancel(self, job: Job, keep: bool) -> None:
        """Synthesize the partial answers collected so far, or drop them."""
        if keep and job.done_count:
            return self._requeue(job, "choose", synthesis="pending")
        self.transition(job, "dropped", expect="choose")
        self._finish(job, answer=None, synthesis="cancelled")

    def read_on(self, job: Job, rest: bool) -> None:
        """The answer to "confirm": read the rest of the file (every chunk it needs), or synthesize
        what was read (the answer then names the part that was not)."""
        changes = dict(selected=job.chunks, agreed=job.chunks) if rest else dict(synthesis="pending")
        self._requeue(job, "confirm", message="", **changes)

    def resume(self, job: Job) -> None:
        """Continue an interrupted job: every chunk not yet run is run, no finished or failed one."""
        if job.state != "interrupted":
            raise InvalidTransition(f"The analysis of {job.file} is {job.state}, not interrupted.")
        try:
            doc = plan.document(self.sizing, job, tokens=False)       # (a request: the fingerprint only)
        except (HarveyError, OSError) as exc:
            self._refuse(job, f"{job.file} cannot be read any more ({_one_line(exc)}), so the analysis cannot "
                              "resume. Put the file back and retry, or discard the analysis.")
        if doc.fingerprint != job.fingerprint:
            self._refuse(job, f"{job.file} has changed since the analysis started, so finished chunks no longer "
                              "match it. Discard this analysis and start a new one.")
        self._requeue(job, "interrupted", message="")

    def _requeue(self, job: Job, expect: str, **changes) -> None:
        """Send a job that waits on the user (``expect``) back to work: it holds its session again,
        under the session's lock so that no message slips in between, and is queued. The state is
        checked under the runner's lock too: a run still letting go of the job (its transition gives
        the session back in that lock) has finished doing so when the check sees the new state."""
        with self.sessions.lock(job.session), self._lock:
            if job.state != expect:
                raise InvalidTransition(f"The analysis of {job.file} is {job.state} now, not {expect}.")
            self._retake(job)
            try:
                self.transition(job, "queued", expect=expect, **changes)
            except BaseException:         # not queued (changed meanwhile, or not saved): not held
                self._release(job)
                raise
        self._submit(job)

    def _refuse(self, job: Job, message: str) -> None:
        self.note(job, message, expect="interrupted")
        raise JobError(message)

    def discard(self, job: Job, expect=None) -> None:
        """Throw the job away (its card's Discard, or its session deleted): its folder goes."""
        with self._lock:
            activity = self._activity_of(job)
            self.transition(job, "discarded", expect=expect)
        if activity is not None:
            activity.stop()
        self._settle(job)

    def discard_for_session(self, session: str) -> int:
        """The session was deleted: discard its jobs (a running one is stopped). Returns how many."""
        count = 0
        for job in self.for_session(session):
            try:
                self.discard(job)
                count += 1
            except InvalidTransition:
                pass            # done or dropped: being recorded, gone in a moment
        return count

    # -- the worker --------------------------------------------------------------------

    def run_start(self, job: Job) -> int:
        """The id of the event that began the job's current run (a follower skips earlier runs' events)."""
        with self._lock:
            return self._run_start.get(job.id, 0)

    def _submit(self, job: Job) -> None:
        with self._lock:
            self._run_start[job.id] = self.log_for(job).last_id
        self._progress(job)
        self.lane.put(job.id)

    def _serve(self, job_id: str) -> None:
        """Run one queued job (the analysis lane runs one at a time: the Pi's model is asked for one)."""
        with self._lock:
            job = self.jobs.get(job_id)
        if job is None:
            return
        try:
            self._run(job)
        except InvalidTransition as exc:      # cancelled, discarded or stopped meanwhile
            log.info("analysis %s: %s", job.id, exc)
            self._after_stop(job)
        except OSError as exc:                # job.json or results.jsonl cannot be written: a full disk
            self._given_back(job, exc)
        except ModelError as exc:             # the model server, away while the file was read or counted
            if not exc.transient:
                return self._failed(job, exc)
            log.warning("analysis %s: the model server is away (%s); interrupted", job.id, exc)
            try:
                Execution(self.steps).interrupt(job, exc, during="reading of the file")
            except InvalidTransition:
                pass
            except OSError as unsaved:
                self._given_back(job, unsaved)
        except Exception as exc:  # a job must never kill the worker
            self._failed(job, exc)
        finally:
            self._let_go(job)

    def _failed(self, job: Job, exc: Exception) -> None:
        """The run ended on an error it could not recover from: the job fails with it (logged)."""
        log.exception("analysis %s failed", job.id, exc_info=exc)
        try:
            self._fail(job, f"The analysis failed: {_one_line(exc)}")
        except InvalidTransition:
            pass
        except OSError as unsaved:        # the failure cannot be saved either
            self._given_back(job, unsaved)

    def _let_go(self, job: Job) -> None:
        """The lane's item is over: a job it left running, synthesizing or cancelling (states only
        this thread moves a job out of; a Retry queues it anew, never into these) is interrupted
        and gives its session back, so nothing a crash or a failed save left behind holds the
        session until a restart."""
        if job.state not in ("running", "synthesizing", "cancelling"):
            return
        log.error("analysis %s: its run ended with the job still %s; interrupted", job.id, job.state)
        try:
            self.transition(job, "interrupted", message="The analysis stopped unexpectedly; Retry to go on.")
        except OSError as exc:
            return self._given_back(job, exc)
        except InvalidTransition:
            return

    def _run(self, job: Job) -> None:
        try:
            self.transition(job, "running", expect="queued", started=job.started or time.time())
        except InvalidTransition:
            return                  # cancelled or discarded before the worker got to it
        self._progress(job)
        try:
            doc = plan.document(self.sizing, job)
        except ModelError as exc:
            if exc.transient:
                raise                     # the server is away: interrupted, Retry goes on (``_serve``)
            return self._fail(job, f"{job.file} cannot be read: {_one_line(exc)}")
        except (HarveyError, OSError) as exc:
            return self._fail(job, f"{job.file} cannot be read: {_one_line(exc)}")
        if not job.fingerprint:           # planned from its measure (too large to read in a request)
            fields, doc = plan.exact(self.sizing, job, doc)
            self.machine.update(job, expect="running", **fields)
            self._progress(job)
        if doc.fingerprint != job.fingerprint:
            return self._fail(job, f"{job.file} changed after the analysis was planned, so its chunks no longer "
                                   "match. Discard this analysis and start a new one.")
        if job.source != (source := plan.source_of(doc)):     # a job.json from before issue #15
            self.machine.update(job, expect="running", source=source)
        if job.way == "retrieve":
            return Retrieval(self.steps).run(job, doc)
        if job.way == "relevant" and job.synthesis != "pending":
            return self._run_relevant(job, doc)
        self._take_seeds(job, doc)
        run = Execution(self.steps)
        if job.synthesis != "pending" and not run.map_all(job, doc):
            return                  # interrupted: Ollama is away
        if self._stopped(job):
            return self._after_stop(job)
        if job.synthesis != "pending" and job.wants_all and job.left_out:
            return self._ask_to_read_on(job, doc)
        run.reduce(job, doc)

    def _run_relevant(self, job: Job, doc: chunking.Document) -> None:
        """A question with one answer (issue 42): the chunks most relevant first, until what was read
        answers it; then the synthesis of what was read, in the file's order."""
        ranked = Retrieval(self.steps).ranked(job, doc, plan.job_chunks(self.sizing, job, doc))
        if ranked is None:
            return                  # stopped while the index was made
        order, how = ranked
        run = Execution(self.steps)
        finished, why = run.map_ranked(job, doc, order)
        if not finished:
            return                  # interrupted: Ollama is away
        if self._stopped(job):
            return self._after_stop(job)
        self.machine.update(job, expect="running", ranked_by=how, read_until=why)
        run.reduce(job, doc)

    def _take_seeds(self, job: Job, doc: chunking.Document) -> None:
        """The chunks a partial answer read, taken as this run's results where this run's chunk lies exactly
        where that one did in the same text (the scene's text fingerprint); the others are read."""
        seeds = job.seeds
        if not seeds or "taken" in seeds:
            return
        taken = 0
        if seeds.get("source") == job.source:
            chunks = plan.job_chunks(self.sizing, job, doc)
            for fields in seeds.get("results") or []:
                i = fields["index"]
                if i < len(chunks) and i not in job.results and (chunks[i].start, chunks[i].end) == (fields["start"],
                                                                                                  fields["end"]):
                    self.store.add_result(job, ChunkResult(**fields))
                    taken += 1
        log.info("analysis %s: %d chunks taken from the answer it continues, %d to read", job.id, taken,
                 job.total - len(job.results))
        self.machine.update(job, expect="running", seeds={"source": seeds.get("source"), "taken": taken})

    def _ask_to_read_on(self, job: Job, doc: chunking.Document) -> None:
        """Every agreed chunk has run but the re-planned file needs more: pause and ask (never cut
        silently); the card names the part not read so far."""
        unread = plan.unread(job, doc, plan.job_chunks(self.sizing, job, doc, whole=True))
        self.transition(job, "confirm", expect="running", unread=unread, message=(
            f"{job.file} is denser than planned: the whole file needs {job.chunks} chunks, and the {job.total} "
            "agreed have run."))

    def _stopped(self, job: Job) -> bool:
        return self._stopping or job.state not in WORKING

    def _after_stop(self, job: Job) -> None:
        """After a cancel the user chooses; after a shutdown the job waits for Resume."""
        try:
            if self._stopping and job.state in ACTIVE:
                self.transition(job, "interrupted", message=self._stopped_message(job))
            elif job.state == "cancelling":
                self.transition(job, "choose")
        except InvalidTransition:
            return

    @staticmethod
    def _stopped_message(job: Job) -> str:
        return "The server stopped during the run."

    def _fail(self, job: Job, message: str, synthesis: str | None = None) -> None:
        """The job cannot finish; the scene records what ran (when anything did); the card says why."""
        if synthesis is not None:
            try:
                record.write_outcome(self.sessions, job, None, synthesis)
            except (TurnMoved, SessionNotFound) as exc:
                message += f" (It could not be recorded in the session either: {_one_line(exc)})"
        self.transition(job, "failed", message=message)

    # -- the session record ---------------------------------------------------------------

    def _finish(self, job: Job, answer: str | None, synthesis: str) -> None:
        """Write a done or dropped job's outcome into the session, then forget the job.

        The turn that asked is addressed by index and checked (record.write_outcome);
        if it moved, the job fails and keeps its answer on the card: nothing is lost.
        """
        try:
            record.write_outcome(self.sessions, job, answer, synthesis)
        except (TurnMoved, SessionNotFound) as exc:
            self.transition(job, "failed", message=(
                f"The answer could not be written into the session: {_one_line(exc)}"
                + (" It is kept below." if answer else "")))
            return
        self._settle(job)

    def _recover(self, job: Job) -> None:
        """At start-up: finish recording a job whose outcome was decided but maybe not written."""
        if job.state == "discarded" or record.recorded(self.sessions, job):
            return self._settle(job)
        if job.state == "declined":
            try:
                record.write_decline(self.sessions, job)
            except (TurnMoved, SessionNotFound):
                pass
            return self._settle(job)
        self._finish(job, job.answer, "ok" if job.state == "done" else "cancelled")

    def _settle(self, job: Job) -> None:
        """The outcome is recorded (or thrown away): the folder goes, the runner forgets the job,
        and its session is free again."""
        self._release(job)
        self.store.remove(job, keep_results=record.partial(job))
        with self._lock:
            self.jobs.pop(job.id, None)
            self._run_start.pop(job.id, None)
            self._written.pop(job.id, None)
            events = self.logs.pop(job.id, None) or EventLog()
            self._settled[job.id] = (job, events)
            while len(self._settled) > KEEP_SETTLED:
                old_id, _ = self._settled.popitem(last=False)
                self.store.forget(old_id)
        events.append("state", job.state)
        events.close()

    # -- progress events (data-less or small: the SSE view renders them) ---------------------

    def _progress(self, job: Job, running: list[int] | None = None, stage: str = "") -> None:
        """A progress event: ``running``, the 0-based chunks whose map calls are in flight (the card
        says "reading chunks 4, 5 of 20"), or a stage of the synthesis."""
        data = {k: v for k, v in (("running", running), ("stage", stage)) if v not in (None, "", [])}
        self.log_for(job).append("progress", json.dumps(data) if data else "")

    def _writing(self, job: Job, text: str) -> None:
        """The answer being written so far; its followers render it from here (``writing``)."""
        with self._lock:
            self._written[job.id] = text
        self.log_for(job).append("writing")

    def writing(self, job: Job) -> str:
        """What the model is writing for ``job`` now ("" when nothing, or once its state moved on)."""
        with self._lock:
            return self._written.get(job.id, "") if job.state in ("running", "synthesizing") else ""

    def _partial(self, job: Job, index: int) -> None:
        """Chunk ``index``'s partial answer is recorded (the card's list of answers grows)."""
        self.log_for(job).append("partial", str(index))

    def _emit_state(self, job: Job) -> None:
        """Tell followers the card changed state (their stream renders the new card, then ends)."""
        self.log_for(job).append("state", job.state)

    def shutdown(self) -> None:
        """Stop the request in flight; the running job becomes interrupted, so a restart offers Resume."""
        with self._lock:
            self._stopping = True
            running = list(self._activities.values())
        for activity in running:
            activity.stop()
