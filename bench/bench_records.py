"""The app's totals and counts against the truth on generated record haystacks (issue 40).

Run from the repository root:

    python bench/bench_records.py                      # scripted models, 10, 40 and 100 records
    python bench/bench_records.py --demo --records 10  # the bundled SmolLM2-135M (slow)
    python bench/bench_records.py --write              # also replace the section in bench/RESULTS.md

Two haystacks per count N (``tests/haystacks.haystack``: sections of harbour filler), each with N records
planted in it, written as people write them, with ids, dates and years beside the figures:

* **ledger**: "2024-03-07 · INV-2024-0042 · €1,234.50" lines, one in four a refund written ``-€12.50``
  or ``(12.50)``; asked "What is the net total of the ledger entries?";
* **doses**: "Dose 7 (room 12B, 2024): 12.5mg" lines, units glued or spaced; asked "What is the total dose
  given?".

Each is asked through the chat (the app under waitress; a file that fits the window is analysed from the
file list instead), the card started on every chunk, answered by:

* **careful**: a scripted model that reads each record right (its value, sign and unit): whatever
  is off is the app's doing;
* **quote only**: a scripted model that lists each record with its words but no value: the app reads
  the value from the quote itself (``quantities``);
* **bundled** (``--demo``): SmolLM2-135M behind the Ollama API; its reading is what it is.

Prints, per (records, file, model): the count the app shows against N, the total it shows against the
truth (or "no total" when a value could not be typed), the model's own figure, model calls, prompt and
generated tokens, seconds. On a Pi the model's time is the cost: the calls and tokens are the figure.
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
from _harness import close_quietly, header, table, write_section  # noqa: E402

from haystacks import haystack  # noqa: E402
from scripted_ollama import Reply, ScriptedOllama  # noqa: E402

SECTION = "## Totals and counts on record haystacks (issue 40, `bench/bench_records.py`)"
DEADLINE_S = 3600.0
QUESTIONS = {"ledger": "What is the net total of the ledger entries in ledger.md?",
             "doses": "What is the total dose given, according to doses.md?"}


def ledger(n: int) -> tuple[str, list[dict], float]:
    """N ledger lines (one in four a refund), their records as a careful model reads them, the net total."""
    records, total = [], 0.0
    for i in range(n):
        cents = 1000 + (i * 7919) % 250000
        value = cents / 100
        if i % 4 == 3:
            written = f"-€{value:,.2f}" if i % 8 == 3 else f"({value:,.2f} EUR)"
            value = -value
        else:
            written = f"€{value:,.2f}"
        line = f"2024-03-{i % 28 + 1:02d} · INV-2024-{i + 1:04d} · {written}"
        records.append({"item": f"INV-2024-{i + 1:04d}", "quote": line, "value": value, "unit": "€"})
        total += value
    return _planted(records), records, round(total, 2)


def doses(n: int) -> tuple[str, list[dict], float]:
    """N dose lines (units glued or spaced), their records, the total in mg."""
    records, total = [], 0.0
    for i in range(n):
        mg = (2.5, 5, 7.5, 10, 12.5)[i % 5]
        written = f"{mg:g}mg" if i % 2 else f"{mg:g} mg"
        line = f"Dose {i + 1} (room 12B, 2024): {written}"
        records.append({"item": f"Dose {i + 1}", "quote": line, "value": mg, "unit": "mg"})
        total += mg
    return _planted(records), records, round(total, 2)


def _planted(records: list[dict]) -> str:
    sections = max(12, (len(records) + 1) // 2 + 4)
    facts: dict[int, str] = {}
    for i, r in enumerate(records):
        s = (i * 7) % sections if len(records) <= sections else i // 2
        facts[s] = (facts.get(s, "") + "\n\n" + r["quote"]).strip()
    return haystack(sections, facts)


class Scripted:
    """A scripted model that lists each record its chunk holds: with its value (careful) or without."""

    def __init__(self, records: list[dict], with_values: bool, total: float, unit: str):
        self.records, self.with_values = records, with_values
        self.synthesis = f"The total is {total:,.2f} {unit}." if with_values else "The records are listed."

    def __call__(self, body) -> Reply:
        if body["messages"][0]["content"].startswith("You combine"):
            return Reply(text=self.synthesis)
        chunk = body["messages"][-1]["content"]
        items = [{"item": r["item"], "quote": r["quote"], "value": r["value"] if self.with_values else None,
                  "unit": r["unit"] if self.with_values else None} for r in self.records if r["quote"] in chunk]
        return Reply(text=json.dumps({"relevant": bool(items), "items": items, "stated": [], "confidence": 4}),
                     piece_size=400)


def run(url: str, model: str, file: str, text: str, demo: bool) -> dict:
    from conftest import LiveApp, make_config

    with tempfile.TemporaryDirectory() as tmp:
        config = make_config(Path(tmp), url, model=model)
        if demo:
            config = dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, timeout_s=600.0))
        Path(config.workspace).mkdir(parents=True)
        (Path(config.workspace) / f"{file}.md").write_text(text)
        live = LiveApp(config)
        started = time.monotonic()
        try:
            name = live.open_session()
            live.post(f"/s/{name}/messages", data={"message": QUESTIONS[file]})
            job = live.services.jobs.open_for(name)
            if job is None:         # it fits the window: asked from the file list ("Analyse in chunks") instead
                name = live.services.store.create(model).name
                live.post(f"/s/{name}/analysis/direct", data={"file": f"{file}.md"})
                job = live.services.jobs.open_for(name)
            live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": QUESTIONS[file], "scope": "all"})
            deadline = time.monotonic() + DEADLINE_S
            while job.id in live.services.jobs.jobs and time.monotonic() < deadline:
                if job.state == "confirm":
                    live.post(f"/s/{name}/analysis/{job.id}/read-on", data={"rest": "yes"})
                if job.state in ("failed", "interrupted"):
                    break
                time.sleep(0.2)
        finally:
            close_quietly(live)
        return {"state": job.state, "figures": job.figures or {}, "calls": job.model_calls,
                "prompt": job.prompt_tokens, "generated": job.generated_tokens,
                "seconds": time.monotonic() - started}


def row(n: int, file: str, who: str, result: dict, total: float, unit: str) -> list:
    f = result["figures"]
    totals = f.get("totals") or {}
    if result["state"] != "done":
        shown_total = f"({result['state']})"
    elif totals:
        shown_total = "; ".join(f"{v:,.2f} {u}" for u, v in totals.items())
    else:
        shown_total = f"no total ({f.get('untyped', 0)} untyped)" if f else "-"
    right = totals == {unit: total} or (len(totals) == 1 and abs(next(iter(totals.values())) - total) < 0.005
                                        and next(iter(totals)) == unit)
    says = f.get("model_says")
    return [n, file, who, f"{f.get('count', '-')} of {n}", shown_total, f"{total:,.2f} {unit}",
            "yes" if right else "no", "-" if says is None else f"{says:,.2f}", result["calls"],
            f"{result['prompt']:,}", f"{result['generated']:,}", f"{result['seconds']:.1f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, nargs="*", default=[10, 40, 100])
    parser.add_argument("--demo", action="store_true", help="the bundled SmolLM2-135M instead of the scripted models")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    rows = []
    demo = None
    if args.demo:
        from harvey_demo import server as demo_server
        if not demo_server.model_available():
            raise SystemExit(demo_server.INSTALL_HINT)
        demo = demo_server.DemoServer(threads=1).start()
    try:
        for n in args.records:
            for file, make in (("ledger", ledger), ("doses", doses)):
                text, records, total = make(n)
                unit = "EUR" if file == "ledger" else "mg"
                if demo is not None:
                    rows.append(row(n, file, "bundled SmolLM2-135M",
                                    run(demo.url, "smollm2:135m", file, text, True), total, unit))
                    print(rows[-1], flush=True)
                    continue
                for who, with_values in (("careful", True), ("quote only", False)):
                    with ScriptedOllama(script=Scripted(records, with_values, total, unit)) as server:
                        rows.append(row(n, file, who, run(server.url, "tiny:1b", file, text, False), total, unit))
                    print(rows[-1], flush=True)
    finally:
        if demo is not None:
            demo.stop()
    command = f"python bench/bench_records.py --records {' '.join(map(str, args.records))}" + (" --demo" if args.demo else "")
    text = (header("SmolLM2-135M (bundled)" if args.demo else "Scripted models", command) + "\n"
            + table(["records", "file", "model", "count shown", "total shown", "truth", "right", "model says",
                     "calls", "prompt tokens", "generated tokens", "seconds"], rows) + "\n")
    print(text)
    if args.write:
        from _harness import ROOT
        old = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
        kept = ""
        m = re.search(rf"^{re.escape(SECTION)}\n(.*?)(?=^## |\Z)", old, re.S | re.M)
        if m:      # keep the other run's table (scripted and bundled are written by separate runs)
            mine = "### SmolLM2" if args.demo else "### Scripted"
            kept = "\n".join(part for part in re.split(r"(?=^### )", m.group(1), flags=re.M)
                             if part.startswith("### ") and not part.startswith(mine))
        write_section(SECTION, f"{SECTION}\n\n{INTRO}\n\n{text}\n{kept}")


INTRO = ("Each file is asked through the chat and read whole. \"careful\": a scripted model that reads each record "
         "right (value, sign, unit); \"quote only\": one that gives each record's words but no value, so the app "
         "reads the value from the quote; the bundled model's reading is what it is. \"right\": the app's total "
         "equals the truth to the cent, in the right unit.")


if __name__ == "__main__":
    main()
