"""A whole chunked analysis against the real small model: calls, tokens and model time (issue 14).

Run from the repository root:  python bench/bench_analysis_model.py [--bytes N] [--write LABEL]

The app runs under waitress (tests/conftest.LiveApp) against the bundled SmolLM2-135M
behind Ollama's API (harvey_demo.server.DemoServer, one thread). The document is Python's
reference topics as Markdown (pydoc_data, shipped with CPython), cut to ``--bytes``
(default: the size that makes exactly 20 chunks with this checkout's chunker, so the
"before" run is a 20-chunk analysis and the "after" run analyses the same bytes). The
user asks "Summarize each section of topics.md", gets the alert card and starts it.

Counted from the model server's own answers (``prompt_eval_count``, ``eval_count``, and
the time of each call as the client saw it): model calls, prompt tokens, generated tokens,
model seconds. On a Pi the model's time is the cost; generated tokens are the slow part.
``--write LABEL`` adds a row to the "## Analysis against the real model" section of
bench/RESULTS.md (LABEL: e.g. "before #14").
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import ROOT, add_rows, chunks_for, close_quietly, git_revision, live_app, machine, pydoc_markdown  # noqa: E402

SECTION = "## Analysis against the real model (issue 14)"
DEADLINE_S = 3600.0


def fit_bytes(target: int) -> int:
    """The smallest size (in 2 KB steps) whose topics document makes ``target`` chunks here."""
    for size in range(20_000, 400_000, 2_000):
        if chunks_for(pydoc_markdown(size), "markdown") >= target:
            return size
    raise SystemExit("no size gives that many chunks")


def record_calls(client, calls: list) -> None:
    """Wrap this one client's ``chat`` so each call's final counts and time are kept (bench only)."""
    real = client.chat

    def chat(model, messages, **kwargs):
        started = time.monotonic()
        stream = real(model, messages, **kwargs)
        original_iter = stream.__iter__

        def iterate():
            pieces = 0
            try:
                for piece in original_iter():
                    pieces += 1
                    yield piece
            finally:          # also a call the app stopped (a loop): its pieces, one token each
                usage = stream.usage
                calls.append({"seconds": time.monotonic() - started,
                              "prompt": (usage.prompt_tokens or 0) if usage else 0,
                              "generated": (usage.generated_tokens or 0) if usage else pieces,
                              "num_ctx": kwargs.get("num_ctx"), "stopped": usage is None})
        return _Iterable(stream, iterate)

    client.chat = chat


class _Iterable:
    """The stream with the recording iterator in front; everything else passes through."""

    def __init__(self, stream, iterate):
        self._stream, self._iterate = stream, iterate

    def __iter__(self):
        return self._iterate()

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def topics_app(text: str):
    """The bundled model (one thread) and the app under waitress against it, ``text`` in its workspace as
    topics.md: (model, live); both closed at the end."""
    from harvey_demo import server as demo_server

    if not demo_server.model_available():
        raise SystemExit(demo_server.INSTALL_HINT)
    with demo_server.DemoServer(threads=1) as model, tempfile.TemporaryDirectory() as tmp:
        live = live_app(Path(tmp), model.url, model_server=_ollama(model))
        try:
            workspace = Path(live.config.workspace)
            workspace.mkdir(parents=True, exist_ok=True)
            (workspace / "topics.md").write_text(text)
            yield model, live
        finally:
            close_quietly(live)


def run(size: int) -> dict:
    text = pydoc_markdown(size)
    with topics_app(text) as (model, live):
        calls: list = []
        record_calls(live.services.models, calls)
        name = live.open_session()
        card = live.post(f"/s/{name}/messages", data={"message": "Summarize each section of topics.md"}).text
        job_id = re.search(r'id="job-([0-9a-f]+)"', card).group(1)
        chunks = int(re.search(r"<dt>Chunks</dt><dd>(\d+) chunks", card).group(1))
        wall = run_card(live, name, job_id)
        session = live.services.store.folder / f"{name}.spmd"
        ran = int(re.search(r"chunk: file=topics.md, chunks=(\d+)", session.read_text()).group(1))
        doc_tokens = model_tokens(model, text)
        over = [c for c in calls if c["num_ctx"] and c["prompt"] + c["generated"] > c["num_ctx"]]
        refused = "context" in session.read_text().lower() and "exceed" in session.read_text().lower()
    return {"bytes": len(text.encode()), "chunks": chunks, "ran": ran, "calls": len(calls),
            "prompt": sum(c["prompt"] for c in calls), "generated": sum(c["generated"] for c in calls),
            "model_s": sum(c["seconds"] for c in calls), "wall_s": wall, "over_window": len(over),
            "refused": refused, "doc_tokens": doc_tokens}


def run_card(live, name: str, job_id: str, instruction: str = "Summarize each section.") -> float:
    """Start the card's analysis on the whole file and wait for its synthesis in the session file (at
    most ``DEADLINE_S``); the seconds it took."""
    started = time.monotonic()
    live.post(f"/s/{name}/analysis/{job_id}/start", data={"instruction": instruction, "scope": "all"})
    session = live.services.store.folder / f"{name}.spmd"
    while "synthesis: model=" not in session.read_text():
        if time.monotonic() - started > DEADLINE_S:
            raise SystemExit("the analysis did not finish in time")
        time.sleep(1.0)
    return time.monotonic() - started


def model_tokens(model, text: str) -> int:
    """The document's tokens by the model's own tokenizer (llama.cpp ``/tokenize``, in 8 KB pieces cut at lines)."""
    from harvey_demo.server import _post_json

    url = model.engine._chat_server.listening_address
    pieces, piece = [], ""
    for line in text.split("\n"):
        if len(piece) + len(line) > 8000:
            pieces.append(piece)
            piece = ""
        piece += line + "\n"
    pieces.append(piece)
    return sum(len(_post_json(url, "/tokenize", {"content": p, "add_special": False})["tokens"]) for p in pieces)


def _ollama(model):
    from app.config import ModelServerConfig

    return ModelServerConfig(url=model.url, model=model.model_name, connect_timeout_s=2.0, timeout_s=600.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=0, help="document size (default: 20 chunks here)")
    parser.add_argument("--write", metavar="LABEL", default="")
    args = parser.parse_args()
    size = args.bytes or fit_bytes(20)
    r = run(size)
    row = (f"| {args.write or 'this run'} | {git_revision()} | {r['bytes']:,} | {r['doc_tokens']:,} | {r['chunks']} | "
           f"{r['ran']} | {r['calls']} | {r['prompt']:,} | {r['prompt'] / r['doc_tokens']:.2f} | {r['generated']:,} | {r['model_s']:.0f} | "
           f"{r['wall_s']:.0f} | {r['over_window']} |")
    print(row)
    if args.write:
        add_rows(SECTION, [
            f"Command: `python bench/bench_analysis_model.py --bytes {size} --write LABEL`", "",
            f"Machine: {machine()}. SmolLM2-135M-Instruct (harvey_demo, 1 thread), window 8192.", "",
            "| run | tree | document bytes | document tokens (the model's) | chunks planned | chunks run | "
            "model calls | prompt tokens | prompt tokens per document token | generated tokens | model s | "
            "wall s | calls over the window |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"], [row])


if __name__ == "__main__":
    main()
