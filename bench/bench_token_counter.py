"""Exact token counters (issue 30): build time, counting speed, memory.

For SmolLM2-135M (byte-level BPE, 49,152 tokens) and Gemma 3 270M (SentencePiece, 262,144 tokens),
each in a fresh process that has imported the app (create_app), so the RSS is the app's:

- build: the ``/api/show`` verbose JSON (as Ollama sends it) parsed and built into a counter;
- disk: the same counter loaded from the disk cache (``data/tokenizers/DIGEST.json``), what a restart does;
- RSS of the process after each (and its peak, ``ru_maxrss``), against the app alone;
- counting speed in MB/s over real text (this repository's Markdown and Python, and the shared
  references), counted whole and in 64 KB pieces.

    python bench/bench_token_counter.py            # both models, a table in Markdown
    python bench/bench_token_counter.py --long     # Gemma: words without a space, merged in pieces
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _corpus() -> str:
    paths = sorted(ROOT.glob("**/*.md")) + sorted(ROOT.glob("app/**/*.py")) + sorted(Path("/work/shared").glob("**/*.md"))
    parts = []
    for path in paths:
        if ".venv" in path.parts or "node_modules" in path.parts:
            continue
        try:
            parts.append(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    text = "\n\n".join(parts)
    while len(text.encode()) < 4_000_000:
        text += "\n\n" + text
    return text[:4_000_000]


def child(model: str, show_json: Path, cache: Path) -> dict:
    """One measurement in this (fresh) process."""
    import tempfile as _tf

    from app import create_app
    from app.modelserver.tokens import Counter, counter_from_info
    from conftest import make_config

    with _tf.TemporaryDirectory() as tmp:
        create_app(make_config(Path(tmp), "http://127.0.0.1:9"))
        app_rss = _rss_mb()
        out = {"model": model, "app_rss_mb": round(app_rss, 1)}
        if not cache.exists():
            started, cpu = time.perf_counter(), time.process_time()
            info = json.loads(show_json.read_text(encoding="utf-8"))["model_info"]
            counter = counter_from_info(info)
            out["build_s"] = round(time.perf_counter() - started, 2)
            out["build_cpu_s"] = round(time.process_time() - cpu, 2)
            del info
            cache.write_text(counter.dumps(), encoding="utf-8")
            from app.modelserver.counting import _release

            _release(counter)          # what counting.TokenCounters does after a build
            out["built_rss_mb"] = round(_rss_mb(), 1)
        else:
            from app.modelserver.counting import _release

            started, cpu = time.perf_counter(), time.process_time()
            counter = Counter.loads(cache.read_text(encoding="utf-8"))
            _release(counter)          # what counting.TokenCounters does after a load
            out["disk_s"] = round(time.perf_counter() - started, 2)
            out["disk_cpu_s"] = round(time.process_time() - cpu, 2)
            out["loaded_rss_mb"] = round(_rss_mb(), 1)
            text = _corpus()
            size = len(text.encode()) / 1e6
            out["before_count_rss_mb"] = round(_rss_mb(), 1)
            wall, cpu = time.perf_counter(), time.process_time()
            whole = counter.count(text)
            out["count_mb_s"] = round(size / (time.perf_counter() - wall), 2)
            out["count_mb_cpu_s"] = round(size / (time.process_time() - cpu), 2)
            out["corpus_mb"] = round(size, 1)
            out["bytes_per_token"] = round(size * 1e6 / whole, 2)
            out["counted_rss_mb"] = round(_rss_mb(), 1)
        out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        return out


def long_words() -> None:
    """Gemma's counter on a megabyte that has no "▁" to cut at (a data URI's base64, a hex dump,
    Japanese without a newline): merged ``spm.LONG_WORD`` characters at a time against merged
    whole (llama.cpp's count), each in a fresh process for its time and peak RSS."""
    import random

    if len(sys.argv) > 2:           # the child: one text, one way
        from app.modelserver import spm
        from app.modelserver.tokens import counter_from_info
        from vocab import gemma_gguf, model_info

        counter = counter_from_info(model_info(gemma_gguf()))
        counter.release()
        kind, whole = sys.argv[2], sys.argv[3] == "whole"
        rng = random.Random(1)
        text = {"base64": lambda: __import__("base64").b64encode(rng.randbytes(750_000)).decode(),
                "hex": lambda: rng.randbytes(500_000).hex(),
                "japanese": lambda: ("日本語のテキストは空白がありません。東京都" * 50_000)[:1_000_000]}[kind]()
        if whole:
            spm.LONG_WORD = 10**9
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        started = time.perf_counter()
        tokens = counter.count(text)
        print(json.dumps({"tokens": tokens, "s": round(time.perf_counter() - started, 2), "chars": len(text),
                          "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                          "before_peak_mb": round(before, 1), "rss_mb": round(_rss_mb(), 1)}))
        return
    print(f"load average {os.getloadavg()[0]:.2f}; nproc {os.cpu_count()}")
    print("| text | characters | in pieces: tokens | seconds | peak RSS | merged whole: tokens | seconds | peak RSS | difference |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind in ("base64", "hex", "japanese"):
        got = {}
        for way in ("pieces", "whole"):
            run = subprocess.run([sys.executable, __file__, "--long", kind, way], capture_output=True, text=True,
                                 check=True)
            got[way] = json.loads(run.stdout.strip().splitlines()[-1])
        a, b = got["pieces"], got["whole"]
        print(f"| {kind} | {a['chars']:,} | {a['tokens']:,} | {a['s']} | {a['peak_mb']} MB | {b['tokens']:,} | {b['s']} | "
              f"{b['peak_mb']} MB | {a['tokens'] - b['tokens']:+d} |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--long":
        long_words()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "SHOW_JSON", "CACHE"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]), Path(args.child[2]))))
        return
    from vocab import gemma_gguf, model_info, smollm_gguf

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, gguf in (("SmolLM2-135M", smollm_gguf), ("Gemma 3 270M", gemma_gguf)):
            show = Path(tmp) / f"{model}.show.json"
            show.write_text(json.dumps({"model_info": model_info(gguf())}), encoding="utf-8")
            cache = Path(tmp) / f"{model}.tokenizer.json"
            result = {"show_mb": round(show.stat().st_size / 1e6, 1)}
            for _ in range(2):      # first builds (and writes the cache), then loads it
                run = subprocess.run([sys.executable, __file__, "--child", model, str(show), str(cache)],
                                     capture_output=True, text=True, check=True, env={**os.environ})
                step = json.loads(run.stdout.strip().splitlines()[-1])
                if "build_s" in step:
                    step["build_peak_rss_mb"] = step.pop("peak_rss_mb")
                result.update(step)
            result["cache_mb"] = round(cache.stat().st_size / 1e6, 1)
            rows.append(result)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; nproc {os.cpu_count()}")
    print("| model | /api/show JSON | build from it: wall (CPU) | disk cache | load from disk: wall (CPU) | app RSS | "
          "+ counter loaded | after counting the corpus | peak while building | count: MB/s wall (per CPU s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['show_mb']} MB | {r['build_s']} s ({r['build_cpu_s']} s) | {r['cache_mb']} MB | "
              f"{r['disk_s']} s ({r['disk_cpu_s']} s) | {r['app_rss_mb']} MB | {r['loaded_rss_mb']} MB | "
              f"{r['counted_rss_mb']} MB ({r['corpus_mb']} MB text, {r['bytes_per_token']} B/token) | "
              f"{r['build_peak_rss_mb']} MB | {r['count_mb_s']} ({r['count_mb_cpu_s']}) |")

if __name__ == "__main__":
    main()
