"""Session pages: list and search, read as a screenplay, download, import, rename, delete, restore.

The session files stay the source of truth: the list reads them through an
in-memory index that re-parses only changed files, the reading page is
rendered from the file on each request (the store caches the parse by mtime),
and downloads send the stored bytes untouched.  Names in URLs must match the
Harvey file-name pattern exactly, so no URL reaches outside ``sessions_dir``.
"""

from __future__ import annotations

import io
import logging
import re
import threading
import zipfile
from dataclasses import dataclass, field
from datetime import datetime

from flask import (Blueprint, Response, abort, flash, get_flashed_messages, redirect, render_template,
                   request, send_file, url_for)
from markupsafe import Markup

from ..sessions import fountain
from ..errors import Refused
from ..render import markdown
from .context import services
from ..sessions.names import SUFFIX, valid_name
from ..sessions.store import Session, SessionNotFound

log = logging.getLogger(__name__)
bp = Blueprint("sessions", __name__, url_prefix="/sessions")

IMPORT_SUFFIXES = (".spmd", ".fountain")
PAGE_SCENES = 40         # scenes the screenplay page shows at first; older ones load on demand (as the chat)
# Cues whose dialogue is shown as typed, not as Markdown: the agent and the shell.
PLAIN_CUES = {fountain.HARVEY, "SHELL"}
_TALKING_USER = re.compile(r"int\.?\s+harvey and (.+?) talking\b", re.IGNORECASE)
# Control characters no text file holds (tab, LF, FF and CR are fine): a sign of a binary upload.
_BINARY = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


@bp.record_once
def _warm_index(state) -> None:
    """Index the sessions in the background when the app is built (parsing 500 files takes a while on a Pi)."""
    index = state.app.extensions["harvey"].store.index()
    threading.Thread(target=index.warm, name="session-index-warm-up", daemon=True).start()


class ImportRefused(Refused):
    """An upload that cannot become a session; the text tells the user why."""


# -- names -------------------------------------------------------------------------------

def _session(name: str) -> Session:
    """The session, or 404 for a name outside the pattern or without a file."""
    if not valid_name(name):
        log.info("session name refused: %r", name[:80])
        abort(404, description="There is no such session.")
    try:
        return services().store.load(name)
    except (SessionNotFound, OSError):
        abort(404, description="There is no such session.")


# -- the list ----------------------------------------------------------------------------

def _human_size(size: int) -> str:
    """Bytes as a phone-width figure."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / 1024 / 1024:.1f} MB"


def _list_page(error: str = "", status: int = 200):
    """The list with the search applied; also the answer to a refused import."""
    store = services().store
    query = request.args.get("q", "").strip()
    index = store.index()
    try:
        items = index.search(query) if query else index.entries()
    except Refused as exc:                  # too many words: said on the page, nothing searched
        items, error, status = [], error or str(exc), 400
    html = render_template("sessions/index.html", items=items, query=query, error=error,
                           trashed=store.trashed(), human_size=_human_size,
                           max_upload_mb=services().config.server.max_upload_mb,
                           messages=get_flashed_messages(with_categories=True))
    return Response(html, status=status)


@bp.get("/")
def index():
    """Every session, newest first; ``?q=`` keeps those whose text holds every word."""
    return _list_page()


# -- reading -----------------------------------------------------------------------------

@dataclass
class ElementView:
    """One screenplay element as the page shows it."""

    kind: str                      # "action", "note" or "dialogue"
    text: str
    cue: str = ""
    html: Markup | None = None     # dialogue rendered from Markdown; None: shown as typed
    turn: int = -1                 # an analysis or passages answer: its turn (the sources line opens passages)
    analysis: fountain.ChunkAnalysis | None = None


@dataclass
class SceneView:
    heading: str
    lines: list[ElementView] = field(default_factory=list)
    analysis: fountain.ChunkAnalysis | None = None


def _speakers(session: Session) -> set[str]:
    """Cues whose words are shown as typed: the user(s), HARVEY and the shell.

    Everything else is a model speaking, whose replies are Markdown (as in the chat).
    """
    users = {m[1].strip().upper() for s in session.play.scenes if (m := _TALKING_USER.match(s.heading))}
    author = session.play.title_page.get("Author", "").strip().upper()
    return PLAIN_CUES | users | ({author} if author else set()) | {services().config.user_name.upper()}


def scene_views(session: Session, start: int = 0, stop: int | None = None) -> list[SceneView]:
    """Scenes ``start:stop`` as the template walks them; chunk analyses keep their parsed parameters.

    Only those scenes are rendered (Markdown is the costly part): a long session's page
    costs what its page of scenes costs.  An analysis answer's citations link to their
    passages, as in the chat.
    """
    scenes = session.play.scenes
    stop = len(scenes) if stop is None else stop
    plain = _speakers(session)
    answers = _cited_answers(session, start, stop)
    views = []
    for number in range(start, stop):
        scene = scenes[number]
        view = SceneView(scene.heading, analysis=fountain.read_chunk_scene(scene))
        for el in scene.elements:
            line = ElementView(el.kind, el.text, el.character)
            if el.kind == "dialogue" and el.character.split("(", 1)[0].strip().upper() not in plain:
                cited = answers.get((number, el.text))
                line.html = markdown(el.text, cite=cited[0] if cited else None)
                if cited:                    # the answer's sources, as the chat lists them (issue 33)
                    line.turn, line.analysis = cited[1], cited[2]
            view.lines.append(line)
        views.append(view)
    return views


def _cited_answers(session: Session, start: int, stop: int) -> dict:
    """(scene number, answer text) -> (the citation links, the turn, its analysis) of each turn in
    scenes ``start:stop`` whose analysis recorded passages."""
    from .fragments import citation_links

    found = {}
    for index, turn in enumerate(session.turns):
        if turn.analysis is None or not turn.scenes or turn.scenes[1] < start or turn.scenes[0] >= stop:
            continue
        links = citation_links(session.name, index, turn.analysis)
        if links and turn.reply:
            for number in range(turn.scenes[0], turn.scenes[1] + 1):
                found[(number, turn.reply)] = (links, index, turn.analysis)
    return found


def _page_start(session: Session) -> tuple[int, int]:
    """The page of scenes a request asks for, as (start, stop): ``?before=N`` gives the page that
    ends before scene N, no ``before`` the newest.  A ``before`` outside the session is a 400
    that says so, never an empty or partial page."""
    total = len(session.play.scenes)
    if "before" not in request.args:
        return max(0, total - PAGE_SCENES), total
    before = request.args.get("before", type=int)
    if before is None or not 0 < before <= total:
        log.info("screenplay page refused: before=%r of %d scenes", request.args.get("before")[:20], total)
        abort(400, description="There are no earlier scenes there.")
    return max(0, before - PAGE_SCENES), before


@bp.get("/<name>")
def read(name: str):
    """The session as a screenplay, newest scenes first, with continue / download / rename / delete.

    ``?before=N`` shows the page of scenes before scene N (the "earlier" link without JavaScript)."""
    session = _session(name)
    start, stop = _page_start(session)
    return render_template("sessions/read.html", session=session, scenes=scene_views(session, start, stop),
                           earlier=start, later=stop < len(session.play.scenes),
                           messages=get_flashed_messages(with_categories=True))


@bp.get("/<name>/scenes")
def earlier(name: str):
    """The page of scenes before ``before`` (the "earlier scenes" button), and the next button."""
    session = _session(name)
    if "before" not in request.args:
        abort(400, description="There are no earlier scenes there.")
    start, stop = _page_start(session)
    return render_template("sessions/_scenes.html", session=session, scenes=scene_views(session, start, stop),
                           earlier=start)


@bp.get("/<name>/download")
def download(name: str):
    """The file exactly as stored, as an attachment under its own name."""
    _session(name)
    path = services().store.path(name)
    return send_file(path, mimetype="text/plain", as_attachment=True,  # Werkzeug adds "; charset=utf-8"
                     download_name=f"{name}{SUFFIX}", etag=False, conditional=False)


@bp.get("/download-all")
def download_all():
    """Every session file (not the trash) in one zip, built in memory: session files are small text."""
    store = services().store
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in store.names():
            if valid_name(name):
                try:
                    archive.writestr(f"{name}{SUFFIX}", store.path(name).read_bytes())
                except FileNotFoundError:  # deleted while we zipped
                    continue
    buffer.seek(0)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return send_file(buffer, mimetype="application/zip", as_attachment=True,
                     download_name=f"harvey-sessions-{stamp}.zip")


# -- changing ----------------------------------------------------------------------------

@bp.post("/<name>/title")
def rename(name: str):
    """Change the Title on the title page; the file name (the URL) stays."""
    _session(name)
    services().store.rename(name, request.form.get("title", ""))
    return redirect(url_for("sessions.read", name=name), code=303)


@bp.post("/<name>/delete")
def delete(name: str):
    """Move the file to the trash, from which the list restores it."""
    title = _session(name).title
    svc = services()
    with svc.store.lock(name):            # the busy check and the move are one change (no send slips in)
        if svc.activities.working(name):
            abort(409, description="This session is busy (a reply or an analysis is running); try again when "
                                   "it ends.")
        try:
            svc.store.delete(name)
        except SessionNotFound:
            abort(404, description="There is no such session.")
    if svc.jobs:
        svc.jobs.discard_for_session(name)       # its analyses point at nothing now: their files go
    log.info("session %s moved to the trash", name)
    flash(f"Moved “{title}” to the trash. Restore it from the list below.", "ok")   # by its name, not its id
    return redirect(url_for("sessions.index"), code=303)


@bp.post("/trash/<entry>/restore")
def restore(entry: str):
    """Bring a deleted session back (under a new name only if its own was taken since)."""
    if not valid_name(entry):
        log.info("trash name refused: %r", entry[:80])
        abort(404, description="There is no such deleted session.")
    try:
        name = services().store.restore(entry)
    except SessionNotFound:
        abort(404, description="There is no such deleted session.")
    log.info("session %s restored from the trash as %s", entry, name)
    flash("Restored from the trash.", "ok")
    return redirect(url_for("sessions.read", name=name), code=303)


# -- import --------------------------------------------------------------------------------

def _import_text(filename: str, data: bytes) -> str:
    """The upload's text if it can be a session, else ImportRefused saying why."""
    if not filename.lower().endswith(IMPORT_SUFFIXES):
        raise ImportRefused("Only .spmd and .fountain files can be imported.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ImportRefused("The file is not UTF-8 text, so it is not a Harvey session.") from None
    if not text.strip() or _BINARY.search(text):
        raise ImportRefused("The file is empty or not a text file.")
    play = fountain.loads(text)
    if not play.title_page and not any(scene.heading for scene in play.scenes):
        raise ImportRefused("The file is not a Fountain screenplay: it has neither a title page nor a scene heading.")
    return text


def _mark_if_twin(store, name: str) -> None:
    """An import whose title another session has already (its source, downloaded and imported back) is
    named "… (imported 2026-12-06)" (issue 45: two sessions of one title, nothing to tell them apart).
    Only then: an import of a new session keeps its file byte for byte."""
    title = store.load(name).title
    if any(e.title == title and e.name != name for e in store.index().entries()):
        store.rename(name, f"{title} (imported {datetime.now():%Y-%m-%d})")


@bp.post("/import")
def import_session():
    """Add an uploaded .spmd or .fountain file as a new session; nothing is written when it is refused."""
    svc = services()
    limit = svc.config.server.max_upload_mb * 1024 * 1024
    upload = request.files.get("file")
    if upload is None or not upload.filename:
        return _refuse("Choose a .spmd or .fountain file to import.", 0)
    data = upload.read(limit + 1)
    if len(data) > limit:
        abort(413, description=f"The file is larger than {svc.config.server.max_upload_mb} MB.")
    try:
        text = _import_text(upload.filename, data)
    except ImportRefused as exc:
        return _refuse(str(exc), len(data))
    name = svc.store.import_text(text)
    _mark_if_twin(svc.store, name)
    log.info("session imported as %s (%d bytes)", name, len(data))
    flash("Imported. Read it here, or continue it in the chat.", "ok")
    return redirect(url_for("sessions.read", name=name), code=303)


def _refuse(message: str, size: int):
    """400 with the list page and the reason; the log gets the reason, never the contents."""
    log.warning("session import refused (%d bytes): %s", size, message)
    return _list_page(error=message, status=400)


@bp.errorhandler(413)
def too_large(exc):
    """The upload limit (Flask's MAX_CONTENT_LENGTH or ours), said on the list page."""
    mb = services().config.server.max_upload_mb
    log.warning("session upload refused: larger than %d MB", mb)
    return _list_page(error=f"The file is too large: imports are limited to {mb} MB.", status=413)
