"""Request safety that needs no request: the secret key, proxies' headers, the body limit.

The hooks that check each request (headers, cross-site protection, encodings, error
pages) are in ``app.web.security``; what they share with ``harvey serve`` is here.

Every state-changing request must come from our own pages: its Origin (when the
browser sends one) must be this host, and it must carry the per-browser token
that the page hands to htmx in a header (or a form field for plain forms).

Form data must be valid UTF-8 (Werkzeug would quietly turn bad bytes into
U+FFFD and the session file would keep them), uploaded file names must be plain
names, and every refusal comes back as a short clear message, not Werkzeug's
bare error page. The login gate (``app.auth``) runs before all of this.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
from pathlib import Path


from .storage import atomic_write

log = logging.getLogger(__name__)

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


def waitress_body_limit(app) -> int:
    """Waitress's ``max_request_body_size``: the app's own limit and a small margin, chunked or not.

    Waitress reads a whole body before the app sees it, so this is what bounds the
    bytes a client can make the server read (and spool to the SD card); a body with
    a Content-Length over it is refused before a byte of it is read.
    """
    return app.config["MAX_CONTENT_LENGTH"] + BODY_MARGIN


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


def plain_file_name(name: str) -> bool:
    """A name a browser sends for a picked file: no folder parts, no '..', no controls."""
    return (name not in (".", "..") and len(name) <= 255 and not any(c in name for c in "/\\")
            and not any(ord(c) < 32 or ord(c) == 127 for c in name))
