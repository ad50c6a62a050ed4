"""Benchmark long sessions (issue 23 item 8): parse speed, and the two pages of a 100,000-scene session.

Run from the repository root:  python bench/bench_long_sessions.py [--scenes 100000] [--runs 3] [--write]
                                [--before DIR]   (DIR: another checkout, e.g. ``git archive owner | tar -x -C DIR``)

The session is what the issue describes, "100,000 scenes (9 MB, an import)": a file in the terminal
Harvey's own layout (a TALKING heading, the user's line, the model's reply; no state line, no
"Forwarding to"), generated deterministically.  Measured:

* parse: ``fountain.loads`` then ``fountain.turns`` (what the first page view does) on a 1 MB file and
  on the whole file, best of ``--runs`` (the machine is shared; the best is the least disturbed);
* with ``--before DIR``, the parse is also timed with DIR's ``app`` (a subprocess each, the two
  checkouts alternating run by run, so both see the same load on a shared machine);
* pages: through waitress on loopback, timed with httpx (status 200, body read), each page in a fresh
  app once the start-up index warm-up is done: "first" parses the file, "second" is the next request
  (the store's parse is cached by mtime).  The chat page is ``/s/<name>``, the screenplay ``/sessions/<name>``.

``--write`` replaces the "## Long sessions" section of bench/RESULTS.md with the numbers.
"""
from __future__ import annotations

import argparse
import gc
import inspect
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine, write_section  # noqa: E402
from bench_sessions import Served  # noqa: E402

from app.config import Config, OllamaConfig, ServerConfig  # noqa: E402
from app.sessions import fountain  # noqa: E402

SECTION = "## Long sessions"
T0 = datetime(2026, 1, 1, 8, 0, 0)
NAME = "harvey-session-20260101-080000"


def harvey_file(scenes: int) -> str:
    """A session of ``scenes`` TALKING scenes as the terminal Harvey writes them (an import)."""
    parts = ["Title: Harvey Session\nCredit: Recorded by Harvey\nAuthor: PI\nDate: 2026-01-01 08:00:00\n"
             "Draft date: 2026-01-01\nModel: LLAMA3.2 (ollama)\nBackend: ollama\n\n\nFADE IN:\n"]
    for i in range(scenes):
        when = T0 + timedelta(seconds=i)
        parts.append(f"\n\nINT. HARVEY AND PI TALKING {when:%Y-%m-%d %H:%M:%S}\n\n"
                     f"PI\nquestion {i}\n\nLLAMA3.2\nanswer **{i}**\n\n")
    parts.append("\n>THE END.<\n")
    return "".join(parts)


def parse_seconds(text: str, runs: int) -> float:
    """Best time of ``runs`` full parses (screenplay and turns), each from a collected heap."""
    best = float("inf")
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        fountain.turns(fountain.loads(text))
        best = min(best, time.perf_counter() - start)
    return best


# Run by another checkout's Python path: this file's generator and timing, nothing imported from here
# (importing this module would import this checkout's app).
PARSE_ONE = """
import gc, time
from datetime import datetime, timedelta
from app.sessions import fountain
print(fountain.__file__)
T0 = datetime(2026, 1, 1, 8, 0, 0)
{source}
text = harvey_file({scenes})
gc.collect()
start = time.perf_counter()
fountain.turns(fountain.loads(text))
print(time.perf_counter() - start)
"""


def parse_alternating(checkouts: dict[str, Path], scenes: int, runs: int) -> dict[str, float]:
    """Best parse seconds of each checkout's ``app`` on the same file, the checkouts taking turns."""
    best = {label: float("inf") for label in checkouts}
    for _ in range(runs):
        for label, root in checkouts.items():
            env = {**os.environ, "PYTHONPATH": str(root)}
            code = PARSE_ONE.format(source=inspect.getsource(harvey_file), scenes=scenes)
            module, seconds = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, check=True,
                                             capture_output=True, text=True).stdout.split()
            assert Path(module).is_relative_to(root.resolve()), (module, root)   # that checkout's app
            best[label] = min(best[label], float(seconds))
    return best


def page_times(config: Config, path: str) -> tuple[tuple[float, int], tuple[float, int]]:
    """(seconds, bytes) of the first and the second GET of ``path`` in a fresh, warmed-up app."""
    served = Served(config)
    try:
        assert served.app.extensions["harvey"].store.index().warmed.wait(300)
        return served.timed_get(path), served.timed_get(path)
    finally:
        served.close()


def report(args, sizes: dict, parses: dict, pages: dict, versus: dict) -> str:
    parse_rows = "\n".join(f"| {label} | {sizes[label] / 1e6:.1f} MB | {parses[label]:.2f} s "
                           f"| {sizes[label] / 1e6 / parses[label]:.2f} MB/s |" for label in parses)
    page_rows = "\n".join(f"| {label} | {first[0]:.2f} s | {first[1] / 1024:.0f} KB | {second[0]:.2f} s "
                          f"| {second[1] / 1024:.0f} KB |" for label, (first, second) in pages.items())
    return f"""{SECTION}

`python bench/bench_long_sessions.py --scenes {args.scenes} --runs {args.runs}{f' --before {args.before}' if args.before else ''}{' --write' if args.write else ''}`
Machine: {machine()}.
A {args.scenes:,}-scene session in the terminal Harvey's layout (an import), generated by the script.

Parse (`fountain.loads` + `fountain.turns`, best of {args.runs}):

| file | size | parse | speed |
|---|---|---|---|
{parse_rows}

Pages (fresh app after its index warm-up; through waitress, httpx, body read):

| page | first | size | second | size |
|---|---|---|---|---|
{page_rows}
{_versus(args, versus)}"""


def _versus(args, versus: dict) -> str:
    """The alternating before/after parse table, when ``--before`` was given."""
    if not versus:
        return ""
    rows = "\n".join(f"| {label} | {seconds:.2f} s |" for label, seconds in versus.items())
    return f"""
Parse of the {args.scenes:,}-scene file, `--before {args.before}` (its `app`) and this checkout taking turns,
best of {args.runs} each:

| app | parse |
|---|---|
{rows}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    parser.add_argument("--before", help="another checkout whose app's parse is timed alternately with this one")
    args = parser.parse_args()
    big = harvey_file(args.scenes)
    small = harvey_file(round(args.scenes * 1_000_000 / len(big.encode())))
    texts = {"1 MB": small, f"{len(big.encode()) / 1e6:.1f} MB ({args.scenes:,} scenes)": big}
    sizes = {label: len(text.encode()) for label, text in texts.items()}
    parses = {label: parse_seconds(text, args.runs) for label, text in texts.items()}
    with tempfile.TemporaryDirectory() as tmp:
        config = Config(ollama=OllamaConfig(url="http://127.0.0.1:9", connect_timeout_s=0.2),
                        server=ServerConfig(host="127.0.0.1", port=0), workspace=f"{tmp}/workspace",
                        sessions_dir=f"{tmp}/sessions", data_dir=f"{tmp}/data", user_name="pi")
        Path(config.sessions_dir).mkdir(parents=True)
        Path(config.sessions_dir, f"{NAME}.spmd").write_text(big, encoding="utf-8")
        pages = {f"chat `/s/{NAME}`": page_times(config, f"/s/{NAME}"),
                 f"screenplay `/sessions/{NAME}`": page_times(config, f"/sessions/{NAME}")}
    versus = {}
    if args.before:
        root = Path(__file__).resolve().parents[1]
        versus = parse_alternating({f"before ({args.before})": Path(args.before), "after (this checkout)": root},
                                   args.scenes, args.runs)
    text = report(args, sizes, parses, pages, versus)
    print(text)
    if args.write:
        print(f"written to {write_section(SECTION, text)}")


if __name__ == "__main__":
    main()
