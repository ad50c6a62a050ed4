"""Request safety: security headers, cross-site request protection, encodings, error pages.

Every state-changing request must come from our own pages: its Origin (when the
browser sends one) must be this host, and it must carry the per-browser token
that the page hands to htmx in a header (or a form field for plain forms).

Form data must be valid UTF-8 (Werkzeug would quietly turn bad bytes into
U+FFFD and the session file would keep them), uploaded file names must be plain
names, and every refusal comes back as a short clear message, not Werkzeug's
bare error page. The login gate (``app.web.auth``) runs before all of this.
The secret key, the proxy headers and the body limit's waitress side are in
``app.security``; logs go to ``app.security`` as before.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from urllib.parse import unquote_to_bytes, urlsplit

from flask import Flask, abort, current_app, render_template, request, session
from markupsafe import escape
from werkzeug.exceptions import HTTPException

from ..security import TOO_LARGE_KEY, came_through_proxy, load_secret_key, plain_file_name

log = logging.getLogger("app.security")

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'")


def init_app(app: Flask, login_gate=None) -> None:
    """Install the secret key, the login gate, the request checks, headers and error pages.

    Order matters: the login gate first (a signed-out browser goes to /login),
    then the body and encoding checks (they must read the raw body before the form
    is parsed), then the CSRF check.  ``login_gate`` installs the gate (the app
    factory passes ``auth.init_app``; this module does not import ``auth``, which
    imports it).
    """
    svc = app.extensions["harvey"]
    app.secret_key = load_secret_key(svc.config.data_path / "secret_key")
    # Cookies are per host, not per port: a name of our own avoids other apps on the Pi.
    app.config.update(SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Lax",
                      SESSION_COOKIE_NAME="harvey_session")
    if login_gate is not None:
        login_gate(app)
    app.before_request(refuse_body_over_limit)
    app.before_request(check_encoding)
    app.before_request(check_csrf)
    app.after_request(add_headers)
    app.register_error_handler(HTTPException, error_page)
    app.jinja_env.globals["csrf_token"] = csrf_token


def refuse_body_over_limit():
    """413 for a request whose body waitress stopped reading (``body_limit_channel``): the page says the limit."""
    if request.environ.get(TOO_LARGE_KEY):
        log.info("refused a request body over the limit (%s %s)", request.method, request.path)
        abort(413)
    return None


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
    cross_site = request.headers.get("Sec-Fetch-Site") == "cross-site"
    if cross_site or (origin and origin != "null" and urlsplit(origin).netloc != request.host):
        hint = ""
        if not cross_site and came_through_proxy(request.environ):
            hint = (f" (It came through a proxy as {request.host}, not as {urlsplit(origin).netloc}: "
                    "the proxy must pass on the Host header, or name itself in server.trusted_proxy and "
                    "send X-Forwarded-Host; see deploy/README.md.)")
        abort(403, description="This request came from another site and was refused." + hint)
    sent = request.headers.get(CSRF_HEADER) or request.form.get(CSRF_FIELD, "")
    expected = session.get("csrf", "")
    if not expected or not hmac.compare_digest(sent, expected):
        abort(403, description="The page's security token is missing or old: reload the page and try again.")
    return None


def check_encoding():
    """Refuse (400) text that is not UTF-8 and uploaded file names that are paths."""
    if not _utf8(request.environ.get("PATH_INFO", "").encode("latin-1")) or not _form_utf8(
            request.query_string):
        abort(400, description="The address is not valid UTF-8 text.")
    if request.method in SAFE_METHODS:
        return None
    if request.mimetype == "application/x-www-form-urlencoded":
        if not _form_utf8(request.get_data(cache=True)):
            abort(400, description="The form data is not valid UTF-8 text.")
    elif request.mimetype == "multipart/form-data":
        # Werkzeug has already replaced bad bytes here: U+FFFD is their trace.
        if any("\ufffd" in value for value in request.form.values()):
            abort(400, description="The form data is not valid UTF-8 text.")
        for upload in request.files.values():
            if upload.filename and not plain_file_name(upload.filename):
                abort(400, description="The uploaded file's name is not a plain file name "
                                       "(no folders, no '..', no control characters).")
    return None


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _form_utf8(raw: bytes) -> bool:
    """Whether every name and value of an urlencoded body (or query) decodes as UTF-8."""
    return all(_utf8(unquote_to_bytes(part.replace(b"+", b" ")))
               for pair in raw.split(b"&") for part in pair.split(b"=", 1))


def error_page(exc: HTTPException):
    """Every 4xx/5xx as a short clear message: a page, or a fragment for htmx."""
    if exc.code is None or exc.code < 400 or exc.response is not None:
        return exc   # redirects, and answers a view built itself with abort(response)
    message = _clear_message(exc)
    if request.headers.get("HX-Request") == "true":
        body = f'<p class="flash error" role="alert">{escape(message)}</p>'
    else:
        body = render_template("auth/error.html", code=exc.code, title=exc.name, message=message)
    response = exc.get_response()
    response.set_data(body)
    response.mimetype = "text/html"
    return response


def _clear_message(exc: HTTPException) -> str:
    """The view's own description, or plain words in place of Werkzeug's default."""
    if exc.description and exc.description != type(exc).description:
        return exc.description
    if exc.code == 413:
        server = current_app.extensions["harvey"].config.server
        return (f"The request is too large: files up to {server.max_upload_mb} MB, "
                f"messages up to {server.max_message_kb} KB.")
    plain = {400: "The request could not be understood.", 404: "There is no such page.",
             405: "That action is not allowed here."}
    if exc.code in plain:
        return plain[exc.code]
    if exc.code >= 500:
        return "Something went wrong on the server; the log has the details."
    return f"{exc.name}."


def add_headers(response):
    """Headers that keep the page from being framed, sniffed or scripted inline."""
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Cross-Origin-Opener-Policy", "same-origin")
    return response
