"""Benchmark the session pages: the list of 500 sessions and a 1,000-turn session, through waitress.

Run from the repository root:  python bench/bench_sessions.py [--runs 15] [--write]

The sessions are written by the app's own writer (``SessionStore.create``,
``store.turn_scene`` / ``fountain.turn_scenes``, ``fountain.dumps`` and the
the app's atomic ``storage.atomic_write_text``) into a temporary folder, deterministically
(fixed seed): 499 sessions of 4-40 turns with Markdown replies (lists, code,
tables; one in ten with a chunk analysis) plus one session of 1,000 turns, so
the list holds 500 files.  The app then runs under waitress on a loopback port
(as ``harvey serve`` runs it) and httpx times whole GET requests (status 200,
body read):

* "first": the first request of a fresh app (the list index is empty, the
  session is not parsed yet), so it includes parsing every file once;
* "warm": the median of ``--runs`` further requests (the list's index and
  the store's parse are cached by mtime; the page is rendered every time).

Goals (issue): the 1,000-turn session opens in under 0.5 s, the list of 500
sessions in under 0.3 s.  ``--write`` replaces the "## Session pages" section
of bench/RESULTS.md with the numbers.

``--search [--sessions 500] [--session-kb 100] [--before DIR]`` (issue 23) times only the list's
search, in-process on ``SessionIndex`` (no HTTP): the sessions of bench/bench_stream_list.py (about
100 KB each, every reply with an emoji, one holding "zeppelin"), searched for "zeppelin" by this
checkout's app and, with ``--before``, by DIR's (a subprocess each, the checkout first on the path):
the first search (no word files yet: each session read once and its word file written), the next
ones (median of 3), one after a single session changed, the bytes of the word files, and the
tracemalloc peak of a search.  Prints a Markdown table; it writes nothing to RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import ROOT, write_section  # noqa: E402

from app import create_app
from app.sessions import fountain  # noqa: E402
from app.storage import atomic_write_text  # noqa: E402
from app.config import Config, ModelServerConfig, ServerConfig  # noqa: E402

SECTION = "## Session pages"
WORDS = ("the a of and to in is was for on that with as by at from it this be are or raspberry pi model "
         "context swap memory fan heatsink kernel python service journal network disk").split()
T0 = datetime(2026, 1, 1, 8, 0, 0)


def _words(r: random.Random, n: int) -> str:
    return " ".join(r.choice(WORDS) for _ in range(n))


def _reply(r: random.Random) -> str:
    """A Markdown reply of a few hundred bytes to ~2 KB, like a small model's."""
    parts = [_words(r, r.randint(15, 60)).capitalize() + "."]
    if r.random() < 0.5:
        parts.append("\n".join(f"- {_words(r, r.randint(3, 10))}" for _ in range(r.randint(2, 6))))
    if r.random() < 0.3:
        parts.append("```python\n" + "\n".join(f"x{i} = {i}  # {_words(r, 4)}" for i in range(r.randint(2, 8)))
                     + "\n```")
    if r.random() < 0.1:
        parts.append("| key | value |\n|---|---|\n" + "\n".join(f"| {_words(r, 1)} | {i} |" for i in range(4)))
    parts.append(_words(r, r.randint(10, 40)).capitalize() + ".")
    return "\n\n".join(parts)


def write_session(store, when: datetime, n_turns: int, r: random.Random, analysis: bool = False) -> str:
    """One session through the app's writer: create, then the turns' scenes, written atomically once."""
    session = store.create("llama3.2:3b", title=_words(r, 4).title(), now=when)
    play = session.play
    for i in range(n_turns):
        question = _words(r, r.randint(5, 25)) + (" zeppelin" if r.random() < 0.04 and i == 0 else "") + "?"
        turn = fountain.Turn(when + timedelta(seconds=30 * i), question, "llama3.2:3b",
                             _reply(r), fountain.stats_line("llama3.2:3b", "ollama", 200, 1500, 9.5))
        if analysis and i == n_turns - 1:
            turn.analysis = fountain.ChunkAnalysis("report.md", 6, "llama3.2:3b", "paragraph", 1500,
                                                   "Summarize each part.", turn.when, ["ok"] * 6, "ok")
        play.scenes += fountain.turn_scenes(turn, store.user_name, store.workspace)
    atomic_write_text(store.path(session.name), fountain.dumps(play))
    return session.name


def populate(store, count: int, big_turns: int) -> str:
    """``count - 1`` ordinary sessions plus one of ``big_turns`` turns; returns the big one's name."""
    r = random.Random(0)
    for i in range(count - 1):
        write_session(store, T0 + timedelta(hours=i), r.randint(4, 40), r, analysis=i % 10 == 0)
    return write_session(store, T0 + timedelta(hours=count), big_turns, r)


class Served:
    """The app under waitress on a free loopback port (as in tests/conftest.py)."""

    def __init__(self, config: Config):
        from waitress import create_server

        self.app = create_app(config)
        self.server = create_server(self.app, host="127.0.0.1", port=0, threads=4)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.server.effective_port}", timeout=60)

    def timed_get(self, path: str) -> tuple[float, int]:
        """Seconds for one whole GET (body read) and the body's size."""
        start = time.perf_counter()
        response = self.http.get(path)
        body = response.content
        seconds = time.perf_counter() - start
        assert response.status_code == 200, (path, response.status_code)
        return seconds, len(body)

    def close(self) -> None:
        self.http.close()
        self.app.extensions["harvey"].jobs.shutdown()
        self.server.close()


def measure(served: Served, path: str, runs: int) -> dict:
    first, size = served.timed_get(path)
    warm = [served.timed_get(path)[0] for _ in range(runs)]
    return {"first": first, "warm": statistics.median(warm), "max": max(warm), "bytes": size}


def at_start(config: Config, path: str) -> float:
    """The request sent the moment a fresh app is up (it waits for the start-up warm-up)."""
    served = Served(config)
    try:
        return served.timed_get(path)[0]
    finally:
        served.close()


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        found = re.search(r"^(?:model name|Model)\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = found.group(1).strip() if found else cpu
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def report(results: dict, args, setup_s: float, folder_bytes: int, list_at_start: float) -> str:
    rows = "\n".join(
        f"| {label} | {r['first'] * 1000:.0f} ms | {r['warm'] * 1000:.0f} ms | {r['max'] * 1000:.0f} ms "
        f"| {r['bytes'] / 1024:.0f} KB | {goal} |"
        for label, (r, goal) in results.items())
    return f"""{SECTION}

`python bench/bench_sessions.py --runs {args.runs} --write` ({datetime.now():%Y-%m-%d}).
Machine: {machine()}.
Through waitress on loopback, timed with httpx (whole request, body read).
{args.count} session files ({folder_bytes / 1024 / 1024:.1f} MB, written in {setup_s:.1f} s by the app's
writer), one of them {args.big} turns.

- "first": the first request to a fresh app once its start-up warm-up (a background
  thread that indexes every file for the list) has finished; the 1,000-turn session is
  parsed by this request (nothing caches it yet).
- "warm": median of {args.runs} further requests (the list index and the store's parse
  are cached by mtime/size; the HTML is rendered every time).
- A list request sent the instant the app starts waits for the warm-up to finish, i.e.
  parses all {args.count} files: {list_at_start * 1000:.0f} ms.

| request | first | warm (median) | warm (max) | page | goal |
|---|---|---|---|---|---|
{rows}
"""


def write_results(text: str) -> Path:
    """Replace (or add) only our section of bench/RESULTS.md."""
    return write_section(SECTION, text)


# Run in a subprocess with one checkout first on the path: times that checkout's SessionIndex.search.
SEARCH_ONE = """
import json, os, shutil, statistics, sys, time, tracemalloc
from pathlib import Path
sys.path.insert(0, {root!r})
from app.sessions import index as sessions
folder = Path({folder!r})
shutil.rmtree(folder / ".search", ignore_errors=True)
index = sessions.SessionIndex(folder)
index.entries()

def timed(query):
    start = time.perf_counter()
    found = index.search(query)
    return time.perf_counter() - start, len(found)

first, hits = timed("zeppelin")
warm = statistics.median(timed("zeppelin")[0] for _ in range(3))
changed = sorted(folder.glob("*.spmd"))[0]
with open(changed, "a", encoding="utf-8") as fh:
    fh.write("\\n")
after_change = timed("zeppelin")[0]
tracemalloc.start()
timed("zeppelin")
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
words = sum(p.stat().st_size for p in (folder / ".search").glob("*.words")) if (folder / ".search").is_dir() else 0
print(json.dumps(dict(app=sessions.__file__, first=first, warm=warm, after_change=after_change, peak=peak,
                      words=words, hits=hits)))
"""


def search_bench(args) -> None:
    """Time the list's search on the bench_stream_list sessions, this checkout and ``--before``."""
    import json
    import subprocess

    from bench_stream_list import write_sessions

    sides = ([("before", Path(args.before).resolve())] if args.before else []) + [("after", ROOT)]
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        folder = Path(tmp) / "sessions"
        folder.mkdir()
        written = write_sessions(folder, args.sessions, args.session_kb)
        rows = []
        for label, root in sides:
            out = subprocess.run([sys.executable, "-c", SEARCH_ONE.format(root=str(root), folder=str(folder))],
                                 cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, check=True,
                                 capture_output=True, text=True, timeout=3600)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            assert Path(r["app"]).is_relative_to(root), (r["app"], root)      # that checkout's app
            rows.append(f"| {label} | {r['first']:.2f} s | {r['warm']:.3f} s | {r['after_change']:.3f} s "
                        f"| {r['words'] / 1e6:.2f} MB | {r['peak'] / 1e6:.2f} MB | {r['hits']} |")
    print(f"""`python bench/bench_sessions.py --search --sessions {args.sessions} --session-kb {args.session_kb}"""
          f"""{f' --before {args.before}' if args.before else ''}`
Machine: {machine()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}.
{args.sessions} sessions, {written / 1e6:.1f} MB (bench_stream_list's: ~{args.session_kb} KB each, an emoji in every
reply, one holding "zeppelin"); `SessionIndex.search("zeppelin")` in-process.

| code | first search | next (median of 3) | after one session changed | word files | peak (tracemalloc) | hits |
|---|---:|---:|---:|---:|---:|---:|
""" + "\n".join(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--big", type=int, default=1000)
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    parser.add_argument("--search", action="store_true", help="time only the list's search (see above)")
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--session-kb", type=int, default=100)
    parser.add_argument("--before", help="with --search: another checkout whose search is timed too")
    args = parser.parse_args()
    if args.search:
        search_bench(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        config = Config(model_server=ModelServerConfig(url="http://127.0.0.1:9", connect_timeout_s=0.2),
                        server=ServerConfig(host="127.0.0.1", port=0), workspace=f"{tmp}/workspace",
                        sessions_dir=f"{tmp}/sessions", data_dir=f"{tmp}/data", user_name="pi")
        served = Served(config)
        start = time.perf_counter()
        big = populate(served.app.extensions["harvey"].store, args.count, args.big)
        setup_s = time.perf_counter() - start
        folder_bytes = sum(p.stat().st_size for p in Path(config.sessions_dir).glob("*.spmd"))
        served.close()
        list_at_start = at_start(config, "/sessions/")
        served = Served(config)              # a fresh app: only the start-up warm-up has run
        try:
            assert served.app.extensions["harvey"].store.index().warmed.wait(60)
            results = {
                f"list of {args.count} sessions `/sessions/`": (measure(served, "/sessions/", args.runs), "< 300 ms"),
                "search `/sessions/?q=zeppelin`": (measure(served, "/sessions/?q=zeppelin", args.runs), "-"),
                f"read {args.big}-turn session `/sessions/<name>`": (measure(served, f"/sessions/{big}", args.runs),
                                                                     "< 500 ms"),
            }
        finally:
            served.close()
    text = report(results, args, setup_s, folder_bytes, list_at_start)
    print(text)
    if args.write:
        print(f"written to {write_results(text)}")


if __name__ == "__main__":
    main()
