"""Chunked analysis: the execution of one job's run, its map calls and its reduce.

The runner (``runner.JobRunner``) owns the jobs, the user's decisions, the session's
activity and the lane; for each run it builds an :class:`Execution`, which asks the model
for every chunk without an answer (map, with retries and re-plans) and then for the
synthesis (reduce).  It sees the runner only through ``steps.RunSteps`` (stopped, progress,
transition, fail, finish, the activity): every state change still goes through the runner,
so the two never race.  Failures of a map call are sorted by what trying
again can do (``retryable``, ``repeats``):

* the server away, busy or restarting (connection refused or reset, a timeout, a connection
  cut mid-reply, 429, 502, 503, 504) is retried after a growing pause (``RETRY_PAUSES_S``);
  a Stop during the pause ends it at once; when the pauses are used up, the job is
  interrupted (Retry resumes it): only a lost server pauses the job;
* the server's own error (``answered``: a 500, or an error inside the reply's stream, the
  runner failing on this input) is an answer: retried once after the first pause, then
  recorded for the chunk (its lines named unread) and the run goes on;
* a refusal that repeats (the model not installed) is recorded at once, never retried;
* anything else is retried once and recorded.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from .. import chunking
from ..budget import observed_bpt
from ..errors import HarveyError
from ..errors import one_line as _one_line
from ..modelserver import Cancelled, ContextExceeded, FormatRefused, ModelFailed, ModelNotFound, ServerError
from ..sessions import notes
from ..work.activity import Part
from ..work.calls import Request
from . import answers, mapreduce, plan, record
from .inflight import Interrupted, MapQueue, RankedQueue
from .job import ChunkResult, Job
from .steps import RunSteps

log = logging.getLogger(__name__)

RETRIES = 1                 # a chunk that failed otherwise (not a refusal that repeats) is tried once more
# The pauses before each retry of a map call the server could not answer now (``retryable``): a
# server restarting or loading a model gets about 7 s in all before the job pauses. Tests set
# shorter ones here.
RETRY_PAUSES_S: tuple[float, ...] = (1.0, 2.0, 4.0)
MAX_SPLIT_DEPTH = 3         # a chunk refused for the window is read in at most 2**3 parts


def repeats(exc: BaseException) -> bool:
    """A refusal that the same request would get again: never retried."""
    return isinstance(exc, (ContextExceeded, ModelNotFound, mapreduce.CombineError))


def answered(exc: BaseException) -> bool:
    """The server's own error: a 500 (a runner that crashed on this input, a balancer's own error) or
    an error inside the reply's stream (``ModelFailed``). The server is there and answered, so the
    chunk is sent once more, then recorded as failed; the job never pauses for it."""
    return isinstance(exc, ModelFailed) or (isinstance(exc, ServerError) and exc.http_status == 500)


def retryable(exc: BaseException) -> bool:
    """A map call worth sending again after a pause: the server is away, busy or restarting
    (``transient``: refused or reset connections, timeouts, cut connections, 429/502/503/504)."""
    return bool(getattr(exc, "transient", False)) and not repeats(exc)


def joined(index: int, parts: list[ChunkResult], heading: str, where: dict) -> ChunkResult:
    """A split chunk's result: its halves' answers as one (relevant when either half had
    something; the relevant halves' texts, their points in order, the higher confidence)."""
    relevant = [r for r in parts if r.relevant]
    confidences = [r.confidence for r in parts if r.confidence is not None]
    return ChunkResult(index, "ok", "\n\n".join(r.text for r in relevant or parts[:1]),
                       seconds=sum(r.seconds for r in parts), heading=heading, relevant=bool(relevant),
                       points=[p for r in parts for p in r.points],
                       confidence=max(confidences) if confidences else None, **where)


def passage_lines(chunk: chunking.Chunk, text: str) -> tuple[int, int]:
    """The 1-based first and last line of the chunk's whole range ``start:end`` (its overlap with
    the chunk before included: the model read it, and a quote may come from it)."""
    return chunk.first_line - text.count("\n", chunk.start, chunk.body_start), chunk.last_line


def loop_note(what: str) -> str:
    """Said under an answer the app stopped because the model was repeating itself (issue 44)."""
    return (f"\n\n*(The {what} was stopped: the model was repeating itself. What it wrote before the repetition "
            "is kept; asking again, or with another model, may do better.)*")


def cut_note(what: str, tokens: int, hint: str = "Ask for less, or analyse fewer chunks.",
             capped: bool = False) -> str:
    """Said under an answer that ended at its cap: its end is missing, and why (its own cap,
    ``chat.reply_tokens``, or all the room the window left)."""
    why = "its cap (chat.reply_tokens)" if capped else "all the room the model's window left"
    return f"\n\n*(The {what} was cut at {tokens:,} tokens, {why}: its end is missing. {hint})*"


class Execution:
    """One run of one job: its map calls and its reduce.  The runner builds one per run and keeps
    every piece of state (jobs, activities, the stop flag); this holds only the run's steps
    (``steps.RunSteps``), the part of the runner a run may use."""

    def __init__(self, steps: RunSteps):
        self.steps = steps
        self.sizing, self.calls = steps.sizing, steps.calls
        self.machine = steps.machine
        self._costs = threading.Lock()      # the job's cost figures, added to by every map call

    def map_all(self, job: Job, doc: chunking.Document) -> bool:
        """Map every chunk without an answer (a finished one is never redone); False when interrupted.

        ``model_server.parallel`` calls run at once and results are recorded in chunk order
        (``inflight.MapQueue``); after each the rest may be re-planned from the file's measured
        bytes per token (``plan.replan``).
        """
        activity = self.steps.activity_of(job)
        if activity is None:
            return True             # the job no longer holds its session: it was stopped
        return MapQueue(self, job, doc, activity, self.sizing.config.model_server.parallel).run()

    def map_ranked(self, job: Job, doc: chunking.Document, order: list[int]) -> tuple[bool, str]:
        """Map the chunks most relevant first until what was read answers the question (issue 42:
        ``answers.enough``); (False when interrupted, why the reading stopped: "answered", "share" or
        "" when every chunk was read)."""
        activity = self.steps.activity_of(job)
        if activity is None:
            return True, ""
        queue = RankedQueue(self, job, doc, activity, self.sizing.config.model_server.parallel, order, answers.enough)
        return queue.run(), queue.why

    def _pause(self, job: Job, part: Part, seconds: float) -> bool:
        """Wait ``seconds`` before a retry (a server restarting); True when a Stop, a cancel or a
        shutdown came (they stop the job's activity, which cancels the part), which ends the wait
        at once."""
        if self.steps.stopped(job):
            return True
        return part.wait_stopped(seconds) or self.steps.stopped(job)

    def read_chunk(self, job: Job, chunk: chunking.Chunk, doc: chunking.Document, part: Part,
                    depth: int = 0) -> ChunkResult | Interrupted | None:
        """Run the instruction on one chunk (a pool thread of ``MapQueue``): its result, the job's
        interruption, or None when it was stopped.

        The reply budget keeps a partial answer short where the instruction allows
        (generation is the slowest part on a CPU); a PDF's chunk is labelled with its pages.
        The result keeps where the chunk lies in the document's text and only the quotes
        that it holds (the record's passage).  A chunk refused for the window is split in
        two and each half read (``_read_halves``), never sent again as it was.
        """
        text = doc.text
        pages = doc.source.pages_of(chunk.start, chunk.end) if doc.source is not None else None
        budget = plan.reply_budget(self.sizing, job.task)
        section = " › ".join(chunk.heading_path)
        heading = section
        if pages:
            heading = (f"pages {pages[0]}–{pages[1]}" if pages[0] != pages[1] else f"page {pages[0]}") + (
                f" · {heading}" if heading else "")
        where = dict(start=chunk.start, end=chunk.end, lines=list(passage_lines(chunk, text)),
                     pages=list(pages) if pages else None, section=section)
        result, pauses, others = None, 0, 0
        while True:
            if self.steps.stopped(job) or part.cancelled:
                return None
            started = time.monotonic()
            try:
                reply = self._map_call(job, chunk, budget, pages, part)
                answer = self._read_reply(job, reply, text[chunk.start:chunk.end])
                return ChunkResult(chunk.index, "ok", answer.text, seconds=time.monotonic() - started,
                                   heading=heading, relevant=answer.relevant, points=answer.points,
                                   confidence=answer.confidence, answer=answer.answer, **where)
            except ContextExceeded as exc:
                if self.steps.stopped(job) or part.cancelled:
                    return None
                return self._read_halves(job, chunk, doc, part, depth, exc, heading, where)
            except HarveyError as exc:
                if self.steps.stopped(job) or part.cancelled:
                    return None
                result = ChunkResult(chunk.index, "error", error=_one_line(exc), heading=heading)
                if answered(exc) and others < RETRIES and RETRY_PAUSES_S:
                    others += 1
                    log.warning("chunk %d/%d of %s: the server answered with an error (%s); sent once more in "
                                "%.1f s", chunk.index + 1, job.total, job.file, _one_line(exc), RETRY_PAUSES_S[0])
                    if self._pause(job, part, RETRY_PAUSES_S[0]):
                        return None
                    continue
                if retryable(exc) and pauses < len(RETRY_PAUSES_S):
                    pause, pauses = RETRY_PAUSES_S[pauses], pauses + 1
                    log.warning("chunk %d/%d of %s failed (%s); retry %d of %d in %.1f s", chunk.index + 1,
                                job.total, job.file, _one_line(exc), pauses, len(RETRY_PAUSES_S), pause)
                    if self._pause(job, part, pause):
                        return None
                    continue
                log.warning("chunk %d/%d of %s failed: %s", chunk.index + 1, job.total, job.file, exc)
                if exc.transient and not repeats(exc):
                    return Interrupted(exc)
                if repeats(exc) or answered(exc) or others >= RETRIES:
                    return result       # refused for good, or retried as often as it may be
                others += 1

    def _read_halves(self, job: Job, chunk: chunking.Chunk, doc: chunking.Document, part: Part, depth: int,
                     refusal: ContextExceeded, heading: str, where: dict) -> ChunkResult | Interrupted | None:
        """The server refused the chunk for its window (its own limit, or a calibration that
        under-counted): read it as two halves cut at a structure boundary (``chunking.split_chunk``),
        each maybe split again down to ``MAX_SPLIT_DEPTH``, and join their answers as the chunk's.
        When that still fails, the chunk is a failed chunk (its lines are named as unread)."""
        halves = chunking.split_chunk(doc.text, chunk, job.map_bpt) if depth < MAX_SPLIT_DEPTH else None
        if halves is None:
            log.warning("chunk %d/%d of %s refused for the window, split %d times: %s", chunk.index + 1, job.total,
                        job.file, depth, _one_line(refusal))
            return ChunkResult(chunk.index, "error", heading=heading, error=(
                f"{_one_line(refusal)} (split in {2 ** depth} parts, still too large)" if depth else _one_line(refusal)))
        log.info("chunk %d/%d of %s refused for the window: read as two halves (depth %d)", chunk.index + 1,
                 job.total, job.file, depth + 1)
        parts = []
        for half in halves:
            outcome = self.read_chunk(job, half, doc, part, depth + 1)
            if not isinstance(outcome, ChunkResult) or outcome.status != "ok":
                return outcome if outcome is None or isinstance(outcome, Interrupted) else dataclasses.replace(
                    outcome, index=chunk.index, heading=heading)
            parts.append(outcome)
        return joined(chunk.index, parts, heading, where)

    def _map_call(self, job: Job, chunk: chunking.Chunk, budget, pages, part: Part) -> str:
        """One map call: structured (MAP_SCHEMA as ``format``) unless the server refused it once
        or the instruction's answer grows with the text (translate, rewrite, list every…: free
        text, as a few short points would cut it); a refusal is remembered for the job and the
        call is sent again as free text.

        A structured reply also spells out its quotes and the JSON around them, so it may
        generate about twice the free-text budget (within the cap every chunk was sized for):
        a reply cut off mid-JSON would be read as free text."""
        if job.list_of or answers.point_question(job.task):
            return self._shaped_call(job, chunk, budget, pages, part)
        if not job.format_refused and budget.words is not None:    # (a translation is no list of points)
            messages = mapreduce.map_messages(job.task, chunk, job.total, budget.words, pages, structured=True)
            num_predict = min(self.sizing.config.chunking.map_reply_tokens, 2 * budget.num_predict + 32)
            try:
                return self._call(job, messages, num_predict, kind=job.text_kind or None, chunk=True,
                                  format=mapreduce.MAP_SCHEMA, holder=part, reading=_reading(job, chunk))
            except FormatRefused as exc:
                log.info("analysis %s: the server refused the JSON schema (%s); free text from now on", job.id,
                         _one_line(exc))
                self.machine.update(job, expect="running", format_refused=True)
        messages = mapreduce.map_messages(job.task, chunk, job.total, budget.words, pages)
        return self._call(job, messages, budget.num_predict, kind=job.text_kind or None, chunk=True, holder=part,
                          reading=_reading(job, chunk))

    @staticmethod
    def _read_reply(job: Job, reply: str, chunk_text: str) -> mapreduce.MapAnswer:
        """A map reply read by the shape it was asked in (issue 32: a list's items, a point
        question's short answer, else points)."""
        if job.list_of:
            return mapreduce.read_list_reply(reply, chunk_text)
        if answers.point_question(job.task):
            return mapreduce.read_point_reply(reply, chunk_text)
        return mapreduce.read_map_reply(reply, chunk_text)

    def _shaped_call(self, job: Job, chunk: chunking.Chunk, budget, pages, part: Part) -> str:
        """A map call of a list instruction (every item with its words: LIST_SCHEMA, the whole reply
        cap) or of a point question (points and a short answer: POINT_SCHEMA); as free text once the
        server refused a schema."""
        cap = plan.map_reply_cap(self.sizing, whole=job.in_chat)
        if job.list_of:
            messages = mapreduce.list_messages(job.task, job.list_of, chunk, job.total, pages)
            schema, num_predict = mapreduce.LIST_SCHEMA, cap
        else:
            messages = mapreduce.point_messages(job.task, chunk, job.total, budget.words, pages)
            schema, num_predict = mapreduce.POINT_SCHEMA, min(cap, 2 * budget.num_predict + 48)
        if not job.format_refused:
            try:
                return self._call(job, messages, num_predict, kind=job.text_kind or None, chunk=True,
                                  format=schema, holder=part, reading=_reading(job, chunk))
            except FormatRefused as exc:
                log.info("analysis %s: the server refused the JSON schema (%s); free text from now on", job.id,
                         _one_line(exc))
                self.machine.update(job, expect="running", format_refused=True)
        if job.list_of:
            messages = [{"role": "system", "content": mapreduce.MAP_SYSTEM}, messages[1]]
        else:
            messages = mapreduce.map_messages(job.task, chunk, job.total, budget.words, pages)
        return self._call(job, messages, num_predict if job.list_of else budget.num_predict,
                          kind=job.text_kind or None, chunk=True, holder=part, reading=_reading(job, chunk))

    def interrupt(self, job: Job, exc: BaseException, during: str = "") -> None:
        """The model server is away: pause the job with what it has; Retry continues it."""
        where = f" during the {during}" if during else ""
        server = self.sizing.models.name
        self.steps.transition(job, "interrupted", message=(
            f"{server} could not be reached{where}: {_one_line(exc)} {job.done_count} of {job.total} chunks "
            f"are finished and kept. Retry when {server} is back."))

    def _call(self, job: Job, messages: list[dict], num_predict: int, kind: str | None = None,
              chunk: bool = False, format: dict | None = None, holder: Part | None = None,
              cuts: list[int] | None = None, reading: str = "", writing: bool = False) -> str:
        """One model call through the shared helper (``work.calls``): refused before sending if it
        would not fit the window with its reply, cancelled by the job's activity on a stop
        (``holder``: the map call's part of it, which a re-plan may also cancel).

        What it cost (the server's own prompt and reply token counts, its time) is added
        to the job; a map call (``chunk``) also measures the file's own bytes per token,
        which a re-plan sizes the rest with.  ``reading``: what the card says while a server that reports
        it reads the prompt (llama-server's ``return_progress``: "Processing chunk 4/20: reading the prompt,
        1,200 of 4,800 tokens"), at most once a second.  ``writing``: the reply is an answer a person waits
        for (the synthesis): the card shows it while it is written (issue 44).
        """
        activity = holder or self.steps.activity_of(job)
        if activity is None:
            raise Cancelled("The analysis no longer holds its session.")
        bpt = job.map_bpt if chunk else self._reduce_bpt(job)
        request = Request(job.model, messages, window=job.window, num_predict=num_predict, bytes_per_token=bpt,
                          kind=kind, format=format, on_progress=self._prompt_progress(job, reading) if reading else None,
                          on_text=(lambda text: self.steps.writing(job, text)) if writing else None)
        text, usage = self.calls.text(activity, request)
        if usage is not None:
            measured = observed_bpt(messages, usage.prompt_tokens) if chunk else None
            with self._costs:       # (map calls end in several threads at once)
                job.add_cost(usage, measured)
        if cuts is not None:        # the caller says when its reply ended at its cap (-1: stopped in a loop)
            cuts.append(-1 if usage is not None and usage.looped else
                        request.num_predict if usage is not None and usage.cut_off else 0)
        if usage is not None and usage.looped and chunk:
            log.info("analysis %s: a map call repeated itself; its answer is kept up to the repetition", job.id)
        return text

    def _prompt_progress(self, job: Job, reading: str):
        """A call's prompt progress as the card's stage, at most once a second."""
        said = [0.0]

        def progress(done: int, total: int) -> None:
            now = time.monotonic()
            if now - said[0] >= 1.0 or done >= total:
                said[0] = now
                self.steps.progress(job, stage=f"{reading}: reading the prompt, {done:,} of {total:,} tokens")
        return progress

    def _reduce_bpt(self, job: Job) -> float:
        """Reduce requests carry the model's own prose: sized at the newest cautious figure for it
        (or the plan's, if that is more cautious)."""
        return min(job.bytes_per_token, self.sizing.calibration.bytes_per_token(job.model, "prose", conservative=True))

    def reduce(self, job: Job, doc: chunking.Document) -> None:
        """Synthesize the relevant partial answers, with citations checked; with no answer at all,
        fail without sending anything; with nothing relevant, say so without a synthesis call.
        Whatever part of the file no answer covers is decided here (``plan.unread``) and named."""
        answered = [(i, r) for i, r in sorted(job.results.items()) if r.status == "ok" and i < job.total]
        if not answered:
            first = next((r.error for r in job.results.values() if r.error), "no chunk was run")
            return self.steps.fail(job, f"No chunk produced an answer, so nothing was synthesized. The model said: "
                                   f"{first}", synthesis="error: no chunk produced an answer")
        unread = plan.unread(job, doc, plan.job_chunks(self.sizing, job, doc, whole=True))
        self.steps.transition(job, "synthesizing", expect="running", unread=unread)
        self.steps.progress(job)
        relevant = [(i, r) for i, r in answered if r.relevant]
        missing = [i + 1 for i in range(job.file_chunks)
                   if job.results.get(i) is None or job.results[i].status != "ok"]
        computed = self._computed(job, doc, answered, relevant)
        if job.in_chat and job.list_of:
            # a list question on a file that fits (issue 45): the one map call's items are the answer,
            # written by the app (no synthesis call: on a Pi, the model's time is the cost)
            answer = answers.list_reply(job.items, job.list_of, job.file, job.items_cut)
        elif not relevant:
            answer = (f"No chunk of {job.file} had anything relevant to the instruction ({len(answered)} "
                      f"chunk{'s' if len(answered) != 1 else ''} read), so nothing was synthesized.")
        else:
            answer = self._synthesize(job, relevant, missing, **computed)
            if answer is None:
                return
        figures = job.figures
        if figures and relevant and not job.in_chat:    # the model's own figure, from its words (never rewritten)
            figures = {**figures, "model_says": answers.model_figure(answer, figures, job.task)}
        answer += record.coverage_note(job)
        self.steps.transition(job, "done", expect="synthesizing", answer=answer, finished=time.time(), figures=figures)
        self.steps.finish(job, answer, "ok")

    def _computed(self, job: Job, doc: chunking.Document, answered, relevant) -> dict:
        """What the app computes from the partial answers before the synthesis (issue 32), saved on the
        job for the record: the coverage; a list's merged items; a point question's versions.  Returns
        the synthesis instruction and note that follow from them."""
        text = doc.text
        last = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        rows = text.split("\n")

        def through_blanks(a: int, b: int) -> tuple[int, int]:
            """A chunk's lines with the blank lines after it (no chunk carries them): read spans then meet."""
            while b < len(rows) and not rows[b].strip():
                b += 1
            return a, b

        read_lines = [through_blanks(*r.lines) for _, r in answered if r.lines]
        whole = not job.unread and len(read_lines) == len(answered)
        changes: dict = {"coverage": answers.read_coverage(
            job.done_count, job.file_chunks, [(1, max(1, last))] if whole or not read_lines else read_lines,
            len(answered) - len(relevant), "; ".join(notes.where(span) for span in job.unread))}
        if job.way == "relevant":
            changes["coverage"] = answers.relevant_coverage(
                read_lines, job.file_chunks, job.read_until, len(answered) - len(relevant))
        elif job.in_chat and not job.unread:
            changes["coverage"] = ""      # a list question's file read whole: its notice says so (issue 45)
        task, note = job.task, ""
        if job.list_of:
            results = [r for _, r in relevant]
            items, changes["items_cut"] = answers.merge_items(results, text, job.task)
            ask = answers.settled(answers.asked(job.task, job.list_of), items)
            items = answers.values_asked(ask, items)
            lines = answers.line_numbers(text, [i.at for i in items])
            changes["items"] = [{"text": i.text, "quote": i.quote, "value": i.value, "unit": i.unit, "chunks": i.chunks,
                                 "at": i.at, "line": lines.get(i.at)} for i in items]
            changes["figures"] = answers.summarize(items, answers.file_states(results, text, ask), ask,
                                                   len(answered), job.file_chunks, changes["items_cut"])
            task = mapreduce.list_reduce_task(job.task, job.list_of, len(items), len(answered), job.file_chunks)
        elif answers.point_question(job.task):
            found = answers.versions([r for _, r in relevant])
            changes["versions"] = [dataclasses.asdict(v) for v in found] if len(found) > 1 else []
            note = answers.conflict_note(found)
        self.machine.update(job, expect="synthesizing", **changes)
        return {"task": task, "extra": note}

    def _synthesize(self, job: Job, relevant: list[tuple[int, ChunkResult]], missing: list[int],
                    task: str | None = None, extra: str = "") -> str | None:
        """The reduce over the relevant chunks' parts, each point labelled ``[n]``; its citations
        reduced to relevant chunks.  None when it did not finish (the job has moved on).
        ``task``: the synthesis instruction (a list's asks for a summary only); ``extra``: a line for
        the request (the chunks' disagreeing answers)."""
        config = self.sizing.config
        parts = [mapreduce.part(i, job.total, r.heading, r.text, r.points, r.confidence) for i, r in relevant]
        note = f"\nChunks with no answer (failed or not run): {mapreduce.ranges(missing)}." if missing else ""
        note += extra
        effective = plan.effective_context(self.sizing, job.model, job.window)
        cuts: list[int] = []            # per call: its cap when the reply ended there, else 0
        combiner = mapreduce.Combiner(
            lambda messages, reply: self._call(job, messages, reply, cuts=cuts, reading="Synthesizing", writing=True),
            effective=effective,
            safety=mapreduce.safety_tokens(config.budget.safety_margin, effective), bpt=self._reduce_bpt(job),
            reply_tokens=config.budget.reply_tokens, part_reply_tokens=config.chunking.map_reply_tokens,
            progress=lambda stage: self.steps.progress(job, stage=stage), answer_cap=config.chat.reply_tokens)
        try:
            answer = combiner.combine(task or job.task, parts, note)
        except HarveyError as exc:
            if self.steps.stopped(job):
                self.steps.after_stop(job)
            elif exc.transient:
                self.interrupt(job, exc, during="synthesis")
            else:
                self.steps.fail(job, f"The synthesis failed: {_one_line(exc)}", synthesis=f"error: {_one_line(exc)}")
            return None
        if not answer.strip():
            # a small model can end its synthesis at once: the reply would be empty, the chunks' answers lost
            # from the chat (seen with SmolLM2-135M); they are the answer then, said so
            log.warning("analysis %s: the synthesis came back empty; the chunks' answers stand in", job.id)
            answer = empty_synthesis_answer(relevant)
        answer, removed = mapreduce.resolve_citations(answer, {i + 1 for i, _ in relevant})
        if removed:
            log.info("analysis %s: %d citations of chunks without a relevant passage removed", job.id, removed)
        if cuts and cuts[-1] == -1:
            log.warning("analysis %s: the synthesis repeated itself; stopped there", job.id)
            answer += loop_note("synthesis")
        elif cuts and cuts[-1]:
            log.warning("analysis %s: the synthesis was cut at its cap of %d tokens", job.id, cuts[-1])
            answer += cut_note("synthesis", cuts[-1], capped=cuts[-1] >= config.chat.reply_tokens)
        return answer


EMPTY_SYNTHESIS = "The model wrote no synthesis, so here are the chunks' own answers:"


def empty_synthesis_answer(relevant: list[tuple[int, ChunkResult]], limit: int = 300) -> str:
    """The answer when the synthesis came back empty: each relevant chunk's answer on a line, cited."""
    lines = [EMPTY_SYNTHESIS, ""]
    for i, r in relevant:
        text = " ".join((r.text or "").split())
        lines.append(f"- {text[:limit]}{'…' if len(text) > limit else ''} [{i + 1}]")
    return "\n".join(lines)


def _reading(job: Job, chunk: chunking.Chunk) -> str:
    """The card's words for a map call in flight."""
    return f"Processing chunk {chunk.index + 1}/{job.total}"
