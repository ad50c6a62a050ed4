"""The workspace file list: pick a file to ask about, analyse one, upload one."""

from __future__ import annotations

import logging

from flask import Blueprint, abort, flash, get_flashed_messages, redirect, render_template, request, url_for

from .services import services
from .sessions.names import valid_name
from .workspace import Workspace, WorkspaceError

log = logging.getLogger(__name__)
bp = Blueprint("files", __name__, url_prefix="/files")


def _session_arg() -> str:
    name = request.values.get("session", "")
    if not valid_name(name) or not services().store.exists(name):
        abort(404, description="There is no such session.")
    return name


@bp.get("/")
def index():
    """Every workspace file with its size and estimated tokens."""
    svc = services()
    session = _session_arg()
    bpt = svc.calibration.bytes_per_token(svc.config.ollama.model)
    files = [{"name": f.name, "size": f.size, "tokens": int(f.size / bpt)}
             for f in Workspace(svc.config.workspace_path).files()]
    return render_template("files/index.html", files=files, session=session,
                           max_upload_mb=svc.config.server.max_upload_mb,
                           messages=get_flashed_messages(with_categories=True))


def _attached(saved=None, error: str = ""):
    """The chat's Attach button (htmx) gets a status line instead of the file list."""
    return render_template("files/_attached.html", saved=saved, error=error), 422 if error else 200


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
        saved = Workspace(svc.config.workspace_path).save_upload(upload.filename, data)
    except (WorkspaceError, OSError) as exc:
        log.warning("upload refused (%d bytes): %s", len(data), exc.__class__.__name__)
        if from_chat:
            return _attached(error=f"The upload was refused: {exc}")
        flash(f"The upload was refused: {exc}", "error")
        return redirect(url_for("files.index", session=session), code=303)
    log.info("uploaded a file of %d bytes to the workspace", saved.size)
    if from_chat:
        return _attached(saved)
    flash(f"Uploaded {saved.name} ({saved.size} bytes).", "ok")
    return redirect(url_for("files.index", session=session), code=303)
