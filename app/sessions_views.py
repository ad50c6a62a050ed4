"""Session pages (placeholder)."""

from flask import Blueprint

bp = Blueprint("sessions", __name__, url_prefix="/sessions")


@bp.get("/")
def index():
    return "sessions"
