"""Issue 24: one 20-chunk analysis on one model server, and on two behind nginx (parallel 2).

Run from the repository root (Debian's nginx installed, as scripts/test.sh does):

    python bench/bench_scaleout.py [--runs 3] [--tps 40] [--prefill-tps 2000] [--write]

Each model server is the test suite's scripted Ollama-API server (tests/scripted_ollama.py)
made to behave like Ollama with OLLAMA_NUM_PARALLEL=1 on a machine of its own: it serves one
chat at a time (a second call waits for the first, as in Ollama's queue), reads the prompt at
``--prefill-tps`` tokens a second (the wait before the first byte) and generates at ``--tps``
tokens a second (one token a streamed piece). Generation is simulated by waiting, so two
"machines" really do work at once here; two real models on this 2-core machine would share its
cores and show nothing about two machines.

Set-ups, a fresh app (tests/conftest.LiveApp under waitress) and fresh servers each run:

* one server, the app pointed at it directly, ``model_server.parallel: 1`` (the Pi);
* one server behind nginx, parallel 1 (what the balancer itself costs);
* two servers behind nginx (deploy/nginx-model-servers.conf through tests/balancer.py),
  ``model_server.parallel: 2``.

The document is the test suite's big.md, sized so that the plan is exactly 20 chunks and the
server's token count agrees with the app's estimate for Markdown (no re-plan): every run makes
20 map calls and one synthesis call. Measured: wall time from POST .../start to the SSE
``close``; model calls, prompt and generated tokens per server (from the servers' records);
the most calls a server had at once, the one it was generating and any waiting behind it (1: the
balancer never queued a call behind another on the same server). Ratio = two servers' median wall time over one
server's (the issue's goal: at most 0.6).
"""
from __future__ import annotations

import argparse
import dataclasses
import shutil
import tempfile
import threading
import time
from pathlib import Path

from _harness import CHUNK_RE, Reply, TimedScripted, close_quietly, header, median, synthetic_markdown, table, \
    write_section

from app import chunking
from app.budget import KIND_FACTORS

CHUNKS = 20
MAP_TOKENS = 48             # tokens of each partial answer
SYNTHESIS_TOKENS = 120      # tokens of the synthesized answer
MARKDOWN_RATIO = 1 / KIND_FACTORS["markdown"]   # the server counts Markdown as the app estimates it


class OneAtATime(TimedScripted):
    """A scripted server that serves one chat at a time, reads the prompt at ``prefill_tps`` and
    generates at ``tps`` tokens a second: Ollama with OLLAMA_NUM_PARALLEL=1 on its own machine."""

    def __init__(self, tps: float, prefill_tps: float):
        self._turn = threading.Lock()        # one chat generates at a time
        self._count = threading.Lock()       # guards busy / most_busy
        self.tps, self.prefill_tps = tps, prefill_tps
        self.busy = self.most_busy = 0
        self.generated = 0
        super().__init__(script=self._answer, token_ratio=MARKDOWN_RATIO)

    def _bind(self, address):
        """The scripted handler, its chat behind this server's one-at-a-time lock."""
        httpd = super()._bind(address)
        server, base = self, httpd.RequestHandlerClass

        class OneChat(base):
            def _chat(self, body, rec):
                with server._count:
                    server.busy += 1            # this call, and any it waits behind
                    server.most_busy = max(server.most_busy, server.busy)
                try:
                    with server._turn:
                        return super()._chat(body, rec)
                finally:
                    with server._count:
                        server.busy -= 1

        httpd.RequestHandlerClass = OneChat
        return httpd

    def _answer(self, body: dict) -> Reply:
        """A map call's partial answer or the synthesis, of a fixed length, paced as the model."""
        found = CHUNK_RE.search(body["messages"][-1]["content"])
        text, tokens = ((f"Partial answer for chunk {found.group(1)}.", MAP_TOKENS) if found
                        else ("SYNTHESIZED answer for the run.", SYNTHESIS_TOKENS))
        self.generated += tokens
        return Reply(text=text.ljust(4 * tokens, ".")[:4 * tokens], piece_size=4, token_delay=1 / self.tps,
                     first_byte_delay=self.prompt_tokens(body) / self.prefill_tps)


def twenty_chunks() -> str:
    """big.md with exactly 20 chunks at the app's Markdown estimate (1,500-token chunks)."""
    settings = chunking.ChunkSettings(size_tokens=1500, overlap="paragraph",
                                      bytes_per_token=4.0 * KIND_FACTORS["markdown"])
    for sections in range(10, 80):
        text = synthetic_markdown(sections)
        if chunking.plan_document(chunking.make_document(text, "markdown", settings)).chunks == CHUNKS:
            return text
    raise RuntimeError("no size of big.md gives 20 chunks")


def with_parallel(config, parallel: int):
    """``config`` with ``model_server.parallel``; a checkout without that setting can run parallel 1 only."""
    if "parallel" not in {f.name for f in dataclasses.fields(config.model_server)}:
        if parallel > 1:
            raise SystemExit("bench_scaleout: this checkout has no model_server.parallel (issue 24's parallel map calls)")
        return config
    return dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, parallel=parallel))


def one_run(document: str, servers: int, balanced: bool, parallel: int, args, balancer_folder: Path) -> dict:
    """One analysis of ``document``; the figures of that run."""
    from balancer import Nginx, balancer_site, free_port
    from conftest import LiveApp, make_config

    tmp = Path(tempfile.mkdtemp(prefix="bench-scaleout-"))
    models = [OneAtATime(args.tps, args.prefill_tps).start() for _ in range(servers)]
    nginx = live = None
    try:
        url = models[0].url
        if balanced:
            port = free_port()
            site = balancer_site([m.url.removeprefix("http://") for m in models], port)
            nginx = Nginx(balancer_folder / f"nginx-{time.monotonic_ns()}", site, port)
            url = nginx.url
        config = with_parallel(make_config(tmp, url), parallel)
        live = LiveApp(config)
        workspace = Path(config.workspace)
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / "big.md").write_text(document)
        name = live.open_session()
        live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
        job = live.services.jobs.open_for(name)
        assert job is not None and job.chunks == CHUNKS, job and job.chunks
        started = time.monotonic()
        live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize each section."})
        events = list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=300, total=900))
        wall = time.monotonic() - started
        assert events[-1][0] == "close" and job.state == "done", (job.state, job.message)
        chats = [[c for c in m.chats()] for m in models]
        maps = sum(1 for calls in chats for c in calls if CHUNK_RE.search(c.body["messages"][-1]["content"]))
        assert maps == CHUNKS and sum(map(len, chats)) == CHUNKS + 1, (maps, [len(c) for c in chats])
        return {"wall": wall, "calls": [len(c) for c in chats], "generated": [m.generated for m in models],
                "prompt": sum(m.prompt_tokens(c.body) for m, calls in zip(models, chats) for c in calls),
                "most_busy": max(m.most_busy for m in models)}
    finally:
        if live is not None:
            close_quietly(live)
        if nginx is not None:
            nginx.stop()
        for m in models:
            m.stop()
        shutil.rmtree(tmp, ignore_errors=True)


SETUPS = [("one server, direct, parallel 1", 1, False, 1),
          ("one server behind nginx, parallel 1", 1, True, 1),
          ("two servers behind nginx, parallel 2", 2, True, 2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tps", type=float, default=40.0, help="generated tokens a second, per server")
    parser.add_argument("--prefill-tps", type=float, default=2000.0, help="prompt tokens read a second, per server")
    parser.add_argument("--write", action="store_true", help="put the section into bench/RESULTS.md")
    args = parser.parse_args()
    import pytest

    document = twenty_chunks()
    folder = Path(tempfile.mkdtemp(prefix="bench-scaleout-nginx-"))
    rows, walls = [], {}
    try:
        for label, servers, balanced, parallel in SETUPS:
            runs = [one_run(document, servers, balanced, parallel, args, folder) for _ in range(args.runs)]
            walls[label] = median([r["wall"] for r in runs])
            last = runs[-1]
            rows.append([label, f"{walls[label]:.1f} s", ", ".join(f"{r['wall']:.1f}" for r in runs),
                         " + ".join(str(c) for c in last["calls"]), " + ".join(f"{g:,}" for g in last["generated"]),
                         f"{last['prompt']:,}", str(max(r["most_busy"] for r in runs))])
    except pytest.skip.Exception as exc:
        raise SystemExit(f"bench_scaleout: {exc}") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    one, two = walls[SETUPS[0][0]], walls[SETUPS[2][0]]
    command = (f"python bench/bench_scaleout.py --runs {args.runs} --tps {args.tps:g} "
               f"--prefill-tps {args.prefill_tps:g}" + (" --write" if args.write else ""))
    text = "\n".join([
        "## Scale-out: one model server vs two behind nginx (issue 24)", "",
        header("A 20-chunk analysis", command),
        f"Document: {len(document.encode()):,} bytes of Markdown, {CHUNKS} chunks of up to 1,500 tokens; "
        f"{CHUNKS} map calls ({MAP_TOKENS} tokens each) and 1 synthesis ({SYNTHESIS_TOKENS} tokens) per run. "
        f"Each server is the scripted Ollama-API server serving one call at a time, reading prompts at "
        f"{args.prefill_tps:g} tokens/s and generating at {args.tps:g} tokens/s: **simulated generation "
        f"time**, not a model (two real models would share this machine's 2 cores). Median of {args.runs} runs.",
        "", table(["set-up", "wall (median)", "runs (s)", "model calls per server (last run)",
                   "generated tokens per server (last run)", "prompt tokens",
                   "most calls at a server at once, queued included (all runs)"], rows), "",
        f"**Two servers / one server: {two / one:.2f}** of the wall time (goal: at most 0.6).", ""])
    print(text)
    if args.write:
        write_section("## Scale-out: one model server vs two behind nginx (issue 24)", text)


if __name__ == "__main__":
    main()
