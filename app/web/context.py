"""``services()``: the running app's ``Services``, read from Flask's ``current_app``.

Only views call it; domain code gets what it needs as arguments.
"""

from __future__ import annotations

from flask import current_app

from ..services import Services


def services() -> Services:
    """The running app's services (set up by ``create_app``)."""
    return current_app.extensions["harvey"]
