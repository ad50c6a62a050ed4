"""Benchmark long sessions (issue 23 item 8): parse speed, and the two pages of a 100,000-scene session.

Run from the repository root:  python bench/bench_long_sessions.py [--scenes 100000] [--runs 3] [--write]
                                [--before DIR]   (DIR: another checkout, e.g. ``git archive owner | tar -x -C DIR``)

The session is what the issue describes, "100,000 scenes (9 MB, an import)": a file in the terminal
Harvey's own layout (a TALKING heading, the user's line, the model's reply; no state line, no
"Forwarding to"), generated deterministically.  Measured:

* parse: ``fountain.loads`` then ``fountain.turns`` (what the first page view does) on files of about
  0.3, 1 and 3 MB and on the whole file, each the first parse of a fresh process (as a page after a
  restart sees it), wall and CPU seconds (``time.process_time``), best of ``--runs`` (the machine is
  shared; the best is the least disturbed, and CPU time is what other processes disturb least).
  Linear parsing means the same MB/s at every size: the table ends with the whole file's MB/s
  divided by the 1 MB file's;
* with ``--before DIR``, the parse is also timed with DIR's ``app`` (a subprocess each, the two
  checkouts alternating run by run, so both see the same load on a shared machine);
* pages: through waitress on loopback, timed with httpx (status 200, body read), each page in a fresh
  app once the start-up index warm-up is done: "first" parses the file, "second" is the next request
  (the store's parse is cached by mtime); wall and CPU seconds, each the best of ``--runs`` fresh
  apps.  The chat page is ``/s/<name>``, the screenplay ``/sessions/<name>``.

``--write`` replaces the "## Long sessions" section of bench/RESULTS.md with the numbers.
"""
from __future__ import annotations

import argparse
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

from app.config import Config, ModelServerConfig, ServerConfig  # noqa: E402

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
print(len(text.encode()))
gc.collect()
start, cpu = time.perf_counter(), time.process_time()
fountain.turns(fountain.loads(text))
print(time.perf_counter() - start, time.process_time() - cpu)
"""


def parse_fresh(root: Path, scenes: int) -> tuple[int, float, float]:
    """(bytes, wall s, CPU s) of one parse of a ``scenes``-scene file by ``root``'s ``app``, the first
    of a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    code = PARSE_ONE.format(source=inspect.getsource(harvey_file), scenes=scenes)
    module, size, wall, cpu = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, check=True,
                                             capture_output=True, text=True).stdout.split()
    assert Path(module).is_relative_to(root.resolve()), (module, root)   # that checkout's app
    return int(size), float(wall), float(cpu)


def parse_sizes(root: Path, scene_counts: dict[str, int], runs: int) -> dict[str, tuple[int, float, float]]:
    """Per file: (bytes, best wall s, best CPU s) over ``runs`` fresh processes, the sizes taking turns."""
    best: dict[str, tuple[int, float, float]] = {}
    for _ in range(runs):
        for label, scenes in scene_counts.items():
            size, wall, cpu = parse_fresh(root, scenes)
            old = best.get(label, (size, float("inf"), float("inf")))
            best[label] = (size, min(old[1], wall), min(old[2], cpu))
    return best


def parse_alternating(checkouts: dict[str, Path], scenes: int, runs: int) -> dict[str, tuple[float, float]]:
    """Best (wall, CPU) parse seconds of each checkout's ``app`` on the same file, the checkouts taking turns."""
    best = {label: (float("inf"), float("inf")) for label in checkouts}
    for _ in range(runs):
        for label, root in checkouts.items():
            _, wall, cpu = parse_fresh(root, scenes)
            best[label] = (min(best[label][0], wall), min(best[label][1], cpu))
    return best


def page_times(config: Config, path: str, runs: int) -> tuple[tuple[float, float, int], tuple[float, float, int]]:
    """(wall s, CPU s, bytes) of the first and the second GET of ``path``, each the best of ``runs`` fresh,
    warmed-up apps.  CPU is this process's (the app's threads and the client's) during the request."""
    best = [(float("inf"), float("inf"), 0)] * 2
    for _ in range(runs):
        served = Served(config)
        try:
            assert served.app.extensions["harvey"].store.index().warmed.wait(300)
            for i in range(2):
                cpu = time.process_time()
                wall, size = served.timed_get(path)
                cpu = time.process_time() - cpu
                best[i] = (min(best[i][0], wall), min(best[i][1], cpu), size)
        finally:
            served.close()
    return best[0], best[1]


def report(args, parses: dict, pages: dict, versus: dict, loads: tuple[str, str]) -> str:
    page_rows = "\n".join(f"| {label} | {first[0]:.2f} s | {first[1]:.2f} s | {first[2] / 1024:.0f} KB "
                          f"| {second[0]:.2f} s | {second[1]:.2f} s | {second[2] / 1024:.0f} KB |"
                          for label, (first, second) in pages.items())
    return f"""{SECTION}

`python bench/bench_long_sessions.py --scenes {args.scenes} --runs {args.runs}{f' --before {args.before}' if args.before else ''}{' --write' if args.write else ''}`
Machine: {machine()}.
A {args.scenes:,}-scene session in the terminal Harvey's layout (an import), generated by the script.

Load average when the parse runs began: {loads[0]}; when they ended: {loads[1]} (2 cores).

Parse (`fountain.loads` + `fountain.turns`, the first parse of a fresh process, best of {args.runs}):

{_parse_table(parses)}

Pages (a fresh app after its index warm-up; through waitress, httpx, body read; best of {args.runs} apps):

| page | first: wall | CPU | size | second: wall | CPU | size |
|---|---|---|---|---|---|---|
{page_rows}
{_versus(args, versus)}"""


def _parse_table(parses: dict) -> str:
    """The parse by size: wall and CPU seconds and speeds, and the whole file's MB/s over the 1 MB file's."""
    rows = "\n".join(f"| {label} | {size / 1e6:.2f} MB | {wall:.2f} s | {size / 1e6 / wall:.2f} MB/s "
                     f"| {cpu:.2f} s | {size / 1e6 / cpu:.2f} MB/s |" for label, (size, wall, cpu) in parses.items())
    small, big = parses["1 MB"], parses[next(reversed(parses))]
    return f"""| file | size | wall | speed (wall) | CPU | speed (CPU) |
|---|---|---|---|---|---|
{rows}

Whole file / 1 MB, MB/s: {(big[0] / big[1]) / (small[0] / small[1]):.2f} (wall), {(big[0] / big[2]) / (small[0] / small[2]):.2f} (CPU); 1.00 is linear."""


def _versus(args, versus: dict) -> str:
    """The before checkout's parse by size and the alternating before/after table, when ``--before`` was given."""
    if not versus:
        return ""
    before, loads = versus["sizes"]
    rows = "\n".join(f"| {label} | {wall:.2f} s | {cpu:.2f} s |" for label, (wall, cpu) in versus["both"].items())
    return f"""
The same parse by size with `--before {args.before}`'s `app` (load average {loads[0]} at the start, {loads[1]} at the end):

{_parse_table(before)}

Parse of the {args.scenes:,}-scene file, `--before {args.before}` (its `app`) and this checkout taking turns,
each the first parse of a fresh process, best of {args.runs} each:

| app | wall | CPU |
|---|---|---|
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
    per_mb = args.scenes * 1_000_000 / len(big.encode())
    counts = {"0.3 MB": round(0.3 * per_mb), "1 MB": round(per_mb), "3 MB": round(3 * per_mb),
              f"{len(big.encode()) / 1e6:.1f} MB ({args.scenes:,} scenes)": args.scenes}
    root = Path(__file__).resolve().parents[1]
    began = " ".join(f"{x:.2f}" for x in os.getloadavg())
    parses = parse_sizes(root, counts, args.runs)
    loads = (began, " ".join(f"{x:.2f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        config = Config(model_server=ModelServerConfig(url="http://127.0.0.1:9", connect_timeout_s=0.2),
                        server=ServerConfig(host="127.0.0.1", port=0), workspace=f"{tmp}/workspace",
                        sessions_dir=f"{tmp}/sessions", data_dir=f"{tmp}/data", user_name="pi")
        Path(config.sessions_dir).mkdir(parents=True)
        Path(config.sessions_dir, f"{NAME}.spmd").write_text(big, encoding="utf-8")
        pages = {f"chat `/s/{NAME}`": page_times(config, f"/s/{NAME}", args.runs),
                 f"screenplay `/sessions/{NAME}`": page_times(config, f"/sessions/{NAME}", args.runs)}
    versus = {}
    if args.before:
        began = " ".join(f"{x:.2f}" for x in os.getloadavg())
        before = parse_sizes(Path(args.before), counts, args.runs)
        versus["sizes"] = (before, (began, " ".join(f"{x:.2f}" for x in os.getloadavg())))
        versus["both"] = parse_alternating({f"before ({args.before})": Path(args.before), "after (this checkout)": root},
                                   args.scenes, args.runs)
    text = report(args, parses, pages, versus, loads)
    print(text)
    if args.write:
        print(f"written to {write_section(SECTION, text)}")


if __name__ == "__main__":
    main()
