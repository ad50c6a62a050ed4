"""Record the bundled models' replies to prompts that make small models loop (issue 44).

Run from the repository root:  python bench/record_loops.py --out tests/data/loops/recorded.json

Each bundled model that is installed (SmolLM2-135M, Gemma 3 270M) answers each prompt below through the
demo server (Ollama's API, ``num_predict`` 700, its default sampling, then temperature 0): the prompts
are the app's own kinds of request (a synthesis of partial answers, a list's summary, a passages answer,
a chat question) on the harbour filler the tests use. The replies are written as they came, for a person
to label (looping or not) in ``tests/data/loops/labels.yaml``; the loop measure (``app/work/loops.py``) is
tested on them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from haystacks import haystack  # noqa: E402

PARTIALS = "\n\n".join(f"[Chunk {i} of 12]\n- [{i}] Vault code VC-{i:03d} opens locker {i}." for i in range(1, 13))
PROMPTS = [
    ("synthesis", "You combine partial answers into one answer.",
     f"Instruction: List every vault code.\n(The app itself lists and counts the vault codes: 12 in all. Do not list "
     f"them; write only a short summary of them in at most three sentences.)\n---\n{PARTIALS}"),
    ("synthesis", "You combine partial answers into one answer.",
     f"Instruction: Summarize the harbour's logistics.\n---\n{haystack(3)}"),
    ("passages", "You answer questions about a file from passages of it. Use only the passages below.",
     f"Passages:\n\n{haystack(2)}\n\nQuestion: Who is the harbour master?"),
    ("chat", "You are Harvey, a helpful assistant.", "Write a long story about a lighthouse keeper."),
    ("chat", "You are Harvey, a helpful assistant.", "List 50 facts about the moon."),
    ("chat", "You are Harvey, a helpful assistant.", "Repeat the word harbour as often as you can."),
    ("chat", "You are Harvey, a helpful assistant.", "Explain recursion, then give an example, then explain it again."),
    ("chat", "You are Harvey, a helpful assistant.", "What are the tides? Answer in detail."),
    ("list", "List, from this chunk of a longer document only, every item the instruction asks for.",
     f"Chunk 1 of 3:\n{haystack(1)}\n---\nList every crane in this chunk, each with its exact words."),
    ("chat", "You are Harvey, a helpful assistant.", "Write a poem with a refrain about the sea."),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="tests/data/loops/recorded.json")
    parser.add_argument("--num-predict", type=int, default=700)
    args = parser.parse_args()
    from harvey_demo import models as bundled
    from harvey_demo.server import DemoServer

    recorded = []
    for name in ("smollm2:135m", "gemma3:270m"):
        try:
            bundled.locate(bundled.get(name))
        except Exception as exc:            # not installed here: said, and the next model
            print(f"# {name}: {exc}", flush=True)
            continue
        with DemoServer(model_name=name, threads=2) as server:
            for kind, system, prompt in PROMPTS:
                for temperature in (None, 0.0):
                    options = {"num_predict": args.num_predict, **({"temperature": temperature}
                                                                    if temperature is not None else {})}
                    body = {"model": name, "stream": False, "options": options,
                            "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}]}
                    reply = httpx.post(f"{server.url}/api/chat", json=body, timeout=900).json()
                    text = reply.get("message", {}).get("content", "")
                    recorded.append({"model": name, "kind": kind, "temperature": temperature,
                                     "prompt": prompt[:200], "reply": text})
                    print(f"# {name} {kind} t={temperature}: {len(text)} chars", flush=True)
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print("wrote", out)


if __name__ == "__main__":
    main()
