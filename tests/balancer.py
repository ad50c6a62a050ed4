"""Debian's nginx as a test's own process: a reverse proxy in front of Harvey, or a balancer in
front of several model servers (issue 24).

``Nginx`` runs ``nginx -p FOLDER -c FOLDER/nginx.conf`` in the foreground (no daemon, no system
files): its pid file, error log, temp folders and config all live in the test's tmp folder, and
``stop()`` ends it. ``balancer_site`` is deploy/nginx-model-servers.conf, the snippet docs/model-servers.md
documents, with only its machines' addresses and its port changed, so the tests run the very
configuration a reader copies. The ``balancer`` fixture starts it in front of given servers and
stops it at the end of the test.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import require
from waiting import wait_for_exit, wait_until

ROOT = Path(__file__).resolve().parent.parent
BALANCER_SITE = ROOT / "deploy" / "nginx-model-servers.conf"
DOCUMENTED_SERVERS = ("192.168.1.21:11434", "192.168.1.22:11434")


def free_port() -> int:
    """A port nothing listens on now (nginx binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nginx_binary() -> str | None:
    """Debian's nginx (scripts/test.sh installs it); None when it is missing."""
    return shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)


def balancer_site(servers: list[str], port: int) -> str:
    """deploy/nginx-model-servers.conf with its machines replaced by ``servers`` (host:port) and
    its port by ``port`` on loopback; each replaced line must be found once, so an edit of the
    documented file that the test would no longer cover fails here instead of passing unnoticed."""
    text = BALANCER_SITE.read_text()
    lines = [f"server {address};" for address in DOCUMENTED_SERVERS]
    for old in [*lines, "listen 11435;"]:
        assert text.count(old) == 1, f"deploy/nginx-model-servers.conf no longer has {old!r} once"
    text = text.replace(lines[0], "\n    ".join(f"server {address};" for address in servers))
    text = text.replace(lines[1] + "\n", "")
    return text.replace("listen 11435;", f"listen 127.0.0.1:{port};")


class Nginx:
    """Debian's nginx as the test's own process: its own prefix, config, pid and logs; no daemon."""

    def __init__(self, folder: Path, site: str, port: int):
        """Write the config around ``site`` (an http-level snippet) and start; returns once nginx
        accepts connections on ``port`` (or fails the test with nginx's own words)."""
        binary = nginx_binary()
        require(binary is not None, "Debian's nginx is not installed (apt-get install nginx; scripts/test.sh does)")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "site.conf").write_text(site)
        temp = "\n".join(f"    {kind}_temp_path {folder}/{kind};" for kind in
                         ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        (folder / "nginx.conf").write_text(
            ("user root;\n" if os.geteuid() == 0 else "") +
            f"worker_processes 1;\ndaemon off;\npid {folder}/nginx.pid;\nerror_log {folder}/error.log;\n"
            f"events {{ worker_connections 64; }}\n"
            f"http {{\n    access_log off;\n{temp}\n    include {folder}/site.conf;\n}}\n")
        self.folder, self.port = folder, port
        self.url = f"http://127.0.0.1:{port}"
        self.log = open(folder / "nginx.out", "w")
        self.proc = subprocess.Popen([binary, "-p", str(folder), "-c", str(folder / "nginx.conf")],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(lambda: self._listening(port), 20, f"nginx to listen on {port} ({self.output()})")

    def _listening(self, port: int) -> bool:
        """True once a connection to ``port`` succeeds; fails the test at once if nginx exited."""
        if self.proc.poll() is not None:
            pytest.fail(f"nginx exited with {self.proc.returncode}: {self.output()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    def output(self) -> str:
        """What nginx said (its stdout/stderr and error log): for failure messages and asserts."""
        self.log.flush()
        parts = [p.read_text(errors="replace") for p in (self.folder / "nginx.out", self.folder / "error.log")
                 if p.exists()]
        return "\n".join(parts)

    def stop(self) -> None:
        """Terminate nginx (it exits at once on SIGTERM) and wait, with a deadline; twice is once."""
        if self.proc.poll() is None:
            self.proc.terminate()
            wait_for_exit(self.proc, 10, "nginx to stop")
        if not self.log.closed:
            self.log.close()


@pytest.fixture
def balancer(tmp_path):
    """``balancer([url, url])``: the documented nginx balancer in front of those servers; stopped
    at the end of the test."""
    started: list[Nginx] = []

    def start(urls: list[str]) -> Nginx:
        port = free_port()
        servers = [url.removeprefix("http://").rstrip("/") for url in urls]
        proxy = Nginx(tmp_path / f"balancer-{len(started)}", balancer_site(servers, port), port)
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()
