"""The model time a loop's stop saves on the bundled models (issue 44).

Run from the repository root:

    python bench/bench_loops.py             # print the table
    python bench/bench_loops.py --write     # also replace its section in bench/RESULTS.md

Input: the bundled models' replies recorded by ``bench/record_loops.py`` (``tests/data/loops/recorded.json``,
10 prompts of the app's own kinds, each at the default sampling and at temperature 0, ``num_predict``
700) and a person's labels (``labels.yaml``).  Each reply is streamed through ``LoopWatch`` as the app
reads it: "before" is what the model generated (all of it), "after" what it had generated when the app
stopped it (the watch's text then), both counted with the model's own tokenizer (its GGUF vocabulary from
the demo server's ``/api/show``), and turned into seconds at the speed the model writes on this machine
(one live call of 200 tokens per model).  The recordings were cut at 700 tokens, so "before" is the
least a loop costs: without the stop a loop runs to its cap (1,024 tokens now, the whole room of the
window before issue 44).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _harness import header, table, write_section  # noqa: E402
from app.modelserver.tokens import counter_from_info  # noqa: E402
from app.work.loops import LoopWatch  # noqa: E402

DATA = ROOT / "tests" / "data" / "loops"
SECTION = "## Loops stopped on the bundled models (issue 44, `bench/bench_loops.py`)"
PIECE = 6            # characters per streamed piece, about a token and a half


def generated_at_stop(text: str) -> str | None:
    """What the model had written when the app stopped it (None: it was not stopped)."""
    watch = LoopWatch()
    for i in range(0, len(text), PIECE):
        if watch.feed(text[i:i + PIECE]) is not None:
            return watch.text
    return None


def model_facts(name: str) -> tuple[object, float]:
    """The model's own counter and its writing speed here (tokens a second)."""
    from harvey_demo.server import DemoServer

    with DemoServer(model_name=name, threads=2) as server:
        info = httpx.post(f"{server.url}/api/show", json={"model": name, "verbose": True}, timeout=120).json()
        counter = counter_from_info(info["model_info"], name)
        body = {"model": name, "stream": False, "options": {"num_predict": 200, "temperature": 0},
                "messages": [{"role": "user", "content": "Write a long story about a harbour."}]}
        reply = httpx.post(f"{server.url}/api/chat", json=body, timeout=600).json()
    speed = reply["eval_count"] / (reply["eval_duration"] / 1e9)
    return counter, speed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    replies = json.loads((DATA / "recorded.json").read_text("utf-8"))
    labels = yaml.safe_load((DATA / "labels.yaml").read_text("utf-8"))["labels"]
    facts = {}
    for name in sorted({r["model"] for r in replies}):
        try:
            facts[name] = model_facts(name)
        except Exception as exc:                  # not installed here: said, and left out
            print(f"# {name}: {exc}", flush=True)
    rows_by: dict[tuple[str, str], dict] = defaultdict(lambda: defaultdict(float))
    for i, reply in enumerate(replies):
        if reply["model"] not in facts:
            continue
        counter, speed = facts[reply["model"]]
        row = rows_by[(reply["model"], reply["kind"])]
        before = counter.count(reply["reply"])
        stopped = generated_at_stop(reply["reply"])
        after = counter.count(stopped) if stopped is not None else before
        row["replies"] += 1
        row["looping"] += bool(labels.get(i))
        row["stopped"] += stopped is not None
        row["wrong"] += stopped is not None and not labels.get(i)
        row["before"] += before
        row["after"] += after
        row["speed"] = speed
    rows, total = [], defaultdict(float)
    for (model, kind), row in sorted(rows_by.items()):
        saved_s = (row["before"] - row["after"]) / row["speed"]
        rows.append([model, kind, int(row["replies"]), int(row["looping"]), f"{int(row['stopped'])} ({int(row['wrong'])})",
                     f"{int(row['before']):,}", f"{int(row['after']):,}", f"{row['before'] / row['speed']:.0f}",
                     f"{row['after'] / row['speed']:.0f}", f"{saved_s:.0f}"])
        for key in ("replies", "looping", "stopped", "wrong", "before", "after"):
            total[key] += row[key]
        total["before_s"] += row["before"] / row["speed"]
        total["after_s"] += row["after"] / row["speed"]
    rows.append(["all", "", int(total["replies"]), int(total["looping"]), f"{int(total['stopped'])} ({int(total['wrong'])})",
                 f"{int(total['before']):,}", f"{int(total['after']):,}", f"{total['before_s']:.0f}",
                 f"{total['after_s']:.0f}", f"{total['before_s'] - total['after_s']:.0f}"])
    speeds = ", ".join(f"{name} {speed:.0f} tokens/s" for name, (_, speed) in sorted(facts.items()))
    text = "\n".join([
        SECTION, "",
        header("Generated tokens and model seconds before and after the loop stop", "python bench/bench_loops.py --write"),
        f"Writing speed here (one live call of 200 tokens): {speeds}.", "",
        table(["model", "kind", "replies", "looping (labelled)", "stopped (of them wrongly)", "tokens before",
               "tokens after", "s before", "s after", "s saved"], rows), "",
        "Tokens are counted with each model's own tokenizer; seconds are tokens at the speed above. \"Before\" is",
        "the whole recorded reply, itself cut at 700 tokens: a loop left alone runs on to its cap, so the saving",
        "is the least. A Pi writes 5 to 10 times slower than this machine: the seconds grow by as much.",
    ])
    print(text)
    if args.write:
        print("wrote", write_section(SECTION, text))


if __name__ == "__main__":
    main()
