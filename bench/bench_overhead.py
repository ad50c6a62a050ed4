"""Item 2: the app's own cost per chunk in a 20-chunk analysis.

Run from the repository root:  python bench/bench_overhead.py [--runs 5] [--latency 0.2 1.0]

Setup per run (a fresh app each time): the scripted Ollama server (tests/scripted_ollama.py)
answers every chat request in a fixed time (10 pieces, ``token_delay`` = latency/10 after
each); the app runs under waitress (tests/conftest.LiveApp, default config: 1,500-token
chunks, paragraph overlap, window 8192); the workspace holds a Markdown file that the
chunker splits into exactly 20 chunks.  The client does what a browser does: posts
"Summarize big.md", gets the alert card, POSTs .../start, then reads the SSE progress
stream until it closes.

Measured, in one process, on one monotonic clock:

* wall: from sending POST /start to reading the SSE ``close`` event.
* model (server side): per chat request, the scripted server's arrival time to the moment
  the last NDJSON line and the chunked terminator were flushed; summed.
* model (client side): per ``ModelServer.chat`` call made by the worker, from the call to
  the last line read (includes the app's HTTP client work); summed.
* overhead per chunk = (wall - model) / 20, with either model figure; share = (wall - model)/wall.
* worker CPU per chunk: CPU seconds of the analysis worker thread (/proc/self/task/<tid>/schedstat)
  over the whole run / 20.  It counts the app's own work (chunking, rendering the progress
  HTML, fsyncs' CPU, httpx parsing) and is far less sensitive to other processes on the
  cores than wall time.
* where the wall-clock overhead goes: before the first model request (queue, re-read and
  chunk the file), median gap between consecutive requests, and after the last request
  (synthesis record, session write, SSE close); and, inside the worker, the time spent
  rendering the progress HTML, writing job.json / results.jsonl, rewriting calibration.json
  (after every model call), and the number of os.fsync calls and their time (wrapped on
  the running instances; os.fsync for the whole process, where only the app calls it).

Each figure is the median of ``--runs`` runs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from _harness import (CHUNK_RE, Reply, TimedScripted, close_quietly, fit_to_chunks, header, live_app, median,
                      synthetic_markdown,
                      table, time_client_calls)

CHUNKS = 20
PIECES = 10
_REAL_FSYNC = os.fsync


def script_for(latency: float):
    delay = latency / PIECES

    def script(body):
        prompt = body["messages"][-1]["content"]
        found = CHUNK_RE.search(prompt)
        text = f"Partial answer for chunk {found.group(1)}." if found else "SYNTHESIZED answer for the run."
        text = text.ljust(PIECES * 4)[: PIECES * 4]
        return Reply(text=text, piece_size=4, token_delay=delay)
    return script


def worker_cpu_seconds() -> float:
    """CPU time of the analysis worker thread (it stays alive 30 s after its queue empties)."""
    for thread in threading.enumerate():
        if thread.name == "analysis" and thread.native_id:
            fields = Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text().split()
            return int(fields[0]) / 1e9
    return float("nan")


def time_methods(svc) -> dict[str, float]:
    """Wall seconds the worker spends in a few steps (wrapped on this app's instances only),
    and every os.fsync in the process (only the app calls it here)."""
    spent = {"render": 0.0, "job_writes": 0.0, "calibration": 0.0, "chunking": 0.0,
             "fsync": 0.0, "fsync_calls": 0}

    def wrap(obj, attr, key):
        original = getattr(obj, attr)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - started
                if key == "fsync":
                    spent["fsync_calls"] += 1
        setattr(obj, attr, timed)

    runner = svc.jobs
    wrap(runner, "_render", "render")               # progress / partial HTML for the SSE log
    wrap(runner.store, "add_result", "job_writes")  # results.jsonl append + fsync, per chunk
    wrap(runner.store, "save", "job_writes")        # job.json atomic write + fsync
    wrap(svc.calibration, "_save", "calibration")   # calibration.json rewrite + fsync after each call
    wrap(runner, "_document", "chunking")           # re-read + fingerprint the file before the run
    os.fsync = _REAL_FSYNC                          # one wrapper per run, not one per run so far
    wrap(os, "fsync", "fsync")
    return spent


def one_run(document: str, latency: float, nodelay: bool = True) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    server = TimedScripted(script=script_for(latency), nodelay=nodelay).start()
    live = None
    try:
        live = live_app(tmp, server.url)
        workspace = Path(live.config.workspace)
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / "big.md").write_text(document)
        name = live.open_session()
        live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
        job = live.services.jobs.open_for(name)
        assert job is not None and job.chunks == CHUNKS, (job and job.chunks)
        spans = time_client_calls(live.services.models)
        spent = time_methods(live.services)
        before = len(server.chats())
        t0 = time.monotonic()
        live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize each section."})
        events = list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=120))
        t1 = time.monotonic()
        assert events[-1][0] == "close" and job.state == "done", (job.state, job.message)
        chats = server.chats()[before:]
        for c in chats:
            c.finished.wait(5)
        maps = [c for c in chats if CHUNK_RE.search(c.body["messages"][-1]["content"])]
        assert len(maps) == CHUNKS and len(chats) == CHUNKS + 1, (len(maps), len(chats))
        wall = t1 - t0
        model_server = sum(c.finished.at - c.at for c in chats)
        model_client = sum(end - start for start, end, _ in spans)
        spans.sort()
        gaps = [spans[i + 1][0] - spans[i][1] for i in range(len(spans) - 1)]
        return {
            "wall": wall, "model_server": model_server, "model_client": model_client,
            "per_chunk_server": (wall - model_server) / CHUNKS * 1000,
            "per_chunk_client": (wall - model_client) / CHUNKS * 1000,
            "share_server": (wall - model_server) / wall * 100,
            "share_client": (wall - model_client) / wall * 100,
            "worker_cpu": worker_cpu_seconds() / CHUNKS * 1000,
            "head": (spans[0][0] - t0) * 1000, "gap": median(gaps) * 1000, "tail": (t1 - spans[-1][1]) * 1000,
            "requests": len(chats), "sse_events": len(events),
            **{f"in_{k}": v / CHUNKS * (1 if k == "fsync_calls" else 1000) for k, v in spent.items()},
        }
    finally:
        if live is not None:
            close_quietly(live)
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--latency", type=float, nargs="+", default=[0.2, 1.0],
                        help="seconds each model request takes (default: 0.2 1.0)")
    parser.add_argument("--nagle", action="store_true",
                        help="leave Nagle's algorithm on in the scripted server (http.server's default; "
                             "Ollama sets TCP_NODELAY)")
    args = parser.parse_args()
    document, sections = fit_to_chunks(lambda n: synthetic_markdown(n), CHUNKS, "markdown", 10, 60)
    print(header("App overhead per chunk (item 2)",
                 f"python bench/bench_overhead.py --runs {args.runs} --latency "
                 + " ".join(str(x) for x in args.latency) + (" --nagle" if args.nagle else "")))
    print(f"Document: {len(document.encode()):,} bytes of Markdown ({sections} sections), {CHUNKS} chunks; "
          f"{CHUNKS} map requests + 1 synthesis request per run; median of {args.runs} runs; scripted server "
          f"with {'Nagle on (http.server default)' if args.nagle else 'TCP_NODELAY (as Ollama)'}.\n")
    rows, parts = [], []
    for latency in args.latency:
        one_run(document, latency, not args.nagle) if latency == args.latency[0] else None   # warm-up
        results = [one_run(document, latency, not args.nagle) for _ in range(args.runs)]
        m = {k: median([r[k] for r in results]) for k in results[0]}
        rows.append([f"{latency * 1000:.0f} ms", f"{m['wall']:.2f} s", f"{m['model_server']:.2f} s",
                     f"{m['per_chunk_server']:.1f} ms", f"{m['share_server']:.2f} %",
                     f"{m['per_chunk_client']:.1f} ms", f"{m['share_client']:.2f} %",
                     f"{m['worker_cpu']:.1f} ms",
                     f"{m['head']:.0f} / {m['gap']:.1f} / {m['tail']:.0f} ms"])
        parts.append([f"{latency * 1000:.0f} ms", f"{m['gap']:.1f} ms", f"{m['in_render']:.1f} ms",
                      f"{m['in_job_writes']:.1f} ms", f"{m['in_calibration']:.1f} ms", f"{m['in_chunking']:.1f} ms",
                      f"{m['in_fsync_calls']:.2f} / {m['in_fsync']:.1f} ms"])
        print(f"Per run, latency {latency * 1000:.0f} ms: overhead per chunk (vs server) "
              + ", ".join(f"{r['per_chunk_server']:.1f}" for r in results) + " ms.\n")
    print()
    print(table(["model latency / request", "wall (21 requests)", "model time (server)",
                 "overhead / chunk (vs server)", "share of run (vs server)",
                 "overhead / chunk (vs client)", "share of run (vs client)",
                 "worker CPU / chunk", "before first / between / after last request"], rows))
    print()
    print("Where the worker's time goes, per chunk (wall ms, medians; the steps are timed by wrapping "
          "JobRunner methods on the running instance):\n")
    print(table(["model latency / request", "gap between requests", "rendering progress/partial HTML",
                 "job.json + results.jsonl writes", "calibration.json writes", "re-reading the file (÷ 20)",
                 "os.fsync calls / time (whole run ÷ 20)"], parts))


if __name__ == "__main__":
    main()
