"""Harvey Web: a chat app for a Raspberry Pi that talks to a local Ollama.

``create_app(config)`` builds the Flask app. Importing this package does no work:
blueprints (all in ``app.web``) and services are imported inside the factory.
"""

from __future__ import annotations

from pathlib import Path

from .version import __version__  # noqa: F401 (the package's version)

ROOT = Path(__file__).resolve().parent.parent


def create_app(config=None, *, services=None):
    """Build the app for ``config`` (an ``app.config.Config``; defaults if None).

    ``services`` lets a test hand in pre-built services; normally they are made
    here from the config.
    """
    from flask import Flask

    from .config import Config
    from .errors import HarveyError
    from .services import Services
    from .web import analysis, auth, chat, files, health, security, sessions

    config = config or Config()
    app = Flask(__name__, template_folder=str(ROOT / "templates"), static_folder=str(ROOT / "static"))
    app.config["MAX_CONTENT_LENGTH"] = config.server.max_upload_mb * 1024 * 1024 + 64 * 1024
    app.config["SEND_FILE_MAX_AGE_DEFAULT"] = 3600   # static files: no re-check on every page load
    app.extensions["harvey"] = services or Services.from_config(config)
    security.init_app(app, login_gate=auth.init_app)
    app.register_error_handler(HarveyError, _harvey_error)
    for module in (health, chat, files, analysis, sessions):
        app.register_blueprint(module.bp)
    return app


def _harvey_error(exc):
    """Any ``HarveyError`` a view lets through: its status and its message, logged once.

    The clear page or htmx fragment comes from the same handler as ``abort``.
    """
    import logging

    from werkzeug.exceptions import HTTPException, default_exceptions

    from .web.security import error_page

    logging.getLogger("harvey.web").info("refused (%s, %s): %s", exc.kind, exc.status, exc)
    http = default_exceptions.get(exc.status, HTTPException)(description=str(exc) or None)
    http.code = exc.status
    return error_page(http)
