"""The chunked-analysis pages: the card's buttons and its progress stream (SSE).

The worker appends small events (``progress`` with the chunks in flight or a stage,
``partial`` with a chunk index, ``state``); this module renders the fragments
from the job when it streams them, with the events' own ids, so a reconnect
with Last-Event-ID replays exactly what was missed.
"""

from __future__ import annotations

import json
import logging
import math
import time

from flask import Blueprint, Response, abort, flash, redirect, render_template, request, stream_with_context, url_for

from .. import chunking
from ..budget import KIND_WORDS
from ..errors import Busy, HarveyError
from ..render import markdown
from ..retrieval import embedding
from ..events import RECONNECT_MS, Event, gate_for, last_event_id, sse_format, sse_retry
from .context import services
from ..sessions import fountain, notes
from ..sessions.store import SessionNotFound
from .fragments import turn_fragment
from ..workspace import Workspace
from ..analysis import answers, library, passages, plan, records
from ..chat import read_chunks
from ..analysis.job import ACTIVE, DISCARDABLE, InvalidTransition, Job, disk_trouble, without_directive

log = logging.getLogger(__name__)
bp = Blueprint("analysis", __name__)


# -- views ---------------------------------------------------------------------------------

def _session(name: str) -> None:
    """404 for a bad or unknown session name, in every analysis URL."""
    if not services().store.exists(name):
        abort(404, description="There is no such session.")


def _job(name: str, job_id: str) -> Job:
    _session(name)
    job = services().jobs.find(job_id)
    if job is None or job.session != name:
        abort(404, description="There is no such analysis.")
    return job


def _turn_html(job: Job) -> str:
    return turn_fragment(job.session, job.turn)


def _unsaved(job: Job, exc: OSError) -> str:
    """A decision whose state could not be saved (a full or read-only disk): nothing changed,
    and the card says why instead of a server error."""
    log.warning("analysis %s: a decision could not be saved: %s", job.id, exc)
    services().jobs.machine.unsaved(job, job.state, message=(
        f"That could not be saved: {disk_trouble(exc)}. Make room (or fix the disk), then try again."))
    return _turn_html(job)


@bp.post("/s/<name>/analysis/<job_id>/start")
def start(name: str, job_id: str):
    """Start with the user's instruction, or decline on "no". A second tap finds the job started."""
    job = _job(name, job_id)
    runner = services().jobs
    instruction = request.form.get("instruction", "")
    try:
        if instruction.strip().lower() == "no":
            runner.decline(job)
        else:
            way = request.form.get("way")
            runner.start(job, instruction, request.form.get("scope", ""),
                         way if way in ("retrieve", "relevant") else "read", list_of=request.form.get("list_of"))
    except InvalidTransition:
        pass                                  # started (or answered) already: show the card as it is
    except HarveyError as exc:                # refused: say why on the card, only if it is still asking
        runner.note(job, str(exc), expect="proposed", instruction=instruction)
    except OSError as exc:
        return _unsaved(job, exc)
    return _turn_html(job)


def _decided(job: Job, act, refused: type[Exception] = HarveyError) -> str:
    """Carry out one of the card's decisions and answer with the card as it is now.

    ``refused``: the refusal that needs no words of its own (answered already on another device,
    or the session busy): the card re-drawn says which.  A state that cannot be saved (a full or
    read-only disk) changes nothing and the card says why (``_unsaved``)."""
    try:
        act()
    except OSError as exc:
        return _unsaved(job, exc)
    except refused:
        pass
    return _turn_html(job)


@bp.post("/s/<name>/analysis/<job_id>/read-on")
def read_on(name: str, job_id: str):
    """The answer to a job that needs more calls than agreed: read the rest, or synthesize what was read."""
    job = _job(name, job_id)
    return _decided(job, lambda: services().jobs.read_on(job, rest=request.form.get("rest") == "yes"))


@bp.post("/s/<name>/analysis/<job_id>/decline")
def decline(name: str, job_id: str):
    job = _job(name, job_id)
    return _decided(job, lambda: services().jobs.decline(job), refused=InvalidTransition)


@bp.post("/s/<name>/analysis/<job_id>/cancel")
def cancel(name: str, job_id: str):
    services().jobs.cancel(_job(name, job_id))
    return Response("", status=204)


@bp.post("/s/<name>/analysis/<job_id>/after-cancel")
def after_cancel(name: str, job_id: str):
    job = _job(name, job_id)
    return _decided(job, lambda: services().jobs.after_cancel(job, keep=request.form.get("keep") == "yes"))


@bp.post("/s/<name>/analysis/<job_id>/resume")
def resume(name: str, job_id: str):
    """Retry an interrupted job: the message on the card says why when it cannot."""
    job = _job(name, job_id)
    return _decided(job, lambda: services().jobs.resume(job))


@bp.post("/s/<name>/analysis/<job_id>/discard")
def discard(name: str, job_id: str):
    """Throw away a failed, interrupted or stale job; its files go."""
    job = _job(name, job_id)
    return _decided(job, lambda: services().jobs.discard(job, expect=DISCARDABLE), refused=InvalidTransition)


def _render(job: Job, event: Event) -> str:
    """The fragment an event stands for, rendered from the job now."""
    if event.name == "partial":
        result = job.results.get(int(event.data or -1))
        return render_template("analysis/_partial.html", job=job, result=result) if result else ""
    if event.name == "writing":
        return render_template("analysis/_writing.html", text=services().jobs.writing(job), markdown=markdown)
    if event.name == "progress":
        data = json.loads(event.data) if event.data else {}
        return render_template("analysis/_progress.html", job=job, running=data.get("running") or [],
                               stage=data.get("stage", ""), now=time.time())
    return event.data


@bp.get("/s/<name>/analysis/<job_id>/events")
def events(name: str, job_id: str):
    """SSE: progress and partial answers, replayed after Last-Event-ID, then the new card.

    An unknown job (a stale page after a restart) gets a stream that just closes:
    a 404 would make the browser's EventSource retry for ever. The stream ends
    itself after the gate's lifetime (the browser reconnects with Last-Event-ID
    and the replay goes on from there); over the gate's cap it is told to come
    back later. The analysis runs on in its worker whoever watches.
    """
    _session(name)
    runner = services().jobs
    job = runner.find(job_id)
    if job is None or job.session != name:
        return _sse(sse_format(Event(0, "close", "")))
    log_ = runner.log_for(job)
    prefix = log_.key + "-"
    after = last_event_id(request.headers, request.args, log_.key)
    if job.state in ACTIVE and after is not None:
        after = max(after, runner.run_start(job))       # a resumed job: the earlier runs' events are over
    idle = log_.closed or job.state not in (*ACTIVE, "done", "dropped")
    if after is None or (idle and after >= log_.last_id) or after > log_.last_id:
        # Nothing running to follow, or an id from another run of the log (the server restarted):
        # the card as it is now, which opens its own stream if the job runs.
        return _sse(sse_format(Event(log_.last_id, "state", _turn_html(job)), prefix)
                    + sse_format(Event(log_.last_id, "close", ""), prefix))
    gate = gate_for(services())
    slot = gate.enter()
    if slot is None:
        return _sse(gate.busy_body())

    def stream():
        try:
            yield sse_retry(RECONNECT_MS)
            for event in slot.follow(log_, after):
                if event is None:
                    yield sse_format(None)
                    continue
                if event.name == "state":
                    yield sse_format(Event(event.id, "state", _turn_html(job)), prefix)
                    yield sse_format(Event(event.id, "close", ""), prefix)
                    return
                yield sse_format(Event(event.id, event.name, _render(job, event)), prefix)
            if log_.closed:
                yield sse_format(Event(log_.last_id, "close", ""), prefix)
            # else: lifetime up or shutting down; the browser reconnects with its Last-Event-ID
        finally:
            slot.release()

    response = _sse(stream_with_context(stream()))
    response.call_on_close(slot.release)
    return response


def _sse(body) -> Response:
    return Response(body, mimetype="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@bp.post("/s/<name>/analysis/direct")
def direct(name: str):
    """Analyse a workspace file directly (the terminal Harvey's /read-chunks)."""
    _session(name)
    try:
        job = read_chunks.read_chunks(services(), name, request.form.get("file", ""))
    except Busy as exc:
        abort(409, description=str(exc))
    except (HarveyError, OSError) as exc:
        message = _without_folder(str(exc) if isinstance(exc, HarveyError) else
                                  f"The file could not be read ({exc.strerror or exc.__class__.__name__}).")
        log.info("direct analysis in %s refused: %s", name, message)
        if request.form.get("back") == "files":          # the Files page says why, in its own words
            flash(f"{request.form.get('file', '')} cannot be analysed: {message}", "error")
            return redirect(url_for("files.index", session=name), code=303)
        abort(400, description=message)
    return redirect(url_for("chat.page", name=name) + f"#turn-{job.turn}", code=303)


def _without_folder(message: str) -> str:
    """A refusal's words without the server's absolute path to the workspace (issue 33)."""
    root = str(services().config.workspace_path)
    return message.replace(root + "/", "").replace(root, services().config.workspace)


@bp.get("/s/<name>/turns/<int:turn>/passages/<int:chunk>")
def passage(name: str, turn: int, chunk: int):
    """The passage a citation [chunk] in turn ``turn``'s answer stands on.

    For htmx, the fragment the chat's passage dialog shows; without JavaScript the link
    opens this as a page of its own. A session, turn or chunk without a recorded passage
    is a 404; a file that is gone or unreadable is said on the page (``passages.show``).
    """
    _session(name)
    try:
        turns = services().store.load(name).turns
    except SessionNotFound:
        abort(404, description="There is no such session.")
    analysis = turns[turn].analysis if turn < len(turns) else None
    found = passages.passage_of(analysis, chunk)
    if found is None:
        abort(404, description="That answer cites no such passage.")
    shown = passages.show(Workspace(services().config.workspace_path), analysis, found)
    if request.headers.get("HX-Request") == "true":
        html = render_template("analysis/_passage.html", shown=shown)
    else:
        html = render_template("analysis/passage.html", shown=shown, session_name=name, turn=turn)
    return Response(html, headers={"Vary": "HX-Request"})


@bp.app_context_processor
def _card_context() -> dict:
    """What the analysis card needs in any page that shows one."""
    runner = services().jobs
    return {"config_chunking": services().config.chunking, "config_chat": services().config.chat, "now_ts": time.time,
            "job_log_id": lambda job: runner.log_for(job).last_id, "past_instructions": past_instructions,
            "job_results": runner.results, "unread_where": unread_where, "sources": sources,
            "retrieval_offer": retrieval_offer, "computed": computed, "question_kind": question_kind,
            "waits_for": waits_for, "writing": runner.writing, "markdown": markdown, "estimated_why": estimated_why,
            "list_target": lambda text: answers.list_target(without_directive(text or "")),
            "model_speed": services().calibration.speed, "plural": answers.plural}


def estimated_why(model: str, text_kind: str = "", bytes_per_token: float = 0.0) -> str:
    """Why the card's sizes are estimates, not the model's own count (issue 43): the counter's reason,
    and the kind of text the file was taken for with the figure that gives (``budget.calibration_kind``:
    the estimate's one guess, shown so a wrong one is seen)."""
    state, why = services().models.counter_state(model)
    if state == "estimated" and why:
        reason = f"the model's tokens cannot be counted here ({why})"
    elif state == "building":
        reason = "the model's tokenizer is still loading"
    else:
        reason = "the model server gives no tokenizer"
    words = KIND_WORDS.get(text_kind)
    if words and bytes_per_token:
        return f"{reason}; sized as {words} at {bytes_per_token:.1f} bytes a token"
    return f"{reason}; sizes are from the measured bytes per token"


def waits_for(job: Job) -> dict | None:
    """The analysis ``job`` waits behind on the one analysis lane (issue 44): its file and session, how far
    it is, about how long it has left, where it is and how to stop it; None when nothing runs before it."""
    runner = services().jobs
    ahead = runner.ahead(job)
    if ahead is None:
        return None
    try:
        title = services().store.load(ahead.session).title
    except (SessionNotFound, OSError):
        title = ahead.session
    eta = ahead.eta_seconds()
    base = url_for("analysis.start", name=ahead.session, job_id=ahead.id)[:-6]
    return {"file": ahead.file, "title": title, "done": ahead.processed, "total": ahead.total,
            "minutes": max(1, round(eta / 60)) if eta else None, "stage": ahead.state,
            "url": url_for("chat.page", name=ahead.session) + f"#turn-{ahead.turn}", "cancel": f"{base}/cancel",
            "same_session": ahead.session == job.session}


def question_kind(job: Job) -> dict:
    """What the card says the question is, and so which read it offers first (issue 42): "one" (a question
    with one answer: the most relevant chunks first, until they answer it) or "whole" (a list, a count,
    a total, a summary: every chunk); with the cost of each.  The guess is shown, and the other read is
    the button beside it."""
    task = without_directive(job.instruction or "")
    one = answers.point_question(task) and not answers.list_target(task)
    per = job.seconds_per_chunk
    share = max(3, math.ceil(answers.SHARE * job.chunks))
    return {"kind": "one" if one else "whole", "share": min(share, job.chunks),
            "whole_minutes": max(1, round(per * job.chunks / 60)) if per else None,
            "share_minutes": max(1, round(per * min(share, job.chunks) / 60)) if per else None}


def retrieval_offer(job: Job) -> dict:
    """The card's second choice (issue 25): its cost on this machine and whether passages can be
    found by meaning, from the measured speeds (one request of about ``passages`` x 600 tokens and a
    reply; the indexing still to do at the measured seconds per embedded piece) and the installed
    models.  Nothing is indexed or sent to a model to draw the card."""
    svc = services()
    settings = svc.config.retrieval
    prompt = settings.passages * chunking.RETRIEVAL_SIZE_TOKENS + 300
    speed = svc.calibration.speed(job.model, long_prompts=True)      # passages: a long prompt
    minutes = (prompt / speed[0] + svc.config.budget.reply_tokens / speed[1]) / 60 if speed else None
    cost = _index_cost(svc, job)
    model = cost.model if cost else (svc.indexer.embed_model() if svc.indexer else None)
    return {"minutes": minutes, "embed_model": model, "hint": embedding.MODEL_HINT,
            "cost": cost_text(cost, minutes)}


def _index_cost(svc, job: Job):
    """What indexing the job's file still costs (``Indexer.cost``), or None when there is no indexer
    or the file cannot be read now (the card then says no indexing figure; starting says why)."""
    if not svc.indexer:
        return None
    try:
        path = Workspace(svc.config.workspace_path).resolve(job.file).path
        if chunking.measure(path).text_bytes > plan.PLAN_READ_BYTES:
            return svc.indexer.estimate(job.file_tokens)      # never read a huge file to draw a card
        return svc.indexer.cost(svc.indexer.document(path))
    except Exception as exc:    # noqa: BLE001 - a card is drawn whatever the index or the file says
        log.info("card of %s: no indexing estimate (%s)", job.file, exc)
        return None


def cost_text(cost, minutes: float | None) -> str:
    """The second choice's cost in words: the indexing still to do, then the answer, e.g. "about 6 min
    to index 120 passages, then about 1 min" ("" when neither is known)."""
    answer = f"about {_minutes(minutes * 60)} min" if minutes else ""
    if cost is None or cost.complete:
        return answer
    # (an estimate from the file's size says "about": issue 45, the card said 379 where indexing counted 339)
    passages = f"{'about ' if cost.estimated else ''}{cost.passages} passage{'s' if cost.passages != 1 else ''}"
    if cost.model is None:
        index = "a keyword index first (seconds)"
    elif cost.seconds is None:
        index = f"{passages} to index first (time unknown until the first batch)"
    else:
        index = f"about {_minutes(cost.seconds)} min to index {passages}"
    return f"{index}, then {answer}" if answer else index


def _minutes(seconds: float) -> int:
    """Whole minutes for a card, at least 1 (a card never promises "0 min")."""
    return max(1, round(seconds / 60))


def unread_where(job: Job) -> str:
    """The parts of the file a job does not read, for its card ("" when it reads everything it needs)."""
    return "; ".join(notes.where(span) for span in job.unread)


def sources(session: str, index: int, analysis: fountain.ChunkAnalysis | None) -> list[dict]:
    """The answer's sources, from the passages the scene recorded (every chunk that had something
    relevant), each with where it lies and the link that opens it: shown under the answer whether
    or not the synthesis wrote ``[n]`` markers. Rendered at view time, not written into the answer:
    the .spmd keeps the model's words (the terminal Harvey would send a list in the reply text to its
    model), and the passages it is made from are in the scene already."""
    if not session or analysis is None:
        return []
    return [{"chunk": n, "where": _where(p), "section": p.heading,
             "url": url_for("analysis.passage", name=session, turn=index, chunk=n)}
            for n, p in sorted(analysis.passages.items())]


def computed(session: str, index: int, analysis: fountain.ChunkAnalysis | None) -> dict | None:
    """What the app computed for an analysis answer (issue 32), from the scene's notes, for the view:
    a list's items (each opening its passage like a citation) and its count line, the chunks'
    disagreeing versions, the coverage, and whether the passages held the answer (with the whole-file
    read offered when they did not).  Rendered at view time: the reply keeps the model's words."""
    if not session or analysis is None or not analysis.computed:
        return None
    found = notes.read_computed(analysis.computed)

    def link(chunk) -> str:
        if isinstance(chunk, int) and chunk in analysis.passages:
            return url_for("analysis.passage", name=session, turn=index, chunk=chunk)
        return ""

    items = [{**it, "url": link(it.get("chunk")), "value_text": answers.amount_text(it["value"], it.get("unit") or "")
              if isinstance(it.get("value"), (int, float)) else ""} for it in found.items]
    count, figures = None, []
    c = found.count
    if c is not None and "op" in c:             # issue 40: what the file states, what the app computed, over what
        figures = [{"label": label, "text": text} for label, text in answers.figure_lines(c)]
    elif c is not None:                         # an answer recorded before issue 40
        count = answers.count_line(int(c.get("count") or 0), str(c.get("target") or ""), c.get("total"),
                                   int(c.get("valued") or 0), c.get("stated"), int(c.get("cut") or 0))
    conflicts = [{**v, "url": link(v.get("chunk"))} for v in found.conflicts]
    offer = None
    if found.answerable is False and analysis.rag:
        cost = found.cost or {}
        offer = {"url": url_for("analysis.read_whole", name=session, turn=index),
                 "text": whole_read_text(cost.get("chunks"), cost.get("calls"), cost.get("minutes"))}
    rest = None
    if found.partial and not analysis.rag:          # read the rest: only the chunks not read (issues 40, 42)
        read = sum(1 for r in analysis.results if r == "ok")
        left = max(0, analysis.chunks - read)
        per = float(found.partial.get("per_chunk") or 0)
        minutes = f", about {max(1, round(per * left / 60))} min" if per else ""
        rest = {"url": url_for("analysis.read_rest", name=session, turn=index),
                "text": f"Read the other {left:,} chunk{'s' if left != 1 else ''} ({left + 1:,} model calls{minutes}; "
                        f"the {read:,} read are not read again)"}
    return {"listed": items, "count": count, "figures": figures, "conflicts": conflicts, "coverage": found.coverage,
            "offer": offer, "rest": rest, "replaced": found.replaced, "op": (c or {}).get("op", ""),
            "in_chat": analysis.in_chat,
            "records": url_for("analysis.records_table", name=session, turn=index) if items else ""}


@bp.post("/s/<name>/turns/<int:turn>/read-rest")
def read_rest(name: str, turn: int):
    """A list answer over part of its file read to the end (issue 40): the chunks it read are not read again,
    and the new answer replaces it."""
    return _read_again(name, turn, services().jobs.read_rest)


def _read_again(name: str, turn: int, read):
    """A turn's answer read again over more of its file (``read``: the runner's ``read_whole`` or
    ``read_rest``), the new job's card in its place."""
    _session(name)
    try:
        job = read(name, turn)
    except Busy as exc:
        abort(409, description=str(exc))
    except (HarveyError, OSError) as exc:
        abort(400, description=str(exc))
    if request.headers.get("HX-Request") == "true":
        return _turn_html(job)
    return redirect(url_for("chat.page", name=name) + f"#turn-{job.turn}", code=303)


@bp.get("/s/<name>/turns/<int:turn>/records")
def records_table(name: str, turn: int):
    """A list answer's records as a table (issue 40): sorted by a column, with a figure computed over them
    (count, sum, average, smallest, largest; per unit or per item) by SQLite, with no model call."""
    analysis = _recorded_analysis(name, turn)
    rows = records.rows_of(notes.read_computed(analysis.computed).items)
    sort, descending = request.args.get("sort", "n"), request.args.get("desc") == "1"
    op, by = request.args.get("op", ""), request.args.get("by", "unit")
    figures = records.aggregate(rows, op, by) if op in records.OPS else []
    return render_template("analysis/_records.html", rows=records.sorted_rows(rows, sort, descending), sort=sort,
                           descending=descending, op=op, by=by, figures=figures, said=records.said,
                           amount=answers.amount_text, session=name, turn=turn, analysis=analysis,
                           passage_url=lambda chunk: url_for("analysis.passage", name=name, turn=turn, chunk=chunk)
                           if chunk in analysis.passages else "")


@bp.get("/s/<name>/turns/<int:turn>/records.csv")
def records_csv(name: str, turn: int):
    """The records as CSV, to open in a spreadsheet."""
    analysis = _recorded_analysis(name, turn)
    rows = records.rows_of(notes.read_computed(analysis.computed).items)
    stem = analysis.file.rsplit("/", 1)[-1].rsplit(".", 1)[0] or "records"
    return Response(records.csv_text(rows), mimetype="text/csv",
                    headers={"Content-Disposition": f'attachment; filename="{stem}-records.csv"'})


def _recorded_analysis(name: str, turn: int) -> fountain.ChunkAnalysis:
    """The analysis recorded in turn ``turn`` of session ``name`` (404 when there is none)."""
    try:
        turns = services().store.load(name).turns
    except SessionNotFound:
        abort(404)
    if not 0 <= turn < len(turns) or turns[turn].analysis is None:
        abort(404, description="That turn holds no analysis.")
    return turns[turn].analysis


def whole_read_text(chunks, calls, minutes) -> str:
    """The Self-Route offer's cost, as the card gives it: "41 chunks, 43 model calls, about 12 min"."""
    parts = [f"{chunks} chunk{'s' if chunks != 1 else ''}"] if chunks else []
    parts += [f"{calls} model call{'s' if calls != 1 else ''}"] if calls else []
    parts += [f"about {_minutes(minutes * 60)} min" if minutes else "time unknown until the model has answered once"]
    return ", ".join(parts)


@bp.post("/s/<name>/turns/<int:turn>/read-whole")
def read_whole(name: str, turn: int):
    """Self-Route's one tap (issue 32): a passages answer said the passages do not hold the answer; read
    the whole file for the same instruction. Its answer replaces the passages answer as the turn's reply
    (which the new scene keeps)."""
    return _read_again(name, turn, services().jobs.read_whole)


def _where(p: fountain.CitedPassage) -> str:
    """A passage's place for a reader: a PDF's pages, else its lines."""
    if p.pages:
        return f"page {p.pages[0]}" if p.pages[0] == p.pages[1] else f"pages {p.pages[0]}–{p.pages[1]}"
    return f"lines {p.lines[0]}–{p.lines[1]}"


def past_instructions(job: Job) -> list[library.Suggestion]:
    """The user's earlier chunk instructions for the card's file, best first (the prompt library).

    Read from the session index, which re-parses only the files that changed: a card
    costs one directory scan, not a read of every session. No list (rather than no card)
    when the folder cannot be read.
    """
    try:
        mined = services().store.index().instructions()
    except OSError:
        return []
    return library.suggest(mined, job.file, job.instruction)
