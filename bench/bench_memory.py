"""Item 4: resident memory of `harvey serve`, idle and at its peak during a 20-chunk analysis.

Run from the repository root:  python bench/bench_memory.py [--runs 5] [--imports]

Per run, in a fresh temporary folder:
1. the scripted Ollama server runs in its own process (``python tests/scripted_ollama.py
   --port N --delay 0.004``: it echoes the prompt's last 200 characters in 4-character
   pieces, ~0.2 s per request);
2. ``python -m app.cli serve --config harvey.yaml`` runs as a subprocess (the real entry
   point: waitress, 8 threads, loopback, no password), pointed at it;
3. "started": VmRSS once the port answers /healthz;
4. "idle": a browser-like first load (GET / -> the chat page, then its CSS and JS), 2 s
   pause, VmRSS;
5. the user's message names a Markdown file of 20 chunks (about 79 KB), the alert card
   comes back, POST .../start, the SSE progress stream is read to the end while a thread
   samples VmRSS every 5 ms;
6. "peak": VmHWM (the kernel's high-water mark of RSS) after the run; "after": VmRSS 2 s later.

Everything is read from /proc/<pid>/status of the serve process.  Median of ``--runs``.

``--turns N`` (default 300; 0 skips it): one more fresh ``harvey serve`` for N chat turns
through the app (issue 13, problem 10), ``--per-session`` turns (default 10) in each of
N/10 sessions, one after the other as a user would: POST the message, read the reply's
SSE stream to its final event. The scripted server answers each in ~60 pieces, 1 ms apart.
VmRSS after turns 10 (the "first few"), 50, 100, 200, N, and again after the registry's
grace (35 s) has released the last replies; the goal is growth under 10 MB from turn 10.
``--skip-analysis``: only the turns run.

``--imports``: also prints where the idle memory goes: VmRSS of a bare interpreter, then
after importing each third-party dependency, the app's modules, and create_app().
"""
from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from _harness import (ROOT, fit_to_chunks, header, median, rss_kb, serve_env, synthetic_markdown, table,
                      write_serve_config)

PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, path: str = "/", timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}{path}", timeout=1.0)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing answers on port {port}")


def stop_all(procs, tmp: Path, timeout: float = 20.0) -> None:
    """Stop the serve and the scripted server as a user would (SIGINT), then remove the folder."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    shutil.rmtree(tmp, ignore_errors=True)


def one_run(document: str) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    (tmp / "workspace").mkdir()
    (tmp / "workspace" / "big.md").write_text(document)
    procs: list = []
    try:
        serve, app_port = start_servers(tmp, "0.004", procs)
        started, _ = rss_kb(serve.pid)
        base = f"http://127.0.0.1:{app_port}"
        with httpx.Client(base_url=base, timeout=30.0, follow_redirects=True) as http:
            page = http.get("/")
            token = re.search(r'"X-CSRF-Token": "([^"]+)"', html.unescape(page.text)).group(1)
            for asset in re.findall(r'(?:href|src)="(/static/[^"]+)"', page.text):
                http.get(asset)
            name = page.url.path.rsplit("/", 1)[-1]
            time.sleep(2)
            idle, _ = rss_kb(serve.pid)
            headers = {"X-CSRF-Token": token, "HX-Request": "true"}
            card = http.post(f"/s/{name}/messages", data={"message": "Summarize big.md"}, headers=headers).text
            job = re.search(r"/analysis/([0-9a-f]+)/start", card).group(1)
            chunks = int(re.search(r"(\d+) chunks", html.unescape(card)).group(1))
            samples: list[int] = []
            done = threading.Event()

            def sample():
                while not done.is_set():
                    samples.append(rss_kb(serve.pid)[0])
                    time.sleep(0.005)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            http.post(f"/s/{name}/analysis/{job}/start", headers=headers,
                      data={"instruction": "Summarize each section.", "scope": "all"})
            t0 = time.monotonic()
            events = []
            with http.stream("GET", f"/s/{name}/analysis/{job}/events", timeout=120) as response:
                for line in response.iter_lines():
                    if line.startswith("event:"):
                        events.append(line[6:].strip())
            seconds = time.monotonic() - t0
            done.set()
            sampler.join()
            _, peak = rss_kb(serve.pid)
            partials = events.count("partial")
            # the plan's count at the Markdown calibration; the run re-sizes from the server's counts
            ran = int(re.search(r"chunks=(\d+)", (tmp / "sessions" / f"{name}.spmd").read_text()).group(1))
            assert partials == ran and chunks >= 20, (partials, ran, chunks)
            time.sleep(2)
            after, _ = rss_kb(serve.pid)
        return {"started": started, "idle": idle, "peak": peak, "sampled_max": max(samples), "after": after,
                "seconds": seconds}
    finally:
        stop_all(procs, tmp)


def turns_run(turns: int, per_session: int, grace_wait: float = 35.0) -> dict:
    """RSS of one harvey serve over ``turns`` chat turns (problem 10: memory stays flat)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-turns-"))
    (tmp / "workspace").mkdir()
    procs: list = []
    marks = sorted({m for m in (10, 50, 100, 200, turns) if m <= turns})
    rss: dict[int, int] = {}
    try:
        serve, app_port = start_servers(tmp, "0.001", procs)
        base = f"http://127.0.0.1:{app_port}"
        t0 = time.monotonic()
        with httpx.Client(base_url=base, timeout=30.0, follow_redirects=True) as http:
            page = http.get("/")
            token = re.search(r'"X-CSRF-Token": "([^"]+)"', html.unescape(page.text)).group(1)
            headers = {"X-CSRF-Token": token, "HX-Request": "true"}
            name, turn = page.url.path.rsplit("/", 1)[-1], 0
            for n in range(1, turns + 1):
                if turn == per_session:                  # the next session, as "New chat" makes it
                    name = http.post("/new", headers=headers).url.path.rsplit("/", 1)[-1]
                    turn = 0
                message = f"Turn {n}: tell me about item {n} of the list, in a sentence or two please. " * 3
                sent = http.post(f"/s/{name}/messages", data={"message": message}, headers=headers)
                assert sent.status_code == 200, sent.text[:200]
                final = False
                with http.stream("GET", f"/s/{name}/turns/{turn}/stream", timeout=60) as response:
                    for line in response.iter_lines():
                        final = final or line == "event: final"
                assert final, f"turn {n}: no final event"
                http.get(f"/s/{name}")                   # the page, as a reload would read it
                turn += 1
                if n in marks:
                    rss[n] = rss_kb(serve.pid)[0]
        seconds = time.monotonic() - t0
        time.sleep(grace_wait)
        after_grace = rss_kb(serve.pid)[0]
        return {"marks": rss, "after_grace": after_grace, "seconds": seconds,
                "sessions": (turns + per_session - 1) // per_session}
    finally:
        stop_all(procs, tmp)


def start_servers(tmp: Path, delay: str, procs: list) -> tuple[subprocess.Popen, int]:
    """The scripted Ollama server (``delay`` s per piece) and one ``harvey serve`` in ``tmp``, both
    listening; each process is added to ``procs`` as it starts, so ``stop_all`` ends what did."""
    ollama_port, app_port = free_port(), free_port()
    write_serve_config(tmp, f"http://127.0.0.1:{ollama_port}", app_port)
    procs.append(subprocess.Popen([PYTHON, str(ROOT / "tests" / "scripted_ollama.py"), "--port", str(ollama_port),
                                   "--delay", delay], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_port(ollama_port)
    serve = subprocess.Popen([PYTHON, "-m", "app.cli", "serve", "--config", str(tmp / "harvey.yaml")],
                             cwd=tmp, env=serve_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.insert(0, serve)
    wait_port(app_port, "/healthz")
    return serve, app_port


def analyses_run(count: int, document: str) -> dict:
    """RSS of one harvey serve over ``count`` 20-chunk analyses, one after another (problem 10)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-analyses-"))
    (tmp / "workspace").mkdir()
    (tmp / "workspace" / "big.md").write_text(document)
    procs: list = []
    marks = sorted({m for m in (3, 10, 20, count) if m <= count})
    rss: dict[int, int] = {}
    try:
        serve, app_port = start_servers(tmp, "0.0005", procs)
        t0 = time.monotonic()
        with httpx.Client(base_url=f"http://127.0.0.1:{app_port}", timeout=30.0, follow_redirects=True) as http:
            page = http.get("/")
            token = re.search(r'"X-CSRF-Token": "([^"]+)"', html.unescape(page.text)).group(1)
            headers = {"X-CSRF-Token": token, "HX-Request": "true"}
            name = page.url.path.rsplit("/", 1)[-1]
            for n in range(1, count + 1):
                if n > 1:
                    name = http.post("/new", headers=headers).url.path.rsplit("/", 1)[-1]
                card = http.post(f"/s/{name}/messages", data={"message": "Summarize big.md"}, headers=headers).text
                job = re.search(r"/analysis/([0-9a-f]+)/start", card).group(1)
                http.post(f"/s/{name}/analysis/{job}/start", headers=headers,
                          data={"instruction": "Summarize each section.", "scope": "all"})
                deadline = time.monotonic() + 300
                while "synthesis: model=" not in (tmp / "sessions" / f"{name}.spmd").read_text():
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"analysis {n} did not finish")
                    time.sleep(0.05)
                http.get(f"/s/{name}")
                if n in marks:
                    rss[n] = rss_kb(serve.pid)[0]
        return {"marks": rss, "seconds": time.monotonic() - t0}
    finally:
        stop_all(procs, tmp)


def print_analyses(result: dict, count: int) -> None:
    marks = result["marks"]
    first = marks[min(marks)]
    print(f"\n{count} analyses of a 20-chunk file through harvey serve, one after another, "
          f"{result['seconds']:.1f} s:\n")
    rows = [[f"after analysis {n}", f"{v / 1024:.1f} MB", f"{(v - first) / 1024:+.1f} MB"] for n, v in marks.items()]
    print(table(["point", "VmRSS", f"growth since analysis {min(marks)}"], rows))
    print(f"\nGrowth from analysis {min(marks)} to {max(marks)}: {(marks[max(marks)] - first) / 1024:+.1f} MB "
          "(goal: < 10 MB together with the turns run).")


def print_turns(result: dict, turns: int, per_session: int) -> None:
    marks = result["marks"]
    first = marks[min(marks)]
    print(f"\n{turns} chat turns through harvey serve ({result['sessions']} sessions of {per_session} turns; "
          f"POST + SSE to the final event + page reload each), {result['seconds']:.1f} s:\n")
    rows = [[f"after turn {n}", f"{v / 1024:.1f} MB", f"{(v - first) / 1024:+.1f} MB"] for n, v in marks.items()]
    rows.append(["35 s later (finished replies released)", f"{result['after_grace'] / 1024:.1f} MB",
                 f"{(result['after_grace'] - first) / 1024:+.1f} MB"])
    print(table(["point", "VmRSS", f"growth since turn {min(marks)}"], rows))
    growth = (marks[max(marks)] - first) / 1024
    print(f"\nGrowth from turn {min(marks)} to turn {max(marks)}: {growth:+.1f} MB (goal: < 10 MB).")


IMPORT_PROBE = r"""
import os
def rss():
    for line in open(f"/proc/{os.getpid()}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
print("bare interpreter", rss())
for name in ("yaml", "markupsafe", "jinja2", "werkzeug", "flask", "httpx", "waitress", "markdown_it", "bs4"):
    __import__(name)
    print(f"+ import {name}", rss())
import app.web.analysis, app.web.chat, app.web.sessions, app.web.auth  # the app's own modules (+ what they import)
print("+ app modules", rss())
from app import create_app
from app.config import Config, ModelServerConfig
import tempfile
tmp = tempfile.mkdtemp()
create_app(Config(model_server=ModelServerConfig(url="http://127.0.0.1:9"), workspace=tmp + "/w", sessions_dir=tmp + "/s",
                  data_dir=tmp + "/d"))
print("+ create_app()", rss())
"""


def import_costs() -> list[list]:
    """VmRSS step by step while importing the app's dependencies, then the app (median of 3)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = []
    for _ in range(3):
        out = subprocess.run([PYTHON, "-c", IMPORT_PROBE], env=env, cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
        runs.append([line.rsplit(" ", 1) for line in out.strip().splitlines()])
    steps = []
    previous = 0
    for i, (label, _) in enumerate(runs[0]):
        value = median([int(run[i][1]) for run in runs])
        steps.append([label, f"{value / 1024:.1f} MB", f"+{(value - previous) / 1024:.1f} MB" if i else ""])
        previous = value
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--imports", action="store_true", help="also show where the idle memory goes")
    parser.add_argument("--turns", type=int, default=300, help="chat turns in the turns run (0: skip it)")
    parser.add_argument("--per-session", type=int, default=10, help="turns per session in the turns run")
    parser.add_argument("--skip-analysis", action="store_true", help="only the turns run")
    parser.add_argument("--analyses", type=int, default=0, help="also N analyses in one serve (problem 10)")
    args = parser.parse_args()
    if args.analyses and args.skip_analysis:
        document, _ = fit_to_chunks(synthetic_markdown, 20, "markdown", 10, 60)
        print(header("Memory of harvey serve over analyses (issue 13, problem 10)",
                     f"python bench/bench_memory.py --skip-analysis --turns 0 --analyses {args.analyses}"))
        print_analyses(analyses_run(args.analyses, document), args.analyses)
        if not args.turns:
            return
    if args.skip_analysis:
        print(header("Memory of harvey serve over chat turns (issue 13, problem 10)",
                     f"python bench/bench_memory.py --skip-analysis --turns {args.turns} "
                     f"--per-session {args.per_session}"))
        print_turns(turns_run(args.turns, args.per_session), args.turns, args.per_session)
        return
    document, _ = fit_to_chunks(synthetic_markdown, 20, "markdown", 10, 60)   # exactly 20 chunks
    print(header("Memory of harvey serve (item 4)",
                 f"python bench/bench_memory.py --runs {args.runs} --turns {args.turns}"
                 + (" --imports" if args.imports else "")))
    results = [one_run(document) for _ in range(args.runs)]
    mb = lambda key: f"{median([r[key] for r in results]) / 1024:.1f} MB"  # noqa: E731
    spread = lambda key: (f"{min(r[key] for r in results) / 1024:.1f}–"  # noqa: E731
                          f"{max(r[key] for r in results) / 1024:.1f}")
    print(f"Median of {args.runs} runs (fresh process each); analysis of {len(document):,} bytes in 20 chunks "
          f"took {median([r['seconds'] for r in results]):.1f} s.\n")
    print(table(["state", "RSS (median)", "min–max (MB)", "goal"], [
        ["started, no request yet (VmRSS)", mb("started"), spread("started"), ""],
        ["idle after the first page load (VmRSS)", mb("idle"), spread("idle"), "< 60 MB"],
        ["peak during the 20-chunk analysis (VmHWM)", mb("peak"), spread("peak"), "< 100 MB"],
        ["highest 5-ms sample during the analysis (VmRSS)", mb("sampled_max"), spread("sampled_max"), ""],
        ["2 s after the analysis (VmRSS)", mb("after"), spread("after"), ""],
    ]))
    if args.turns:
        print_turns(turns_run(args.turns, args.per_session), args.turns, args.per_session)
    if args.imports:
        steps = import_costs()
        print("\nWhere the idle memory goes (VmRSS of a fresh interpreter after each step, median of 3):\n")
        print(table(["step", "VmRSS", "added"], steps))


if __name__ == "__main__":
    main()
