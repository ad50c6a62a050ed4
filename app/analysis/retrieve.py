"""The retrieval answer (issue 25): one chat request over a file's most relevant passages.

The card's second choice.  The file's index is built (or found: an unchanged file is never
indexed twice) on the "index" lane; the question is searched by keyword and, with an embedding
model, by meaning (``app.retrieval.search``); the best passages are taken in rank order while
they fit the window, with a passage's neighbours in the same section pulled in after them (seed
002's walk from chunk to section), and sent in document order with their heading path and lines
or pages.  Everything in the request draws from one budget (seed 003 Direction 2:
``budget.Budget.reserve``): system prompt, question, passages, reply; so it never overflows.
The passages sent are the answer's sources, recorded in the CHUNK ANALYSIS scene with the
terminal Harvey's ``[[rag: N chunks from FILE, top score S]]`` note.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
import threading
import time

from .. import chunking
from ..budget import new_budget
from ..errors import HarveyError
from ..errors import one_line as _one_line
from ..modelserver import Cancelled, ContextExceeded, FormatRefused
from ..retrieval import embedding, search
from ..retrieval.index import BrokenIndex, Index, Passage, path_for
from ..work.calls import Request
from . import answers, mapreduce
from .execute import cut_note, loop_note
from .job import Job
from .steps import RunSteps

log = logging.getLogger(__name__)

INDEX_IDLE_S = 900.0         # a build silent this long (no batch, no end) is given up; one embed call times out at 600
INDEX_REQUESTS = 3           # times a job asks for its index when another job's Cancel ended the build it waited on
CANDIDATES_PER_PASSAGE = 3   # hits searched per passage wanted (some will not fit)
REFUSED_RETRIES = 3          # times a request the server refused as too long is sent again with fewer passages
SYSTEM = ("You answer questions about a file from passages of it. Use only the passages below. Cite the "
          "passages your answer rests on by their numbers, as [12] or [12, 40]. If the passages do not hold "
          "the answer, say so plainly.")


def label(p: Passage) -> str:
    """A passage's heading in the request and the card: its number, section path, and pages or lines."""
    where = (f"page {p.pages[0]}" if p.pages and p.pages[0] == p.pages[1] else
             f"pages {p.pages[0]}–{p.pages[1]}" if p.pages else f"lines {p.first_line}–{p.last_line}")
    section = " › ".join(p.heading_path)
    return f"[{p.n + 1}] ({section + '; ' if section else ''}{where})"


def block(p: Passage) -> str:
    return f"{label(p)}\n{p.text.strip()}"


def user_message(file: str, question: str, passages: list[Passage], words: int | None = None) -> str:
    """The request's user message: the passages in the file's order, then the question (and the
    answer's length, ``mapreduce.answer_words`` of the room the window leaves it)."""
    body = "\n\n".join(block(p) for p in passages)
    return (f"Passages from {file}, the most relevant to the question, in the file's order:\n\n{body}\n\n"
            f"Question: {question}{mapreduce.length_line(words)}")


class Retrieval:
    """One retrieval answer for a running job (the analysis lane runs it, the runner owns the job and
    lends this only the run's steps, ``steps.RunSteps``)."""

    def __init__(self, steps: RunSteps):
        self.steps = steps
        self.sizing, self.calls, self.indexer = steps.sizing, steps.calls, steps.indexer

    def run(self, job: Job, doc: chunking.Document) -> None:
        """Index (or find the index), search, fit, ask once, record."""
        rdoc = self.indexer.keyed(chunking.with_settings(doc, chunking.retrieval_settings()))
        for attempt in range(2):          # a damaged index is removed, built anew and searched once more
            progress = self._indexed(job, rdoc)
            if progress is None:
                return
            budget = self._budget(job)
            try:
                with Index(path_for(self.sizing.config.data_path, self.indexer.stored(rdoc.fingerprint))) as index:
                    model = progress.model if progress.model and index.complete(progress.model) else None
                    hits, how = self._search(job, index, model)
                    chosen, scores = self._fit(job, index, hits, budget)
                    total = index.chunk_count()
                break
            except StaleVectors as exc:
                self.indexer.stale(rdoc.fingerprint, exc.model)
                if attempt:
                    return self.steps.fail(job, f"The passages of {job.file} could not be searched: {exc}")
                log.warning("retrieval %s: %s; embedding the file again", job.id, exc)
                self.steps.progress(job, stage="the embedding model changed: indexing again")
            except BrokenIndex as exc:
                self.indexer.broken(rdoc.fingerprint, exc)
                if attempt:
                    return self.steps.fail(job, f"The index of {job.file} is damaged and could not be made "
                                                  f"anew: {_one_line(exc)}")
                log.warning("retrieval %s: %s; indexing again", job.id, exc)
                self.steps.progress(job, stage="the index was damaged: indexing again")
            except HarveyError as exc:         # a search past its time limit
                return self.steps.fail(job, f"The passages of {job.file} could not be searched: {_one_line(exc)}")
        if self.steps.stopped(job):          # a Stop while the question was embedded
            return self.steps.after_stop(job)
        if not chosen:
            answer = (f"No passage of {job.file} matched the question, so nothing was sent to the model. Try "
                      "other words, or read all the chunks.")
            return self._done(job, answer, [], {}, how, total, held=False, text_chars=len(doc.text))
        self.steps.transition(job, "synthesizing", expect="running")
        self.steps.progress(job, stage=f"answering from {len(chosen)} passages")
        asked = self._ask(job, chosen, {h.n: rank for rank, h in enumerate(hits)}, budget)
        if asked is None:
            return
        reply, chosen, said = asked
        answer, held = read_routed(reply)
        answer += said
        answer, removed = mapreduce.resolve_citations(answer, {p.n + 1 for p in chosen})
        if removed:
            log.info("retrieval %s: %d citations of passages not sent removed", job.id, removed)
        self._done(job, answer, chosen, scores, how, total, held=held, text_chars=len(doc.text))

    # -- the index ----------------------------------------------------------------------------

    def _indexed(self, job: Job, rdoc: chunking.Document):
        """Wait for the file's index; the progress, or None when the job stopped or cannot go on.
        An index whose vectors are not all in (the embedding model away) still answers by keyword."""
        for _ in range(INDEX_REQUESTS):
            progress = self._wait_index(job, rdoc)
            if progress is None:
                return None
            if progress.state != "cancelled":
                break
            log.info("retrieval %s: another job's cancel ended the index build; asking again", job.id)
        if self.steps.stopped(job):
            self.steps.after_stop(job)
            return None
        if not progress.complete:
            target = path_for(self.sizing.config.data_path, self.indexer.stored(rdoc.fingerprint))
            try:
                with Index(target) as index:
                    usable = index.has_chunks()
            except BrokenIndex as exc:
                self.indexer.broken(rdoc.fingerprint, exc)
                usable = False
            if not usable:
                self.steps.transition(job, "interrupted", message=(
                    f"{job.file} could not be indexed: {progress.note or progress.state}. Retry when the model "
                    "server is back."))
                return None
            log.info("retrieval %s: index incomplete (%s); keyword search", job.id, progress.note)
        return progress

    def _wait_index(self, job: Job, rdoc: chunking.Document):
        """Ask for the index and sleep until it is done or the job is stopped: one Event, set by the
        build at each batch and at its end, and by the job's Stop (``Activity.waking``), so nothing
        polls; a build silent for ``INDEX_IDLE_S`` is given up.  The progress, or None when the job
        was stopped (its build is cancelled after the batch in flight)."""
        indexer, woken = self.indexer, threading.Event()
        progress = indexer.request(rdoc)
        activity = self.steps.activity_of(job)
        progress.listen(woken)
        with activity.waking(woken) if activity is not None else contextlib.nullcontext():
            try:
                return self._sleep_on_index(job, rdoc, progress, woken)
            finally:
                progress.unlisten(woken)

    def _sleep_on_index(self, job: Job, rdoc: chunking.Document, progress, woken: threading.Event):
        """``_wait_index``'s loop: one progress event per batch, until the build ends, goes silent or
        the job is stopped."""
        indexer, shown = self.indexer, -1
        while not progress.complete and not progress.finished.is_set():
            if self.steps.stopped(job):
                indexer.cancel(rdoc.fingerprint)
                self.steps.after_stop(job)
                return None
            if progress.embedded != shown:          # an event per batch
                shown = progress.embedded
                self.steps.progress(job, stage=f"indexing: {shown} of {progress.total or '?'} passages embedded")
            if not woken.wait(INDEX_IDLE_S):
                log.warning("retrieval %s: the index build said nothing for %.0f s; going on without it",
                            job.id, INDEX_IDLE_S)
                break
            woken.clear()
        return progress

    # -- search and fit -----------------------------------------------------------------------

    def _search(self, job: Job, index: Index, model: str | None, limit: int = 0) -> tuple[list[search.Hit], str]:
        """The hits for the question, and how they were found (said in the answer's notice)."""
        limit = limit or self.sizing.config.retrieval.passages * CANDIDATES_PER_PASSAGE
        vector = None
        activity = self.steps.activity_of(job)
        if model and activity is not None:
            try:        # through the call helper: a Stop cuts it, however long the embedding model loads
                vector = embedding.pack(self.calls.embed(activity, model, [embedding.query_text(model, job.task)])[0])
            except Cancelled:
                model = None        # stopped: the job ends after the search (``run``)
            except HarveyError as exc:
                log.warning("retrieval %s: the question could not be embedded (%s); keyword search", job.id, exc)
                model = None
        key = index.vector_key(model) if model else None
        if vector is not None and key and key.rsplit("#", 1)[-1] != str(len(vector) // 4):
            raise StaleVectors(model, f"{model} now answers {len(vector) // 4} numbers a vector; the index "
                                      f"holds vectors of {key.rsplit('#', 1)[-1]}")
        hits = search.search(index, job.task, model, vector, limit=limit)
        return hits, (f"hybrid search (keywords and {model})" if model else "keyword search")

    def ranked(self, job: Job, doc: chunking.Document, chunks: list[chunking.Chunk]) -> tuple[list[int], str] | None:
        """The run's chunks (their indexes) most relevant first, and how they were ranked (issue 42): from
        the file's index as the passages answer searches it (keywords, and meaning where an embedding
        model is installed, fused), each chunk at the rank of its best passage; the chunks no passage
        matched follow in the file's order.  An index that cannot be searched gives the file's order.
        None when the job was stopped while its index was made."""
        rdoc = self.indexer.keyed(chunking.with_settings(doc, chunking.retrieval_settings()))
        progress = self._indexed(job, rdoc)
        if progress is None:
            return None
        try:
            with Index(path_for(self.sizing.config.data_path, self.indexer.stored(rdoc.fingerprint))) as index:
                model = progress.model if progress.model and index.complete(progress.model) else None
                hits, how = self._search(job, index, model, limit=index.chunk_count())
                where = {p.n: p for p in index.passages(h.n for h in hits)}
        except (StaleVectors, BrokenIndex, HarveyError) as exc:
            log.warning("relevance %s: the index could not be searched (%s); the file's order", job.id, exc)
            return [c.index for c in chunks], "the file's order (the index could not be searched)"
        best: dict[int, int] = {}
        for rank, hit in enumerate(hits):
            p = where.get(hit.n)
            if p is None:
                continue
            for c in chunks:
                if c.start < p.end and p.start < c.end:
                    best.setdefault(c.index, rank)
        # A passage may span several (smaller) chunks: among those, the one holding more of the question's
        # words is read first.
        words = {w for w in re.findall(r"\w+", job.task.casefold()) if len(w) > 2}
        held = {c.index: sum(1 for w in words if w in c.text.casefold()) for c in chunks if c.index in best}
        order = sorted(best, key=lambda i: (best[i], -held[i], i)) + [c.index for c in chunks if c.index not in best]
        return order, how

    def _budget(self, job: Job):
        """The request's one budget: reply and margin taken, then the system prompt and question."""
        bpt = min(job.bytes_per_token,
                  self.sizing.calibration.bytes_per_token(job.model, job.text_kind or "prose", conservative=True))
        # issue 30: counted with the model's own tokenizer when it has one (the worker may wait for it)
        counter = self.sizing.models.counter(job.model, wait=True)
        template = self.sizing.calibration.templates.cost(job.model) if counter is not None else None
        budget = new_budget(self.sizing.config, job.model, job.window, bpt, counter=counter, template=template)
        budget.reserve("system", budget.messages_cost([{"content": SYSTEM + ROUTE_LINE}]) + budget.template[1])
        budget.reserve("question", budget.messages_cost(
            [{"content": user_message(job.file, job.task, [], mapreduce.MAX_ANSWER_WORDS)}]))
        return budget

    def _fit(self, job: Job, index: Index, hits: list[search.Hit], budget) -> tuple[list[Passage], dict[int, float]]:
        """The passages sent: the best hits while they fit (at most ``retrieval.passages``), then each
        one's neighbours in its own section (a passage cut mid-section), best hit's first.  They are
        reserved in ``budget``, the one the request is then made with."""
        wanted = self.sizing.config.retrieval.passages
        chosen: dict[int, Passage] = {}
        scores = {h.n: h.shown_score for h in hits}
        for passage in _in_rank_order(index, [h.n for h in hits]):
            if len(chosen) >= wanted:
                break
            if budget.reserve("passages", self._cost(passage, budget)):
                chosen[passage.n] = passage
        for n in list(chosen):
            for near in index.passages([n - 1, n + 1]):
                if (near.n not in chosen and near.heading_path == chosen[n].heading_path
                        and budget.reserve("passages", self._cost(near, budget))):
                    chosen[near.n] = near
        return [chosen[n] for n in sorted(chosen)], scores

    @staticmethod
    def _cost(p: Passage, budget) -> int:
        return budget.estimate(block(p) + "\n\n")

    # -- the call and the record ----------------------------------------------------------------

    def _ask(self, job: Job, passages: list[Passage], ranks: dict[int, int],
             budget) -> tuple[str, list[Passage], str] | None:
        """The one chat request (refused before sending if it would not fit): told its length and
        given all the room the budget left after the passages; the reply (Self-Route's JSON, or free
        text), the passages it was given and the notes the app adds under it, or None when it did not end.  A request the server refuses as too long (its count is
        higher than the estimate) is sent again without its lowest-ranked passages, at most
        ``REFUSED_RETRIES`` times; an answer cut at its cap says so."""
        activity = self.steps.activity_of(job)
        cap = self.sizing.config.chat.reply_tokens          # the answer's own cap (issue 44)
        reply = min(budget.components["reply"] + max(0, budget.remaining), cap) if cap else \
            budget.components["reply"] + max(0, budget.remaining)
        dropped = 0
        try:
            if activity is None:
                raise Cancelled("The analysis no longer holds its session.")
            for attempt in range(REFUSED_RETRIES + 1):
                messages = [{"role": "system", "content": SYSTEM + ROUTE_LINE},
                            {"role": "user", "content": user_message(job.file, job.task, passages,
                                                                     mapreduce.answer_words(reply))}]
                request = Request(job.model, messages, window=job.window, num_predict=reply,
                                  bytes_per_token=budget.bytes_per_token,
                                  format=None if job.format_refused else ROUTE_SCHEMA,
                                  on_text=lambda text: self.steps.writing(job, answer_so_far(text)))
                try:
                    text, usage = self._routed_call(job, activity, request)
                    break
                except ContextExceeded as exc:
                    fewer = _without_lowest(passages, ranks)
                    if attempt == REFUSED_RETRIES or not fewer or self.steps.stopped(job):
                        raise
                    dropped += len(passages) - len(fewer)
                    log.warning("retrieval %s: the server refused %d passages as too long (%s); sending %d",
                                job.id, len(passages), _one_line(exc), len(fewer))
                    passages = fewer
        except HarveyError as exc:
            if self.steps.stopped(job):
                self.steps.after_stop(job)
            elif exc.transient:
                self.steps.transition(job, "interrupted", message=(
                    f"The model server could not be reached: {_one_line(exc)} Retry when it is back."))
            else:
                self.steps.fail(job, f"The answer failed: {_one_line(exc)}")
            return None
        if usage is not None:
            job.add_cost(usage)
        said = ""                       # what the app says under the answer (never parsed as the reply)
        if dropped:
            said += (f"\n\n*({dropped} lower-ranked passage{'s were' if dropped != 1 else ' was'} left out: the "
                     "model server counted the request longer than its window.)*")
        if usage is not None and usage.cut_off:
            said += cut_note("answer", reply, "Ask for less, or read all the chunks.",
                             capped=reply >= self.sizing.config.chat.reply_tokens)
        elif usage is not None and usage.looped:
            said += loop_note("answer")
        return text, passages, said

    def _routed_call(self, job: Job, activity, request: Request):
        """The answer's call, asking for Self-Route's JSON (``ROUTE_SCHEMA``); sent again as free text when
        the server refuses a schema (remembered for the job)."""
        try:
            return self.calls.text(activity, request)
        except FormatRefused as exc:
            if request.format is None:
                raise
            log.info("retrieval %s: the server refused the JSON schema (%s); free text", job.id, _one_line(exc))
            self.steps.machine.update(job, expect="synthesizing", format_refused=True)
            return self.calls.text(activity, dataclasses.replace(request, format=None))

    def _done(self, job: Job, answer: str, passages: list[Passage], scores: dict[int, float], how: str,
              total: int, held: bool = True, text_chars: int = 0) -> None:
        rag = [{"chunk": p.n + 1, "start": p.start, "end": p.end, "lines": [p.first_line, p.last_line],
                "pages": list(p.pages) if p.pages else None, "section": " › ".join(p.heading_path),
                "score": round(scores.get(p.n, 0.0), 4)} for p in passages]
        if job.state == "running":
            self.steps.transition(job, "synthesizing", expect="running")
        self.steps.transition(job, "done", expect="synthesizing", answer=answer, finished=time.time(), rag=rag,
                               rag_search=how, rag_chunks=total, rag_answerable=held,
                               coverage=answers.passages_coverage(rag, text_chars))
        self.steps.finish(job, answer, "ok")


class StaleVectors(HarveyError):
    """The stored vectors are not comparable with the question's (another dimension)."""

    def __init__(self, model: str, message: str):
        super().__init__(message)
        self.model = model


def _without_lowest(passages: list[Passage], ranks: dict[int, int]) -> list[Passage]:
    """The passages without the lowest-ranked quarter of them (at least one), in the file's order.
    ``ranks``: each hit's place in the search's order (0 is the best); a neighbour pulled in for
    its section has no place of its own and goes first."""
    drop = max(1, len(passages) // 4)
    ranked = sorted(passages, key=lambda p: ranks.get(p.n, len(ranks)), reverse=True)
    gone = {p.n for p in ranked[:drop]}
    return [p for p in passages if p.n not in gone]


def _in_rank_order(index: Index, numbers: list[int]) -> list[Passage]:
    """The passages of these chunk numbers, in the order given (best first)."""
    by_n = {p.n: p for p in index.passages(numbers)}
    return [by_n[n] for n in numbers if n in by_n]


# -- Self-Route (issue 32): the answer says whether the passages hold it -----------------------------------

ROUTE_LINE = (" Reply in JSON: answer (your answer, with its citations), in_passages (true if the passages "
              "hold the answer, false if they do not).")
ROUTE_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}, "in_passages": {"type": "boolean"}},
                "required": ["answer", "in_passages"]}
_CANNOT = re.compile(r"\b(?:(?:do|does|did)\s+not|don't|doesn't)\s+(?:contain|hold|mention|say|include|provide|"
                     r"answer|cover)|\bno\s+(?:information|mention|passage)|\bnot\s+(?:found|mentioned|given|"
                     r"stated)\b|\b(?:cannot|can't|unable\s+to)\s+(?:answer|find|tell|determine)", re.I)
_FENCED = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def read_routed(reply: str) -> tuple[str, bool]:
    """A passages answer and whether the passages hold it: ROUTE_SCHEMA's JSON, else the free text,
    held unless its opening says the passages do not have it."""
    text = reply.strip()
    fenced = _FENCED.match(text)
    try:
        data = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("answer"), str) and isinstance(data.get("in_passages"), bool):
        return data["answer"].strip(), data["in_passages"]
    if (cut := _CUT_ANSWER.match(text)) is not None:       # the JSON cut off by the reply cap: its answer so far
        words = cut.group(1).rstrip("\\")
        try:
            words = json.loads(f'"{words}"')
        except ValueError:
            pass
        held = re.search(r'"in_passages"\s*:\s*false', text) is None and _CANNOT.search(words[:300]) is None
        return words.strip() + " […]", held
    return text, _CANNOT.search(text[:300]) is None


def answer_so_far(reply: str) -> str:
    """The answer part of a passages reply still being written, to show while it comes (issue 44): the
    ``answer`` of the JSON so far (``partial_json_parser`` reads a JSON cut anywhere), else the text."""
    text = reply.lstrip()
    if text.startswith("```"):                 # a fenced JSON: from its first line on
        text = text.partition("\n")[2].lstrip()
    if not text.startswith("{"):
        return text
    from partial_json_parser import loads     # (imported when an answer streams, not at start-up)
    try:
        data = loads(text)
    except ValueError:
        return ""
    answer = data.get("answer") if isinstance(data, dict) else None
    return answer if isinstance(answer, str) else ""


_CUT_ANSWER = re.compile(r'^\{\s*"answer"\s*:\s*"((?:[^"\\]|\\.)*)', re.S)
