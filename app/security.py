"""Request safety: security headers, cross-site request protection, the secret key.

Every state-changing request must come from our own pages: its Origin (when the
browser sends one) must be this host, and it must carry the per-browser token
that the page hands to htmx in a header (or a form field for plain forms).
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit

from flask import Flask, abort, request, session

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'")


def init_app(app: Flask) -> None:
    """Install the secret key, the CSRF check and the response headers."""
    svc = app.extensions["harvey"]
    app.secret_key = load_secret_key(svc.config.data_path / "secret_key")
    app.config.update(SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Lax")
    app.before_request(check_csrf)
    app.after_request(add_headers)
    app.jinja_env.globals["csrf_token"] = csrf_token


def load_secret_key(path: Path) -> bytes:
    """A random key kept in the data folder (0600), made on first start."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key)
        return key


def csrf_token() -> str:
    """This browser's token, made on first use and kept in the signed cookie."""
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(24)
        session.permanent = True
    return session["csrf"]


def check_csrf():
    """Refuse a state-changing request from another site (403)."""
    if request.method in SAFE_METHODS:
        return None
    origin = request.headers.get("Origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.host:
        abort(403, description="This request came from another site and was refused.")
    sent = request.headers.get(CSRF_HEADER) or request.form.get(CSRF_FIELD, "")
    expected = session.get("csrf", "")
    if not expected or not hmac.compare_digest(sent, expected):
        abort(403, description="The page's security token is missing or old: reload the page and try again.")
    return None


def add_headers(response):
    """Headers that keep the page from being framed, sniffed or scripted inline."""
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault("X-Frame-Options", "DENY")
    return response
