"""The chunked-analysis pages: the card's buttons and its progress stream (SSE)."""

from __future__ import annotations

import time

from flask import Blueprint, Response, abort, redirect, request, stream_with_context, url_for

from .. import chunking
from ..events import RECONNECT_MS, Event, gate_for, last_event_id, sse_format, sse_retry
from ..ollama import OllamaError
from ..services import services
from ..sessions import fountain
from ..sessions.store import SessionNotFound
from ..chat import prepare as conversation
from .runner import ACTIVE, Job, JobError

bp = Blueprint("analysis", __name__)


# -- views ---------------------------------------------------------------------------------

def _job(name: str, job_id: str) -> Job:
    try:
        job = services().jobs.get(job_id)
    except KeyError:
        abort(404, description="There is no such analysis.")
    if job.session != name:
        abort(404, description="There is no such analysis.")
    return job


def _turn_html(job: Job) -> str:
    from ..chat.views import turn_fragment

    return turn_fragment(job.session, job.turn)


@bp.post("/s/<name>/analysis/<job_id>/start")
def start(name: str, job_id: str):
    """Start with the user's instruction, or decline on "no"."""
    job = _job(name, job_id)
    runner = services().jobs
    instruction = request.form.get("instruction", "")
    if job.state not in ("proposed", "interrupted"):
        return _turn_html(job)
    if instruction.strip().lower() == "no":
        runner.decline(job)
        return _turn_html(job)
    try:
        runner.start(job, instruction, request.form.get("scope", ""))
    except (JobError, OllamaError) as exc:
        job.message = str(exc)
        job.instruction = instruction
    return _turn_html(job)


@bp.post("/s/<name>/analysis/<job_id>/decline")
def decline(name: str, job_id: str):
    job = _job(name, job_id)
    if job.state == "proposed":
        services().jobs.decline(job)
    return _turn_html(job)


@bp.post("/s/<name>/analysis/<job_id>/cancel")
def cancel(name: str, job_id: str):
    services().jobs.cancel(_job(name, job_id))
    return Response("", status=204)


@bp.post("/s/<name>/analysis/<job_id>/after-cancel")
def after_cancel(name: str, job_id: str):
    job = _job(name, job_id)
    if job.state == "choose":
        services().jobs.after_cancel(job, keep=request.form.get("keep") == "yes")
    return _turn_html(job)


@bp.post("/s/<name>/analysis/<job_id>/resume")
def resume(name: str, job_id: str):
    job = _job(name, job_id)
    if job.state == "interrupted":
        try:
            services().jobs.resume(job)
        except (JobError, chunking.ChunkingError, OSError) as exc:
            job.message = str(exc)
    return _turn_html(job)


@bp.get("/s/<name>/analysis/<job_id>/events")
def events(name: str, job_id: str):
    """SSE: progress and partial answers, replayed after Last-Event-ID, then the new card.

    An unknown job (a stale page after a restart) gets a stream that just closes:
    a 404 would make the browser's EventSource retry for ever. The stream ends
    itself after the gate's lifetime (the browser reconnects with Last-Event-ID
    and the replay goes on from there); over the gate's cap it is told to come
    back later. The analysis runs on in its worker whoever watches.
    """
    job = services().jobs.jobs.get(job_id)
    if job is None or job.session != name:
        return _sse(sse_format(Event(0, "close", "")))
    log_ = services().jobs.log_for(job)
    after = last_event_id(request.headers, request.args)
    if (job.state not in ACTIVE and not log_.closed) or after > log_.last_id:
        # Nothing running to follow, or an id from another run of the log (the server restarted):
        # the card as it is now, which opens its own stream if the job runs.
        return _sse(sse_format(Event(log_.last_id, "state", _turn_html(job)))
                    + sse_format(Event(log_.last_id, "close", "")))
    gate = gate_for(services())
    slot = gate.enter()
    if slot is None:
        return _sse(gate.busy_body())

    def stream():
        try:
            yield sse_retry(RECONNECT_MS)
            for event in slot.follow(log_, after):
                if event is not None and event.name == "state":
                    yield sse_format(Event(event.id, "state", _turn_html(job)))
                    yield sse_format(Event(event.id, "close", ""))
                    return
                yield sse_format(event)
            if log_.closed:
                yield sse_format(Event(log_.last_id, "close", ""))
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
    svc = services()
    try:
        session = svc.store.load(name)
    except SessionNotFound:
        abort(404, description="There is no such session.")
    if svc.jobs.busy(name) or svc.replies.running(name):
        abort(409, description="This session is busy; wait for the reply or analysis to finish.")
    file = request.form.get("file", "")
    from ..chat.views import session_model
    from ..workspace import WorkspaceError

    from ..chat.views import status_for

    model = session_model(session)
    turn = fountain.Turn(when=conversation.now(), user_text=f"/read-chunks {file}", model=model)
    with svc.store.lock(name):
        session = svc.store.load(name)
        try:
            remaining = status_for(session, model)["remaining"] or 0
            job = svc.jobs.propose(name, len(session.turns), file, "", model, remaining=remaining,
                                   turn_text=turn.user_text)
        except (WorkspaceError, chunking.ChunkingError, OllamaError) as exc:
            abort(400, description=str(exc))
        turn.harvey = f"Chunk analysis of {job.file}: about {job.file_tokens:,} tokens in {job.chunks} chunks."
        svc.store.append_turn(name, turn)
    return redirect(url_for("chat.page", name=name) + f"#turn-{job.turn}", code=303)


@bp.app_context_processor
def _card_context() -> dict:
    """What the analysis card needs in any page that shows one."""
    runner = services().jobs
    return {"config_chunking": services().config.chunking, "now_ts": time.time,
            "job_log_id": lambda job: runner.log_for(job).last_id}
