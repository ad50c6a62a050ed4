"""Who may use Harvey: the password, the login page and the remembered device.

Anyone on the LAN can reach the port, so when Harvey listens beyond loopback it
asks for a password (``auth: auto``), always asks (``auth: password``), or never
asks because harvey.yaml says so explicitly (``auth: none``). A required password
that has not been set yet closes the app instead of opening it: every page says
how to set one.

The password is stored as a salted scrypt hash in ``data_dir/password`` (0600),
with its parameters, so they can be raised later without breaking old hashes.
A signed-in browser holds Flask's signed session cookie for 180 days; the cookie
names the password's generation, so setting a new password signs every device
out. Wrong passwords are slowed down per client address (and, more gently, for
everyone at once) by refusing early with 429 + Retry-After, never by sleeping on
a waitress thread.

Behind a reverse proxy every request arrives from loopback, so "listening on
loopback" does not mean "used from this machine only": under ``auth: auto`` a
request that carries forwarding headers must sign in, and naming the proxy
(``server.trusted_proxy``) makes the password required for every request. A
proxy that adds no forwarding header (nginx's bare ``proxy_pass``) still shows:
it speaks HTTP/1.0 to Harvey, which no browser does, so that request must sign
in too; and what such a proxy looked like is noted in the data folder for
``harvey check`` to report (``ProxySightings``). The
client address (the throttle's key, the log) is the one the proxy names only
when the proxy is trusted (waitress rewrites REMOTE_ADDR then); otherwise it is
the peer, because a header any client can type proves nothing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import ipaddress
import json
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from flask import (Blueprint, Flask, Response, current_app, has_request_context, redirect, render_template,
                   request, session, url_for)

from .security import came_through_proxy

log = logging.getLogger(__name__)
bp = Blueprint("auth", __name__)

PASSWORD_FILE = "password"
PROXY_SIGHTINGS_FILE = "proxy-seen.json"
# where Debian's nginx keeps the sites it serves (``harvey check`` reads them)
NGINX_SITES = (Path("/etc/nginx/sites-enabled"), Path("/etc/nginx/conf.d"))
# 32 MiB of memory per check: strong, yet a Pi 3 answers in well under a second.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 15, 8, 1
REMEMBER = timedelta(days=180)
OPEN_ENDPOINTS = {"static", "health.healthz", "auth.login", "auth.logout"}
SET_PASSWORD_HINT = "harvey set-password"


# -- the stored hash ----------------------------------------------------------------------

def set_password(data_path: Path, password: str) -> Path:
    """Store a new salted scrypt hash (0600), replacing any old one atomically.

    A new random salt makes a new file even for the same password, so the
    generation changes and every remembered device must sign in again.
    """
    data_path = Path(data_path)
    data_path.mkdir(parents=True, exist_ok=True)
    owner = data_path.stat()
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    record = f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}\n"
    path = data_path / PASSWORD_FILE
    tmp = data_path / f".{PASSWORD_FILE}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(record)
        fh.flush()
        os.fsync(fh.fileno())
    if os.geteuid() == 0 and (owner.st_uid, owner.st_gid) != (0, 0):
        # `sudo harvey set-password`: the file belongs to the data folder's owner (the service's
        # user), else the service cannot read its own password (issue 31).
        os.chown(tmp, owner.st_uid, owner.st_gid)
    os.replace(tmp, path)
    return path


def _user(uid: int) -> str:
    import pwd
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def unreadable_hint(path: Path) -> str:
    """Why this process cannot read the password file, and the command that fixes it."""
    try:
        st = path.stat()
        owner, mode = _user(st.st_uid), f"{st.st_mode & 0o777:04o}"
    except OSError:
        owner, mode = "unknown", "unknown"
    me = _user(os.geteuid())
    return (f"cannot read the password file {path}: permission denied (owned by {owner}, mode {mode}; Harvey "
            f"runs as {me}), so no one can sign in. Fix: `sudo chown {me}: {path}`, or set the password again "
            f"as {me}: `sudo -u {me} harvey --config <harvey.yaml> set-password`")


def verify_record(record: str, password: str) -> bool:
    """Whether ``password`` matches a stored ``scrypt$n$r$p$salt$hash`` line."""
    try:
        n, r, p, salt, digest = _parse(record)
    except ValueError:
        return False
    return hmac.compare_digest(_scrypt(password, salt, n, r, p), digest)


def _parse(record: str) -> tuple[int, int, int, bytes, bytes]:
    """Split a stored line; ValueError when it is not one we wrote."""
    kind, n, r, p, salt, digest = record.strip().split("$")
    n, r, p = int(n), int(r), int(p)
    if kind != "scrypt" or not (2 <= n <= 2 ** 20 and 1 <= r <= 32 and 1 <= p <= 16):
        raise ValueError("not a Harvey scrypt record")
    return n, r, p, base64.b64decode(salt, validate=True), base64.b64decode(digest, validate=True)


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    """scrypt from the standard library, with room for the memory it needs."""
    return hashlib.scrypt(password.encode("utf-8", "surrogatepass"), salt=salt, n=n, r=r, p=p,
                          maxmem=256 * n * r * p + 2 ** 20, dklen=32)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class PasswordFile:
    """The stored hash, re-read when the file changes (set-password while serving)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._stamp: tuple | None = None
        self._record: str | None = None
        self._lock = threading.Lock()

    def record(self) -> str | None:
        """The usable stored line, or None when there is none (missing or damaged)."""
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            return None
        with self._lock:
            if stamp != self._stamp:
                self._stamp, self._record = stamp, self._read()
            return self._record

    def _read(self) -> str | None:
        try:
            record = self.path.read_text(encoding="ascii").strip()
            _parse(record)
            return record
        except PermissionError:
            log.error("%s", unreadable_hint(self.path))
            return None
        except (OSError, ValueError, UnicodeDecodeError):
            log.error("%s is not a usable password file: run `%s` again", self.path, SET_PASSWORD_HINT)
            return None

    def generation(self) -> str | None:
        """A short fingerprint of the stored hash: changes whenever the password is set."""
        record = self.record()
        return hashlib.sha256(record.encode("ascii")).hexdigest()[:16] if record else None

    def verify(self, password: str) -> bool:
        record = self.record()
        return bool(record) and verify_record(record, password)


# -- slowing down wrong passwords -----------------------------------------------------------

@dataclass
class Throttle:
    """Failures per key: after ``free`` of them each failure doubles the wait, up to ``cap``.

    Kept in memory: a restart forgets it, which costs an attacker a restart.
    """

    free: int = 3
    cap: float = 900.0
    clock: object = time.monotonic
    max_keys: int = 10000
    _entries: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def wait(self, key: str) -> float:
        """Seconds before ``key`` may try again (0 = now)."""
        with self._lock:
            until = self._entries.get(key, (0, 0.0))[1]
            return max(0.0, until - self.clock())

    def failed(self, key: str) -> float:
        """Count a failure; the wait it earns."""
        with self._lock:
            failures, _ = self._entries.get(key, (0, 0.0))
            failures += 1
            delay = 0.0 if failures <= self.free else min(self.cap, 2.0 ** (failures - self.free))
            self._entries[key] = (failures, self.clock() + delay)
            if len(self._entries) > self.max_keys:
                self._forget_expired()
            return delay

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def _forget_expired(self) -> None:
        """Bound memory: drop keys whose wait is over (then the oldest, if still too many)."""
        now = self.clock()
        self._entries = {k: v for k, v in self._entries.items() if v[1] > now}
        while len(self._entries) > self.max_keys:
            self._entries.pop(next(iter(self._entries)))


# -- the decision and the app hooks ---------------------------------------------------------

def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address or a Host header's name) is this machine only."""
    host = (host or "").strip().strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _loopback_peer(environ) -> bool:
    return is_loopback(environ.get("REMOTE_ADDR", ""))


def _host_name(environ) -> str:
    try:
        return urlsplit(f"//{environ.get('HTTP_HOST', '')}").hostname or ""
    except ValueError:
        return ""


def headerless_proxy(environ) -> str:
    """How a request shows it came through a proxy on this machine that adds no forwarding header; "" if not.

    "HTTP/1.0": nginx's bare ``proxy_pass`` talks HTTP/1.0 to its upstream, while
    browsers and HTTP clients speak 1.1 or 2. "Host": a loopback peer naming
    another machine (a proxy that passes the browser's Host and nothing else;
    ``check_host`` refuses it, so it is broken rather than open).
    """
    if came_through_proxy(environ) or not _loopback_peer(environ):
        return ""
    if environ.get("SERVER_PROTOCOL") == "HTTP/1.0":
        return "HTTP/1.0"
    return "" if is_loopback(_host_name(environ)) else "Host"


def password_required(mode: str, host: str, trusted_proxy: str | None = None) -> bool:
    """none: never; password: always; auto: when the app listens beyond loopback or behind a proxy.

    This is the decision for every request; under ``auto`` a request that came
    through an unnamed proxy needs the password too (``AuthState.needed``).
    """
    return mode == "password" or (mode == "auto" and (not is_loopback(host) or bool(trusted_proxy)))


@dataclass
class AuthState:
    """What the hooks need, kept in ``app.extensions["harvey_auth"]``."""

    required: bool
    password: PasswordFile
    per_client: Throttle = field(default_factory=Throttle)
    everyone: Throttle = field(default_factory=lambda: Throttle(free=20, cap=60.0))
    loopback_only: bool = False
    mode: str = "auto"
    trusted_proxy: str | None = None
    sightings: "ProxySightings | None" = None
    _proxies_seen: set = field(default_factory=set)

    def needed(self, environ) -> bool:
        """Whether this request must carry a signed-in cookie.

        Under ``auth: auto`` on loopback, a request with forwarding headers came
        from wherever the proxy serves (the LAN, the internet), not from this
        machine: it signs in like a LAN request; so does one that a proxy passed
        on bare (HTTP/1.0 from loopback, ``headerless_proxy``).
        """
        return self.required or (self.mode == "auto" and (
            came_through_proxy(environ) or headerless_proxy(environ) == "HTTP/1.0"))

    def note_proxy(self, environ) -> None:
        """Say once per proxy address that it is not trusted, and what that costs."""
        peer = environ.get("REMOTE_ADDR", "")
        if self.trusted_proxy or peer in self._proxies_seen or len(self._proxies_seen) > 16:
            return
        self._proxies_seen.add(peer)
        log.warning("A request came through a proxy at %s (forwarding headers): it must sign in. "
                    "Set server.trusted_proxy: %s in harvey.yaml so wrong passwords are counted per "
                    "client, not for everyone behind the proxy at once.", peer, peer)


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



# -- what `harvey check` says about a proxy ---------------------------------------------------

class ProxySightings:
    """The last request that came through a proxy with forwarding headers, and the last without.

    Kept in the data folder (``harvey check`` runs in another process) and written
    at most once per kind per process: one small file, no write per request.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._noted: set[str] = set()
        self._lock = threading.Lock()

    def note(self, environ) -> None:
        """Record this request if it is the first of its kind since start (``with`` or ``without`` headers)."""
        how = headerless_proxy(environ)
        kind = "with" if came_through_proxy(environ) else ("without" if how else "")
        with self._lock:
            if not kind or kind in self._noted:
                return
            self._noted.add(kind)
        entry = {"when": time.time(), "peer": environ.get("REMOTE_ADDR", ""),
                 "host": environ.get("HTTP_HOST", ""), "protocol": environ.get("SERVER_PROTOCOL", ""), "how": how}
        if kind == "without":
            log.warning("A request reached Harvey through a proxy on this machine that sends no forwarding "
                        "headers (%s from %s, Host %s): see deploy/nginx-harvey.conf.", how or "?",
                        entry["peer"], entry["host"])
        try:
            seen = self.read()
            seen[kind] = entry
            from .storage import atomic_write_text

            atomic_write_text(self.path, json.dumps(seen, indent=1))
        except OSError as exc:
            log.warning("could not note the proxy in %s: %s", self.path, exc)

    def read(self) -> dict:
        try:
            seen = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return seen if isinstance(seen, dict) else {}


def proxy_problems(config, sites=NGINX_SITES) -> list[str]:
    """What ``harvey check`` says about reverse proxies: a bare proxy seen by the app, or in nginx's sites."""
    problems = []
    seen = ProxySightings(config.data_path / PROXY_SIGHTINGS_FILE).read()
    without, with_headers = seen.get("without"), seen.get("with")
    if isinstance(without, dict) and not (isinstance(with_headers, dict)
                                          and with_headers.get("when", 0) > without.get("when", 0)):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(without.get("when", 0)))
        problems.append(
            f"on {when} Harvey was reached through a proxy on this machine that sends no forwarding headers "
            f"({without.get('how') or '?'}: {without.get('protocol')} from {without.get('peer')}, Host "
            f"{without.get('host')}). Under auth: auto such a proxy could open Harvey to everyone it serves: "
            "make it send X-Forwarded-For, X-Forwarded-Proto and the Host (deploy/nginx-harvey.conf), and "
            "set server.trusted_proxy to the address it connects from.")
    problems.extend(_bare_nginx_sites(config.server.port, sites))
    return problems


def _bare_nginx_sites(port: int, sites) -> list[str]:
    """nginx site files that proxy_pass to Harvey's port without setting X-Forwarded-For."""
    import re

    target = re.compile(rf"proxy_pass\s+https?://(127\.[\d.]+|localhost|\[::1\]):{port}\b")
    found = []
    for folder in sites:
        try:
            files = sorted(p for p in Path(folder).iterdir() if p.is_file())
        except OSError:
            continue
        for path in files:
            try:
                text = "\n".join(line.split("#", 1)[0] for line in path.read_text(errors="replace").splitlines())
            except OSError:
                continue
            if target.search(text) and "x-forwarded-for" not in text.lower():
                found.append(f"{path} passes requests to Harvey (port {port}) without X-Forwarded-For: "
                             "add the proxy_set_header lines of deploy/nginx-harvey.conf.")
    return found
