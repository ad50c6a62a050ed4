"""Request safety: security headers, cross-site request protection, the secret key.

Every state-changing request must come from our own pages: its Origin (when the
browser sends one) must be this host, and it must carry the per-browser token
that the page hands to htmx in a header (or a form field for plain forms).

Form data must be valid UTF-8 (Werkzeug would quietly turn bad bytes into
U+FFFD and the session file would keep them), uploaded file names must be plain
names, and every refusal comes back as a short clear message, not Werkzeug's
bare error page. The login gate (``app.auth``) runs before all of this.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
from pathlib import Path
from urllib.parse import unquote_to_bytes, urlsplit

from flask import Flask, abort, current_app, render_template, request, session
from markupsafe import escape
from werkzeug.exceptions import HTTPException

from .storage import atomic_write

log = logging.getLogger(__name__)

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"

KEY_BYTES = 32

# What a reverse proxy adds to a request it passes on: waitress's own list (Forwarded and
# X-Forwarded-*) and the other names proxies and CDNs use. Their presence is all that is read
# here: a header a client can type is never believed, only a trusted proxy's (through waitress).
FORWARDING_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
                      "X-Forwarded-Port", "X-Forwarded-By", "X-Forwarded-Server", "X-Forwarded-Prefix",
                      "X-Real-IP", "X-Client-IP", "True-Client-IP", "CF-Connecting-IP", "Via")
_FORWARDING_KEYS = tuple("HTTP_" + name.upper().replace("-", "_") for name in FORWARDING_HEADERS)
# What waitress believes from the trusted proxy: the client's address, the name and scheme the
# browser used (so the Origin check compares with the name the user typed). Waitress refuses to
# mix these with RFC 7239 Forwarded; Caddy and nginx send the X-Forwarded-* ones.
TRUSTED_PROXY_HEADERS = frozenset({"x-forwarded-for", "x-forwarded-host", "x-forwarded-proto",
                                   "x-forwarded-port"})

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


def load_secret_key(path: Path) -> bytes:
    """A random key kept in the data folder (0600), made on first start.

    Written atomically (a temporary file, fsync, rename): a power cut or a full
    SD card leaves no key or the whole key, never a short one. A file shorter
    than a whole key (what an older Harvey could leave after such a crash) is
    not used: a new key replaces it, and every device signs in again.
    """
    try:
        key = path.read_bytes()
    except FileNotFoundError:
        key = b""
    if len(key) >= KEY_BYTES:
        return key
    if key or path.exists():
        log.warning("%s holds %d bytes, not a whole key: making a new one (devices sign in again)",
                    path, len(key))
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(KEY_BYTES)
    atomic_write(path, key)   # mkstemp makes the file 0600 before a byte is written
    return key


# -- reverse proxies ------------------------------------------------------------------------

def came_through_proxy(environ) -> bool:
    """Whether the request carries a header that a reverse proxy adds (see FORWARDING_HEADERS).

    Only presence counts, never the values: a loopback peer that forwards
    requests from elsewhere must not be taken for this machine.
    """
    return any(key in environ for key in _FORWARDING_KEYS)


def waitress_proxy_settings(server) -> dict:
    """The waitress arguments for ``server.trusted_proxy`` (a ServerConfig).

    Waitress 3 removes Forwarded and X-Forwarded-* from every request whose
    peer is not its ``trusted_proxy`` (``clear_untrusted_proxy_headers``
    defaults to true), so the app could not tell a proxied request from a local
    one. Harvey keeps them (it only looks at their presence) and lets waitress
    believe them only from the named proxy: then waitress sets REMOTE_ADDR to
    the client the proxy names (the last X-Forwarded-For hop, the one the proxy
    appended), and the Host and scheme to what the browser used.
    """
    settings: dict = {"clear_untrusted_proxy_headers": False}
    if server.trusted_proxy:
        settings.update(trusted_proxy=str(ipaddress.ip_address(server.trusted_proxy.strip().strip("[]"))),
                        trusted_proxy_count=1, trusted_proxy_headers=set(TRUSTED_PROXY_HEADERS))
    return settings


# -- the body limit -------------------------------------------------------------------------

BODY_MARGIN = 64 * 1024      # what waitress reads past Flask's MAX_CONTENT_LENGTH before it stops
TOO_LARGE_KEY = "harvey.body_over_limit"


def waitress_body_limit(app: Flask) -> int:
    """Waitress's ``max_request_body_size``: the app's own limit and a small margin, chunked or not.

    Waitress reads a whole body before the app sees it, so this is what bounds the
    bytes a client can make the server read (and spool to the SD card); a body with
    a Content-Length over it is refused before a byte of it is read.
    """
    return app.config["MAX_CONTENT_LENGTH"] + BODY_MARGIN


def refuse_body_over_limit():
    """413 for a request whose body waitress stopped reading (``body_limit_channel``): the page says the limit."""
    if request.environ.get(TOO_LARGE_KEY):
        log.info("refused a request body over the limit (%s %s)", request.method, request.path)
        abort(413)
    return None


_channel_class = None


def body_limit_channel():
    """A waitress channel whose "413 Request Entity Too Large" is the app's own answer.

    Waitress answers a body over ``max_request_body_size`` with bare text of its
    own. This channel runs the app instead, with an empty body and the request
    marked (``refuse_body_over_limit`` answers 413 through the usual error pages:
    the upload limit in plain words, a fragment for htmx), then closes the
    connection, since the rest of the body was never read. Built on first use:
    importing this module does not import waitress.
    """
    global _channel_class
    if _channel_class is None:
        import io

        from waitress.channel import HTTPChannel
        from waitress.task import ErrorTask, WSGITask
        from waitress.utilities import RequestEntityTooLarge

        class TooLargeTask(WSGITask):
            def get_environment(self):
                environ = super().get_environment()
                environ.update({"CONTENT_LENGTH": "0", "wsgi.input": io.BytesIO(), TOO_LARGE_KEY: True})
                environ.pop("CONTENT_TYPE", None)
                return environ

            def execute(self):
                self.set_close_on_finish()       # the body's unread rest must not be taken for a request
                super().execute()

        def error_task(channel, request):
            too_large = isinstance(request.error, RequestEntityTooLarge)
            return (TooLargeTask if too_large else ErrorTask)(channel, request)

        _channel_class = type("BodyLimitChannel", (HTTPChannel,), {"error_task_class": staticmethod(error_task)})
    return _channel_class


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


def plain_file_name(name: str) -> bool:
    """A name a browser sends for a picked file: no folder parts, no '..', no controls."""
    return (name not in (".", "..") and len(name) <= 255 and not any(c in name for c in "/\\")
            and not any(ord(c) < 32 or ord(c) == 127 for c in name))


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
