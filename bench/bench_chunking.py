"""Benchmark app.chunking: seconds and peak memory for 1 MB and 10 MB inputs.

Run from the repository root:  python bench/bench_chunking.py [--runs 5]

Inputs are generated here, deterministically (fixed seeds), as Markdown
(headings, paragraphs, lists, pipe tables, fenced code) and Python source
(functions and classes with comments).  Each input is written to a temporary
file and chunked with ``chunk_file`` (read + decode + chunk), default settings.

* seconds: median of ``--runs`` timed runs (perf_counter, no tracing).
* peak memory: median of 3 separate runs under tracemalloc; it counts every
  Python allocation during ``chunk_file``, including the file's bytes, the
  decoded text and all chunk texts.  "x input" is that peak / file size.

Goals (issue): 10 MB under 2 s, 10 MB at most 12x the 1 MB time, peak memory
under 5x the input.
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.chunking import ChunkSettings, chunk_file  # noqa: E402

VOCAB = ("the a of and to in is was for on that with as by at from it this be are or "
         "an which have not were has but their one all been more also they its "
         "analysis context model chunk document section paragraph memory budget "
         "raspberry overflow synthesis").split()


def _words(r: random.Random, n: int) -> str:
    return " ".join(r.choice(VOCAB) for _ in range(n))


def make_markdown(size: int, seed: int = 1) -> str:
    """Markdown of about ``size`` bytes with every unit type the chunker knows."""
    r = random.Random(seed)
    out, total, i = [], 0, 0
    while total < size:
        i += 1
        k = r.random()
        if k < 0.06:
            s = "#" * r.randint(1, 3) + f" Section {i} " + _words(r, 4)
        elif k < 0.62:
            s = "\n".join(_words(r, r.randint(8, 16)).capitalize() + "."
                          for _ in range(r.randint(1, 8)))
        elif k < 0.77:
            s = "\n".join("- " + _words(r, r.randint(3, 15)) for _ in range(r.randint(2, 8)))
        elif k < 0.87:
            s = "```python\n" + "\n".join(f"x_{j} = {j}  # {_words(r, 4)}"
                                         for j in range(r.randint(3, 30))) + "\n```"
        else:
            rows = [f"| {j} | {_words(r, 2)} | {r.randint(0, 9999)} |"
                    for j in range(r.randint(3, 120))]
            s = "| id | name | value |\n|---|---|---:|\n" + "\n".join(rows)
        out.append(s)
        total += len(s) + 2
    return "\n\n".join(out) + "\n"


def make_python(size: int, seed: int = 2) -> str:
    """Python source of about ``size`` bytes: functions, classes, comments."""
    r = random.Random(seed)
    out, total, i = [], 0, 0
    while total < size:
        i += 1
        if r.random() < 0.1:
            s = (f"class Thing{i}:\n    \"\"\"{_words(r, 8)}.\"\"\"\n\n"
                 f"    def method(self, x):\n        return x + {i}\n")
        else:
            body = "\n".join(f"    v{j} = {r.randint(0, 999)}  # {_words(r, 5)}"
                             for j in range(r.randint(2, 25)))
            s = (f"# {_words(r, 6)}\ndef func_{i}(a, b=None):\n"
                 f"    \"\"\"{_words(r, 10)}.\"\"\"\n{body}\n    return a\n")
        out.append(s)
        total += len(s) + 2
    return "\n\n".join(out) + "\n"


def make_one_line(size: int, seed: int = 3) -> str:
    """Worst case for cutting: one line of words, no newline at all."""
    r = random.Random(seed)
    words = [r.choice(VOCAB) for _ in range(1000)]
    line = " ".join(words) + " "
    return (line * (size // len(line) + 1))[:size]


def make_tiny_paragraphs(size: int) -> str:
    """Worst case for per-unit cost: one-word paragraphs ("word\\n\\n")."""
    return "word\n\n" * (size // 6)


def _timed(path: Path, settings: ChunkSettings) -> tuple[float, int]:
    gc.collect()
    t0 = time.perf_counter()
    _, chunks = chunk_file(path, settings)
    dt = time.perf_counter() - t0
    n = len(chunks)
    del chunks
    return dt, n


def _peak(path: Path, settings: ChunkSettings) -> int:
    gc.collect()
    tracemalloc.start()
    doc, chunks = chunk_file(path, settings)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del doc, chunks
    return peak


def machine() -> str:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"nproc {os.cpu_count()}, CPU {cpu}, Python {platform.python_version()} "
            f"({platform.machine()}, {platform.system()})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs per input (median)")
    ap.add_argument("--sizes", default="1,10", help="input sizes in MB, comma separated")
    ap.add_argument("--size-tokens", type=int, default=1500)
    ap.add_argument("--worst-case", action="store_true",
                    help="also run one-line and one-word-paragraph inputs (largest size)")
    args = ap.parse_args(argv)
    settings = ChunkSettings(size_tokens=args.size_tokens)
    sizes = [int(float(x) * 1_000_000) for x in args.sizes.split(",")]
    rows, times = [], {}
    groups = [("Markdown", ".md", make_markdown, sizes), ("Python", ".py", make_python, sizes)]
    if args.worst_case:
        groups += [("worst: one line (.txt)", ".txt", make_one_line, [max(sizes)]),
                   ("worst: one-word paragraphs (.md)", ".md", make_tiny_paragraphs, [max(sizes)])]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for label, ext, make, group_sizes in groups:
            paths = {}
            for size in group_sizes:
                paths[size] = Path(tmp) / f"input_{size}{ext}"
                paths[size].write_text(make(size), encoding="utf-8")
            runs = {size: [] for size in group_sizes}
            for _ in range(args.runs):          # sizes interleaved: load hits both alike
                for size in group_sizes:
                    runs[size].append(_timed(paths[size], settings))
            for size in group_sizes:
                secs = statistics.median(r[0] for r in runs[size])
                peak = statistics.median(_peak(paths[size], settings) for _ in range(3))
                times[(label, size)] = secs
                rows.append((label, paths[size].stat().st_size, runs[size][0][1], secs, peak))
                paths[size].unlink()
    load_after = os.getloadavg()[0]
    print(f"Machine: {machine()}; load average {load_before:.2f} before, {load_after:.2f} after")
    print(f"Command: python bench/bench_chunking.py --runs {args.runs} --sizes {args.sizes}"
          f" --size-tokens {args.size_tokens}" + (" --worst-case" if args.worst_case else ""))
    print()
    print("| input | size (MB) | chunks | seconds (median) | MB/s | peak memory (MB) "
          "| peak / input |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, nbytes, n, secs, peak in rows:
        print(f"| {label} | {nbytes / 1e6:.2f} | {n} | {secs:.3f} | {nbytes / 1e6 / secs:.1f} "
              f"| {peak / 1e6:.1f} | {peak / nbytes:.2f}x |")
    if len(sizes) >= 2:
        lo, hi = min(sizes), max(sizes)
        print()
        for label in ("Markdown", "Python"):
            ratio = times[(label, hi)] / times[(label, lo)]
            print(f"- {label}: {hi / 1e6:g} MB / {lo / 1e6:g} MB time ratio "
                  f"{ratio:.1f} (size ratio {hi / lo:.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
