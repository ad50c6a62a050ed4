"""Shared helpers for the app-cost benchmarks (bench_overhead, bench_tokens, bench_memory,
bench_pages, bench_sse, bench_budget).  Not a benchmark itself.

Everything here uses the project's own test tools: ``tests/scripted_ollama.py``
(the scripted Ollama-API server) and ``tests/conftest.py`` (``LiveApp``: the app
under waitress with an httpx client that carries the CSRF token).
"""
from __future__ import annotations

import datetime
import http.client
import math
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "tests")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from scripted_ollama import Recorded, Reply, ScriptedOllama  # noqa: E402,F401


# -- machine and statistics ----------------------------------------------------------------

def machine() -> str:
    """One line: CPU model, cores, load, Python, date."""
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{cpu}, nproc={os.cpu_count()}, load average {load}, Python {platform.python_version()} "
            f"({platform.machine()}, {platform.system()} {platform.release()}), "
            f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}")


def median(values) -> float:
    return statistics.median(values)


def percentile(values, p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    data = sorted(values)
    if not data:
        return float("nan")
    k = max(0, min(len(data) - 1, math.ceil(p / 100 * len(data)) - 1))
    return data[k]


def table(headers: list[str], rows: list[list]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(headers) + " |",
           "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|"]
    for row in rows:
        out.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(out)


def write_serve_config(folder: Path, ollama_url: str, port: int) -> Path:
    """A harvey.yaml for a `harvey serve` subprocess whose folders all live in ``folder``."""
    path = folder / "harvey.yaml"
    path.write_text(
        f"ollama:\n  url: {ollama_url}\n  model: tiny:1b\nworkspace: {folder / 'workspace'}\n"
        f"sessions_dir: {folder / 'sessions'}\ndata_dir: {folder / 'data'}\nuser_name: bench\n"
        f"server:\n  host: 127.0.0.1\n  port: {port}\n")
    return path


def serve_env() -> dict:
    """The environment for that subprocess: this checkout, no Ollama overrides from the shell."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OLLAMA_HOST", None)
    env.pop("HARVEY_MODEL", None)
    return env


# -- documents ----------------------------------------------------------------------------

from test_analysis import PARAGRAPH  # noqa: E402,F401  (the test suite's big.md, shared)
from test_analysis import big_markdown as synthetic_markdown  # noqa: E402,F401


def pydoc_markdown(limit_bytes: int) -> str:
    """Real English prose: Python's own reference topics (pydoc_data, shipped with CPython),
    one ``## topic`` section each, in sorted order, the last one cut at a paragraph break
    so that the text is at most ``limit_bytes``."""
    from pydoc_data.topics import topics

    parts, size = [], 0
    for key in sorted(topics):
        block = f"## {key}\n\n{topics[key].strip()}\n"
        room = limit_bytes - size
        if len(block.encode()) > room:
            cut = block.encode()[:max(0, room)].decode("utf-8", "ignore")
            cut = cut[: cut.rfind("\n\n") + 1]        # end at a paragraph break
            if cut.strip():
                parts.append(cut)
            break
        parts.append(block)
        size += len(block.encode()) + 1
    return "\n".join(parts)


def stdlib_source(names: tuple[str, ...], limit_bytes: int) -> str:
    """Real Python source: stdlib modules, concatenated, cut at a line break near ``limit_bytes``."""
    import importlib.util

    text = ""
    for name in names:
        spec = importlib.util.find_spec(name)
        text += Path(spec.origin).read_text(encoding="utf-8") + "\n\n"
        if len(text.encode()) >= limit_bytes:
            break
    cut = text.encode()[:limit_bytes].decode("utf-8", "ignore")
    return cut[: cut.rfind("\n") + 1]


def chunks_for(text: str, kind: str, size_tokens: int = 1500, overlap: str = "paragraph") -> int:
    from app import chunking

    settings = chunking.ChunkSettings(size_tokens=size_tokens, overlap=overlap, bytes_per_token=4.0)
    return chunking.plan_document(chunking.make_document(text, kind, settings)).chunks


def fit_to_chunks(make, target: int, kind: str, lo: int, hi: int, **kw) -> tuple[str, int]:
    """The smallest ``make(n)`` (n in [lo, hi]) whose document has exactly ``target`` chunks."""
    for n in range(lo, hi + 1):
        text = make(n)
        got = chunks_for(text, kind, **kw)
        if got == target:
            return text, n
        if got > target:
            break
    raise RuntimeError(f"no size in [{lo}, {hi}] gives {target} chunks")


# -- timing the model's side ----------------------------------------------------------------

class TimedEvent(threading.Event):
    """A threading.Event that remembers when it was first set (time.monotonic)."""

    def __init__(self):
        super().__init__()
        self.at: float | None = None

    def set(self):
        if self.at is None:
            self.at = time.monotonic()
        super().set()


class TimedScripted(ScriptedOllama):
    """The scripted server, recording when each request's answer was completely sent.

    ``Recorded.at`` is the arrival; ``Recorded.finished`` is set by the handler after
    the last NDJSON line and the chunked terminator were flushed, so
    ``finished.at - at`` is the model's time as the server sees it.

    ``nodelay`` (default True) sets TCP_NODELAY on the server's sockets, as Ollama's Go
    HTTP server does.  Without it, http.server's two writes per plain JSON answer
    (headers, then body) meet Nagle's algorithm and the client's delayed ACK on a
    keep-alive connection: each /api/tags answer then takes ~44 ms instead of ~0.6 ms
    on loopback, which is the test server's cost, not the app's.
    """

    def __init__(self, *args, nodelay: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self._httpd.RequestHandlerClass.disable_nagle_algorithm = nodelay

    def _record(self, method: str, path: str, body: dict) -> Recorded:
        rec = super()._record(method, path, body)
        rec.finished = TimedEvent()
        return rec

    def model_seconds(self, since: float = 0.0) -> list[float]:
        return [r.finished.at - r.at for r in self.chats() if r.at >= since and r.finished.at]


class _TimedStream:
    """Wraps a ChatStream: records [call start, last line read] on the calling thread."""

    def __init__(self, stream, spans: list, started: float, cpu_started: float):
        self._stream, self._spans = stream, spans
        self._started, self._cpu_started = started, cpu_started

    def __iter__(self):
        try:
            yield from self._stream
        finally:
            self._spans.append((self._started, time.monotonic(), time.thread_time() - self._cpu_started))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def time_client_calls(client) -> list:
    """Patch one ModelServer instance so every ``chat`` records (start, end, thread CPU s).

    Start = just before the request is built; end = the final NDJSON line was read
    (or the stream ended).  The spans are appended to the returned list.
    """
    spans: list = []
    original = client.chat

    def chat(*args, **kwargs):
        started, cpu = time.monotonic(), time.thread_time()
        return _TimedStream(original(*args, **kwargs), spans, started, cpu)

    client.chat = chat
    return spans


# -- the app -----------------------------------------------------------------------------

def live_app(tmp: Path, ollama_url: str, **overrides):
    """tests/conftest.LiveApp with tests/conftest.make_config (loopback, auth auto = none)."""
    from conftest import LiveApp, make_config

    return LiveApp(make_config(tmp, ollama_url, **overrides))


def close_quietly(live) -> None:
    """LiveApp.close() closes waitress's trigger with the channels, so a task thread that is
    still finishing logs 'Bad file descriptor'; that is the test harness shutting down, not
    something to show next to the figures."""
    import logging

    logger = logging.getLogger("waitress")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        live.close()
        time.sleep(0.05)
    finally:
        logger.setLevel(level)


class Served:
    """`python -m app.cli serve` in a subprocess with a harvey.yaml in ``folder``."""

    def __init__(self, folder: Path, ollama_url: str):
        import socket

        self.folder = folder
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        config = write_serve_config(folder, ollama_url, self.port)
        command = [sys.executable, "-m", "app.cli", "serve", "--config", str(config)]
        env = serve_env()
        self.proc = subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.get("/healthz")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def get(self, path: str, headers: dict | None = None):
        conn = self.connection()
        try:
            conn.request("GET", path, headers=headers or {})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in kB from /proc/<pid>/status."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            key, value = line.split(":", 1)
            values[key] = int(value.split()[0])
    return values["VmRSS"], values["VmHWM"]


def git_revision() -> str:
    """HEAD's short id, and whether the app's files differ from it (read-only git calls)."""
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "app", "templates",
                                "static"], capture_output=True, text=True, timeout=5).stdout.strip()
        return rev + (" (+ uncommitted changes in app/templates/static)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_section(section: str, text: str) -> Path:
    """Replace (or add) only the section headed ``section`` in bench/RESULTS.md; ``text`` starts with it."""
    path = ROOT / "bench" / "RESULTS.md"
    old = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    pattern = re.compile(rf"^{re.escape(section)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(old):
        new = pattern.sub(lambda _: text.rstrip("\n") + "\n\n", old, count=1)
    else:
        new = old.rstrip("\n") + "\n\n" + text
    path.write_text(new.rstrip("\n") + "\n", encoding="utf-8")
    return path


def add_rows(section: str, intro: list[str], rows: list[str]) -> Path:
    """Add ``rows`` to the end of the table of the section headed ``section`` in bench/RESULTS.md (kept rows
    stay: earlier runs are the history), creating the section from ``intro`` (its lines after the heading,
    the table's head last) when there is none."""
    path = ROOT / "bench" / "RESULTS.md"
    old = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    found = re.search(rf"^{re.escape(section)}\n.*?(?=^## |\Z)", old, re.S | re.M)
    body = found.group(0).rstrip("\n") if found else "\n".join([section, "", *intro])
    return write_section(section, body + "\n" + "\n".join(rows) + "\n")


def header(title: str, command: str) -> str:
    return f"### {title}\n\nCommand: `{command}`\n\nMachine: {machine()}; tree at {git_revision()}\n"


CHUNK_RE = re.compile(r"\nChunk (\d+) of (\d+)(?: \([^\n]*\))?:\n")
