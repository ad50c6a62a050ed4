"""Issue 23 items 5 and 6: a streamed reply's cost, and the session list's memory, before and after.

Run from the repository root:
    git archive <before-commit> | tar -x -C /tmp/before        # the code to compare with
    python bench/bench_stream_list.py --before /tmp/before [--runs 3] [--reply-kb 30] [--sessions 500] [--session-kb 100]

Each side runs in its own process with its checkout first on ``sys.path`` (and ``PYTHONPATH``),
so one script measures both.

* Streaming (item 6): the app in-process under waitress (tests/conftest.LiveApp) and the scripted
  Ollama-API server (tests/scripted_ollama.py) stream a ``--reply-kb`` Markdown reply (paragraphs,
  lists, code, tables; deterministic) in 4-character pieces with no delay and nobody following the
  stream. Measured: the process's CPU seconds from the POST until the reply is recorded (the reply
  thread's rendering dominates; the scripted server's share is the same on both sides), the bytes of
  event data the generation keeps afterwards (what a reconnect could be sent), and those events'
  Python objects (``sys.getsizeof`` of each event, its ``__dict__`` and its data). Median of ``--runs``.
* Session list (item 5): ``--sessions`` files of ``--session-kb`` each, every reply holding an emoji
  (Python then stores the whole text at 4 bytes a character), written once by this checkout's writer.
  (a) ``harvey serve`` as a subprocess: VmRSS after /healthz, after GET /sessions/ (the index built),
  after a search that matches one session, and VmHWM; (b) in-process with ``tracemalloc``: the bytes
  the index (``SessionIndex(folder).entries()``) still holds after the scan, and the scan's peak.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORDS = ("the a of and to in is was for on that with as by at from it this be are or raspberry pi model context "
         "swap memory fan heatsink kernel python service journal network disk").split()


def markdown_reply(size: int, seed: int = 6) -> str:
    """A chatty model's Markdown reply of ``size`` characters: mostly paragraphs, some lists, code, tables."""
    r = random.Random(seed)
    say = lambda n: " ".join(r.choice(WORDS) for _ in range(n))   # noqa: E731
    parts, total = [], 0
    while total < size:
        roll = r.random()
        if roll < 0.6:
            part = say(r.randint(15, 60)).capitalize() + "."
        elif roll < 0.8:
            part = "\n".join(f"- {say(r.randint(3, 10))}" for _ in range(r.randint(2, 6)))
        elif roll < 0.9:
            part = "```python\n" + "\n".join(f"x{i} = {i}  # {say(4)}" for i in range(r.randint(2, 8))) + "\n```"
        else:
            part = "| key | value |\n|---|---|\n" + "\n".join(f"| {say(1)} | {i} |" for i in range(4))
        parts.append(part)
        total += len(part) + 2
    return "\n\n".join(parts)[:size]


# -- workers: run with one checkout first on sys.path -----------------------------------------

def _use(app_dir: Path) -> None:
    sys.path[:0] = [str(app_dir), str(app_dir / "tests")]


def work_stream(app_dir: Path, reply_kb: int) -> dict:
    """One streamed reply through the app; CPU seconds and what its events keep."""
    _use(app_dir)
    from conftest import LiveApp, make_config
    from scripted_ollama import Reply, ScriptedOllama

    text = markdown_reply(reply_kb * 1000)
    tmp = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    scripted = ScriptedOllama(script=Reply(text=text, piece_size=4)).start()
    live = LiveApp(make_config(tmp, scripted.url))
    try:
        name = live.open_session()
        cpu, wall = time.process_time(), time.monotonic()
        assert live.post(f"/s/{name}/messages", data={"message": "talk"}).status_code == 200
        gen = live.services.activities.last(name)
        deadline = time.monotonic() + 600
        while not gen.events.closed:
            if time.monotonic() > deadline:
                raise RuntimeError("the reply did not end within 600 s")
            time.sleep(0.01)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        events = gen.events.snapshot()
        data = sum(len(e.data.encode()) for e in events)
        objects = sum(sys.getsizeof(e) + (sys.getsizeof(vars(e)) if hasattr(e, "__dict__") else 0)
                      + sys.getsizeof(e.data) for e in events)
        return {"app": sys.modules["app"].__file__, "reply": len(text.encode()), "cpu": cpu, "wall": wall, "events": len(events), "data": data,
                "objects": objects, "biggest": max(len(e.data) for e in events)}
    finally:
        live.close()
        scripted.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def work_index(app_dir: Path, folder: Path) -> dict:
    """The index of ``folder`` built in this process: bytes it keeps (tracemalloc), the scan's peak."""
    _use(app_dir)
    import tracemalloc

    from app.sessions.index import SessionIndex

    tracemalloc.start()
    started = time.monotonic()
    index = SessionIndex(folder)
    entries = index.entries()
    seconds = time.monotonic() - started
    held, peak = tracemalloc.get_traced_memory()
    search_started = time.monotonic()
    found = index.search("zeppelin")
    search_s = time.monotonic() - search_started
    held_after_search, _ = tracemalloc.get_traced_memory()
    return {"app": sys.modules["app"].__file__, "entries": len(entries), "held": held, "peak": peak, "scan_s": seconds, "found": len(found),
            "search_s": search_s, "held_after_search": held_after_search}


def work_serve(app_dir: Path, folder: Path) -> dict:
    """``harvey serve`` of ``app_dir`` on ``folder``: RSS idle, after the list, after a search."""
    import http.client
    import signal
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = folder / "harvey.yaml"
    config.write_text(f"ollama:\n  url: http://127.0.0.1:9\n  model: tiny:1b\nworkspace: {folder / 'workspace'}\n"
                      f"sessions_dir: {folder / 'sessions'}\ndata_dir: {folder / 'data'}\nuser_name: bench\n"
                      f"server:\n  host: 127.0.0.1\n  port: {port}\n")
    env = {**os.environ, "PYTHONPATH": str(app_dir)}
    env.pop("OLLAMA_HOST", None)
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--config", str(config)], cwd=app_dir,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def get(path: str) -> tuple[int, float]:
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            return response.status, time.monotonic() - started
        finally:
            conn.close()

    def rss() -> tuple[int, int]:
        values = {}
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                values[key] = int(value.split()[0])
        return values["VmRSS"], values["VmHWM"]

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                get("/healthz")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        idle = rss()[0]
        status, list_s = get("/sessions/")
        assert status == 200, status
        listed = rss()[0]
        status, search_s = get("/sessions/?q=zeppelin")
        assert status == 200, status
        searched, hwm = rss()
        return {"idle": idle, "listed": listed, "searched": searched, "hwm": hwm, "list_s": list_s,
                "search_s": search_s}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- the sessions, written once -------------------------------------------------------------

def write_sessions(folder: Path, count: int, kb: int) -> int:
    """``count`` sessions of about ``kb`` KB, each reply with an emoji; one says "zeppelin". Bytes written."""
    sys.path[:0] = [str(ROOT)]
    from app.sessions import fountain
    from app.sessions.store import SessionStore
    from app.storage import atomic_write_text

    store = SessionStore(folder, "bench", str(folder.parent / "workspace"))
    r = random.Random(5)
    t0 = datetime(2026, 1, 1, 8, 0, 0)
    for i in range(count):
        when = t0 + timedelta(hours=i)
        session = store.create("llama3.2:3b", title=f"Session {i}", now=when)
        play, size, turn = session.play, 0, 0
        while size < kb * 1000:
            reply = markdown_reply(r.randint(2000, 8000), seed=r.randint(0, 10 ** 6)) + " 🌡️"
            if i == count // 2 and turn == 0:
                reply += " zeppelin"
            question = " ".join(r.choice(WORDS) for _ in range(12)) + "?"
            t = fountain.Turn(when + timedelta(seconds=30 * turn), question, "llama3.2:3b", reply,
                              fountain.stats_line("llama3.2:3b", "ollama", 200, 1500, 9.5))
            play.scenes += fountain.turn_scenes(t, store.user_name, store.workspace)
            size += len(reply.encode()) + len(question) + 200
            turn += 1
        atomic_write_text(store.path(session.name), fountain.dumps(play))
    return sum(p.stat().st_size for p in folder.iterdir())


# -- the report --------------------------------------------------------------------------------

def run_worker(kind: str, app_dir: Path, *args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", kind, "--app-dir", str(app_dir), *args],
                         capture_output=True, text=True, timeout=3600, env={**os.environ, "PYTHONPATH": ""})
    if out.returncode:
        raise RuntimeError(f"{kind} worker for {app_dir} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def mb(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} KB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reply-kb", type=int, default=30)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--session-kb", type=int, default=100)
    parser.add_argument("--worker", choices=["stream", "index", "serve"], help=argparse.SUPPRESS)
    parser.add_argument("--app-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = {"stream": lambda: work_stream(args.app_dir, args.reply_kb),
                  "index": lambda: work_index(args.app_dir, args.folder / "sessions"),
                  "serve": lambda: work_serve(args.app_dir, args.folder)}[args.worker]()
        print(json.dumps(result))
        return
    sides = ([("before", args.before.resolve())] if args.before else []) + [("after", ROOT)]
    sys.path[:0] = [str(HERE)]
    from _harness import header, table

    print(header("Streaming cost and session list memory (issue 23 items 5, 6)",
                 "python bench/bench_stream_list.py " + " ".join(sys.argv[1:])))
    rows = []
    for label, app_dir in sides:
        runs = [run_worker("stream", app_dir, "--reply-kb", str(args.reply_kb)) for _ in range(args.runs)]
        pick = lambda key: statistics.median(r[key] for r in runs)   # noqa: E731
        rows.append([label, mb(runs[0]["reply"]), f"{pick('cpu'):.2f} s", f"{pick('wall'):.2f} s",
                     f"{runs[0]['events']}", mb(pick("data")), f"{pick('data') / runs[0]['reply']:.1f}×",
                     mb(pick("objects")), mb(runs[0]["biggest"])])
    print(f"\nA {args.reply_kb} KB Markdown reply in 4-character pieces, no delay, nobody following; "
          f"median of {args.runs} runs.\n")
    print(table(["code", "reply", "CPU", "wall", "events", "event data kept", "× reply", "event objects",
                 "largest event"], rows))

    with tempfile.TemporaryDirectory(prefix="bench-list-") as tmp:
        folder = Path(tmp)
        (folder / "sessions").mkdir()
        started = time.monotonic()
        written = write_sessions(folder / "sessions", args.sessions, args.session_kb)
        print(f"\n{args.sessions} sessions, {mb(written)} on disk (written in {time.monotonic() - started:.0f} s), "
              "each reply with an emoji.\n")
        rows = []
        for label, app_dir in sides:
            served = run_worker("serve", app_dir, "--folder", str(folder))
            index = run_worker("index", app_dir, "--folder", str(folder))
            rows.append([label, f"{served['idle'] / 1024:.0f} MB", f"{served['listed'] / 1024:.0f} MB",
                         f"{served['searched'] / 1024:.0f} MB", f"{served['hwm'] / 1024:.0f} MB",
                         f"{served['list_s']:.1f} s", f"{served['search_s']:.2f} s",
                         mb(index["held"]), mb(index["peak"]), f"{index['found']}"])
        print(table(["code", "RSS idle", "RSS after the list", "RSS after a search", "VmHWM", "first list",
                     "search", "index holds (tracemalloc)", "scan peak", "search hits"], rows))


if __name__ == "__main__":
    main()
