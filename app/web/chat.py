"""The chat page: send a message, follow the reply as it streams, stop it, compact.

Thin: each view reads the request, calls a use case (``turns``) with explicit
arguments and renders what it did (``fragments``).  Replies arrive over
server-sent events from the activity's event log, so a second tab or a reload
follows the same reply instead of asking again.
"""

from __future__ import annotations

import logging

from flask import Blueprint, Response, abort, redirect, render_template, request, stream_with_context, url_for
from markupsafe import escape

from ..errors import Busy, Conflict, HarveyError
from ..events import RECONNECT_MS, Event, gate_for, sse_format, sse_retry
from ..render import stream_snapshot
from .context import services
from ..sessions.names import title_from_message
from ..sessions.store import Session, SessionNotFound
from ..storage import why_unwritten
from ..chat import turns
from .fragments import busy_kind, fragment, page_context, recent, turn_fragment, turn_view, views_of
from ..chat.status import match_model, recorded_model, session_model
from ..workspace import Workspace

log = logging.getLogger(__name__)
bp = Blueprint("chat", __name__)

PAGE_TURNS = 40          # turns the page shows at first; older ones load on demand


def _load(name: str) -> Session:
    try:
        return services().store.load(name)
    except SessionNotFound:
        abort(404, description="There is no such session.")


# -- the page --------------------------------------------------------------------------

@bp.get("/")
def index():
    """The most recent session, or a new one."""
    store = services().store
    names = store.names()
    name = names[0] if names else store.create(services().config.model_server.model).name
    return redirect(url_for("chat.page", name=name))


@bp.post("/new")
def new_session():
    session = services().store.create(services().config.model_server.model)
    return redirect(url_for("chat.page", name=session.name), code=303)


@bp.get("/demo-model")
def demo_model():
    """What the bundled demo model is and how to get real answers (README "The bundled demo model")."""
    return render_template("chat/demo_model.html", model=services().config.model_server.model)


@bp.get("/s/<name>")
def page(name: str):
    session = _load(name)
    ctx = page_context(session, draft=request.args.get("draft", ""))
    recorded = recorded_model(session)
    if recorded and ctx["models"] and match_model(recorded, ctx["models"]) not in ctx["models"]:
        ctx["status"]["problem"] = (f"This session's model {recorded} is not installed here; continuing with "
                                    f"{ctx['model']}. Installed: {', '.join(ctx['models'])}.")
    start = max(0, len(session.turns) - PAGE_TURNS)
    example = example_file() if not session.turns else None
    return render_template("chat/page.html", turns=views_of(session, ctx["model"], start), earlier=start,
                           recent=recent(), example=example, **ctx)


EXAMPLE_SUFFIXES = (".md", ".txt", ".py", ".csv", ".html", ".pdf", ".docx", ".json", ".log")


def example_file() -> str:
    """A file the empty page's hint can name (issue 45: it named notes.md in a workspace without one): a
    text-like file at the workspace's top if there is one, else any; "" when the workspace is empty.  From
    the workspace's kept name index: no walk of a large folder for a hint."""
    paths = Workspace(services().config.workspace_path).names().paths
    top = [p for p in paths if "/" not in p]
    for group in (top, paths):
        for path in group:
            if path.lower().endswith(EXAMPLE_SUFFIXES) and len(path) <= 40:
                return path
    return next((p for p in paths if len(p) <= 40), "")


@bp.get("/s/<name>/turns")
def earlier(name: str):
    """The page of turns before ``before`` (the "earlier turns" button), newest page last."""
    session = _load(name)
    before = request.args.get("before", type=int)
    if before is None or not 0 < before <= len(session.turns):
        abort(400, description="There are no earlier turns there.")
    start = max(0, before - PAGE_TURNS)
    model = session_model(services().sizing, session)
    return render_template("chat/_earlier.html", turns=views_of(session, model, start, before), earlier=start,
                           session=session, user_cue=services().config.user_name.upper())


@bp.post("/s/<name>/title")
def rename(name: str):
    _load(name)
    session = services().store.rename(name, request.form.get("title", ""))
    return render_template("chat/_title.html", session=session)


# -- sending -------------------------------------------------------------------------

def _busy_card(name: str, exc: Busy):
    """A message refused because the session is busy: say so, and offer to show what runs."""
    log.info("refused (busy, 409): %s", exc)
    kind = getattr(exc, "holding", "") or busy_kind(services(), name)
    # the link to what runs carries the typed message into the page's box (issue 45: it was lost on the reload)
    draft = (request.form.get("message") or "")[:4000]
    return render_template("chat/_busy.html", message=str(exc), name=name, kind=kind, draft=draft), 409


def _unwritten(name: str, exc: OSError) -> Response:
    """A message, re-send, regenerate or continue the disk could not take (issue 43): said in the composer's
    note (the typed message stays in the box), never a bare 500; nothing was sent to the model."""
    why = why_unwritten(exc)
    log.error("a change of %s could not be saved: %s", name, why)
    note = (f'<p id="composer-note" class="attach-status error" role="alert">Not sent: {escape(why)}, so the '
            'message could not be saved. It is still in the box: make room (or fix the disk), then send it '
            'again.</p>')
    return Response(note, status=507, headers={"HX-Retarget": "#composer-note", "HX-Reswap": "outerHTML"})


def _render(outcome: turns.Outcome) -> str:
    """The turn a use case wrote, as the page shows it now."""
    view = turn_view(outcome.index, outcome.turn, outcome.model, api=services().config.model_server.api)
    if outcome.reply is not None:
        view.streaming, view.reply_html, view.activity = True, None, outcome.reply.id
    if outcome.job is not None:
        view.alert, view.harvey_text = outcome.job, ""
    return fragment(outcome.session, view, outcome.model)


@bp.post("/s/<name>/messages")
def send(name: str):
    """Record the message and start its reply (or answer with a card), as one change of the session."""
    svc = services()
    _load(name)
    text = request.form.get("message", "")
    if not text.strip():                          # said, not dropped in silence (issue 33)
        note = ('<p id="composer-note" class="attach-status error" role="status">The message is empty (only '
                'spaces or new lines): nothing was sent. Type something to send.</p>')
        return Response(note, headers={"HX-Retarget": "#composer-note", "HX-Reswap": "outerHTML"})
    if len(text.encode("utf-8", "surrogatepass")) > svc.config.server.max_message_kb * 1024:
        abort(413, description=f"The message is larger than {svc.config.server.max_message_kb} KB.")
    try:
        outcome = turns.send(svc, name, text, request.form.get("model") or None,
                             edit_of=request.form.get("retry_of", type=int), allow_missing=_missing_ok())
    except Busy as exc:
        return _busy_card(name, exc)
    except OSError as exc:
        return _unwritten(name, exc)
    if outcome.declined:
        return Response(turn_fragment(name, outcome.index),
                        headers={"HX-Retarget": f"#turn-{outcome.index}", "HX-Reswap": "outerHTML"})
    html = _render(outcome)
    if outcome.renamed:                           # named by its first message: the header shows it
        html += render_template("chat/_title.html", session=outcome.session, oob=True)
    return html


def _missing_ok() -> bool:
    """The missing-file card's "Send without it": the model is told the file is not there."""
    return request.form.get("missing_ok") == "1"


@bp.post("/s/<name>/turns/<int:turn>/resend")
def resend(name: str, turn: int):
    """Re-send a failed or interrupted message: that turn (the last one) is replaced by the new attempt.

    When it is no longer the last turn, or did not fail, the message is sent as a new turn
    instead (nothing is rewritten in the middle of a session).
    """
    _load(name)
    try:
        outcome = turns.resend(services(), name, turn, request.form.get("model") or None,
                               text=request.form.get("message") or None, allow_missing=_missing_ok())
    except Busy as exc:
        return _busy_card(name, exc)
    except OSError as exc:
        return _unwritten(name, exc)
    if outcome is None:
        return send(name)
    return Response(_render(outcome), headers={"HX-Retarget": f"#turn-{turn}", "HX-Reswap": "outerHTML"})


@bp.post("/s/<name>/turns/<int:turn>/regenerate")
def regenerate(name: str, turn: int):
    """Ask the last message again (with the model picked now): a new turn that replaces it in the history.
    ``files=0``: without the files its words name; ``list=0``: in the chat, not as a list question (issue 45)."""
    _load(name)
    try:
        return _render(turns.regenerate(services(), name, turn, request.form.get("model") or None,
                                        read_files=request.form.get("files") != "0",
                                        as_list=request.form.get("list") != "0"))
    except Busy as exc:
        return _busy_card(name, exc)
    except Conflict as exc:
        abort(409, description=str(exc))
    except OSError as exc:
        return _unwritten(name, exc)


@bp.post("/s/<name>/turns/<int:turn>/continue")
def continue_reply(name: str, turn: int):
    """Ask for the rest of the last reply, cut at its cap; it streams into the same turn.  A refusal
    (busy, not the last turn, no room left in the window) is said below the conversation: the turn
    the button targets stays as it is."""
    _load(name)
    below = {"HX-Retarget": "#conversation", "HX-Reswap": "beforeend"}
    try:
        outcome = turns.continue_reply(services(), name, turn)
    except Busy as exc:
        html, status = _busy_card(name, exc)
        return Response(html, status=status, headers=below)
    except HarveyError as exc:
        log.info("continue in %s refused (%s): %s", name, exc.kind, exc)
        return Response(f'<p class="flash error" role="alert">{escape(str(exc))}</p>', status=409, headers=below)
    return _render(outcome)


@bp.post("/s/<name>/compact")
def compact(name: str):
    """Summarise the older turns into one note, in the background; the page follows it like a reply."""
    session = _load(name)
    try:
        gen = turns.compact(services(), name, request.form.get("model") or None)
    except Busy as exc:
        return _busy_card(name, exc)
    except HarveyError as exc:
        abort(502, description=f"The summary could not be made: {exc}")
    if gen is None:
        return Response("", status=204)
    return render_template("chat/_compacting.html", gen=gen, session=session)


@bp.post("/s/<name>/stop")
def stop(name: str):
    """Stop the reply or compact the page names (``activity``); a stale page's Stop stops nothing."""
    _load(name)                       # an unknown session is a 404, not a silent 204
    activity = request.form.get("activity", "")
    if not turns.stop(services(), name, activity):
        log.info("stop in %s for %r: not the work running now; nothing stopped", name, activity)
    return Response("", status=204)


@bp.get("/s/<name>/turns/<int:turn>/stream")
def stream(name: str, turn: int):
    """SSE: the reply so far, then each new piece, then the final turn.

    A reconnect that sends the Last-Event-ID of this reply gets only the pieces
    after that id; any other connect gets one snapshot of the reply so far, rebuilt
    from the events (the blocks' HTML joined, the unfinished rest) and swapped in
    whole. The ids carry the activity's id, unique across restarts, so an id from
    before a restart is never taken for a new reply's.  The stream
    ends itself after the gate's lifetime and the browser comes back with its
    Last-Event-ID; over the gate's cap it is told to come back later.
    """
    _load(name)
    svc = services()
    gen = svc.activities.last(name)
    if gen is None or gen.kind not in ("reply", "compact") or gen.turn != turn or gen.events.closed:
        # Nothing to follow: the turn as stored (quick, so it needs no stream slot).
        return _sse_response(sse_format(Event(0, "final", _final(name, turn, gen)))
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
                body = stream_snapshot(((e.name, e.data) for e in past), f"reply-md-{turn}", f"reply-text-{turn}")
                yield sse_format(Event(len(past), "snapshot", str(body)), gen.key + "-")
                position = len(past)
            for event in slot.follow(gen.events, position):
                if event is None or event.name != "final":
                    yield sse_format(event, gen.key + "-")
            if gen.events.closed:    # recorded: the turn as stored, then the page closes the stream
                yield sse_format(Event(gen.events.last_id, "final", _final(name, turn, gen)), gen.key + "-")
                yield sse_format(Event(gen.events.last_id, "close", ""), gen.key + "-")
            # else: lifetime up or shutting down; the browser reconnects with its Last-Event-ID
        finally:
            slot.release()

    response = _sse_response(stream_with_context(events()))
    response.call_on_close(slot.release)
    return response


@bp.get("/s/<name>/watch")
def watch(name: str):
    """SSE: the turns another device (or tab) adds to this session, each as the page shows it (issue 45: a
    second tab showed the first tab's new turn only once reloaded).

    The page connects with ``have``, the turns it shows, and ``last``, its last turn's key
    (``Turn.key``); each event's id is that key and number after it ("9f2c….3"), so a reconnect (lifetime up, a
    phone that slept) sends Last-Event-ID and gets only what it missed, from the session file itself
    (nothing kept in memory but a number a session: the store's ``turns_changed``).  A failed message
    sent again takes its turn's place (``resend``): the page's last turn then has another key, and that
    turn is sent again.  The first turn's event also carries the session's name when that message named
    it (the sending page's own answer, which brings it too, may come in after the watch's copy and is then
    dropped).  A page skips a turn it shows already and swaps one that another took the place of
    (static/harvey.js).  A watch holds a thread only within the gate's ``watch_limit``, half the streams:
    replies come first.
    """
    _load(name)
    svc = services()
    last, _, have = (request.headers.get("Last-Event-ID", "").strip()
                     or f"{request.args.get('last', '')}.{request.args.get('have', '')}").rpartition(".")
    if not have.isdigit():
        abort(400, description="The watch needs the number of turns the page shows.")
    gate = gate_for(svc)
    slot = gate.enter(watch=True)
    if slot is None:
        return _sse_response(gate.busy_body())
    bell = svc.store.turns_changed

    def events():
        shown, key = int(have), last
        try:
            yield sse_retry(RECONNECT_MS)
            for rung in slot.listen(bell, name, -1):
                if rung is None:
                    yield sse_format(None)
                    continue
                try:
                    session = svc.store.load(name)
                except SessionNotFound:
                    return                          # deleted on another device: nothing more to show
                turns = session.turns
                start = min(shown, len(turns))
                if start and start == shown and key and turns[start - 1].key != key:
                    start -= 1                      # the page's last turn: another message took its place
                for index in range(start, len(turns)):
                    html = turn_fragment(name, index)
                    if index == 0 and session.title == title_from_message(turns[0].user_text):
                        html += render_template("chat/_title.html", session=session, oob=True)   # named by it
                    yield sse_format(Event(index + 1, "turn", html), f"{turns[index].key}.")
                shown, key = len(turns), turns[-1].key if turns else ""
        finally:
            slot.release()

    response = _sse_response(stream_with_context(events()))
    response.call_on_close(slot.release)
    return response


def _final(name: str, turn: int, gen) -> str:
    """The turn as stored; for a compact that wrote nothing (stopped, failed), what happened."""
    if gen is not None and gen.kind == "compact" and gen.turn == turn and gen.status != "done":
        return render_template("chat/_compacting.html", gen=gen, session=_load(name), ended=True)
    return turn_fragment(name, turn)


def _resume_after(gen, last_event_id: str) -> int | None:
    """The position a reconnecting client of ``gen`` has reached (None: it has nothing of it)."""
    key, _, number = last_event_id.strip().rpartition("-")
    if key != gen.key or not number.isdigit():
        return None
    return min(int(number), gen.events.last_id)


def _sse_response(body) -> Response:
    return Response(body, mimetype="text/event-stream",
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
