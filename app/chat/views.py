"""The chat page: send a message, follow the reply as it streams, stop it.

The server answers with HTML fragments (htmx); replies arrive over
server-sent events from the generation's event log, so a second tab or a reload
follows the same reply instead of asking again.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from flask import (Blueprint, Response, abort, redirect, render_template, request,
                   stream_with_context, url_for)
from markupsafe import Markup, escape

from ..analysis.job import SETTLED
from ..analysis.views import citation_links
from ..budget import fit_history, new_budget
from ..errors import Busy, HarveyError
from ..events import RECONNECT_MS, Event, gate_for, sse_format, sse_retry
from ..ollama import OllamaError
from ..render import markdown, stable_end, streaming
from ..services import services
from ..sessions import fountain, names, notes
from ..sessions.store import Session, SessionNotFound
from . import prepare
from .prepare import TurnRefused

log = logging.getLogger(__name__)
bp = Blueprint("chat", __name__)


# -- views of turns ------------------------------------------------------------------

@dataclass
class TurnView:
    """What the turn partial needs to show one turn."""

    index: int
    user_text: str
    model_name: str = ""
    model: str = ""
    reply_html: Markup | None = None
    harvey_text: str = ""
    stats: str = ""
    stopped: bool = False
    error: dict | None = None
    partial_kept: bool = False
    notices: list[str] = field(default_factory=list)
    streaming: bool = False
    alert: object = None
    analysis: object = None
    offers: list[str] = field(default_factory=list)
    interrupted: str = ""       # why the reply was cut off (shutdown or crash): show what was saved + Re-send
    partials: list = field(default_factory=list)    # a finished analysis's partial answers (this run only)
    files: list = field(default_factory=list)       # (name, tokens) the message included
    partials_job: object = None


def turn_view(index: int, turn: fountain.Turn, default_model: str, installed: list[str] = (),
              session: str = "") -> TurnView:
    """Read a recorded turn's notes back into what the page shows.

    With the ``session`` name, an analysis answer's citations link to their passages.
    """
    model_name = prepare.match_model(turn.model, list(installed)) or default_model
    view = TurnView(index, turn.user_text, model_name=model_name, model=fountain.model_cue(model_name),
                    stats=turn.stats or "", harvey_text=answered_alert(turn.harvey or ""), analysis=turn.analysis)
    if turn.reply is not None:
        view.reply_html = markdown(turn.reply, cite=citation_links(session, index, turn.analysis))
    read = notes.read(turn.notes)
    view.stopped, view.notices, view.offers, view.files = read.stopped, read.notices, read.offers, read.files
    if read.error:
        view.error = prepare.error_view(*read.error)
        view.partial_kept = bool(turn.reply)
    view.interrupted = read.interrupted or (_NEVER_FINISHED if _never_finished(turn, read) else "")
    return view


_NEVER_FINISHED = "the server stopped before the reply was finished"


def _never_finished(turn: fountain.Turn, read: notes.Read) -> bool:
    """A message recorded before this server started, with no reply and no note: a crash cut it off.

    (A turn recorded since then with no reply yet is still being prepared or answered.)
    """
    if not turn.user_text or turn.reply is not None or turn.harvey or turn.analysis is not None:
        return False
    if read.error or read.stopped or read.declined or read.compacted is not None or turn.when is None:
        return False
    try:
        return turn.when < services().replies.started_at
    except (TypeError, RuntimeError):      # an aware timestamp from an import; no app context
        return False
_ALERT_PROMPT = re.compile(r"\s*Enter instructions to process each chunk.*\Z", re.S)


def answered_alert(harvey: str) -> str:
    """HARVEY's overflow alert without its question: shown only once the card is answered."""
    return _ALERT_PROMPT.sub("", harvey)


PAGE_TURNS = 40          # turns the page shows at first; older ones load on demand



def _views(session: Session, default_model: str, start: int = 0, stop: int | None = None) -> list[TurnView]:
    """Views of turns ``start`` to ``stop`` only: nothing else is rendered (a long session stays cheap)."""
    svc = services()
    installed, _ = _models()
    turns = session.turns
    stop = len(turns) if stop is None else min(stop, len(turns))
    views = [turn_view(i, turns[i], default_model, installed, session.name) for i in range(max(0, start), stop)]
    by_index = {view.index: view for view in views}
    running = svc.replies.running(session.name)
    if running and running.turn in by_index:
        by_index[running.turn].streaming = True
        by_index[running.turn].reply_html = None
    jobs = [*svc.jobs.for_session(session.name), *svc.jobs.settled_for(session.name)] if svc.jobs else []
    for job in jobs:
        view = by_index.get(job.turn)
        if view is not None and job.state not in SETTLED:
            view.alert, view.harvey_text = job, ""
        elif view is not None and view.analysis is not None and job.results:
            view.partials_job = job          # the partial answers stay openable after the job
            view.partials = svc.jobs.results(job)     # (a snapshot under the runner's lock)
    return views


# -- the page --------------------------------------------------------------------------

def _load(name: str) -> Session:
    try:
        return services().store.load(name)
    except SessionNotFound:
        abort(404, description="There is no such session.")


def session_model(session: Session, installed: list[str] | None = None) -> str:
    """The model of the session's last turn, else the configured default.

    A recorded model that is not installed here (a cloud model of the terminal
    Harvey, say) gives way to the configured default, or the first installed model.
    """
    default = services().config.ollama.model
    recorded = recorded_model(session)
    if recorded is None:
        return default
    if installed is None:
        installed, _ = _models()
    model = prepare.match_model(recorded, installed)
    if installed and model not in installed:
        return default if default in installed else installed[0]
    return model


def recorded_model(session: Session) -> str | None:
    """The model the session's last turn names, as recorded."""
    return next((turn.model for turn in reversed(session.turns) if turn.model), None)


def status_for(session: Session, model: str) -> dict:
    """The status line: model, window, tokens free for the next message."""
    svc = services()
    status = {"model": model, "window": None, "remaining": None, "low": False, "problem": "",
              "components": {}, "effective": None, "bytes_per_token": svc.calibration.bytes_per_token(model),
              "samples": svc.calibration.samples(model)}
    try:
        facts = svc.client.show(model)
    except OllamaError as exc:
        status["problem"] = str(exc)
        return status
    budget = new_budget(svc.config, model, facts.context_length, status["bytes_per_token"])
    fit_history(budget, prepare.system_prompt(svc.config, svc.config.workspace_path),
                prepare.history_turns(session.turns))
    status.update(window=budget.window, effective=budget.effective, remaining=budget.remaining,
                  low=budget.low, components=dict(budget.components))
    return status


def _models() -> tuple[list[str], str]:
    try:
        return services().client.list_models(), ""
    except OllamaError as exc:
        return [], str(exc)


def _recent(limit: int = 8) -> list[dict]:
    """The newest sessions from the list's index (no session file is parsed for this)."""
    try:
        entries = services().store.index().entries()[:limit]
    except OSError:
        return []
    return [{"name": e.name, "title": e.title, "when": e.date, "preview": e.preview} for e in entries]


def _context(session: Session, **extra) -> dict:
    svc = services()
    models, problem = _models()
    model = extra.pop("model", None) or session_model(session, models)
    status = status_for(session, model)
    if problem and not status["problem"]:
        status["problem"] = problem          # the model's facts are cached; Ollama being down is not
    return {"session": session, "user_cue": svc.config.user_name.upper(), "models": models, "model": model,
            "busy": _busy(svc, session.name, bool(svc.replies.running(session.name))),
            "max_message_chars": svc.config.server.max_message_kb * 1024,
            "status": status, **extra}


@bp.get("/")
def index():
    """The most recent session, or a new one."""
    store = services().store
    names = store.names()
    name = names[0] if names else store.create(services().config.ollama.model).name
    return redirect(url_for("chat.page", name=name))


@bp.post("/new")
def new_session():
    session = services().store.create(services().config.ollama.model)
    return redirect(url_for("chat.page", name=session.name), code=303)


@bp.get("/s/<name>")
def page(name: str):
    session = _load(name)
    ctx = _context(session, draft=request.args.get("draft", ""))
    recorded = recorded_model(session)
    if recorded and ctx["models"] and prepare.match_model(recorded, ctx["models"]) not in ctx["models"]:
        ctx["status"]["problem"] = (f"This session's model {recorded} is not installed here; continuing with "
                                    f"{ctx['model']}. Installed: {', '.join(ctx['models'])}.")
    start = max(0, len(session.turns) - PAGE_TURNS)
    return render_template("chat/page.html", turns=_views(session, ctx["model"], start), earlier=start,
                           recent=_recent(), **ctx)


@bp.get("/s/<name>/turns")
def earlier(name: str):
    """The page of turns before ``before`` (the "earlier turns" button), newest page last."""
    session = _load(name)
    before = request.args.get("before", type=int)
    if before is None or not 0 < before <= len(session.turns):
        abort(400, description="There are no earlier turns there.")
    start = max(0, before - PAGE_TURNS)
    model = session_model(session)
    return render_template("chat/_earlier.html", turns=_views(session, model, start, before), earlier=start,
                           session=session, user_cue=services().config.user_name.upper())


def _title_from_first(svc, session: Session, text: str) -> Session:
    """A new session is named after its first message (no model call), unless renamed already."""
    if session.turns or session.title != names.DEFAULT_TITLE:
        return session
    title = names.title_from_message(text)
    return svc.store.rename(session.name, title) if title else session


@bp.post("/s/<name>/title")
def rename(name: str):
    _load(name)
    session = services().store.rename(name, request.form.get("title", ""))
    return render_template("chat/_title.html", session=session)


# -- sending -------------------------------------------------------------------------

def _busy(svc, name: str, replying: bool) -> str:
    """Why Send is off: "reply" (one is streaming), "analysis" (a chunk analysis runs), or ""."""
    if replying:
        return "reply"
    return "analysis" if svc.jobs is not None and svc.jobs.busy(name) else ""


def _fragment(session: Session, view: TurnView, model: str) -> str:
    """The new turn, plus the send button and status line swapped out-of-band."""
    ctx = _context(session, model=model)
    html = render_template("chat/_turn.html", view=view, **ctx)
    html += render_template("chat/_send_button.html", busy=_busy(services(), session.name, view.streaming), oob=True)
    html += render_template("chat/_status.html", oob=True, **{k: v for k, v in ctx.items() if k != "session"},
                            session=session)
    return html


@bp.post("/s/<name>/messages")
def send(name: str):
    """Record the message and start its reply (or answer with a card), as one change of the session.

    The session's lock is held from the busy check to the reply's start, so two devices
    sending at once get one turn each in order, or a clear "busy" card: never a lost,
    doubled or unanswered message.  The turn is written once.
    """
    svc = services()
    _load(name)
    text = request.form.get("message", "")
    if not text.strip():
        return Response("", status=204)
    if len(text.encode("utf-8", "surrogatepass")) > svc.config.server.max_message_kb * 1024:
        abort(413, description=f"The message is larger than {svc.config.server.max_message_kb} KB.")
    with svc.store.lock(name):
        try:
            _refuse_if_busy(svc, name)
        except Busy as exc:         # e.g. the other device's reply: say so, and offer to show it
            log.info("refused (busy, 409): %s", exc)
            return render_template("chat/_busy.html", message=str(exc), name=name,
                                   kind=_busy(svc, name, bool(svc.replies.running(name)))), 409
        untitled = svc.store.load(name)
        session = _title_from_first(svc, untitled, text)
        pending = svc.jobs.open_for(name)
        if pending and pending.state == "proposed":
            svc.jobs.decline(pending)          # a new message answers the card: "no" and carry on
            if text.strip().lower() == "no":
                return Response(turn_fragment(name, pending.turn),
                                headers={"HX-Retarget": f"#turn-{pending.turn}", "HX-Reswap": "outerHTML"})
            session = svc.store.load(name)
        html = _send_locked(svc, session, text, _edit_of(session, request.form.get("retry_of", type=int)))
    if session.title != untitled.title:             # named by its first message: the header shows it
        html += render_template("chat/_title.html", session=session, oob=True)
    return html


@bp.post("/s/<name>/turns/<int:turn>/resend")
def resend(name: str, turn: int):
    """Re-send a failed or interrupted message: that turn (the last one) is replaced by the new attempt.

    The answer swaps that turn out; when it is no longer the last turn, or did not fail, the
    message is sent as a new turn instead (nothing is rewritten in the middle of a session).
    """
    svc = services()
    _load(name)
    with svc.store.lock(name):
        _refuse_if_busy(svc, name)
        session = svc.store.load(name)
        failed = session.turns[turn] if 0 <= turn < len(session.turns) else None
        read = notes.read(failed.notes) if failed is not None else None
        unanswered = failed is not None and (read.error or read.interrupted or failed.reply is None)
        if failed is None or turn != len(session.turns) - 1 or not unanswered or failed.harvey:
            return send(name)
        svc.store.drop_last_turn(name, turn, expect=failed.user_text)
        session = svc.store.load(name)
        html = _send_locked(svc, session, failed.user_text)
    return Response(html, headers={"HX-Retarget": f"#turn-{turn}", "HX-Reswap": "outerHTML"})


def _edit_of(session: Session, index: int | None) -> str | None:
    """The retry note when the message edits the last turn (the Edit button), else None."""
    if index is None or index != len(session.turns) - 1 or not session.turns[index].user_text:
        return None
    return notes.retry(edited=True)


@bp.post("/s/<name>/turns/<int:turn>/regenerate")
def regenerate(name: str, turn: int):
    """Ask the last message again (with the model picked now): a new turn that replaces it in the history."""
    svc = services()
    _load(name)
    with svc.store.lock(name):
        _refuse_if_busy(svc, name)
        session = svc.store.load(name)
        if turn != len(session.turns) - 1 or not session.turns[turn].user_text:
            abort(409, description="Only the last reply can be regenerated; this one is no longer the last.")
        return _send_locked(svc, session, session.turns[turn].user_text, notes.retry(edited=False))


def _refuse_if_busy(svc, name: str) -> None:
    """A reply streaming or an analysis running: the message is refused, nothing is written."""
    if svc.replies.running(name):
        raise Busy("A reply is still being generated in this session (maybe on another device); "
                   "wait for it or stop it, then send again. Your message is still in the box.")
    if svc.jobs.busy(name):
        raise Busy("A chunk analysis is running in this session; its answer will be the reply to the message "
                   "that asked. Wait for it or cancel it, then send again. Your message is still in the box.")


def _send_locked(svc, session: Session, text: str, retry_note: str | None = None):
    """Under the session's lock: route, budget, then record the turn once and start its reply.

    ``retry_note``: the turn asks the last one again; its history leaves that turn out."""
    name = session.name
    model = request.form.get("model") or session_model(session)
    turn = fountain.Turn(when=prepare.now(), user_text=text, model=model, reply=None)
    # a retry: the history is read as it will be once this turn exists (its note takes the last turn out)
    past = [*session.turns, fountain.Turn(None, "", notes=[retry_note])] if retry_note else session.turns
    if retry_note:
        turn.notes.append(retry_note)
    index = len(session.turns)
    try:
        installed = svc.client.list_models()
        mentioned, rest = prepare.split_model_mention(text, installed)
        if mentioned and mentioned != model:
            turn.notes.append(notes.model_switch_note(mentioned, svc.store.backend, turn.when))
        turn.model = model = mentioned or model
        prepared = prepare.prepare(svc, past, rest, model)
    except (OllamaError, TurnRefused) as exc:
        return _refused(name, turn, exc)
    turn.notes.extend(notes.notice(n) for n in prepared.notices)
    if prepared.files:
        turn.notes.append(notes.included([(f.file.name, f.tokens) for f in prepared.files]))
    if prepared.skipped:
        turn.notes.append(notes.offer_chunks(prepared.skipped))
    if prepared.overflow:
        job = svc.jobs.overflow(name, index, turn, prepared)
        session, index = svc.store.append_turn(name, turn)
        view = turn_view(index, turn, model)
        view.alert, view.harvey_text = job, ""
        return _fragment(session, view, model)
    session, index = svc.store.append_turn(name, turn)
    _start_reply(svc, name, index, turn, prepared)
    view = turn_view(index, turn, model)
    view.streaming, view.reply_html = True, None
    return _fragment(session, view, model)


def _refused(name: str, turn: fountain.Turn, exc: Exception):
    """Record the message with an error note and show the error card."""
    svc = services()
    turn.notes.append(notes.error(exc.kind, str(exc)))
    session, index = svc.store.append_turn(name, turn)
    log.info("message in %s not sent: %s", name, exc.kind)
    view = turn_view(index, turn, turn.model)
    view.error = prepare.error_view(exc.kind, str(exc))
    return _fragment(session, view, turn.model)


def _start_reply(svc, name: str, index: int, turn: fountain.Turn, prepared) -> None:
    """Generate in the background; write the reply into turn ``index`` when it ends."""
    def open_stream():
        # The reply may use its reservation and whatever the budget left free: never past the window.
        room = prepared.budget.components.get("reply", 0) + max(0, prepared.budget.remaining)
        return svc.client.chat(prepared.model, prepared.messages, num_ctx=prepared.budget.window,
                               options={"num_predict": room})

    rendered_to = [0]

    def on_piece(gen, piece):
        gen.events.append("piece", str(escape(piece)))
        if "\n" in piece:                  # Markdown as it streams: at each block that completes
            text = gen.text
            if (end := stable_end(text)) > rendered_to[0]:
                rendered_to[0] = end
                gen.events.append("rendered", str(streaming(text, f"reply-text-{index}")))

    def on_finish(gen):
        if gen.status == "interrupted":       # shutdown: what arrived, and a note that offers Re-send
            done_notes = [notes.interrupted(gen.interrupted or "the server stopped")]
        else:
            done_notes = prepare.reply_notes(gen.status, gen.error)
        if gen.final is not None:
            warning = svc.calibration.observe(prepared.model, prepared.messages, gen.final)
            if warning:
                done_notes.append(notes.notice(warning))
        done = prepare.finished_turn(turn, gen.text, gen.final, svc.store.backend, prepared.model, done_notes)
        try:
            svc.store.replace_turn(name, index, done, expect=turn.user_text)
        except HarveyError:
            log.exception("the reply of turn %d in %s could not be recorded", index + 1, name)

    svc.replies.start(name, index, prepared.model, open_stream, on_piece, on_finish)


@bp.post("/s/<name>/compact")
def compact(name: str):
    """Summarise the older turns into one note that later requests send instead."""
    svc = services()
    session = _load(name)
    if svc.replies.running(name) or svc.jobs.busy(name):
        abort(409, description="Wait for the reply or analysis to finish before compacting.")
    model = session_model(session)
    try:
        note = prepare.compact(svc, session.turns, model)
    except OllamaError as exc:
        abort(502, description=f"The summary could not be made: {exc}")
    if note is None:
        return Response("", status=204)
    session, index = svc.store.append_turn(name, note)
    return _fragment(session, turn_view(index, note, model), model)


@bp.post("/s/<name>/stop")
def stop(name: str):
    _load(name)                       # an unknown session is a 404, not a silent 204
    gen = services().replies.running(name)
    if gen:
        gen.stop()
    return Response("", status=204)


@bp.get("/s/<name>/turns/<int:turn>/stream")
def stream(name: str, turn: int):
    """SSE: the reply so far, then each new piece, then the final turn.

    A reconnect that sends the Last-Event-ID of this generation gets only the
    pieces after that id; any other connect gets one snapshot of the pieces so
    far (swapped in whole). The stream ends itself after the gate's lifetime and
    the browser comes back at once with its Last-Event-ID, so nothing is lost or
    repeated; over the gate's cap it is told to come back later. The reply goes
    on in its own thread whoever watches.
    """
    _load(name)
    svc = services()
    gen = svc.replies.current(name)
    if gen is None or gen.turn != turn or gen.events.closed:
        # Nothing to follow: the turn as stored (quick, so it needs no stream slot).
        return _sse_response(sse_format(Event(0, "final", turn_fragment(name, turn)))
                             + sse_format(Event(0, "close", "")))
    gate = gate_for(svc)
    slot = gate.enter()
    if slot is None:
        return _sse_response(gate.busy_body())
    after = _resume_after(gen, request.headers.get("Last-Event-ID", ""))

    def events():
        try:
            yield sse_retry(RECONNECT_MS)
            position = after
            if position is None:
                past = gen.events.snapshot()
                pieces = "".join(e.data for e in past if e.name == "piece")
                yield sse_format(Event(len(past), "snapshot", pieces), gen.key + "-")
                position = len(past)
            for event in slot.follow(gen.events, position):
                if event is None or event.name != "final":
                    yield sse_format(event, gen.key + "-")
            if gen.events.closed:    # recorded: the turn as stored, then the page closes the stream
                yield sse_format(Event(gen.events.last_id, "final", turn_fragment(name, turn)), gen.key + "-")
                yield sse_format(Event(gen.events.last_id, "close", ""), gen.key + "-")
            # else: lifetime up or shutting down; the browser reconnects with its Last-Event-ID
        finally:
            slot.release()

    response = _sse_response(stream_with_context(events()))
    response.call_on_close(slot.release)
    return response


def _resume_after(gen, last_event_id: str) -> int | None:
    """The position a reconnecting client of ``gen`` has reached (None: it has nothing of it)."""
    key, _, number = last_event_id.strip().rpartition("-")
    if key != gen.key or not number.isdigit():
        return None
    return min(int(number), gen.events.last_id)


def _sse_response(body) -> Response:
    return Response(body, mimetype="text/event-stream",
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def turn_fragment(name: str, index: int) -> str:
    """One turn as stored (only that turn is rendered), with the send button and status refreshed."""
    session = services().store.load(name)
    views = _views(session, session_model(session), index, index + 1)
    if not views:
        return ""
    return _fragment(session, views[0], views[0].model_name)
