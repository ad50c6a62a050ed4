"""A list question on a file that fits, against the real small model: the list path against plain chat
(issue 45).

Run from the repository root:  python bench/bench_chat_lists.py [--runs N] [--write LABEL]

The app runs under waitress against the bundled model behind Ollama's API (harvey_demo, one thread), with
CPython's own ``colorsys.py`` in the workspace.  The user asks "List every function defined in colorsys.py":
the app answers on the list path (one map call, the app's list).  Then "Answer in chat instead" asks the
same as plain chat, with the file read into the message.  For each: model calls, prompt and generated
tokens (the server's own counts; a call the app stopped as a loop has no prompt count, and its pieces
stand for its generated tokens), model seconds, and how right the answer is against the file's real
``def`` names (``ast``): the real names it gives, and the names it gives that the file does not define.
"""

from __future__ import annotations

import argparse
import ast
import colorsys
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import add_rows, git_revision, machine  # noqa: E402
from bench_analysis_model import record_calls, topics_app  # noqa: E402

SECTION = "## A list question on a file that fits, against the real model (issue 45)"
QUESTION = "List every function defined in colorsys.py"
DEADLINE_S = 1800.0


def defined(source: str) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)}


def named(reply: str) -> set[str]:
    """The function names an answer gives: identifiers written as a list item, a call or a ``def``."""
    text = reply.replace("\\_", "_")
    found = set(re.findall(r"^\s*(?:[-*]|\d+\.)\s+`?([A-Za-z_]\w*)", text, re.M))
    found |= set(re.findall(r"\bdef\s+([A-Za-z_]\w*)", text))
    found |= set(re.findall(r"`([A-Za-z_]\w*)\(", text))
    return {name for name in found if "_" in name or name.islower() and len(name) > 2}


def answered(live, name: str, index: int, calls: list) -> str:
    """Turn ``index``'s answer, once written and its call counted (the count lands as the stream closes,
    which may be just after the session write)."""
    started = time.monotonic()
    while True:
        turns = live.services.store.load(name).turns
        if len(turns) > index and turns[index].reply and not live.services.activities.working(name) and calls:
            return turns[index].reply
        if time.monotonic() - started > DEADLINE_S:
            raise SystemExit("no answer in time")
        time.sleep(0.5)


def measure(calls: list, reply: str, truth: set[str]) -> dict:
    names = named(reply)
    return {"calls": len(calls), "prompt": sum(c["prompt"] for c in calls),
            "generated": sum(c["generated"] for c in calls), "model_s": sum(c["seconds"] for c in calls),
            "right": len(names & truth), "invented": len(names - truth), "truth": len(truth),
            "loops": sum(c.get("stopped", False) for c in calls)}


def run() -> dict:
    source = Path(colorsys.__file__).read_text()
    truth = defined(source)
    with topics_app("") as (model, live):
        (Path(live.config.workspace) / "colorsys.py").write_text(source)
        calls: list = []
        record_calls(live.services.models, calls)
        name = live.open_session()
        live.post(f"/s/{name}/messages", data={"message": QUESTION})
        listed = measure(calls, answered(live, name, 0, calls), truth)
        calls.clear()
        live.post(f"/s/{name}/turns/0/regenerate", data={"list": "0"})
        chat = measure(calls, answered(live, name, 1, calls), truth)
        model_name = model.model_name
    return {"list": listed, "chat": chat, "model": model_name, "bytes": len(source.encode())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="LABEL", default="")
    parser.add_argument("--runs", type=int, default=3, help="sessions asked (the model samples: answers vary)")
    args = parser.parse_args()
    rows = []
    for n in range(1, args.runs + 1):
        r = run()
        rows += [f"| {args.write or 'this run'} | {git_revision()} | {n} | {way} | {m['calls']} | {m['prompt']:,} | "
                 f"{m['generated']:,} | {m['model_s']:.1f} | {m['loops']} | {m['right']} of {m['truth']} | {m['invented']} |"
                 for way, m in (("list path", r["list"]), ("plain chat (Answer in chat instead)", r["chat"]))]
    print("\n".join(rows))
    if args.write:
        add_rows(SECTION, [
            "Command: `python bench/bench_chat_lists.py --runs 3 --write LABEL`. The model samples, so answers vary "
            "from session to session.", "",
            f"Machine: {machine()}. {r['model']} (harvey_demo, 1 thread); CPython's colorsys.py "
            f"({r['bytes']:,} bytes); the question \"{QUESTION}\".", "",
            "| run | tree | session | answered by | model calls | prompt tokens | generated tokens | model s | "
            "calls stopped as a loop | real functions named | names the file does not define |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"], rows)


if __name__ == "__main__":
    main()
