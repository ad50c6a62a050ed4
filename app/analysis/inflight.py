"""The map calls of one run in flight: up to ``model_server.parallel`` at once, results in chunk order.

A server that answers several calls at once (``OLLAMA_NUM_PARALLEL``, ``llama-server -np N``,
two boxes behind a balancer) reads a file that many times faster; the Pi answers one
(``parallel: 1``, the default), and then this is the old one-chunk-after-another loop.

``MapQueue.run`` hands chunks to a small thread pool (``parallel`` threads, made for the run
and gone with it) and waits for any call to end (``concurrent.futures.wait``: no polling).
A chunk's result is committed (``results.jsonl``, the ``partial`` event, the progress count)
only once every chunk before it has been: chunk 2 finishing before chunk 1 waits for it, so
the results file, the card and a re-plan see the same order as a one-at-a-time run, and a
resumed job re-runs exactly the chunks without a result.  A re-plan after a committed chunk
re-sizes only the chunks not started yet (it cuts after the last chunk in flight), so no call
in flight is ever wasted and a resume replays the same layout.

A Stop (cancel, discard, shutdown) stops the job's activity, which cancels every part at
once; a chunk that needs the job interrupted (the server stayed away through every retry)
cancels the others.  Either way the results that arrived are kept (in chunk order, gaps
allowed) before the job moves on.
"""

from __future__ import annotations

import logging
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from .. import chunking
from ..work.activity import Activity, Part
from . import plan
from .job import ChunkResult, InvalidTransition, Job

log = logging.getLogger(__name__)


@dataclass
class Interrupted:
    """A chunk's outcome when the server stayed away through every retry: the job pauses."""

    error: BaseException


class MapQueue:
    """One run's map calls: which chunks wait, which are in flight, which results wait for earlier ones."""

    def __init__(self, execution, job: Job, doc: chunking.Document, activity: Activity, parallel: int):
        self.ex, self.steps, self.job, self.doc = execution, execution.steps, job, doc
        self.activity, self.parallel = activity, max(1, parallel)
        self.chunks = plan.job_chunks(execution.sizing, job, doc)
        self.todo = [c for c in self.chunks if not self._tried(c.index)]
        self.running: dict[Future, tuple[chunking.Chunk, Part]] = {}
        self.landed: dict[int, ChunkResult | Interrupted | None] = {}   # ended, not yet committed
        self.interrupted: BaseException | None = None

    def _tried(self, index: int) -> bool:
        """Has the chunk a result, an answer or a failure (issue 43: the agreed cost is the cost run; a chunk
        that failed after its retries is run again only when the user asks for it, with its cost)?"""
        return index in self.job.results

    def run(self) -> bool:
        """Map every chunk without an answer; False when the job was interrupted (the server away)."""
        with ThreadPoolExecutor(self.parallel, thread_name_prefix=f"map-{self.job.id}") as pool:
            try:
                while True:
                    self._fill(pool)
                    if not self.running:
                        break
                    ended, _ = wait(self.running, return_when=FIRST_COMPLETED)
                    for future in ended:
                        self._landed(future)
                    self._commit()
            except BaseException:
                self._cancel_all()      # (the job moved on under us): the pool's exit waits for no call
                self._keep_landed()
                raise
        self._commit(everything=True)
        if self.interrupted is not None and not self.steps.stopped(self.job):
            self.ex.interrupt(self.job, self.interrupted)
            return False
        return True

    def _keep_landed(self) -> None:
        """The run fails: answers that already arrived are still recorded (the docstring's promise),
        without letting a second error hide the first."""
        try:
            self._commit(everything=True)
        except Exception:
            log.exception("analysis %s: the answers that arrived could not be recorded", self.job.id)

    def _stopping(self) -> bool:
        return self.interrupted is not None or self.steps.stopped(self.job)

    def _fill(self, pool: ThreadPoolExecutor) -> None:
        """Start calls for the next chunks while fewer than ``parallel`` are in flight; say which run."""
        started = False
        while self.todo and len(self.running) < self.parallel and not self._stopping():
            chunk = self.todo.pop(0)
            part = Part(self.activity)
            self.running[pool.submit(self._read, chunk, part)] = (chunk, part)
            started = True
        if started:
            self.steps.progress(self.job, running=self.in_flight())

    def _read(self, chunk: chunking.Chunk, part: Part):
        """A pool thread: one chunk's map call (retries, a re-split) while the part is attached."""
        with part:
            return self.ex.read_chunk(self.job, chunk, self.doc, part)

    def in_flight(self) -> list[int]:
        """The 0-based chunks whose calls are running now."""
        return sorted(c.index for c, _ in self.running.values())

    def _landed(self, future: Future) -> None:
        """A call ended: keep its outcome until the chunks before it are committed."""
        chunk, _ = self.running.pop(future)
        try:
            outcome = future.result()
        except Exception as exc:        # a bug in one chunk's call must not lose the others'
            log.exception("analysis %s: chunk %d crashed", self.job.id, chunk.index + 1)
            outcome = ChunkResult(chunk.index, "error", error=f"The call crashed: {exc}")
        if isinstance(outcome, Interrupted):
            self.interrupted = self.interrupted or outcome.error
            self._cancel_all()
        self.landed[chunk.index] = outcome

    def _commit(self, everything: bool = False) -> None:
        """Record the results whose earlier chunks are all recorded (``everything``: the run is
        over, record what arrived, gaps allowed); after each, maybe re-plan the rest."""
        waiting = [c.index for c in self.todo] + self.in_flight()
        floor = min(waiting, default=None)
        for index in sorted(self.landed):
            if not everything and floor is not None and index > floor:
                break
            outcome = self.landed.pop(index)
            if not isinstance(outcome, ChunkResult):
                continue                  # stopped, or interrupted: no result for this chunk
            if self.steps.stopped(self.job) and outcome.status != "ok":
                continue
            self.steps.machine.add_result(self.job, outcome)
            self.steps.partial(self.job, index)
            self.steps.progress(self.job, running=self.in_flight())
            if not everything and not self._stopping():
                self._replan()

    def _replan(self) -> None:
        """After a committed chunk: re-size the chunks not started yet if the file measures denser
        or lighter than planned (the ones started, in flight or ended, keep their layout)."""
        job, sizing = self.job, self.steps.sizing
        started = self.todo[0].index if self.todo else len(self.chunks)
        changes = plan.replan(sizing, job, self.doc, self.chunks[:started])
        if changes is None:
            return
        log.info("analysis %s: %s measures %.2f bytes per token, not %.2f: the remaining chunks are re-sized "
                 "(%d chunks in all, were %d)", job.id, job.file, job.measured_bpt, job.bytes_per_token,
                 changes["chunks"], job.chunks)
        try:
            self.steps.machine.update(job, expect="running", **changes)
        except InvalidTransition:       # stopped meanwhile: the loop sees it; what landed is kept
            return
        self.chunks = plan.job_chunks(sizing, job, self.doc)
        self.todo = [c for c in self.chunks[started:] if not self._tried(c.index)]
        self.steps.progress(job)

    def _cancel_all(self) -> None:
        """The job is about to pause: every other call in flight ends now."""
        for _, part in self.running.values():
            part.cancel()


class RankedQueue(MapQueue):
    """A relevance-first read's map calls (issue 42): the chunks in ``order`` (most relevant first), each
    result committed as it lands (no chunk order to wait for, no re-plan: the chunks are the plan's),
    and no new call started once ``enough`` says what was read answers the question."""

    def __init__(self, execution, job: Job, doc: chunking.Document, activity: Activity, parallel: int,
                 order: list[int], enough):
        super().__init__(execution, job, doc, activity, parallel)
        rank = {index: r for r, index in enumerate(order)}
        self.todo.sort(key=lambda c: rank.get(c.index, len(rank) + c.index))
        self.order, self.enough = [i for i in order if i < len(self.chunks)], enough
        self.why = ""

    def _stopping(self) -> bool:
        return bool(self.why) or super()._stopping()

    def _commit(self, everything: bool = False) -> None:
        for index in list(self.landed):
            outcome = self.landed.pop(index)
            if not isinstance(outcome, ChunkResult) or (self.steps.stopped(self.job) and outcome.status != "ok"):
                continue
            self.steps.machine.add_result(self.job, outcome)
            self.steps.partial(self.job, index)
            self.steps.progress(self.job, running=self.in_flight())
        read = [self.job.results[i] for i in self.order if i in self.job.results]
        self.why = self.why or self.enough(read, len(self.chunks))
