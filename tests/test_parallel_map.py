"""Map calls of a chunked analysis: retries with a growing pause, parallel calls, a refused chunk re-split.

Through waitress against the scripted Ollama-API server (and the scripted OpenAI-compatible one):
the server counts the calls it answers at once, fails on cue (an HTTP status N times, a reset
connection) and refuses a prompt as over its window, so each promise is checked on the wire.
"""

from __future__ import annotations

import dataclasses
import logging
import re

import pytest

from app.analysis import execute
from scripted_ollama import Reply, failing
from test_analysis import big_file_config, map_or_reduce, start_job
from waiting import wait_for

MAP = re.compile(r"\nChunk (\d+) of \d+(?: \([^\n]*\))?:\n")


def chunk_of(body) -> int | None:
    """The 1-based chunk a map request asks about (None: a synthesis)."""
    found = MAP.search(body["messages"][-1]["content"])
    return int(found.group(1)) if found else None


def wait_state(job, *states, timeout=30.0):
    wait_for(lambda: job.state in states, timeout, f"job state in {states} (it is {job.state})")


@pytest.fixture
def short_pauses(monkeypatch):
    """Retries after 10, 20 and 40 ms instead of 1, 2 and 4 s."""
    monkeypatch.setattr(execute, "RETRY_PAUSES_S", (0.01, 0.02, 0.04))


def run(live, instruction="Summarize."):
    """Start an analysis of big.md in a new session and follow it to its end."""
    name = live.open_session()
    job, _ = start_job(live, name, instruction)
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30, total=120))
    return name, job


# -- retries ----------------------------------------------------------------------------------

def test_a_server_that_answers_503_twice_then_succeeds_completes_every_chunk_once(
        tmp_path, scripted, make_live, short_pauses, caplog):
    scripted.script = failing(2, map_or_reduce, status=503, which=lambda body: chunk_of(body) == 2)
    live = make_live(big_file_config(tmp_path, scripted))
    with caplog.at_level(logging.WARNING, logger="app.analysis.execute"):
        _, job = run(live)
    assert job.state == "done"
    asked = scripted.map_requests()
    assert asked.count(2) == 3                                       # two 503s, then the answer
    assert all(asked.count(n) == 1 for n in range(1, job.chunks + 1) if n != 2)
    assert [r.status for _, r in sorted(job.results.items())] == ["ok"] * job.chunks
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 2 and "retry 1 of 3" in retries[0] and "503" in retries[0]


@pytest.mark.parametrize("fault, status", [(None, 500), ("reset", None)])
def test_a_500_and_a_reset_connection_are_retried(tmp_path, scripted, make_live, short_pauses, fault, status):
    scripted.script = failing(1, map_or_reduce, status=status, fault=fault, which=lambda body: chunk_of(body) == 3)
    live = make_live(big_file_config(tmp_path, scripted))
    _, job = run(live)
    assert job.state == "done" and scripted.map_requests().count(3) == 2
    assert all(r.status == "ok" for r in job.results.values())


def test_a_server_that_stays_away_interrupts_the_job_after_the_retries(tmp_path, scripted, make_live, short_pauses):
    scripted.script = failing(99, map_or_reduce, status=503, which=lambda body: chunk_of(body) == 2)
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    wait_state(job, "interrupted")
    assert scripted.map_requests().count(2) == 1 + len(execute.RETRY_PAUSES_S)
    assert "Retry when Ollama is back" in job.message and job.results[0].status == "ok"


def test_a_stop_during_the_pause_ends_it_at_once(tmp_path, scripted, make_live, monkeypatch):
    monkeypatch.setattr(execute, "RETRY_PAUSES_S", (120.0,))     # a pause no test would sit out
    scripted.script = failing(99, map_or_reduce, status=503, which=lambda body: chunk_of(body) == 2)
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    wait_for(lambda: scripted.map_requests().count(2) == 1, what="the first 503")
    assert live.post(f"/s/{name}/analysis/{job.id}/cancel").status_code == 204
    wait_state(job, "choose", timeout=20)                           # far less than the pause
    assert scripted.map_requests().count(2) == 1                    # and it was not sent again


# -- parallel map calls -----------------------------------------------------------------------

def parallel_config(tmp_path, scripted, parallel=2, **chunking):
    """big.md in the workspace, and a server said to answer ``parallel`` calls at once.

    The limit of chunks is above what big.md needs however its re-plan falls (it comes after
    the chunks already started, which depends on which calls end first), so no run stops to ask."""
    chunking.setdefault("max_chunks", 40)
    config = big_file_config(tmp_path, scripted, **chunking)
    return dataclasses.replace(config, ollama=dataclasses.replace(config.ollama, parallel=parallel))


def timed_maps(delays: dict[int, float], default: float = 0.0):
    """map_or_reduce, each map reply spread over about ``delays[chunk]`` seconds (``default``)."""
    def script(body):
        reply = map_or_reduce(body)
        n = chunk_of(body)
        if n is not None:
            pieces = max(1, len(reply.text) // reply.piece_size)
            reply.token_delay = delays.get(n, default) / pieces
        return reply
    return script


def test_parallel_2_keeps_two_calls_in_flight_and_results_land_in_chunk_order(tmp_path, scripted, make_live):
    scripted.script = timed_maps({1: 1.0, 2: 0.0}, default=0.05)      # chunk 2 ends long before chunk 1
    live = make_live(parallel_config(tmp_path, scripted))
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    events = list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30, total=120))
    assert job.state == "done" and scripted.max_in_flight == 2      # two at once, never more
    first, second = (next(c for c in scripted.chats() if chunk_of(c.body) == n) for n in (1, 2))
    assert second.ended < first.ended                               # chunk 2 answered first...
    partials = [int(re.search(r"<summary>Chunk (\d+)/", d).group(1)) for e, d, _ in events if e == "partial"]
    assert partials == list(range(1, job.chunks + 1))               # ...and landed after chunk 1
    assert list(job.results) == list(range(job.chunks))             # (results.jsonl in the same order)
    stages = " ".join(d for e, d, _ in events if e == "progress")
    assert "Reading chunks 1, 2 of " in stages
    asked = scripted.map_requests()
    assert sorted(asked) == list(range(1, job.chunks + 1))          # every chunk asked once


def test_stop_with_two_calls_in_flight_cancels_both_and_frees_the_session(tmp_path, scripted, make_live):
    scripted.script = timed_maps({}, default=20.0)                  # every map call takes long
    live = make_live(parallel_config(tmp_path, scripted))
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    wait_for(lambda: scripted.in_flight == 2, what="two map calls in flight")
    in_flight = [c for c in scripted.chats() if not c.finished.is_set()]
    assert len(in_flight) == 2
    assert live.post(f"/s/{name}/analysis/{job.id}/cancel").status_code == 204
    wait_state(job, "choose", timeout=20)
    for rec in in_flight:
        assert rec.finished.wait(10) and rec.disconnected               # the server saw both hang-ups
    assert live.services.activities.holder(name) is None               # the session is free
    assert len(scripted.chats()) == 2 and job.results == {}            # nothing more was started


def test_resume_after_a_restart_re_runs_only_the_missing_chunks_with_parallel_2(tmp_path, scripted, make_live):
    scripted.script = timed_maps({}, default=0.15)
    config = parallel_config(tmp_path, scripted)
    first = make_live(config)
    name = first.open_session()
    job, _ = start_job(first, name, "Summarize.")
    wait_for(lambda: job.done_count >= 3, what="three chunks")
    first.close()                                                   # the server goes away mid-run
    wait_state(job, "interrupted")
    finished = {i for i, r in job.results.items() if r.status == "ok"}
    second = make_live(config)
    resumed = second.services.jobs.get(job.id)
    assert resumed.state == "interrupted" and set(resumed.results) == finished
    before = len(scripted.chats())
    second.post(f"/s/{name}/analysis/{job.id}/resume")
    list(second.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30, total=120))
    assert resumed.state == "done"
    redone = [n - 1 for n in scripted.map_requests(since=before)]
    assert len(redone) == len(set(redone)) and not set(redone) & finished
    assert sorted(redone + sorted(finished)) == list(range(resumed.chunks))
    assert scripted.max_in_flight == 2
