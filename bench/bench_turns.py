"""Benchmark what one chat turn costs as a session grows (issue 13, problem 11).

Run from the repository root:  python bench/bench_turns.py [--turns 200] [--write]

The app runs under waitress (tests/conftest.LiveApp) against the scripted
Ollama-API server, which answers at once, so what is timed is the app's own
work: the POST that records a message and starts its reply (route, budget,
one write of the session file, the fragment), and the page load.  Goal: the
POST of turn 200 within 1.5x of turn 1.  Figures are medians over windows of
10 turns; ``--write`` replaces the "## Turn cost" section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import Reply, ScriptedOllama, close_quietly, header, live_app, median, table, write_section  # noqa: E402

SECTION = "## Turn cost (issue 13, problem 11)"
DEADLINE_S = 30.0


def wait_idle(live, name: str) -> None:
    """Until the reply has been recorded (bounded: a stuck reply fails the run)."""
    deadline = time.monotonic() + DEADLINE_S
    while live.services.activities.holder(name) is not None:
        if time.monotonic() > deadline:
            raise SystemExit("a reply did not finish in time")
        time.sleep(0.002)


def run(turns: int) -> tuple[list[float], list[float], int]:
    """POST latencies (ms) for each turn and page-load latencies (ms) every 10 turns; final file size."""
    with ScriptedOllama(script=Reply(text="A short answer with **some** Markdown, " * 6)) as scripted, \
            tempfile.TemporaryDirectory() as tmp:
        live = live_app(Path(tmp), scripted.url)
        try:
            name = live.open_session()
            posts, pages = [], []
            for i in range(turns):
                started = time.perf_counter()
                response = live.post(f"/s/{name}/messages", data={"message": f"Question {i}: what about x?"})
                posts.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, response.text
                wait_idle(live, name)
                if i % 10 == 9:
                    started = time.perf_counter()
                    live.get(f"/s/{name}")
                    pages.append((time.perf_counter() - started) * 1000)
            size = (live.services.store.folder / f"{name}.spmd").stat().st_size
        finally:
            close_quietly(live)
    return posts, pages, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    posts, pages, size = run(args.turns)
    first, last = median(posts[:10]), median(posts[-10:])
    rows = [[f"turns {lo + 1}-{lo + 10}", f"{median(posts[lo:lo + 10]):.1f}"]
            for lo in range(0, len(posts), max(10, len(posts) // 5 // 10 * 10))]
    text = "\n".join([
        SECTION, "",
        header("POST /s/<name>/messages and the chat page as the session grows",
               f"python bench/bench_turns.py --turns {args.turns}"),
        table(["turns", "POST median (ms)"], rows), "",
        f"POST of the last 10 turns / the first 10: {last / first:.2f}x (goal: at most 1.5x). "
        f"Chat page: {pages[0]:.1f} ms at 10 turns, {pages[-1]:.1f} ms at {args.turns} "
        f"(the page shows the newest 40 turns). Session file at the end: {size / 1024:.0f} KB.", "",
    ])
    print(text)
    if args.write:
        write_section(SECTION, text)

if __name__ == "__main__":
    main()
