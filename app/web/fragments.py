"""The HTML of turns: what the chat page, a streamed final event and an analysis card show.

Shared by the chat and analysis views (neither imports the other): a turn's
recorded notes are read back into a ``TurnView``, the session's activity and
open analyses are laid over it, and ``turn_fragment`` renders one turn with the
send button and status line refreshed out of band.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from flask import render_template, url_for
from markupsafe import Markup

from .. import filenames
from ..analysis.job import SETTLED
from ..errors import HarveyError, ModelError
from ..render import markdown
from .context import services
from .error_cards import error_view
from ..sessions import fountain, notes
from ..sessions.store import Session
from ..chat import prepare
from ..chat.status import chat_models, installed, match_model, session_model, status_for


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
    looped: bool = False        # the app stopped the reply: the model was repeating itself (issue 44)
    error: dict | None = None
    partial_kept: bool = False
    notices: list[str] = field(default_factory=list)
    streaming: bool = False
    activity: str = ""          # the id of the reply streaming into this turn (its Stop names it)
    alert: object = None
    analysis: object = None
    offers: list[str] = field(default_factory=list)
    interrupted: str = ""       # why the reply was cut off (shutdown or crash): show what was saved + Re-send
    partials: list = field(default_factory=list)    # a finished analysis's partial answers (this run only)
    files: list = field(default_factory=list)       # (name, tokens) the message included
    partials_job: object = None
    cut: int = 0                # the reply ended at its cap of this many tokens: said, with Continue
    continuable: bool = False   # the last turn's cut reply leaves room in the window to ask for the rest
    key: str = ""               # ``Turn.key``: a page's watch stream tells a turn sent again in its place


def citation_links(session: str, index: int, analysis: fountain.ChunkAnalysis | None):
    """For ``render.markdown``: where each chunk cited in turn ``index``'s answer opens.

    None (no links at all) unless the turn's analysis recorded passages; a number
    without a passage gets None and stays plain text.
    """
    if not session or analysis is None or not analysis.passages:
        return None
    chunks = set(analysis.passages)
    return lambda n: url_for("analysis.passage", name=session, turn=index, chunk=n) if n in chunks else None


def turn_view(index: int, turn: fountain.Turn, default_model: str, models: list[str] = (),
              session: str = "", api: str = "native") -> TurnView:
    """Read a recorded turn's notes back into what the page shows.

    With the ``session`` name, an analysis answer's citations link to their passages; ``api``
    (``model_server.api``) is the kind of server an error card names.
    """
    model_name = match_model(turn.model, list(models)) or default_model
    view = TurnView(index, turn.user_text, model_name=model_name, model=fountain.model_cue(model_name),
                    stats=turn.stats or "", harvey_text=answered_alert(turn.harvey or ""), analysis=turn.analysis,
                    key=turn.key)
    if turn.reply is not None:
        view.reply_html = markdown(turn.reply, cite=citation_links(session, index, turn.analysis))
    read = notes.read(turn.notes)
    view.stopped, view.notices, view.offers, view.files = read.stopped, read.notices, read.offers, read.files
    view.looped = read.looped
    view.cut = read.cut if turn.reply is not None else 0
    if read.error:
        view.error = error_view(*read.error, api=api)
        if view.error["kind"] in ("missing_file", "outside_file"):
            view.error["fix"] = missing_fix(turn.user_text or "", view.error["detail"])
        view.partial_kept = bool(turn.reply)
    view.interrupted = read.interrupted or (NEVER_FINISHED if _never_finished(turn, read, session, index) else "")
    return view


def missing_fix(text: str, detail: str) -> dict | None:
    """The missing-file card's one tap: the message with each missing name replaced by its near
    match (None when a name has none: only "Send without it" is offered)."""
    missing = filenames.missing_in(detail)
    if not missing or not all(m.suggestion for m in missing):
        return None
    fixed = text
    for m in missing:
        fixed = filenames.with_name(fixed, m.name, m.suggestion)
    return {"text": fixed, "names": ", ".join(m.suggestion for m in missing)} if fixed != text else None


NEVER_FINISHED = "the server stopped before the reply was finished"


def _never_finished(turn: fountain.Turn, read: notes.Read, session: str = "", index: int = -1) -> bool:
    """A message recorded before this server started, with no reply and no note: a crash cut it off.

    (A turn recorded since then with no reply yet is still being prepared or answered.)  Time stamps
    are whole seconds, so a turn of the very second the server started (a crash and a quick restart)
    is told apart by its session's activity: a reply being answered holds its turn from before the
    turn is written until it is recorded.
    """
    if not turn.user_text or turn.reply is not None or turn.harvey or turn.analysis is not None:
        return False
    if read.error or read.stopped or read.looped or read.declined or read.compacted is not None or turn.when is None:
        return False
    try:
        started = services().started_at
        if turn.when < started:
            return True
        if turn.when > started or not session:
            return False
        holder = services().activities.holder(session)
        return holder is None or holder.turn != index
    except (TypeError, RuntimeError):      # an aware timestamp from an import; no app context
        return False


_ALERT_PROMPT = re.compile(r"\s*Enter instructions to process each chunk.*\Z", re.S)


def answered_alert(harvey: str) -> str:
    """HARVEY's overflow alert without its question: shown only once the card is answered."""
    return _ALERT_PROMPT.sub("", harvey)


def views_of(session: Session, default_model: str, start: int = 0, stop: int | None = None) -> list[TurnView]:
    """Views of turns ``start`` to ``stop`` only: nothing else is rendered (a long session stays cheap)."""
    svc = services()
    models, _ = installed(svc.sizing)
    turns = session.turns
    stop = len(turns) if stop is None else min(stop, len(turns))
    views = [turn_view(i, turns[i], default_model, models, session.name, svc.config.model_server.api)
             for i in range(max(0, start), stop)]
    demo = _demo_model(svc, default_model)
    for view in views:
        view.stats = shown_stats(view.stats, svc.store.backend, demo)
    by_index = {view.index: view for view in views}
    held = svc.store.unsaved(session.name)         # a reply the disk could not take (issue 43): shown as it came
    if held is not None and held[0] in by_index and turns[held[0]].reply is None:
        view = turn_view(held[0], held[1], default_model, models, session.name, svc.config.model_server.api)
        views[views.index(by_index[held[0]])] = by_index[held[0]] = view
    last = by_index.get(len(turns) - 1)
    if last is not None and (last.cut or last.looped):
        last.continuable = _continuable(svc, session, last.index, looped=last.looped)
    holder = svc.activities.holder(session.name)
    if holder is not None and holder.kind == "reply" and holder.turn in by_index:
        view = by_index[holder.turn]
        view.streaming, view.reply_html, view.activity = True, None, holder.id
    jobs = [*svc.jobs.for_session(session.name), *svc.jobs.settled_for(session.name)] if svc.jobs else []
    for job in jobs:
        view = by_index.get(job.turn)
        if view is not None and job.state not in SETTLED:
            view.alert, view.harvey_text = job, ""
        elif view is not None and view.analysis is not None and job.results:
            view.partials_job = job          # the partial answers stay openable after the job
            view.partials = svc.jobs.results(job)     # (a snapshot under the runner's lock)
    return views


def _continuable(svc, session: Session, index: int, looped: bool = False) -> bool:
    """Whether Continue can ask for the rest of turn ``index``'s cut reply: its request fits the
    window (the same check the Continue itself makes, ``prepare.continue_request``)."""
    try:
        prepare.continue_request(svc.sizing, session.turns, index, session_model(svc.sizing, session), looped)
    except (HarveyError, ModelError):
        return False
    return True


def recent(limit: int = 8) -> list[dict]:
    """The newest sessions from the list's index (no session file is parsed for this)."""
    try:
        entries = services().store.index().entries()[:limit]
    except OSError:
        return []
    return [{"name": e.name, "title": e.title, "when": e.date, "preview": e.preview} for e in entries]


def busy_kind(svc, name: str) -> str:
    """Why Send is off: "reply", "compact", "analysis" (one is running), or ""."""
    return svc.activities.working(name)      # a card waiting for its instruction: a new message answers it


def page_context(session: Session, **extra) -> dict:
    """What every chat template needs: models, the model in use, busy state, the status line."""
    svc = services()
    models, problem = installed(svc.sizing)
    models = chat_models(svc.sizing, models)              # the picker: chat models only (issue 33)
    model = extra.pop("model", None) or session_model(svc.sizing, session, models)
    status = status_for(svc.sizing, session, model)
    if problem and not status["problem"]:
        status["problem"] = problem          # the model's facts are cached; the server being down is not
    holder = svc.activities.holder(session.name)
    return {"session": session, "user_cue": svc.config.user_name.upper(), "models": models, "model": model,
            "busy": busy_kind(svc, session.name),
            "compacting": holder if holder is not None and holder.kind == "compact" else None, "max_message_chars": svc.config.server.max_message_kb * 1024,
            "status": status, **extra}


def fragment(session: Session, view: TurnView, model: str) -> str:
    """The turn, plus the send button and status line swapped out-of-band."""
    ctx = page_context(session, model=model)
    html = render_template("chat/_turn.html", view=view, **ctx)
    html += render_template("chat/_send_button.html", busy=ctx["busy"], oob=True)
    html += render_template("chat/_status.html", oob=True, **{k: v for k, v in ctx.items() if k != "session"},
                            session=session)
    return html


DEMO_SERVER = "bundled demo model"


def _demo_model(svc, model: str) -> str | None:
    """``model`` when the server running it is Harvey's bundled demo server (its facts say so), else None."""
    try:
        return model if svc.sizing.models.facts(model).demo else None
    except HarveyError:
        return None


def shown_stats(stats: str, backend: str, demo: str | None) -> str:
    """A stats line as the page shows it (issue 45): a reply of the bundled demo model is said to be the demo's,
    where the session file keeps Harvey's own "ollama (model)" (the terminal Harvey reads the model from it)."""
    head = f"{backend} ({demo})"
    if demo and (stats == head or stats.startswith(head + " ")):
        return DEMO_SERVER + stats[len(backend):]
    return stats


def turn_fragment(name: str, index: int) -> str:
    """One turn as stored (only that turn is rendered), with the send button and status refreshed."""
    session = services().store.load(name)
    views = views_of(session, session_model(services().sizing, session), index, index + 1)
    if not views:
        return ""
    return fragment(session, views[0], views[0].model_name)
