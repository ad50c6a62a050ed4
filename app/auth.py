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

This module holds what needs no request: the password file, the throttles, who
must sign in, the proxy sightings, ``harvey check``'s proxy report. The login gate
and the login and logout pages are in ``app.web.auth``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from .security import came_through_proxy

log = logging.getLogger(__name__)

PASSWORD_FILE = "password"
PROXY_SIGHTINGS_FILE = "proxy-seen.json"
# where Debian's nginx keeps the sites it serves (``harvey check`` reads them)
NGINX_SITES = (Path("/etc/nginx/sites-enabled"), Path("/etc/nginx/conf.d"))
# 32 MiB of memory per check: strong, yet a Pi 3 answers in well under a second.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2 ** 15, 8, 1
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
