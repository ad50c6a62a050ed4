"""GET /healthz: is the app up, does Ollama answer, is the model installed."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from flask import Blueprint, jsonify

from ..errors import ModelError
from ..version import __version__
from .context import services

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    """Asked fresh on each call, so it recovers by itself when Ollama comes up."""
    svc = services()
    model = svc.config.model_server.model
    body = {"version": __version__, "ollama": {"url": _without_credentials(svc.models.url), "up": False},
            "model": model, "model_installed": False}
    try:
        installed = svc.models.models()
        body["ollama"]["up"] = True
        body["model_installed"] = model in installed
    except ModelError as exc:
        body["ollama"]["error"] = exc.kind
    return jsonify(body)


def _without_credentials(url: str) -> str:
    """http://user:secret@host:port -> http://host:port: health checks are public."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else ""))) \
        if parts.username or parts.password else url
