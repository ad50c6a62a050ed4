"""What the card's primary read costs and finds, against one whole read (issue 42).

Run from the repository root:

    python bench/bench_route.py                 # scripted model
    python bench/bench_route.py --write         # also replace the section in bench/RESULTS.md
    python bench/bench_route.py --demo --depths 0.5 --items 10   # the bundled SmolLM2-135M (slow)

The haystack is real prose (Python's own reference topics, ``_harness.pydoc_markdown``, 262 KB: about 60
chunks of 1,500 tokens), with facts planted in it.  Through the chat (the app under waitress):

* **one-answer questions**, the fact planted at ten depths of the file (0.05 … 0.95), asked two ways:
  with words the fact shares ("What is the access code for the north vault?") and without (a question
  whose words are nowhere near its answer);
* **list questions**: 10, 40 and 100 planted codes, "List every vault access code".

Each is answered by the card's primary read (a question with one answer: the most relevant chunks first,
until they answer it; a list: every chunk), by that read and then one tap on "Read the rest" when it left
chunks unread, and by one whole read; with a careful scripted model (sure where its chunk holds the fact,
every code its chunk holds).  Prompt tokens and calls are the model server's own counts; "found" is
whether the answer holds the fact (for a list: the codes the app counted, of those planted).

Targets: questions whose words are in the file are answered with at most 25 % of a whole read's prompt
tokens and its recall; the others within one tap, at most 1.15x a whole read's tokens in all; lists
recover every item by default.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import close_quietly, header, pydoc_markdown, table, write_section  # noqa: E402

from careful import CHUNK  # noqa: E402
from scripted_ollama import Reply, ScriptedOllama  # noqa: E402

SECTION = "## Route before reading, read the rest in one tap (issue 42, `bench/bench_route.py`)"
DEADLINE_S = 3600.0
ASKS = {
    "shared": ("What is the access code for the north vault?", "The access code for the north vault is 7-ALPHA-19.",
               "7-ALPHA-19"),
    "not shared": ("Who signed off the refurbishment of the east wing?",
                   "Dana Okafor approved the renovation work on the eastern building in March.", "Dana Okafor"),
}


def planted(base: str, facts: list[tuple[float, str]]) -> str:
    """``base`` with each fact planted at its depth (a share of the text), at a paragraph break."""
    text = base
    for depth, fact in sorted(facts, reverse=True):
        at = text.find("\n\n", int(len(text) * depth))
        at = len(text) if at < 0 else at
        text = text[:at] + f"\n\n{fact}" + text[at:]
    return text


class Careful:
    """Sure where its chunk holds the fact (a question with one answer); every code its chunk holds (a list)."""

    def __init__(self, fact: str = "", answer: str = ""):
        self.fact, self.answer = fact, answer

    def __call__(self, body) -> Reply:
        prompt = body["messages"][-1]["content"]
        if body["messages"][0]["content"].startswith("You combine"):
            codes = sorted(set(re.findall(r"VAC-\d{3}", prompt)))
            found = self.answer if self.answer and self.answer in prompt else "not in what was read"
            return Reply(text=f"Found: {found}. Codes: {', '.join(codes)}.")
        m = CHUNK.search(prompt)
        chunk = " ".join(m.group(3).split()) if m else ""
        if isinstance(body.get("format"), dict) and "items" in body["format"].get("properties", {}):
            items = [{"item": c, "quote": f"vault access code {c}", "value": None, "unit": None}
                     for c in sorted(set(re.findall(r"VAC-\d{3}", chunk)))]
            return Reply(text=json.dumps({"relevant": bool(items), "items": items, "stated": [], "confidence": 4}),
                         piece_size=400)
        held = bool(self.fact) and self.fact in chunk
        return Reply(text=json.dumps({"relevant": held, "points": [{"point": self.answer, "quote": self.fact}] if held
                                      else [], "confidence": 5, "answer": self.answer if held else ""}))


def ask(url: str, model: str, text: str, question: str, way: str, rest: bool, demo: bool) -> dict:
    """One question through the chat, started with ``way``; with ``rest``, then "Read the rest" once."""
    from conftest import LiveApp, make_config

    with tempfile.TemporaryDirectory() as tmp:
        config = make_config(Path(tmp), url, model=model)
        if demo:
            config = dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, timeout_s=600.0))
        Path(config.workspace).mkdir(parents=True)
        (Path(config.workspace) / "manual.md").write_text(text)
        live = LiveApp(config)
        try:
            name = live.open_session()
            live.post(f"/s/{name}/messages", data={"message": f"{question} (manual.md)"})
            job = live.services.jobs.open_for(name)
            if job is None:      # it fits the window (a small model's 8,192): asked from the file list instead
                name = live.services.store.create(model).name
                live.post(f"/s/{name}/analysis/direct", data={"file": "manual.md"})
                job = live.services.jobs.open_for(name)
            live.post(f"/s/{name}/analysis/{job.id}/start",
                      data={"instruction": question, "way": way, "scope": "all"})
            jobs = [settle(live, name, job)]
            if rest and "Read the other" in live.get(f"/s/{name}").text:
                live.post(f"/s/{name}/turns/0/read-rest")
                follow = live.services.jobs.open_for(name) or live.services.jobs.settled_for(name)[-1]
                jobs.append(settle(live, name, follow))
            reply = live.services.store.load(name).turns[0].reply or ""
        finally:
            close_quietly(live)
    return {"state": jobs[-1].state, "reply": reply, "calls": sum(j.model_calls for j in jobs),
            "prompt": sum(j.prompt_tokens for j in jobs), "chunks": jobs[0].file_chunks,
            "count": (jobs[-1].figures or {}).get("count")}


def settle(live, name: str, job):
    deadline = time.monotonic() + DEADLINE_S
    while job.id in live.services.jobs.jobs and time.monotonic() < deadline:
        if job.state == "confirm":
            live.post(f"/s/{name}/analysis/{job.id}/read-on", data={"rest": "yes"})
        time.sleep(0.1)
    return job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", type=float, nargs="*", default=[0.05 + 0.1 * i for i in range(10)])
    parser.add_argument("--items", type=int, nargs="*", default=[10, 40, 100])
    parser.add_argument("--bytes", type=int, default=262_000)
    parser.add_argument("--demo", action="store_true")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    base = pydoc_markdown(args.bytes)
    server, url, model = None, "", "tiny:1b"
    if args.demo:
        from harvey_demo import server as demo_server
        server = demo_server.DemoServer(threads=1).start()
        url, model = server.url, "smollm2:135m"
    else:
        server = ScriptedOllama().start()
        url = server.url
    rows, summary = [], {}
    try:
        for kind, (question, fact, answer) in ASKS.items():
            for depth in args.depths:
                text = planted(base, [(depth, fact)])
                if not args.demo:
                    server.script = Careful(fact, answer)
                whole = ask(url, model, text, question, "read", False, args.demo)
                first = ask(url, model, text, question, "relevant", False, args.demo)
                both = ask(url, model, text, question, "relevant", True, args.demo)
                for label, r in (("whole read", whole), ("primary: most relevant first", first),
                                 ("primary + read the rest", both)):
                    found = answer in r["reply"]
                    rows.append([f"one answer, words {kind}", f"{depth:.2f}", label, r["calls"], f"{r['prompt']:,}",
                                 f"{r['prompt'] / max(1, whole['prompt']):.2f}x", "yes" if found else "no"])
                    summary.setdefault((kind, label), []).append((r["prompt"] / max(1, whole["prompt"]), found))
                print(rows[-3:], flush=True)
        for n in args.items:
            codes = [f"VAC-{i:03d}" for i in range(1, n + 1)]
            text = planted(base, [((i + 0.5) / n * 0.98, f"The vault access code {c} opens door {i + 1}.")
                                  for i, c in enumerate(codes)])
            if not args.demo:
                server.script = Careful()
            r = ask(url, model, text, "List every vault access code", "read", False, args.demo)
            rows.append([f"list of {n}", "-", "primary: every chunk", r["calls"], f"{r['prompt']:,}", "1.00x",
                         f"{r['count']} of {n}"])
            print(rows[-1], flush=True)
    finally:
        server.stop()
    lines = []
    for (kind, label), got in summary.items():
        ratios = [x for x, _ in got]
        lines.append(f"- words {kind}, {label}: found {sum(f for _, f in got)} of {len(got)}; prompt tokens "
                     f"{min(ratios):.2f}x to {max(ratios):.2f}x a whole read (mean {sum(ratios) / len(ratios):.2f}x)")
    command = "python bench/bench_route.py" + (" --demo" if args.demo else "")
    text = (header("SmolLM2-135M (bundled)" if args.demo else "Scripted careful model", command) + "\n"
            + "\n".join(lines) + "\n\n"
            + table(["question", "depth", "read", "calls", "prompt tokens", "of a whole read", "found"], rows) + "\n")
    print(text)
    if args.write:
        write_section(SECTION, f"{SECTION}\n\n{text}")


if __name__ == "__main__":
    main()
