"""Issue 13 problem 10 (analysis half): what the analysis code still holds over many analyses.

Run from the repository root:  python bench/bench_analysis_memory.py [--analyses 30] [--warmup 10]

The test suite's 80 s test moved here (issue 23, "a faster test loop"); the suite keeps a short
version (tests/test_analysis_state.py::test_memory_stays_flat_over_repeated_analyses: 11 analyses
of a 5-chunk file, 3 of them measured). Here, as the old test did: the app under waitress in this
process (tests/conftest.LiveApp) against the scripted Ollama server, the default settled-jobs list
and activity grace, ``--analyses`` analyses of a 12-section Markdown file (about 14 chunks), each in
a new session that is then deleted. Memory is traced (tracemalloc, 16 frames) from analysis
``--warmup`` on; ``--every`` analyses later and after every ``--every`` more, the bytes still
allocated from app/analysis and app/events.py (and by everything) are printed. Tracing slows the
app about tenfold (11 min for 30 on a loaded 2-core machine).
Resident memory of the real `harvey serve` over 30 analyses: bench/bench_memory.py --analyses 30.
"""
from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from _harness import ScriptedOllama, header, table

from conftest import LiveApp                                                  # noqa: E402 (tests/ on the path)
from test_analysis import big_file_config, map_or_reduce, start_job           # noqa: E402
from test_analysis_state import wait_settled                                  # noqa: E402

ANALYSIS = [tracemalloc.Filter(True, "*/app/analysis/*", all_frames=True),
            tracemalloc.Filter(True, "*/app/events.py", all_frames=True)]


def held(scripted) -> tuple[int, int]:
    """Bytes still allocated (traced) by the analysis code and by everything, after a collection;
    the scripted server's request records belong to the bench, so they are cleared first."""
    with scripted._lock:
        scripted.requests.clear()
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    by_file = snapshot.filter_traces(ANALYSIS).statistics("filename")
    return sum(s.size for s in by_file), sum(s.size for s in snapshot.statistics("filename"))


def analyse(live) -> int:
    """One analysis of big.md in a new session, which is then deleted; its chunk count."""
    name = live.services.store.create("tiny:1b").name
    job, _ = start_job(live, name, "Summarize.")
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=60, total=600))
    wait_settled(live, job, timeout=600)
    live.post(f"/sessions/{name}/delete")
    return job.chunks


def run(analyses: int, warmup: int, every: int) -> list[list]:
    """Rows of (after analysis n, analysis code, everything, seconds so far)."""
    rows, started = [], time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, ScriptedOllama(script=map_or_reduce) as scripted:
        live = LiveApp(big_file_config(Path(tmp), scripted))
        try:
            for n in range(1, analyses + 1):
                chunks = analyse(live)
                if n == warmup:
                    tracemalloc.start(16)
                if n > warmup and (n - warmup) % every == 0:
                    code, everything = held(scripted)
                    rows.append([n, chunks, code, everything, round(time.monotonic() - started, 1)])
        finally:
            tracemalloc.stop()
            live.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--analyses", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10, help="untraced analyses before tracing starts")
    parser.add_argument("--every", type=int, default=10, help="analyses between measurements")
    args = parser.parse_args()
    rows = run(args.analyses, args.warmup, args.every)
    print(header("Memory held by the analysis code over repeated analyses", "python " + " ".join(sys.argv)))
    base_code, base_all = rows[0][2], rows[0][3]
    print(table(["after analysis", "chunks", "analysis code holds", "growth since first point",
                 "everything traced", "growth", "elapsed s"],
                [[n, c, f"{code:,} B", f"{code - base_code:+,} B", f"{total:,} B", f"{total - base_all:+,} B", s]
                 for n, c, code, total, s in rows]))
    if len(rows) > 1:
        span = rows[-1][0] - rows[0][0]
        print(f"\nPer analysis, analyses {rows[0][0]} -> {rows[-1][0]}: analysis code "
              f"{(rows[-1][2] - base_code) / span:+,.0f} B, everything {(rows[-1][3] - base_all) / span:+,.0f} B")


if __name__ == "__main__":
    main()
