"""The chunk plan of a file for a model: its window and calibration decide the chunk size.

Planning reads the file (``chunking``) and asks Ollama for the model's window;
it sends nothing to a model.  ``plan`` returns the job fields it decides, so the
caller applies them through a transition.
"""

from __future__ import annotations

import dataclasses
import math

from .. import chunking
from ..chunking import source_of
from ..budget import (Sizing, calibration_kind, context_window, estimate_analysis, estimate_messages, map_reply_budget,
                      margin_share)
from ..errors import ModelError
from ..workspace import Workspace
from .job import Job, without_directive
from .mapreduce import map_prompt_overhead, map_system_for, ranges, reduce_messages


PLAN_READ_BYTES = 4 * 2**20     # a file with more text than this is planned from its measure, not read
COUNT_IN_REQUEST_BYTES = 1 * 2**20   # a text counted exactly while the card is drawn (the worker counts any)
# A longer text is not packed by its tokens (their offsets are 4 bytes a token: 16 MB of text keeps about
# 16 MB of them, and counting it takes minutes on a Pi): its chunks are sized by bytes per token, re-planned.
PACK_COUNTED_MAX_CHARS = 16 * 2**20


def plan(sizing: Sizing, file: str, model: str, instruction: str, bpt: float | None = None,
         whole: bool = False) -> dict:
    """The plan's job fields for ``file`` analysed by ``model``.

    Chunks are sized with the calibration for this kind of text (Markdown and
    non-English text hold more tokens per byte than chat prose) at its most
    cautious recent sample, so no map request is refused for size; the card's
    time and call count come from ``budget.estimate_analysis``.  The file is read
    once; a file whose text would be larger than ``PLAN_READ_BYTES`` is not read
    at all: the card shows an estimate (``estimated``) and the worker plans it
    exactly when the run starts (``exact``), so a request never holds a huge text.  ``bpt``: the bytes
    per token an earlier read was cut with (reading the rest of a partial answer cuts the same chunks).
    ``whole``: chunks as large as a map request's room, not the configured size (a list question on a
    file that fits: one call, issue 45)."""
    config = sizing.config
    window = context_window(config, model, sizing.models.window(model), sizing.models.memory_window(model))
    path = Workspace(config.workspace_path).resolve(file).path
    measured = chunking.measure(path)
    if measured.text_bytes > PLAN_READ_BYTES:
        return estimated(sizing, model, window, instruction, measured)
    first = chunking.read_document(path)
    counter = sizing.models.counter(model)
    if counter is not None and len(first.text) > COUNT_IN_REQUEST_BYTES:
        # too large to count while the card is drawn: a counted sample for the card ("about"),
        # the worker counts it exactly and plans (``exact``) before the first chunk
        return estimated(sizing, model, window, instruction, chunking.measure(path))
    text_kind = calibration_kind(first.kind, first.text)
    bpt = bpt or sizing.calibration.bytes_per_token(model, text_kind, conservative=True)
    task = without_directive(instruction)
    doc = chunking.with_settings(first, settings(sizing, model, window, bpt, task, counter, whole=whole))
    if counter is not None:
        doc = chunking.with_counter(doc, counter)
    planned = _chunks_of(doc)
    fields = dict(model=model, window=window, bytes_per_token=bpt, text_kind=text_kind,
                  **_planned(sizing, model, window, bpt, task, doc, planned), selected=_selection(sizing, planned.chunks))
    if counter is not None:
        fields.update(file_tokens=_count_of(doc, counter), tokens_counted=True, counter=doc.settings.counter)
    return fields


def _count_of(doc: chunking.Document, counter) -> int:
    """The text's own count: its tokens as packed when they were counted as ``Counter.count`` counts
    (``segmentable``: the same pieces), else counted (one more pass)."""
    if doc.token_starts is not None and counter.segmentable:
        return len(doc.token_starts)
    return counter.count(doc.text)


def _chunks_of(doc: chunking.Document) -> chunking.ChunkPlan:
    """The chunk count and sizes of ``doc`` (one pass of the chunker, no chunk texts built)."""
    return chunking.plan_document(doc)


def _planned(sizing: Sizing, model: str, window: int, bpt: float, task: str, doc: chunking.Document,
             planned: chunking.ChunkPlan | None = None) -> dict:
    """The fields an exact plan of ``doc`` decides (its chunks, what they cost, the text's identity)."""
    planned = planned or _chunks_of(doc)
    estimate = estimate_cost(sizing, model, window, bpt, task, planned.chunk_tokens, doc.counter)
    chunks, source = planned.chunks, doc.source
    return dict(chunks=chunks, size_tokens=doc.settings.size_tokens, source=source_of(doc), boundary=doc.boundary,
                kind=doc.kind, fingerprint=doc.fingerprint, file_tokens=doc.tokens, tokens_counted=False,
                pages=source.page_count if source else 0,
                image_pages=ranges(list(source.image_pages)) if source else "",
                estimated_calls=estimate.calls, estimated_seconds=estimate.seconds or 0.0,
                seconds_per_chunk=(estimate.seconds or 0.0) / max(1, chunks))


def _selection(sizing: Sizing, chunks: int) -> int:
    """A new plan's selection: the whole file when it is within ``max_chunks`` (0: the user chooses)."""
    return chunks if chunks <= sizing.config.chunking.max_chunks else 0


def estimated(sizing: Sizing, model: str, window: int, instruction: str, measured: chunking.Measure) -> dict:
    """The card's fields for a file too large to read in a request, from its measure: tokens from
    its estimated text bytes, chunks from the chunk size (each chunk's text is at most its
    ``max_bytes``; overlaps and the fill rule are allowed for).  ``fingerprint`` stays empty:
    the worker plans exactly (``exact``) before the first chunk."""
    text_kind = calibration_kind(measured.kind, measured.sample)
    bpt = sizing.calibration.bytes_per_token(model, text_kind, conservative=True)
    task = without_directive(instruction)
    chosen = settings(sizing, model, window, bpt, task)
    file_bpt = bpt
    counter = sizing.models.counter(model)
    if counter is not None and measured.sample:         # the sample's counted density (still "about")
        file_bpt = max(1.0, len(measured.sample.encode()) / max(1, counter.count(measured.sample)))
    per_chunk = max(1, int(chosen.max_bytes * ESTIMATED_FILL))
    chunks = max(1, math.ceil(measured.text_bytes / per_chunk))
    if counter is not None and measured.sample and measured.text_bytes <= PACK_COUNTED_MAX_CHARS:
        # the worker will pack by the counted tokens
        chosen = settings(sizing, model, window, bpt, task, counter)
        per_chunk = max(1, int(chosen.size_tokens * COUNTED_FILL))
        chunks = max(1, math.ceil(measured.text_bytes / file_bpt / per_chunk))
    estimate = estimate_cost(sizing, model, window, bpt, task, [chosen.size_tokens] * chunks)
    return dict(model=model, window=window, bytes_per_token=bpt, chunks=chunks, size_tokens=chosen.size_tokens,
                source="", boundary=chunking.boundary_for_kind(measured.kind), kind=measured.kind, fingerprint="",
                file_tokens=math.ceil(measured.text_bytes / file_bpt), tokens_counted=False, text_kind=text_kind,
                pages=measured.pages,
                image_pages="", estimated_calls=estimate.calls, estimated_seconds=estimate.seconds or 0.0,
                seconds_per_chunk=(estimate.seconds or 0.0) / chunks, selected=_selection(sizing, chunks))


ESTIMATED_FILL = 0.85    # a chunk holds about this share of its room (paragraph ends, overlap)
COUNTED_FILL = 0.85      # the same for chunks packed by the model's tokens (bench/bench_plan.py)


def exact(sizing: Sizing, job: Job, doc: chunking.Document) -> tuple[dict, chunking.Document]:
    """The fields of a job planned from an estimate, now that the worker has read the file
    (``doc``, read with the job's settings): its real chunks and identity, and the document they
    are chunks of (packed by the model's tokens when its counter is known: counted here, off the
    request path); the selection keeps what the user agreed to, so a file that needs more chunks
    than the card said asks before the first one past it."""
    counter = sizing.models.counter(job.model, wait=True)                # the worker: the count itself
    if len(doc.text) > PACK_COUNTED_MAX_CHARS:
        counter = None
    if counter is not None and doc.token_starts is None:
        doc = chunking.with_counter(doc, counter)
    planned = _chunks_of(doc)
    fields = _planned(sizing, job.model, job.window, job.bytes_per_token, job.task, doc, planned)
    if counter is None:
        return dict(fields, selected=_selected(sizing, job, planned.chunks)), doc
    # counted: the layout is final (no re-plan); more chunks than the card said are asked for first
    agreed = job.agreed or job.selected or job.chunks
    return dict(fields, file_tokens=_count_of(doc, counter), tokens_counted=True, counter=doc.settings.counter,
                selected=min(planned.chunks, agreed)), doc


def reply_budget(sizing: Sizing, task: str):
    """What each map call may generate for this instruction (``budget.map_reply_budget``)."""
    return map_reply_budget(task, cap=sizing.config.chunking.map_reply_tokens)


def settings(sizing: Sizing, model: str, window: int, bpt: float, task: str, counter=None,
             whole: bool = False) -> chunking.ChunkSettings:
    """Chunk size from the config, shrunk if a map request would not fit the window (``whole``: all
    the window's room, the config's size aside).

    The map reply is reserved at the configured cap (not the shorter budget a summary
    gets), so an instruction edited on the card to "translate..." still fits.  With the
    model's ``counter`` the rest of the request is counted and the margin is the exact one.
    """
    config = sizing.config
    effective = effective_context(sizing, model, window)
    reply = map_reply_cap(sizing, whole)
    fixed = (counted_map_fixed(sizing, model, task, counter, effective, reply) if counter is not None
             else map_fixed_tokens(sizing, task, bpt, effective, reply))
    size = max(64, effective - fixed if whole else min(config.chunking.chunk_size_tokens, effective - fixed))
    return chunking.ChunkSettings(size_tokens=size, overlap=config.chunking.overlap, bytes_per_token=bpt)


def map_reply_cap(sizing: Sizing, whole: bool = False) -> int:
    """What a map call may generate: ``chunking.map_reply_tokens``; for the one call of a list question on a
    file that fits (``whole``, issue 45) the chat reply's cap when that is more: the whole file's list is the
    answer the user waits for (at the map cap, SmolLM2's list of colorsys.py was cut mid-JSON)."""
    config = sizing.config
    return max(config.chunking.map_reply_tokens, config.chat.reply_tokens) if whole else config.chunking.map_reply_tokens


def map_fixed_tokens(sizing: Sizing, task: str, bpt: float, effective: int, reply: int) -> int:
    """A map request apart from its chunk: system prompt, instruction, label, length line, reply (``reply``:
    ``map_reply_cap``), margin."""
    words = reply_budget(sizing, task).words
    overhead = map_prompt_overhead(task, 9999, words)
    return (estimate_messages([{"content": map_system_for(task)}, {"content": overhead}], bpt)
            + reply + math.ceil(sizing.config.budget.safety_margin * effective))


def counted_map_fixed(sizing: Sizing, model: str, task: str, counter, effective: int, reply: int) -> int:
    """``map_fixed_tokens`` by the model's own count (issue 30): the system line and the prompt
    around the chunk counted, the label at half a token a byte of its cap (a label's words count
    fewer), the template's learnt cost, the reply's cap, and only the exact margin (what the
    count cannot know: the template before a reply taught it, a token where parts meet)."""
    words = reply_budget(sizing, task).words
    overhead = map_prompt_overhead(task, 9999, words).rstrip("x")
    per_message, per_request = sizing.calibration.templates.cost(model)
    return (counter.count(map_system_for(task)) + counter.count(overhead) + chunking.LABEL_MAX_BYTES // 2
            + 2 * per_message + per_request + reply
            + math.ceil(margin_share(sizing.config, True) * effective))


def estimate_cost(sizing: Sizing, model: str, window: int, bpt: float, task: str, chunk_tokens, counter=None):
    """Calls, tokens and time of the planned analysis (``budget.estimate_analysis``); with the
    model's ``counter`` the map requests around the chunks are counted too (the synthesis is sized
    as the run sizes it: by the estimate and the configured margin, ``Execution._synthesize``)."""
    config = sizing.config
    effective = effective_context(sizing, model, window)
    words = reply_budget(sizing, task).words
    map_parts = [{"content": map_system_for(task)}, {"content": map_prompt_overhead(task, 9999, words)}]
    reduce_parts = reduce_messages(task, [], "")
    map_fixed = estimate_messages(map_parts, bpt)
    if counter is not None:
        per_message, per_request = sizing.calibration.templates.cost(model)
        map_fixed = sum(counter.count(m["content"]) + per_message for m in map_parts) + per_request
    reduce_fixed = estimate_messages(reduce_parts, bpt)
    room = effective - reduce_fixed - config.budget.reply_tokens - math.ceil(config.budget.safety_margin * effective)
    return estimate_analysis(list(chunk_tokens), map_fixed_tokens=map_fixed,
                             map_reply_tokens=reply_budget(sizing, task).num_predict,
                             reduce_room_tokens=max(64, room), reduce_fixed_tokens=reduce_fixed,
                             final_reply_tokens=config.budget.reply_tokens,
                             speed=sizing.calibration.speed(model, long_prompts=True),
                             reply_share=sizing.calibration.reply_share(model, maps=True))


def effective_context(sizing: Sizing, model: str, window: int) -> int:
    """What the model uses well of its window (the config may say less than the window)."""
    return min(sizing.config.model(model).effective_context or window, window)


def seconds_per_chunk(sizing: Sizing, model: str, size_tokens: int) -> float:
    """From the model's measured speed, once known (0 = unknown)."""
    speed = sizing.calibration.speed(model, long_prompts=True)
    if not speed:
        return 0.0
    prompt_tps, eval_tps = speed
    return size_tokens / prompt_tps + sizing.config.chunking.map_reply_tokens / eval_tps


def document(sizing: Sizing, job: Job, tokens: bool = True) -> chunking.Document:
    """The job's file read with the job's settings (raises a HarveyError when it is gone or unreadable).
    A job packed by the model's tokens gets them counted again (the worker); ``tokens=False`` only
    names the counter in the settings, enough for the fingerprint (a request checking a resume)."""
    wf = Workspace(sizing.config.workspace_path).resolve(job.file)
    chosen = chunking.ChunkSettings(size_tokens=job.size_tokens, overlap=sizing.config.chunking.overlap,
                                    bytes_per_token=job.bytes_per_token)
    doc = chunking.read_document(wf.path, chosen)
    if job.counter and not tokens:
        return chunking.with_settings(doc, dataclasses.replace(doc.settings, counter=job.counter))
    if job.counter:           # planned by the model's tokens: the same counter gives the same chunks
        counter = sizing.models.counter(job.model, wait=True)
        if counter is None:
            raise CounterUnavailable(f"the token counter of {job.model} that planned this analysis is not "
                                     "available yet (its server may be loading)")
        doc = chunking.with_counter(doc, counter)
    return doc


class CounterUnavailable(ModelError):
    """The job was planned by the model's own tokens and that counter cannot be had now (its server
    is loading or away): the run waits for Retry, since chunks cut any other way would not be the
    ones the user agreed to (nor the ones already answered)."""

    kind = "unreachable"
    transient = True


REPLAN_CHANGE = 0.10     # re-plan when the file's measured figure differs from the one in use by more
REPLAN_CAUTION = 0.95    # a measured figure is a little high when a server reuses a cached prefix
MAX_REPLANS = 4          # a file whose density keeps changing is not re-planned after every chunk


def job_chunks(sizing: Sizing, job: Job, doc: chunking.Document, whole: bool = False) -> list[chunking.Chunk]:
    """The job's chunks: the plan's, with the rest re-sized at each re-plan (``chunking.chunks_from``);
    the run's first ``job.total``, or (``whole``) every chunk the file needs."""
    chunks = chunking.chunk_document(doc)
    for at, offset, bpt, size in job.replans:
        chunks = chunks[:at] + chunking.chunks_from(_with_settings(doc, bpt, size), offset, at)
    return chunks if whole else chunks[:job.total]          # (a re-plan set the new total)


def _selected(sizing: Sizing, job: Job, chunks: int) -> int:
    """How many of the re-planned chunks run before the user is asked again: all of them when the
    user chose the whole file, but never more than they agreed to (the count the card said when they
    started, ``job.agreed``; for a job from before, ``max_chunks`` or the larger count they chose; the
    worker then pauses in "confirm"); the first N stay the first N."""
    if not job.wants_all:
        return min(job.selected, chunks)
    if job.agreed:                       # issue 30: never past the count the card said, whatever max_chunks
        return min(chunks, job.agreed)
    return min(chunks, max(sizing.config.chunking.max_chunks, job.selected))


def _with_settings(doc: chunking.Document, bpt: float, size: int) -> chunking.Document:
    return dataclasses.replace(doc, settings=dataclasses.replace(doc.settings, bytes_per_token=bpt,
                                                                 size_tokens=size))


def replan(sizing: Sizing, job: Job, doc: chunking.Document, done: list[chunking.Chunk]) -> dict | None:
    """New job fields when the map calls so far show that the file's bytes per token is not the
    figure in use (#14): the chunks after ``done`` are re-sized to the measured one, so a file
    denser than its kind's calibration is not refused for size and a lighter one needs fewer
    calls.  None: the plan stands.
    """
    if job.counter or len(job.replans) >= MAX_REPLANS or not job.measured_bpt or not done:
        return None           # (a counted layout is exact: nothing to repair)
    if any(i >= len(done) for i in job.results):
        return None          # a resume retrying an earlier chunk: later answers fix the layout
    bpt = round(job.measured_bpt * REPLAN_CAUTION, 3)
    if abs(bpt / job.map_bpt - 1) <= REPLAN_CHANGE:
        return None
    size = job.size_tokens
    if bpt > job.bytes_per_token:      # lighter: larger chunks, but each must still fit at the plan's figure
        effective = effective_context(sizing, job.model, job.window)
        room = effective - map_fixed_tokens(sizing, job.task, job.bytes_per_token, effective,
                                            map_reply_cap(sizing, job.in_chat))
        size = max(64, min(size, math.floor(room * job.bytes_per_token / bpt)))
    elif bpt < job.map_bpt:            # denser: the same bytes a chunk as planned, so the same calls as the card,
        #                                as long as a chunk of them still fits the window at the measured figure
        #                                (issue 43: 7 chunks on the card became 8 where each would have fitted)
        effective = effective_context(sizing, job.model, job.window)
        room = effective - map_fixed_tokens(sizing, job.task, bpt, effective, map_reply_cap(sizing, job.in_chat))
        size = max(64, min(size if room < size else math.floor(room), math.ceil(size * job.map_bpt / bpt)))
    at, offset = len(done), done[-1].end
    rest = chunking.chunks_from(_with_settings(doc, bpt, size), offset, at)
    chunks = at + len(rest)
    estimate = estimate_cost(sizing, job.model, job.window, bpt, job.task,
                             [c.tokens for c in done] + [c.tokens for c in rest])
    selected = _selected(sizing, job, chunks)
    message = job.message
    if job.wants_all and selected < chunks:
        message = (f"{job.file} is denser than planned: the whole file needs {chunks} chunks, {chunks - selected} "
                   f"more than the {selected} agreed. After chunk {selected} you choose whether to read the rest.")
    return dict(replans=[*job.replans, [at, offset, bpt, size]], chunks=chunks, selected=selected, message=message,
                estimated_calls=estimate.calls, estimated_seconds=estimate.seconds or job.estimated_seconds)


def unread(job: Job, doc: chunking.Document, chunks: list[chunking.Chunk]) -> list[dict]:
    """The parts of the file that no answered chunk covers, each as its lines (and a PDF's pages, and
    the sections it spans), so the answer and the scene can name what the answer does not rest on.

    Computed from the text the chunks cover (their overlaps included: what the model saw), not
    from chunk numbers: a failed chunk whose neighbours' overlaps read its edges leaves only its
    middle unread. ``chunks``: every chunk the whole file needs (``job_chunks(..., whole=True)``).
    """
    read = [(c.start, c.end) for c in chunks
            if (r := job.results.get(c.index)) is not None and r.status == "ok"]
    text, spans, at = doc.text, [], 0
    for start, end in sorted(read) + [(len(text), len(text))]:
        if start > at:
            spans += _span(doc, chunks, at, start)
        at = max(at, end)
    return spans


def _span(doc: chunking.Document, chunks: list[chunking.Chunk], start: int, end: int) -> list[dict]:
    """The unread text ``start:end`` as one span (none when it is only blank space)."""
    text = doc.text
    lead = len(text[start:end]) - len(text[start:end].lstrip())
    trail = len(text[start:end]) - len(text[start:end].rstrip())
    start, end = start + lead, end - trail
    if start >= end:
        return []
    pages = doc.source.pages_of(start, end) if doc.source is not None else None
    sections = [" › ".join(c.heading_path) for c in chunks if c.body_start < end and c.end > start and c.heading_path]
    section = sections[0] if sections else ""
    if sections and sections[-1] != section:
        section += f" … {sections[-1]}"
    return [{"lines": [text.count("\n", 0, start) + 1, text.count("\n", 0, end - 1) + 1],
             "pages": list(pages) if pages else None, "section": section}]


def file_tokens(sizing: Sizing, file: str, bpt: float) -> tuple[str, int]:
    """The file's name as the workspace knows it and its size estimate (from stat: nothing is read)."""
    wf = Workspace(sizing.config.workspace_path).resolve(file)
    return wf.name, math.ceil(wf.size / bpt)
