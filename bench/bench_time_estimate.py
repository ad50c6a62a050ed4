"""How close the card's time is to the run's, against the real small model (issue 45: "about 7.1 minutes"
became 24; "6.3 minutes" became 12).

Run from the repository root:  python bench/bench_time_estimate.py [--chunks 5]

The app under waitress against the bundled SmolLM2-135M (harvey_demo, one thread), as a new user meets
it: three short chat messages (the model's speeds are learned from them), then "Summarize each section
of topics.md" on Python's reference topics cut to ``--chunks`` chunks. Printed: the card's minutes (its
Time row: the per-chunk estimate times the chunks), the minutes the analysis took (start to the
synthesis recorded), their ratio, and the per-chunk estimate the speeds learned during the run would
give (what the running card's time left is corrected by). Wall time on this machine, so the load
matters: the machine's load average is printed with it.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine, pydoc_markdown  # noqa: E402
from bench_analysis_model import fit_bytes, run_card, topics_app  # noqa: E402

WARM_UP = ("Hello!", "What is a Raspberry Pi?", "Name three fruits.")


def run(chunks: int) -> dict:
    from app.analysis import plan

    text = pydoc_markdown(fit_bytes(chunks))
    with topics_app(text) as (model, live):
        name = live.open_session()
        for message in WARM_UP:
            live.post(f"/s/{name}/messages", data={"message": message})
            gen = live.services.activities.last(name)
            if gen is not None and not gen.wait_ended(600):
                raise SystemExit("a warm-up reply did not end")
        before = live.services.calibration.speed(model.model_name)
        live.post(f"/s/{name}/analysis/direct", data={"file": "topics.md"})      # the card, whatever fits
        job = live.services.jobs.open_for(name)
        # what the card's Time row says: the plan's whole estimate (main: the map calls alone)
        card_s = job.estimated_seconds or job.seconds_per_chunk * job.chunks
        maps_s = job.seconds_per_chunk * job.chunks
        wall = run_card(live, name, job.id)
        after = live.services.calibration.speed(model.model_name)
        # the same estimate at the speeds the run measured (the map calls' share scaled, the rest with it)
        per_chunk_now = plan.seconds_per_chunk(live.services.sizing, model.model_name, job.size_tokens)
        corrected = card_s * (per_chunk_now * job.chunks) / maps_s if maps_s else 0.0
        per_chunk = job.chunk_seconds()
    return {"chunks": job.chunks, "card_s": card_s, "wall_s": wall, "before": before, "after": after,
            "corrected_s": corrected, "per_chunk_run": per_chunk, "per_chunk_card": card_s / max(1, job.chunks),
            "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=5)
    args = parser.parse_args()
    r = run(args.chunks)
    print(f"Machine: {machine()}; load average {r['load']:.1f} at the end")
    print(f"speeds (prompt, reply tokens/s) learned from the chat: {r['before'][0]:.0f}, {r['before'][1]:.1f}; "
          f"after the run: {r['after'][0]:.0f}, {r['after'][1]:.1f}")
    print("| chunks | card min | run min (to the synthesis) | run / card | per chunk: card s | per chunk: run s "
          "| card min with the run's speeds |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {r['chunks']} | {r['card_s'] / 60:.1f} | {r['wall_s'] / 60:.1f} | {r['wall_s'] / max(1, r['card_s']):.2f} "
          f"| {r['per_chunk_card']:.0f} | {r['per_chunk_run']:.0f} | {r['corrected_s'] / 60:.1f} |")


if __name__ == "__main__":
    main()
