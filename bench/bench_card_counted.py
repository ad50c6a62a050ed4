"""Issue 30: the time to the alert card for a very large file with the model's counter loaded.

The app under waitress (``tests/conftest.LiveApp``) and a scripted server on loopback:

- ``ollama``: the scripted Ollama serving SmolLM2-135M's real vocabulary in ``/api/show`` verbose
  (``tests/vocab.py``), so the app counts with its own counter (``tokens.Counter``);
- ``llama``: the scripted llama-server dialect, whose ``/tokenize`` is the counter
  (``remote_counter.RemoteCounter``; a token per 4 bytes there): every count is an HTTP request.

Per case: the counter is built first (what the app's first page starts in the background), a
``--mb`` MB Markdown file is written to the workspace, then one message names it and the wall time
until the answer (the card) is read is the figure, with the card's size, whether it says "about",
and the bytes each ``/tokenize`` request carried (the file must never be sent whole).

    python bench/bench_card_counted.py [--mb 150]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

PARAGRAPH = ("The methodology section describes a three-phase experiment with careful controls, and the "
             "results are discussed at length with tables and figures. ")


def write_markdown(path: Path, megabytes: int) -> None:
    block = "".join(f"## Section {s}\n\nParagraph {s}. " + PARAGRAPH * 5 + "\n\n" for s in range(200))
    with path.open("w", encoding="utf-8") as fh:
        for _ in range(megabytes * 2**20 // len(block) + 1):
            fh.write(block)


def run(kind: str, megabytes: int) -> dict:
    import dataclasses

    from conftest import LiveApp, make_config

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if kind in ("ollama", "gemma"):
            from scripted_ollama import ScriptedOllama
            from vocab import gemma_gguf, model_info, smollm_gguf

            model = "smol:135m" if kind == "ollama" else "gemma3:270m"
            server = ScriptedOllama(models={model: 8192})
            server.model_info[model] = model_info(smollm_gguf() if kind == "ollama" else gemma_gguf())
            config = make_config(tmp, server.url, model=model)
        else:
            from scripted_openai import ScriptedOpenAI

            server, model = ScriptedOpenAI(kind="llama"), "tiny:1b"
            config = make_config(tmp, server.url, model=model)
            config = dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, api="openai"))
        with server:
            (tmp / "workspace").mkdir(parents=True)
            write_markdown(tmp / "workspace" / "big.md", megabytes)
            live = LiveApp(config)
            try:
                live.http.timeout = 120.0
                started = time.perf_counter()
                counter = live.services.models.counter(model, wait=True)
                built = time.perf_counter() - started
                name = live.open_session()
                asked = len(server.requests)
                started = time.perf_counter()
                page = live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"}).text
                card = time.perf_counter() - started
                size = re.search(r"<dt>Size</dt><dd>([^<]*)", page)
                sent = [len(r.body.get("content", "")) for r in server.requests[asked:] if r.path == "/tokenize"]
                job = live.services.jobs.open_for(name)
                return {"kind": kind, "counter": counter.name if counter else None, "build_s": round(built, 2),
                        "card_s": round(card, 2), "size": size.group(1).strip() if size else "?",
                        "chunks": job.chunks if job else None, "tokenize_requests": len(sent),
                        "largest_tokenize_chars": max(sent, default=0)}
            finally:
                live.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=150)
    args = parser.parse_args()
    load = os.getloadavg()
    rows = [run(kind, args.mb) for kind in ("ollama", "gemma", "llama")]
    print(f"load average {load[0]:.2f} {load[1]:.2f} (before), {os.getloadavg()[0]:.2f} (after); nproc {os.cpu_count()}")
    print("| server | counter | counter ready | time to the card | card's size | chunks | /tokenize requests (largest) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kind']} | {r['counter']} | {r['build_s']} s | {r['card_s']} s | {r['size']} | {r['chunks']} | "
              f"{r['tokenize_requests']} ({r['largest_tokenize_chars']:,} chars) |")


if __name__ == "__main__":
    main()
