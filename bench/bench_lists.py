"""Items recovered from a long list: the list path (issue 32) against the plain synthesis and the
passages answer.

Run from the repository root:

    python bench/bench_lists.py                    # scripted "small model", 10, 40 and 100 planted items
    python bench/bench_lists.py --demo --items 10  # the bundled SmolLM2-135M (slow: minutes per run)

For each count N it writes a haystack (``tests/haystacks.haystack``: sections of harbour filler)
with N vault-code sentences planted in it ("Vault code VC-007 opens locker 7."), asks "List every
vault code in codes.md." through the chat (the app under waitress, ``tests/conftest.LiveApp``), and
answers the overflow card three ways, each in a fresh session:

* **list path**: the card's "List every" field as recognised ("vault code"): each chunk's partial is
  a structured list, the app merges and counts; recovered = planted codes among the app's items
  (the ``chunk-item`` notes of the session file);
* **plain synthesis**: the field cleared: the map/reduce as before issue 32; recovered = planted
  codes the answer (the model's reply) names;
* **passages answer**: the card's second choice; recovered = planted codes the reply names.

The scripted model (default) behaves as the issue saw a small model behave, the same in every
call: it finds every code its prompt holds, but writes at most ``--cap`` (8) items in one reply
(a long list is cut: it keeps the last ones it read), in whatever shape the request asks for
(LIST_SCHEMA items, MAP_SCHEMA points, free-text lines, the passages answer's JSON). With
``--demo`` the bundled SmolLM2-135M answers instead (its quality is what it is).

Prints one row per (N, way): recovered of N, the count the app shows (list path) or the model's
stated count, model calls, and the machine's load average.
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
from _harness import ROOT, close_quietly, machine  # noqa: E402,F401

from haystacks import haystack  # noqa: E402
from scripted_ollama import Reply, ScriptedOllama  # noqa: E402

CODE = re.compile(r"VC-\d{3}")
INSTRUCTION = "List every vault code in codes.md."
DEADLINE_S = 3600.0


def document(n: int) -> tuple[str, list[str]]:
    """A haystack with ``n`` planted codes, at most 2 a section (so one chunk's list stays short)."""
    sections = max(12, (n + 1) // 2 + 4)
    facts: dict[int, str] = {}
    codes = [f"VC-{i:03d}" for i in range(1, n + 1)]
    for i, code in enumerate(codes):
        s = (i * 7) % sections if n <= sections else i // 2
        facts[s] = (facts.get(s, "") + f" Vault code {code} opens locker {i + 1}.").strip()
    return haystack(sections, facts), codes


class SmallModel:
    """The scripted model: every code its prompt holds, at most ``cap`` per reply (the last ones)."""

    def __init__(self, cap: int):
        self.cap = cap

    def __call__(self, body) -> Reply:
        system = body["messages"][0]["content"]
        prompt = body["messages"][-1]["content"]
        seen = list(dict.fromkeys(CODE.findall(prompt.split("\n---\n", 1)[-1] if system.startswith("You combine")
                                                else prompt)))[-self.cap:]
        fmt = body.get("format")
        if system.startswith("You answer questions"):                       # the passages answer
            text = f"There are {len(seen)} vault codes: {', '.join(seen)}." if seen else "The passages do not say."
            return Reply(text=json.dumps({"answer": text, "in_passages": bool(seen)}) if fmt else text)
        if system.startswith("You combine"):                               # the synthesis
            return Reply(text=f"There are {len(seen)} vault codes: {', '.join(seen)}.")
        chunk = prompt.split("\n---\n", 1)[1] if "\n---\n" in prompt else prompt
        found = list(dict.fromkeys(CODE.findall(chunk)))[-self.cap:]
        sentences = {c: re.search(rf"Vault code {c} opens locker \d+\.", chunk).group(0) for c in found}
        if isinstance(fmt, dict) and "items" in fmt.get("properties", {}):
            items = [{"item": c, "quote": sentences[c], "value": None} for c in found]
            return Reply(text=json.dumps({"relevant": bool(found), "items": items, "confidence": 4}), piece_size=400)
        if isinstance(fmt, dict):
            points = [{"point": f"vault code {c}", "quote": sentences[c]} for c in found][:4]
            return Reply(text=json.dumps({"relevant": bool(found), "points": points, "confidence": 4}))
        return Reply(text="\n".join(f"- vault code {c}" for c in found) or "Nothing relevant.", piece_size=400)


def run_way(live, way: str) -> dict:
    """One question answered one way; the turn's reply, the app's items, the job."""
    from app.sessions import fountain, notes

    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": INSTRUCTION})
    job = live.services.jobs.open_for(name)
    if job is None:
        raise SystemExit("no overflow card: the document fits the window")
    form = {"instruction": INSTRUCTION, "scope": "all"}
    if way == "plain":
        form["list_of"] = ""
    if way == "passages":
        form["way"] = "retrieve"
    live.post(f"/s/{name}/analysis/{job.id}/start", data=form)
    deadline = time.monotonic() + DEADLINE_S
    while (job.id in live.services.jobs.jobs and job.state not in ("failed", "interrupted")
           and time.monotonic() < deadline):
        time.sleep(0.2)
    if job.state != "done":
        return {"state": f"{job.state}: {job.message}"[:80], "reply": "", "items": [], "count": None,
                "calls": job.model_calls}
    text = (live.services.store.folder / f"{name}.spmd").read_text()
    (turn,) = [t for t in fountain.turns(fountain.loads(text)) if t.user_text]
    computed = notes.read_computed(turn.analysis.computed) if turn.analysis else notes.Computed()
    return {"state": job.state, "reply": turn.reply or "", "items": computed.items, "count": computed.count,
            "calls": job.model_calls}


def recovered(result: dict, codes: list[str], way: str) -> tuple[int, str]:
    """Planted codes the answer holds, and the count it shows."""
    planted = set(codes)
    if way == "list":
        got = {m for it in result["items"] for m in CODE.findall(it["text"] + " " + it["quote"])} & planted
        shown = str(result["count"]["count"]) if result["count"] else "-"
        return len(got), shown
    got = set(CODE.findall(result["reply"])) & planted
    m = re.search(r"There are (\d+)", result["reply"])
    return len(got), m.group(1) if m else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, nargs="*", default=[10, 40, 100])
    parser.add_argument("--cap", type=int, default=8, help="items the scripted model writes in one reply")
    parser.add_argument("--demo", action="store_true", help="the bundled SmolLM2-135M instead of the scripted model")
    parser.add_argument("--ways", nargs="*", default=["list", "plain", "passages"])
    args = parser.parse_args()
    from conftest import LiveApp, make_config

    model = "tiny:1b"
    server = None
    if args.demo:
        from harvey_demo import server as demo_server
        if not demo_server.model_available():
            raise SystemExit(demo_server.INSTALL_HINT)
        server = demo_server.DemoServer(threads=1).start()
        url, model = server.url, "smollm2:135m"
    else:
        server = ScriptedOllama(script=SmallModel(args.cap)).start()
        url = server.url
    print(f"# bench_lists: {'SmolLM2-135M (bundled)' if args.demo else f'scripted model, at most {args.cap} items a reply'}")
    print(f"# {machine()}")
    print("| planted | way | recovered | count shown | model calls | state |")
    print("|---:|---|---:|---:|---:|---|")
    try:
        for n in args.items:
            text, codes = document(n)
            for way in args.ways:
                with tempfile.TemporaryDirectory() as tmp:
                    config = make_config(Path(tmp), url, model=model)
                    if args.demo:       # the real model's first byte may take minutes on a busy machine
                        config = dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, timeout_s=600.0))
                    Path(config.workspace).mkdir(parents=True)
                    (Path(config.workspace) / "codes.md").write_text(text)
                    live = LiveApp(config)
                    try:
                        result = run_way(live, way)
                    finally:
                        close_quietly(live)
                got, shown = recovered(result, codes, way)
                print(f"| {n} | {way} | {got} of {n} | {shown} | {result['calls']} | {result['state']} |", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
