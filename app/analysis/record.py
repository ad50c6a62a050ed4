"""The outcome of an analysis, written into the session through the one writer.

The CHUNK ANALYSIS scene (seed 000 D5) and the answer go into the turn that
asked, by index and checked against its user text (``update_turn`` with
``expect=job.asked``): the session store writes them right after that turn,
whatever was said after it.  If the turn is not there any more the store raises
``TurnMoved`` and nothing is written; the runner then fails the job and keeps
its answer on the card.

For cited answers (issue #15) the scene also keeps, for every chunk that had
something relevant, its passage: where it lies in the file's text as analysed,
its lines, pages and heading path, and the quotes its partial answer rested on;
with the text's fingerprint (``chunk-source``) and how many chunks were relevant.
"""

from __future__ import annotations

from datetime import datetime

from .. import chunking
from ..sessions import fountain, notes
from ..sessions.store import SessionNotFound
from . import answers
from .job import Job
from .mapreduce import ranges


def analysis_record(job: Job, synthesis: str | None) -> fountain.ChunkAnalysis:
    """The scene: ``chunks`` is what the whole file needs (never only the chunks run), one result per
    chunk of the run, and each part of the file no answer covers as a ``chunk-unread`` note."""
    if job.way == "retrieve":
        return rag_record(job, synthesis)
    results = []
    for i in range(job.total):
        r = job.results.get(i)
        if r is None:
            results.append("cancelled")
        elif r.status == "ok":
            results.append("ok")
        else:
            results.append(f"error: {r.error}")
    # Harvey's units and names in the chunk note: the raw model name, chunk-size in bytes (issue 26);
    # chunks: how many the whole file needs, whatever was read (issue 22).
    return fountain.ChunkAnalysis(file=job.file, chunks=job.file_chunks, model=job.model,
                                  boundary=job.boundary, chunk_size=job.size_tokens,
                                  chunk_bytes=round(job.size_tokens * job.map_bpt),
                                  instruction=job.instruction, when=started_at(job),
                                  results=results, synthesis=synthesis, passages=passages(job),
                                  source=job.source or None, relevant=job.relevant_count,
                                  unread=[notes.unread(span) for span in job.unread], computed=computed_notes(job))


def started_at(job: Job) -> datetime:
    """The scene's Started time: when the job started (issue 33: it was when the scene was written)."""
    if job.started:
        return datetime.fromtimestamp(job.started).replace(microsecond=0)
    return datetime.now().replace(microsecond=0)


def rag_record(job: Job, synthesis: str | None) -> fountain.ChunkAnalysis:
    """The scene of an answer from the most relevant passages (issue 25): the retrieval chunks'
    count and size, the ``rag:`` note, and each passage sent (no per-chunk results: none ran)."""
    top = max((p["score"] for p in job.rag), default=0.0)
    rag = f"rag: {len(job.rag)} chunks from {' '.join(job.file.split())}, top score {top:.2f}".replace("]]", "] ]")
    size = chunking.RETRIEVAL_SIZE_TOKENS
    found = {p["chunk"]: fountain.CitedPassage(chunk=p["chunk"], start=p["start"], end=p["end"],
                                                lines=(p["lines"][0], p["lines"][1]),
                                                pages=(p["pages"][0], p["pages"][1]) if p["pages"] else None,
                                                heading=p["section"], quotes=[])
             for p in job.rag}
    return fountain.ChunkAnalysis(file=job.file, chunks=job.rag_chunks, model=job.model, boundary=job.boundary,
                                  chunk_size=size, chunk_bytes=round(size * chunking.retrieval_settings().bytes_per_token),
                                  instruction=job.instruction, when=started_at(job),
                                  results=[], synthesis=synthesis, passages=found, source=job.source or None,
                                  rag=rag, computed=computed_notes(job))


def computed_notes(job: Job) -> list[str]:
    """What the app computed for the answer (issue 32), as the scene's notes: a list's items and
    count, a point question's disagreeing versions, the coverage, Self-Route's verdict and the
    passages answer a whole-file read replaced."""
    out = []
    if job.list_of and job.way != "retrieve" and job.state == "done":
        total = len(job.items)
        out += [notes.item(n, total, it) for n, it in enumerate(job.items, 1)]
        if job.figures:
            out.append(notes.figures(job.figures))
        else:                       # a job finished before issue 40
            values = [it["value"] for it in job.items if it.get("value") is not None]
            out.append(notes.count(job.list_of, total, sum(values) if values else None, len(values), job.stated,
                                   job.items_cut))
    out += [notes.conflict(v) for v in job.versions]
    if job.coverage:
        out.append(notes.coverage(job.coverage))
    if job.way == "retrieve" and job.state == "done":
        minutes = job.run_seconds() / 60 if job.seconds_per_chunk else None
        out.append(notes.answerable(job.rag_answerable, {"chunks": job.chunks, "calls": job.estimated_calls,
                                                         "minutes": round(minutes, 1) if minutes else None}))
    if job.replaces:
        out.append(notes.replaces(job.replaces))
    if job.in_chat:
        out.append(notes.in_chat(job.list_of))
    if partial(job):
        out.append(notes.partial({"job": job.id, "bpt": job.bytes_per_token, "per_chunk": round(job.chunk_seconds(), 1)}))
    return out


def partial(job: Job) -> bool:
    """A read answer that rests on part of its file (the first N chunks, a stop, failed chunks): its chunk
    answers are kept (``JobStore.remove``) so that reading the rest reads only what was not read."""
    return (job.state == "done" and job.way != "retrieve"
            and sum(1 for r in job.results.values() if r.status == "ok") < job.file_chunks)


def rag_line(job: Job) -> str:
    """The answer's notice: how many passages it rests on, how they were found, what it may miss."""
    n = len(job.rag)
    return (f"Answered from {n} passage{'s' if n != 1 else ''} of {job.file} ({job.rag_chunks} in all), found by "
            f"{job.rag_search}; what is spread over the whole file may be missed.")


def passages(job: Job) -> dict[int, fountain.CitedPassage]:
    """Chunk number -> passage, for the relevant chunks whose range the run kept (a result
    from before issue #15 has none, and gets no passage)."""
    out = {}
    for i in range(job.total):
        r = job.results.get(i)
        if r is None or r.status != "ok" or not r.relevant or r.end <= r.start or not r.lines:
            continue
        out[i + 1] = fountain.CitedPassage(chunk=i + 1, start=r.start, end=r.end, lines=(r.lines[0], r.lines[1]),
                                            pages=(r.pages[0], r.pages[1]) if r.pages else None, heading=r.section,
                                            quotes=r.quotes)
    return out


def in_chat_line(job: Job) -> str:
    """The answer's notice when the app took a chat message for a list question (issue 45): what it read the
    message as, and what it did about it (the answer's "Answer in chat instead" undoes it)."""
    calls = "one model call" if job.model_calls == 1 else f"{job.model_calls} model calls"
    return (f"Read as a list question: {calls} listed the {answers.plural(job.list_of, 2)} in {job.file}, read "
            "whole, and the app counted them.")


def relevant_line(job: Job) -> str:
    """What the answer's notice says: "31 of 115 chunks had something relevant", and when not every
    chunk of the file was read, how many were (the count is never of the chunks run alone)."""
    chunks = job.file_chunks
    line = f"{job.relevant_count} of {chunks} chunk{'s' if chunks != 1 else ''} had something relevant"
    if job.done_count < chunks:
        line += f"; {job.done_count} of the {chunks} were read"
    return line + "."


def coverage_note(job: Job) -> str:
    """The answer's closing note when it does not rest on the whole file: how many chunks were read,
    why the others were not, and which lines (pages, sections) they hold. "" when all were read."""
    chunks = job.file_chunks
    failed = [i + 1 for i in range(job.total) if (r := job.results.get(i)) is not None and r.status != "ok"]
    not_run = [i + 1 for i in range(chunks) if job.results.get(i) is None]
    if not failed and not not_run:
        return ""
    if job.way == "relevant":
        return (f"\n\n_Note: this answer rests on the {job.done_count} most relevant of the {chunks} chunks of "
                f"`{job.file}`; the rest was not read._")
    why = ([f"chunk{'s' if len(failed) > 1 else ''} {ranges(failed)} had no answer"] if failed else []) + (
        [f"chunk{'s' if len(not_run) > 1 else ''} {ranges(not_run)} {'were' if len(not_run) > 1 else 'was'} "
         "not run"] if not_run else [])
    where = "; ".join(notes.where(span) for span in job.unread)
    return (f"\n\n_Note: this answer covers {job.done_count} of the {chunks} chunks of `{job.file}` "
            f"({', '.join(why)})" + (f". Not read: {where}" if where else "") + "._")


def write_outcome(store, job: Job, answer: str | None, synthesis: str) -> None:
    """The scene and (when there is one) the answer, in the turn that asked; TurnMoved if it moved."""
    record = analysis_record(job, synthesis)

    def add(turn: fountain.Turn) -> None:
        turn.analysis = record
        if answer is not None and job.replaces:     # Self-Route: the passages answer's notices go with it
            turn.notes = [n for n in turn.notes if not notes.is_notice(n)]
        if answer is not None:
            turn.reply, turn.model = answer, job.model
            # Harvey's stats line under the answer, for the whole analysis: every call's
            # generated and prompt tokens and the model's time (on a Pi, the cost).
            turn.stats = fountain.stats_line(job.model, store.backend, job.generated_tokens, job.prompt_tokens,
                                             job.model_seconds)
            if job.way == "retrieve":
                turn.notes.append(notes.notice(rag_line(job)))
            elif job.in_chat:
                turn.notes.append(notes.notice(in_chat_line(job)))
            else:
                turn.notes.append(notes.notice(relevant_line(job)))
            if job.coverage:
                turn.notes.append(notes.notice(f"Coverage: {job.coverage}."))
            turn.notes.append(notes.notice(
                f"{'Retrieval answer' if job.way == 'retrieve' else 'List' if job.in_chat else 'Chunk analysis'}: {job.model_calls} model call{'s' if job.model_calls != 1 else ''}, {job.prompt_tokens:,} prompt tokens, "
                f"{job.generated_tokens:,} generated tokens, {job.model_seconds:.0f} s of model time."))

    store.update_turn(job.session, job.turn, add, expect=job.asked)


def write_decline(store, job: Job) -> None:
    store.update_turn(job.session, job.turn, lambda turn: turn.notes.append(notes.declined()), expect=job.asked)


def recorded(store, job: Job) -> bool:
    """Whether the job's outcome is already in the session file (after a crash between the two)."""
    try:
        turns = store.load(job.session).turns
    except SessionNotFound:
        return True          # nothing to write into
    if not 0 <= job.turn < len(turns) or turns[job.turn].user_text != job.asked:
        return False         # the write will say TurnMoved
    turn = turns[job.turn]
    if job.state == "declined":
        return notes.read(turn.notes).declined
    return turn.analysis is not None
