"""The workspace file list: pick a file to ask about, analyse one, upload one.

An upload never replaces a workspace file. Uploading a name that is taken keeps
both: the new file gets the next free name (``notes-2.txt``), and the page says
so. Keeping both rather than asking first, because the upload comes from a phone
or a laptop in one tap and the user expects it to land: a question would mean
holding the bytes on the server until they answer (or re-sending them), and the
old file may be one the user put there by hand or a session refers to. The name
it got is on the page, so nothing is lost and nothing is a surprise; deleting
the one not wanted is the user's choice. The same bytes uploaded again add no
copy.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from flask import Blueprint, abort, flash, get_flashed_messages, redirect, render_template, request, url_for

from .context import services
from ..sessions.names import valid_name
from ..storage import atomic_write
from .. import documents, filenames
from ..chat import prepare
from ..chat.status import session_model
from ..errors import HarveyError
from ..workspace import MAX_NAME_CHARS, Workspace, WorkspaceError, safe_filename

log = logging.getLogger(__name__)
bp = Blueprint("files", __name__, url_prefix="/files")


def _session_arg() -> str:
    name = request.values.get("session", "")
    if not valid_name(name) or not services().store.exists(name):
        abort(404, description="There is no such session.")
    return name


# Rows whose token figure the page computes itself; the rest load theirs as they scroll into view (a
# 5,000-file workspace is not measured for one page).
FIGURED_ROWS = 30


@bp.get("/")
def index():
    """Every workspace file with its size and its tokens: the same figure the card and the chat use."""
    svc = services()
    session = _session_arg()
    files = [_listed(f, session if i < FIGURED_ROWS else None)
             for i, f in enumerate(Workspace(svc.config.workspace_path).files())]
    return render_template("files/index.html", files=files, session=session, folder=svc.config.workspace,
                           max_upload_mb=svc.config.server.max_upload_mb,
                           messages=get_flashed_messages(with_categories=True))


@bp.get("/tokens")
def tokens():
    """One file's token figure as a fragment (the Files page's rows past the first ``FIGURED_ROWS``)."""
    session = _session_arg()
    try:
        wf = Workspace(services().config.workspace_path).resolve(request.args.get("name", ""))
    except WorkspaceError as exc:
        abort(404, description=str(exc))
    row = _listed(wf, session)
    return render_template("files/_tokens.html", f=row, session=session)


def _figure(session: str, wf) -> tuple[int, bool]:
    """The file's tokens for the session's model (``prepare.file_tokens``: counted when the model's counter
    is loaded, estimated by its kind of text otherwise) and whether they are the model's exact count."""
    svc = services()
    sizing = svc.sizing
    model = session_model(sizing, svc.store.load(session))
    counter = svc.models.counter(model)             # never waits: a counter still loading is an estimate here
    count, _, exact = prepare.file_tokens(sizing, model, wf, counter)
    return count, exact


def _listed(f, session: str | None) -> dict:
    """One row of the list: a file that is not text (an image, a program) says so, with no token
    figure and no Ask or Analyse (issue 33: a program was "about 42,651 tokens").  ``session``: compute
    the token figure (None: the row loads it)."""
    try:
        what = documents.sniff(f.path)
    except OSError:
        what = "a file that cannot be read"
    row = {"name": f.name, "mention": filenames.mention(f.name), "size": f.size, "tokens": None, "exact": False,
           "not_text": what or ""}
    if session and not what:
        try:
            row["tokens"], row["exact"] = _figure(session, f)
        except (OSError, ValueError, HarveyError) as exc:
            log.info("no token figure for %s: %s", f.name, exc)
            row["not_text"] = "a file that cannot be read"
    return row


def _attached(saved=None, error: str = ""):
    """The chat's Attach button (htmx) gets a status line instead of the file list."""
    return render_template("files/_attached.html", saved=saved, error=error,
                           mention=filenames.mention(saved.name) if saved else ""), 422 if error else 200


@bp.post("/upload")
def upload():
    """Add a file to the workspace (size limited by the config)."""
    svc = services()
    session = _session_arg()
    from_chat = bool(request.headers.get("HX-Request"))
    upload = request.files.get("file")
    if upload is None or not upload.filename:
        if from_chat:
            return _attached(error="Choose a file to attach.")
        flash("Choose a file to upload.", "error")
        return redirect(url_for("files.index", session=session), code=303)
    data = upload.read(svc.config.server.max_upload_mb * 1024 * 1024 + 1)
    if len(data) > svc.config.server.max_upload_mb * 1024 * 1024:
        abort(413, description=f"The file is larger than {svc.config.server.max_upload_mb} MB.")
    try:
        workspace = Workspace(svc.config.workspace_path)
        wanted = safe_filename(upload.filename)
        name, added = save_keeping_both(workspace.root, wanted, data)
        saved = workspace.resolve(name)
    except (WorkspaceError, OSError) as exc:
        log.warning("upload refused (%d bytes): %s", len(data), exc.__class__.__name__)
        if from_chat:
            return _attached(error=f"The upload was refused: {exc}")
        flash(f"The upload was refused: {exc}", "error")
        return redirect(url_for("files.index", session=session), code=303)
    if not added:
        message = f"{name} is already in the workspace with the same content: nothing was added."
    elif name != wanted:
        log.info("uploaded a file of %d bytes to the workspace under a new name (the first was taken)",
                 saved.size)
        message = (f"A file named {wanted} is already in the workspace, so this upload was saved as {name} "
                   f"({saved.size} bytes). Both are kept.")
    else:
        log.info("uploaded a file of %d bytes to the workspace", saved.size)
        message = f"Uploaded {saved.name} ({saved.size} bytes)."
    if from_chat:
        return _attached(saved)            # the chat names the file as saved (its new name, if it got one)
    flash(message, "ok")
    return redirect(url_for("files.index", session=session), code=303)


MAX_COPIES = 1000


def numbered(name: str, n: int) -> str:
    """``notes.txt`` → ``notes-2.txt``; ``data.tar.gz`` → ``data-2.tar.gz``; within MAX_NAME_CHARS."""
    stem, dot, ext = name.partition(".")
    tail = f"-{n}" + dot + ext
    return stem[:max(1, MAX_NAME_CHARS - len(tail))] + tail


def save_keeping_both(root: Path, name: str, data: bytes) -> tuple[str, bool]:
    """Store ``data`` as ``name``, or the first free ``name-N``; never replace a file.

    Returns the name used and whether a file was added (False: a regular file
    with that name already holds exactly these bytes). A name is claimed with
    O_CREAT|O_EXCL, which fails on anything already there (a file, a folder, a
    link, another upload's claim at the same moment), and the bytes then
    replace only our own empty claim, atomically. Only regular files are
    compared, never a link's target (it may be outside the workspace).
    """
    for n in range(1, MAX_COPIES + 1):
        candidate = name if n == 1 else numbered(name, n)
        path = root / candidate
        if _same_bytes(path, data):
            return candidate, False
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            continue
        os.close(fd)
        try:
            atomic_write(path, data)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return candidate, True
    raise WorkspaceError(f"There are already {MAX_COPIES} files named like {name}: rename the file first.")


def _same_bytes(path: Path, data: bytes) -> bool:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size != len(data):
            return False
        return path.read_bytes() == data
    except OSError:
        return False
