"""Item 3: prompt tokens sent per document token, chunked analysis vs one single-pass read.

Run from the repository root:  python bench/bench_tokens.py [--runs 3]

The same file is sent both ways, through the app under waitress, to the scripted Ollama
server (tests/scripted_ollama.py), whose token count is its ``prompt_tokens``: UTF-8
bytes of all message contents / 4, rounded up, per request.

* chunked: default config (window 8192, 1,500-token chunks, ``chunking.overlap`` as in the
  row); the user posts "Summarize each section of <file>", gets the alert card and starts
  the analysis with the instruction "Summarize each section."; every map request (system
  + instruction + "Chunk i of N:" + chunk) is counted, and the synthesis separately.
* single pass: the same app with a 131,072-token window for the model, so the file is
  read into the chat: one request (chat system prompt + message + <file> block).
* document tokens = ceil(bytes of the file / 4).
* chunk texts alone = the chunk texts cut out of the map prompts, bytes/4 each, summed:
  what the overlap (and carried headings) add, without the per-request instruction.

Documents (real text where possible, so paragraph lengths are realistic):
* ``prose.md``: Python's reference topics (pydoc_data, shipped with CPython) as Markdown sections;
* ``synthetic.md``: the test suite's big.md shape (identical 650-byte paragraphs);
* ``source.py``: CPython standard-library modules (argparse, ...) concatenated.
Each is cut to the size that gives exactly 20 chunks with paragraph overlap.

Token counts are deterministic; each is checked to be identical over ``--runs`` runs.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import shutil
import tempfile
import time
from pathlib import Path

from _harness import (CHUNK_RE, Reply, TimedScripted, chunks_for, close_quietly, header, live_app, pydoc_markdown,
                      stdlib_source, synthetic_markdown, table)

INSTRUCTION = "Summarize each section."


def tokens(text: str) -> int:
    return math.ceil(len(text.encode()) / 4)


def script(body):
    prompt = body["messages"][-1]["content"]
    found = CHUNK_RE.search(prompt)
    if found:
        return Reply(text=f"Partial answer for chunk {found.group(1)}: the section covers its topic.")
    return Reply(text="One answer for the whole document.")


def chunked(server, tmp: Path, file: str, text: str, overlap: str) -> dict:
    from app.config import ChunkingConfig

    live = live_app(tmp / f"chunked-{overlap}", server.url, chunking=ChunkingConfig(overlap=overlap))
    try:
        workspace = Path(live.config.workspace)
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / file).write_text(text)
        name = live.open_session()
        before = len(server.chats())
        live.post(f"/s/{name}/messages", data={"message": f"Summarize each section of {file}"})
        job = live.services.jobs.open_for(name)
        assert job is not None and job.state == "proposed", "expected the overflow card"
        live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": INSTRUCTION, "scope": "all"})
        list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=120))
        assert job.state == "done", (job.state, job.message)
        chats = server.chats()[before:]
        maps = [c for c in chats if CHUNK_RE.search(c.body["messages"][-1]["content"])]
        reduces = [c for c in chats if c not in maps]
        chunk_texts = [CHUNK_RE.split(c.body["messages"][-1]["content"], maxsplit=1)[-1] for c in maps]
        return {"chunks": len(maps), "maps": sum(server.prompt_tokens(c.body) for c in maps),
                "reduce": sum(server.prompt_tokens(c.body) for c in reduces),
                "chunk_texts": sum(tokens(t) for t in chunk_texts)}
    finally:
        close_quietly(live)


def single_pass(server, tmp: Path, file: str, text: str) -> int:
    from app.config import ModelConfig

    live = live_app(tmp / "single", server.url, models={"tiny:1b": ModelConfig(context_window=131072)})
    try:
        workspace = Path(live.config.workspace)
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / file).write_text(text)
        name = live.open_session()
        before = len(server.chats())
        live.post(f"/s/{name}/messages", data={"message": f"Summarize each section of {file}"})
        assert live.services.jobs.open_for(name) is None, "the file should fit the big window"
        deadline = time.monotonic() + 10
        while len(server.chats()) == before and time.monotonic() < deadline:
            time.sleep(0.01)
        (request,) = server.chats()[before:]
        assert f'<file name="{file}">' in request.body["messages"][-1]["content"]
        gen = live.services.activities.last(name)
        while gen and not gen.finished and time.monotonic() < deadline:
            time.sleep(0.01)
        return server.prompt_tokens(request.body)
    finally:
        close_quietly(live)


def documents() -> list[tuple[str, str, str]]:
    """(file name, kind, text), each cut to exactly 20 chunks with paragraph overlap."""
    out = []
    for file, kind, make in (
        ("prose.md", "markdown", lambda n: pydoc_markdown(n * 1000)),
        ("synthetic.md", "markdown", lambda n: synthetic_markdown(n)),
        ("source.py", "source", lambda n: stdlib_source(("argparse", "textwrap", "json.decoder", "json.encoder",
                                                          "http.server", "shutil", "tarfile"), n * 1000)),
    ):
        lo, hi = {"synthetic.md": (10, 40)}.get(file, (30, 200))
        for n in range(lo, hi + 1):
            text = make(n)
            got = chunks_for(text, kind)
            if got == 20:
                break
        else:
            raise RuntimeError(f"could not size {file} to 20 chunks")
        out.append((file, kind, text))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(header("Prompt tokens per document token (item 3)", f"python bench/bench_tokens.py --runs {args.runs}"))
    rows, sizes = [], []
    tmp = Path(tempfile.mkdtemp(prefix="bench-tokens-"))
    server = TimedScripted(models={"tiny:1b": 131072}, script=script).start()
    try:
        for file, kind, text in documents():
            doc = tokens(text)
            sizes.append(f"{file}: {len(text.encode()):,} bytes = {doc:,} tokens")
            runs = []
            for run in range(args.runs):
                base = tmp / f"{file}-{run}"
                result = {"single": single_pass(server, base, file, text)}
                for overlap in ("paragraph", "sentence", "none"):
                    result[overlap] = chunked(server, base, file, text, overlap)
                runs.append(result)
                shutil.rmtree(base, ignore_errors=True)
            assert all(r == runs[0] for r in runs), f"counts differ between runs for {file}"
            r = runs[0]
            single = r["single"]
            for overlap in ("paragraph", "sentence", "none"):
                c = r[overlap]
                fixed = (c["maps"] - c["chunk_texts"]) / c["chunks"]
                rows.append([file, overlap, c["chunks"], f"{c['maps']:,}", f"{c['maps'] / doc:.3f}",
                             f"{c['maps'] / single:.3f}", f"{c['chunk_texts'] / doc:.3f}", f"{fixed:.0f}",
                             f"{(c['maps'] + c['reduce']) / doc:.3f}", f"{single:,} ({single / doc:.3f})"])
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("Documents: " + "; ".join(sizes) + f". Counts identical in all {args.runs} runs.\n")
    print(table(["document", "overlap", "chunks", "map prompt tokens", "maps / document",
                 "maps / single pass", "chunk texts alone / document", "fixed tokens per map request",
                 "maps + synthesis / document", "single-pass prompt (/ document)"], rows))


if __name__ == "__main__":
    main()
