"""The login gate and the login and logout pages (the rules they apply are in ``app.auth``).

``init_app`` decides whether a password is needed and installs the gate; a
signed-in browser holds Flask's signed session cookie for ``REMEMBER``. Logs go
to ``app.auth``, the name they have always had.
"""

from __future__ import annotations

import hmac
import logging
import math
import secrets
from datetime import timedelta
from urllib.parse import urlsplit

from flask import (Blueprint, Flask, Response, current_app, has_request_context, redirect, render_template,
                   request, session, url_for)

from ..auth import (PASSWORD_FILE, PROXY_SIGHTINGS_FILE, SET_PASSWORD_HINT, AuthState, PasswordFile, ProxySightings,
                    is_loopback, password_required)
from ..security import came_through_proxy

log = logging.getLogger("app.auth")
bp = Blueprint("auth", __name__)

REMEMBER = timedelta(days=180)
OPEN_ENDPOINTS = {"static", "health.healthz", "auth.login", "auth.logout"}


def init_app(app: Flask) -> None:
    """Decide whether a password is needed, say so in the log, install the login gate.

    Called by ``security.init_app`` before its CSRF check, so a signed-out
    browser is sent to /login before anything else looks at its request.
    """
    config = app.extensions["harvey"].config
    host, proxy = config.server.host, config.server.trusted_proxy
    required = password_required(config.auth, host, proxy)
    state = AuthState(required=required, password=PasswordFile(config.data_path / PASSWORD_FILE),
                      loopback_only=not required and is_loopback(host), mode=config.auth, trusted_proxy=proxy,
                      sightings=ProxySightings(config.data_path / PROXY_SIGHTINGS_FILE))
    app.extensions["harvey_auth"] = state
    app.jinja_env.globals["password_protected"] = state.required   # pages offer "Sign out"
    app.context_processor(_password_protected)
    app.permanent_session_lifetime = REMEMBER
    app.register_blueprint(bp)
    app.before_request(check_host)
    app.before_request(require_login)
    _log_decision(config, state)


def _password_protected() -> dict:
    """Pages offer "Sign out" where a password guards them (per request: a proxied one is guarded)."""
    if not has_request_context():
        return {}
    return {"password_protected": _state().needed(request.environ)}


def _log_decision(config, state: AuthState) -> None:
    """One start-up line that says whether a password protects the app, and why."""
    host = config.server.host
    where = f"listening on {host}" + (f", behind the proxy at {state.trusted_proxy}" if state.trusted_proxy
                                      else "")
    if state.required and state.password.record():
        log.info("Password required (auth: %s, %s).", config.auth, where)
    elif state.required:
        log.warning("A password is required (auth: %s, %s) but none is set: "
                    "run `%s`. Until then only /healthz answers.", config.auth, where, SET_PASSWORD_HINT)
    elif config.auth == "none" and (not is_loopback(host) or state.trusted_proxy):
        log.warning("No password (auth: none) while %s: anyone who can reach this port "
                    "can use Harvey.", where)
    elif config.auth == "none":
        log.info("No password (auth: none): listening on loopback %s.", host)
    else:
        log.info("No password (auth: %s): listening on loopback %s only; a request that comes through "
                 "a reverse proxy (forwarding headers) must sign in.", config.auth, host)


def _state() -> AuthState:
    return current_app.extensions["harvey_auth"]


def check_host():
    """Without a password, answer only to loopback names (blocks DNS rebinding).

    A web page whose name is re-pointed at 127.0.0.1 would otherwise be "same
    origin" with an app that asks no password.
    """
    state = _state()
    if not state.loopback_only or state.needed(request.environ):
        return None   # a password guards it: a rebound name gains nothing
    try:
        name = urlsplit(f"//{request.host}").hostname or ""
    except ValueError:
        name = ""
    if is_loopback(name):
        return None
    return _plain(400, "This Harvey answers only at localhost / 127.0.0.1. To serve it under another name, "
                       "set a password (auth: password in harvey.yaml, then `harvey set-password`).")


def require_login():
    """Let a request through only with a cookie for the current password."""
    state = _state()
    if not state.required and came_through_proxy(request.environ):
        state.note_proxy(request.environ)
    if not state.required and state.mode == "auto":
        state.sightings.note(request.environ)
    if not state.needed(request.environ) or request.endpoint in OPEN_ENDPOINTS:
        return None
    generation = state.password.generation()
    if generation is None:
        return _setup_needed()
    if hmac.compare_digest(str(session.get("auth", "")), generation):
        return None
    return _to_login()


def _is_htmx() -> bool:
    return request.headers.get("HX-Request") == "true"


def _to_login():
    """htmx: 401 with HX-Redirect (htmx navigates); a page load: 303 to /login."""
    target = url_for("auth.login", next=_here())
    if _is_htmx():
        response = _plain(401, "Sign in first.")
        response.headers["HX-Redirect"] = target
        return response
    return redirect(target, code=303)


def _here() -> str:
    """Where to come back to after signing in: the page the user was on."""
    if _is_htmx():
        return safe_next(urlsplit(request.headers.get("HX-Current-URL", "")).path or "/")
    return safe_next(request.full_path.rstrip("?") if request.method == "GET" else "/")


def safe_next(target: str | None) -> str:
    """Only a path on this site: never an absolute or protocol-relative URL."""
    target = target or "/"
    if not target.startswith("/") or target.startswith("//") or "\\" in target or any(
            ord(c) < 32 for c in target):
        return "/"
    return target


def _setup_needed():
    """No password yet: every page says how to set one, and nothing else."""
    if _is_htmx():
        response = _plain(503, f"No password is set: run `{SET_PASSWORD_HINT}` on the server.")
        response.headers["HX-Redirect"] = url_for("auth.login")
        return response
    return Response(render_template("auth/setup.html", hint=SET_PASSWORD_HINT), status=503)


def _plain(status: int, message: str) -> Response:
    """A short text answer for refusals made before any page is rendered."""
    return Response(message + "\n", status=status, mimetype="text/plain")


def _client() -> str:
    """The throttle's key: the peer, or the client a trusted proxy names.

    ``harvey serve`` lets waitress believe X-Forwarded-For only from
    ``server.trusted_proxy`` (``security.waitress_proxy_settings``); then
    REMOTE_ADDR is the client the proxy appended. From any other peer the
    header is ignored here: read directly, it would let one client pose as
    many (never throttled) or as the owner (locking them out).
    """
    return request.remote_addr or "unknown"


# -- the pages ----------------------------------------------------------------------------

@bp.route("/login", methods=["GET", "POST"])
def login():
    """The sign-in form; on success, remember this device for 180 days."""
    state = _state()
    if not state.needed(request.environ):
        return redirect(url_for("chat.index"), code=303)
    if state.password.generation() is None:
        return _setup_needed()
    next_url = safe_next(request.values.get("next"))
    if request.method == "GET":
        signed_in = hmac.compare_digest(str(session.get("auth", "")), state.password.generation())
        return render_template("auth/login.html", next=next_url, signed_in=signed_in, message="")
    wait = max(state.per_client.wait(_client()), state.everyone.wait("*"))
    if wait > 0:
        return _login_page(429, f"Too many wrong passwords: try again in {_whole_seconds(wait)} seconds.",
                           next_url, retry_after=wait)
    if not state.password.verify(request.form.get("password", "")):
        return _wrong_password(state, next_url)
    state.per_client.succeeded(_client())
    _remember(state.password.generation())
    log.info("signed in from %s", _client())
    return redirect(next_url, code=303)


def _wrong_password(state: AuthState, next_url: str):
    """401, and the wait this failure earned (the next try within it gets 429)."""
    delay = max(state.per_client.failed(_client()), state.everyone.failed("*"))
    log.warning("wrong password from %s", _client())
    message = "Wrong password."
    if delay:
        message += f" Wait {_whole_seconds(delay)} seconds before trying again."
    return _login_page(401, message, next_url, retry_after=delay or None)


def _login_page(status: int, message: str, next_url: str, retry_after: float | None = None):
    response = Response(render_template("auth/login.html", next=next_url, signed_in=False, message=message),
                        status=status)
    if retry_after:
        response.headers["Retry-After"] = str(_whole_seconds(retry_after))
    return response


def _whole_seconds(seconds: float) -> int:
    """A wait in whole seconds, rounded up: the page's words and Retry-After say the same (issue 33)."""
    return max(1, math.ceil(seconds))


def _remember(generation: str) -> None:
    """A fresh signed cookie: this password's generation and a new CSRF token."""
    session.clear()
    session["auth"] = generation
    session["csrf"] = secrets.token_urlsafe(24)
    session.permanent = True


@bp.post("/logout")
def logout():
    """Forget this device (the CSRF check guards this POST like any other)."""
    session.clear()
    return redirect(url_for("auth.login"), code=303)
