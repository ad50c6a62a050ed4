"""Issue 24, scale-out: one analysis spread over two model servers behind Debian's nginx.

Everything is real HTTP: the app under waitress, pointed at nginx running the documented
deploy/nginx-model-servers.conf (tests/balancer.py), in front of two scripted model servers
(tests/scripted_ollama.py, tests/scripted_openai.py) that record every call. Each map call's
chunk is read back from the servers' own records, so "no chunk lost or done twice" is counted
where the work happened, not taken from the app's word.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import time
from collections import Counter
from pathlib import Path

from app.budget import KIND_FACTORS
from app.sessions import fountain
from balancer import balancer  # noqa: F401 (the fixture)
from conftest import make_config
from scripted_ollama import ScriptedOllama
from scripted_openai import Reply as OpenAIReply
from scripted_openai import ScriptedOpenAI
from test_analysis import big_markdown, map_or_reduce
from waiting import wait_until

CHUNK = re.compile(r"\nChunk (\d+) of \d+(?: \([^\n]*\))?:\n")
CHUNKS = 20                 # big_markdown() at 1,500-token chunks, sized as Markdown
MARKDOWN = 1 / KIND_FACTORS["markdown"]   # a scripted Ollama counting Markdown as the app estimates it
#                                           (no re-plan after the first call: 20 chunks to the end)
PIECE_DELAY = 0.02          # seconds per streamed piece: a map call takes ~0.15 s
PARALLEL = 2


def chunk_in(body) -> int | None:
    """The 1-based chunk a chat body asks about; None for the synthesis."""
    found = CHUNK.search(body["messages"][-1]["content"])
    return int(found.group(1)) if found else None


def chunk_of(rec) -> int | None:
    """The chunk a recorded chat asked about."""
    return chunk_in(rec.body)


def maps(server) -> list:
    """The server's recorded map calls, in arrival order."""
    return [rec for rec in server.chats() if chunk_of(rec) is not None]


def answered(server) -> list[int]:
    """The chunks whose map call this server answered to the end."""
    return [chunk_of(rec) for rec in maps(server) if rec.finished.is_set() and not rec.disconnected]


def analysis_config(tmp_path, url: str, **ollama):
    """The app pointed at ``url`` with ``model_server.parallel: 2``, and big.md in its workspace."""
    config = make_config(tmp_path, url)
    config = dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, parallel=PARALLEL, **ollama),
                                 chunking=dataclasses.replace(config.chunking, chunk_size_tokens=1500))
    Path(config.workspace).mkdir(parents=True)
    (Path(config.workspace) / "big.md").write_text(big_markdown())
    return config


def run_analysis(live, instruction="Summarize the methodology of each section."):
    """Ask about big.md, start the analysis from its card; returns the session name and the job."""
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    assert job is not None
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": instruction})
    return name, job


def finish(live, name, job) -> str:
    """Follow the job's events to the end; the answer that landed in the chat."""
    events = list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=60, total=120))
    assert events[-1][0] == "close" and job.state == "done", (job.state, job.message)
    text = (live.services.store.folder / f"{name}.spmd").read_text()
    return fountain.turns(fountain.loads(text))[0].reply


def counting(script, servers, seen: list[int]):
    """``script`` that also notes how many chat calls the servers together have in flight."""
    def counted(body):
        seen.append(sum(1 for s in servers for rec in s.chats() if not rec.finished.is_set()))
        return script(body)
    return counted


def paced(body):
    """map_or_reduce, streamed at PIECE_DELAY a piece."""
    reply = map_or_reduce(body)
    reply.token_delay = PIECE_DELAY
    return reply


def test_two_servers_share_the_map_calls_and_one_killed_mid_run_loses_no_chunk(tmp_path, balancer, make_live):
    """The issue's case: both servers get map calls; A dies in the middle of a call; that chunk
    is asked again once, through nginx, of B; every other chunk is asked exactly once; the answer
    lands. A's third map call is a long reply, so A is surely mid-call when it is killed."""
    doomed, spare, seen = ScriptedOllama(token_ratio=MARKDOWN), ScriptedOllama(token_ratio=MARKDOWN), []
    doomed_maps, slow = itertools.count(1), []

    def doomed_script(body):
        reply = paced(body)
        if chunk_in(body) is not None and next(doomed_maps) == 3:
            slow.append(body)
            reply.text = "Still reading this chunk... " * 200         # ~20 s of pieces: killed long before
        return reply

    doomed.script = counting(doomed_script, (doomed, spare), seen)
    spare.script = counting(paced, (doomed, spare), seen)
    with doomed, spare:
        nginx = balancer([doomed.url, spare.url])
        live = make_live(analysis_config(tmp_path, nginx.url))
        name, job = run_analysis(live)
        stuck = wait_until(lambda: next((r for r in maps(doomed) if slow and r.body is slow[0]), None), 60,
                           "A's third map call")
        wait_until(lambda: time.monotonic() - stuck.at > 0.3, 5, "A's first pieces to go out")
        doomed.kill()                                                  # the machine goes away mid-call
        assert stuck.finished.wait(10) and stuck.disconnected
        answer = finish(live, name, job)

    lost = chunk_of(stuck)
    assert job.chunks == CHUNKS
    on_doomed, on_spare = answered(doomed), answered(spare)
    assert len(on_doomed) >= 2 and len(on_spare) >= 2                       # both servers did map calls
    assert lost not in on_doomed and on_spare.count(lost) == 1              # the broken call finished on B
    assert sorted(on_doomed + on_spare) == list(range(1, job.chunks + 1))  # no chunk lost, none done twice
    asked = Counter(chunk_of(rec) for rec in maps(doomed) + maps(spare))
    assert asked == Counter({**{i: 1 for i in range(1, job.chunks + 1)}, lost: 2})  # only the broken one again
    assert all(r.status == "ok" for r in job.results.values()) and len(job.results) == job.chunks
    assert answer.startswith("SYNTHESIZED")
    assert max(seen) >= PARALLEL        # the two worked at once (an upper bound is test_parallel_map's: here a
    #                                     call that just ended may not be marked finished yet)


def openai_paced(body):
    """map_or_reduce's answers from an OpenAI-compatible server, streamed at PIECE_DELAY a piece."""
    return OpenAIReply(text=map_or_reduce(body).text, token_delay=PIECE_DELAY)


def test_two_openai_compatible_servers_behind_nginx_share_an_analysis(tmp_path, balancer, make_live):
    """api: openai through the same nginx: the window comes from /props through the balancer,
    both llama-servers get map calls, each chunk is asked once, every call fits the window."""
    first, second, seen = ScriptedOpenAI(), ScriptedOpenAI(), []
    first.script = second.script = counting(openai_paced, (first, second), seen)
    with first, second:
        nginx = balancer([first.url, second.url])
        live = make_live(analysis_config(tmp_path, nginx.url, api="openai"))
        name, job = run_analysis(live)
        answer = finish(live, name, job)
        calls = first.chats() + second.chats()
    done = [chunk_of(rec) for rec in calls if chunk_of(rec) is not None]
    assert sorted(done) == list(range(1, job.chunks + 1))
    assert all(any(chunk_of(rec) for rec in server.chats()) for server in (first, second))
    assert "/props" in first.paths() + second.paths()
    for rec in calls:
        assert rec.refused is None and first.prompt_tokens(rec.body) + rec.body["max_tokens"] <= 4096
    assert answer.startswith("SYNTHESIZED") and max(seen) >= PARALLEL


def directives(text: str) -> list[str]:
    """nginx configuration without comments, blank lines or indentation: what nginx reads."""
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def test_the_readme_shows_the_nginx_configuration_the_test_runs():
    """The nginx block of docs/model-servers.md (the README's "Where the model runs", moved there in
    issue 45) is deploy/nginx-model-servers.conf, directive for directive: the set-up a reader copies is
    the one the killed-server test above runs."""
    from balancer import BALANCER_SITE

    readme = (BALANCER_SITE.parent.parent / "docs" / "model-servers.md").read_text()
    blocks = re.findall(r"```nginx\n(.*?)```", readme, re.S)
    assert len(blocks) == 1 and directives(blocks[0]) == directives(BALANCER_SITE.read_text())
