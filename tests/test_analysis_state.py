"""The analysis as a state machine (issue 13: problems 5, 6, 7, 8, 10 and the analysis halves of 2 and 13).

Everything runs through waitress against the scripted Ollama server. Every wait
has a deadline (``wait_for``); nothing asserts on wall-clock durations.
"""

import dataclasses
import gc
import re
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from app.analysis import job as job_module
from app.analysis.job import TRANSITIONS
from waiting import wait_for
from app.config import ModelConfig
from app.sessions import fountain
from scripted_ollama import Reply, prose
from test_analysis import big_file_config, big_markdown, map_or_reduce, session_text, slow_maps, start_job

MAP = re.compile(r"\nChunk (\d+) of \d+(?: \([^\n]*\))?:\n")


def wait_state(job, *states, timeout=30.0):
    wait_for(lambda: job.state in states, timeout, f"state in {states} (it is {job.state})")


def wait_settled(live, job, timeout=30.0):
    wait_for(lambda: job.state in ("done", "dropped", "declined", "discarded")
             and job.id not in live.services.jobs.jobs, timeout, f"job settled (it is {job.state})")


def is_map(rec) -> bool:
    return bool(MAP.search(rec.body["messages"][-1]["content"]))


def reduces(scripted, since=0):
    return [c for c in scripted.chats()[since:] if not is_map(c)]


def job_dir(live, job) -> Path:
    return Path(live.config.data_dir) / "jobs" / job.id


@pytest.fixture
def app(tmp_path, scripted, make_live):
    scripted.script = map_or_reduce
    return make_live(big_file_config(tmp_path, scripted)), scripted


# -- the state table -----------------------------------------------------------------------

def test_the_state_table_is_closed_and_settled_states_go_nowhere_but_failed():
    assert set(job_module.STATES) == set(TRANSITIONS)
    for state, targets in TRANSITIONS.items():
        assert targets <= set(TRANSITIONS), state
    for state in ("declined", "discarded"):
        assert TRANSITIONS[state] == frozenset()
    assert TRANSITIONS["done"] == TRANSITIONS["dropped"] == frozenset({"failed"})
    for state in ("running", "cancelling", "synthesizing"):
        assert "queued" not in TRANSITIONS[state]          # a running job never goes back to the queue


# -- problem 5: Ollama goes away -----------------------------------------------------------

def test_ollama_killed_mid_analysis_then_back_resume_redoes_no_finished_chunk(app):
    live, scripted = app
    scripted.script = slow_maps(0.03)
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    wait_for(lambda: job.done_count >= 3, what="three chunks")
    scripted.kill()                                              # Ollama goes away mid-run
    wait_state(job, "interrupted")                               # paused, not failed
    finished = {i + 1 for i, r in job.results.items() if r.status == "ok"}
    assert len(finished) >= 3 and job_dir(live, job).exists()
    assert "Ollama could not be reached" in job.message and "Retry when Ollama is back" in job.message
    page = live.get(f"/s/{name}").text
    assert "was interrupted" in page and f"Resume from chunk {job.next_chunk + 1}" in page
    assert "Discard this analysis" in page
    maps_before = scripted.map_requests()
    scripted.revive()                                            # Ollama is back
    html = live.post(f"/s/{name}/analysis/{job.id}/resume").text
    assert "sse-connect" in html
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    wait_settled(live, job)
    assert job.state == "done"
    after = scripted.map_requests()[len(maps_before):]
    assert not set(after) & finished                             # no finished chunk redone
    assert sorted(set(after) | finished) == list(range(1, job.chunks + 1))
    assert len(after) == len(set(after))                         # and none asked twice after the resume
    everything = scripted.map_requests()
    assert all(everything.count(n) == 1 for n in finished)       # each finished chunk was asked once, ever
    assert len(reduces(scripted)) == 1
    turns = fountain.turns(fountain.loads(session_text(live, name)))
    assert turns[0].reply.startswith("SYNTHESIZED") and turns[0].analysis.results == ["ok"] * job.chunks
    assert not job_dir(live, job).exists()


def test_one_dropped_connection_is_retried_after_a_pause_and_the_run_completes(app):
    live, scripted = app
    dropped = []

    def script(body):
        found = MAP.search(body["messages"][-1]["content"])
        if found and found.group(1) == "2" and not dropped:
            dropped.append(1)
            return Reply(text="Partial answer " * 20, fault="drop")
        return map_or_reduce(body)

    scripted.script = script
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    wait_settled(live, job)
    assert job.state == "done" and scripted.map_requests().count(2) == 2
    assert all(r.status == "ok" for r in job.results.values())


def test_interrupted_job_whose_file_changed_can_be_discarded_and_its_folder_goes(app):
    live, scripted = app
    scripted.script = slow_maps(0.03)
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    wait_for(lambda: job.done_count >= 2, what="two chunks")
    scripted.kill()
    wait_state(job, "interrupted")
    scripted.revive()
    (Path(live.config.workspace) / "big.md").write_text(big_markdown() + "\nA new paragraph.\n")
    html = live.post(f"/s/{name}/analysis/{job.id}/resume").text
    assert "has changed since the analysis started" in html and "Discard this analysis" in html
    assert job.state == "interrupted"
    before = len(scripted.chats())
    html = live.post(f"/s/{name}/analysis/{job.id}/discard").text
    assert job.state == "discarded" and not job_dir(live, job).exists()
    assert "Discard this analysis" not in html and "was interrupted" not in html
    assert live.services.jobs.open_for(name) is None and job.id not in live.services.jobs.jobs
    assert "was interrupted" not in live.get(f"/s/{name}").text
    assert len(scripted.chats()) == before                       # nothing sent


def test_a_failed_job_is_discarded_from_its_card_and_stays_gone_after_a_restart(tmp_path, scripted, make_live):
    scripted.script = lambda body: Reply(fault="context") if is_map_body(body) else map_or_reduce(body)
    config = big_file_config(tmp_path, scripted)
    live = make_live(config)
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    wait_state(job, "failed")
    assert job_dir(live, job).exists()
    page = live.get(f"/s/{name}").text
    assert "failed" in page and "Discard this analysis" in page
    live.post(f"/s/{name}/analysis/{job.id}/discard")
    assert job.state == "discarded" and not job_dir(live, job).exists()
    live.close()
    again = make_live(config)
    assert again.services.jobs.find(job.id) is None and again.services.jobs.jobs == {}
    assert "Discard this analysis" not in again.get(f"/s/{name}").text


# -- problem 6: refusals that repeat ------------------------------------------------------

def is_map_body(body) -> bool:
    return bool(MAP.search(body["messages"][-1]["content"]))


def test_every_map_call_refused_sends_no_synthesis_and_fails_clearly(app):
    live, scripted = app
    scripted.script = lambda body: Reply(fault="context") if is_map_body(body) else map_or_reduce(body)
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    wait_state(job, "failed")
    assert reduces(scripted) == []                               # no synthesis request
    from app.analysis.execute import MAX_SPLIT_DEPTH
    asked = scripted.map_requests()                              # never resent as is: split, smaller each time
    assert sorted(asked) == sorted(list(range(1, job.chunks + 1)) * (1 + MAX_SPLIT_DEPTH))
    assert "No chunk produced an answer, so nothing was synthesized" in job.message
    assert "longer than the model's window" in job.message
    page = live.get(f"/s/{name}").text
    assert "No chunk produced an answer" in page
    turns = fountain.turns(fountain.loads(session_text(live, name)))
    assert turns[0].reply is None                                # nothing invented recorded as the reply
    assert turns[0].analysis.synthesis == "error: no chunk produced an answer"
    assert all(r.startswith("error:") for r in turns[0].analysis.results)


def test_a_missing_model_mid_run_is_not_retried(app):
    live, scripted = app

    def script(body):
        found = MAP.search(body["messages"][-1]["content"])
        if found and found.group(1) == "2":
            return Reply(fault="model_404")
        return map_or_reduce(body)

    scripted.script = script
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    wait_settled(live, job)
    assert job.state == "done" and scripted.map_requests().count(2) == 1
    assert job.results[1].status == "error" and "not installed" in job.results[1].error


# -- problem 7: the combine step makes progress --------------------------------------------

def small_context_config(tmp_path, scripted, effective, **chunking):
    config = big_file_config(tmp_path, scripted, **chunking)
    return dataclasses.replace(config, models={"tiny:1b": ModelConfig(effective_context=effective)})


def parts_in(rec) -> int:
    prompt = rec.body["messages"][-1]["content"]
    return len(re.findall(r"^\[(?:Chunk \d+ of \d+|Combined answer \d+ of \d+)[^\]]*\]$", prompt, re.M))


def test_combine_makes_progress_each_round_with_a_small_context_and_long_partials(tmp_path, scripted, make_live):
    def verbose(body):
        prompt = body["messages"][-1]["content"]
        if MAP.search(prompt):
            return Reply(text="Findings: " + prose(170), piece_size=400)        # ~300 tokens each
        return Reply(text="combined: " + prose(1200, seed=1), piece_size=1000)        # ignores any brevity

    scripted.script = verbose
    live = make_live(small_context_config(tmp_path, scripted, 1800))
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.", scope="first")
    stages, deadline = [], time.monotonic() + 90
    for event, data, _ in live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30):
        found = re.search(r"Combining (\d+) partial answers in (\d+) batches \(round (\d+)\)", data)
        if event == "progress" and found:
            stages.append(tuple(int(g) for g in found.groups()))
        assert time.monotonic() < deadline, f"still combining after 90 s: {stages[-3:]}"
    wait_settled(live, job)
    assert job.state == "done", job.message
    rounds = sorted(set(stages), key=lambda s: s[2])
    assert len(rounds) >= 2                                       # the partials did not fit one request
    for parts, batches, _ in rounds:
        assert batches < parts                                    # fewer parts out of every round
    assert [p for p, _, _ in rounds] == sorted({p for p, _, _ in rounds}, reverse=True)
    for (_, batches, _), (parts_next, _, _) in zip(rounds, rounds[1:]):
        assert parts_next == batches                              # each round starts where the last ended
    assert len(reduces(scripted)) < 2 * job.total                 # bounded: no endless rounds
    for c in scripted.chats():                                    # every request fits the effective context
        assert scripted.prompt_tokens(c.body) + c.body["options"]["num_predict"] <= 1800
    answer = fountain.turns(fountain.loads(session_text(live, name)))[0].reply
    assert answer.startswith("combined:")


def test_combiner_rounds_shrink_even_when_every_reply_ignores_its_cap():
    from app.analysis.mapreduce import Combiner
    from app.budget import estimate_messages

    calls = []

    def call(messages, num_predict):
        calls.append((estimate_messages(messages, 4.0), num_predict))
        return "x" * 20000                                      # a model that never stops

    combiner = Combiner(call, effective=2000, safety=200, bpt=4.0, reply_tokens=300, part_reply_tokens=400)
    parts = [f"[Chunk {i + 1} of 20]\n" + "y" * 1600 for i in range(20)]
    combiner.combine("Summarize.", parts, "")
    assert combiner.rounds == sorted(set(combiner.rounds), reverse=True) and combiner.rounds[0] == 20
    assert all(size + reply <= 2000 - 200 for size, reply in calls)
    assert len(calls) < 20


def test_combine_stops_with_a_clear_error_when_a_round_cannot_shrink(tmp_path, scripted, make_live):
    def verbose(body):
        if MAP.search(body["messages"][-1]["content"]):
            return Reply(text="Findings: " + prose(60), piece_size=400)
        return Reply(text="combined: " + prose(600, seed=1), piece_size=1000)

    scripted.script = verbose
    live = make_live(small_context_config(tmp_path, scripted, 700, map_reply_tokens=100))
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.", scope="first")
    wait_for(lambda: job.state in ("done", "failed"), 60, f"the analysis to end (it is {job.state})")
    assert job.state == "failed"
    assert "The synthesis" in job.message and "Use a model with a larger window" in job.message
    assert len(reduces(scripted)) <= 1
    assert "Use a model with a larger window" in live.get(f"/s/{name}").text


# -- problem 8: one lock, one transition ------------------------------------------------------

def watch_states(job, stop):
    """Every state the job is seen in, in order (a fast poller: no internals)."""
    seen = [job.state]

    def run():
        while not stop.is_set():
            if job.state != seen[-1]:
                seen.append(job.state)
            time.sleep(0.001)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return seen, thread


def test_double_start_cannot_put_a_running_job_back_to_queued(app):
    live, scripted = app
    scripted.script = slow_maps(0.03)
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    stop = threading.Event()
    seen, watcher = watch_states(job, stop)
    scripted.tags_delays = [0.05, 0.8]           # the second tap's model check answers late
    live.services.models.forget_models()          # (so both taps ask for the model list)
    url = f"/s/{name}/analysis/{job.id}/start"
    answers = []
    taps = [threading.Thread(target=lambda: answers.append(live.post(url, data={"instruction": "Summarize. @tiny:1b"})))
            for _ in range(2)]
    for tap in taps:
        tap.start()
    for tap in taps:
        tap.join(30)
    assert [a.status_code for a in answers] == [200, 200]
    wait_settled(live, job, timeout=60)
    stop.set()
    watcher.join(5)
    assert job.state == "done"
    assert "queued" not in seen[seen.index("running"):], seen   # never back to the queue
    assert sorted(scripted.map_requests()) == list(range(1, job.chunks + 1))   # each chunk once
    assert len(reduces(scripted)) == 1


def test_cancel_racing_the_workers_pick_up_is_not_lost(app):
    live, scripted = app
    scripted.script = slow_maps(0.02)
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    picking, picked = threading.Event(), threading.Event()

    class SlowPickUp(type(job)):
        """The worker reads "queued", then is slow to act on it: the window a cancel can fall into."""

        @property
        def state(self):
            value = self.__dict__["state"]
            if value == "queued" and threading.current_thread().name == "analysis" and not picking.is_set():
                picking.set()
                time.sleep(0.5)
                picked.set()
            return value

        @state.setter
        def state(self, value):
            self.__dict__["state"] = value

    job.__class__ = SlowPickUp
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize."})
    wait_for(picking.is_set, what="the worker to pick the job up")
    assert live.post(f"/s/{name}/analysis/{job.id}/cancel").status_code == 204
    wait_for(picked.is_set, what="the worker to act on what it read")
    time.sleep(0.2)                              # (a lost cancel would be running the chunks by now)
    wait_state(job, "choose", "done", "failed")
    assert job.state == "choose"
    assert len(scripted.map_requests()) <= 1 and reduces(scripted) == []
    assert "Synthesize the partial answers" in live.get(f"/s/{name}").text


def test_cancel_of_a_queued_job_before_its_turn_means_it_never_runs(app):
    live, scripted = app
    scripted.script = slow_maps(0.02)
    first_session = live.open_session()
    first, _ = start_job(live, first_session, "Summarize.")
    second_session = live.services.store.create("tiny:1b").name
    second, _ = start_job(live, second_session, "Summarize too.")
    assert second.state == "queued"
    live.post(f"/s/{second_session}/analysis/{second.id}/cancel")
    assert second.state == "choose"
    wait_settled(live, first, timeout=60)
    assert second.state == "choose"
    assert not any(c.body["messages"][-1]["content"].startswith("Summarize too.") for c in scripted.chats())


# -- problem 2 (analysis half): the answer goes after the turn that asked ----------------------

def test_the_answer_lands_after_the_asking_turn_though_the_user_chatted_meanwhile(tmp_path, scripted, make_live):
    scripted.script = slow_maps(0.03)
    config = big_file_config(tmp_path, scripted)
    first = make_live(config)
    name = first.open_session()
    job, _ = start_job(first, name, "Summarize.")
    wait_for(lambda: job.done_count >= 2, what="two chunks")
    first.close()                                                # a restart mid-run
    second = make_live(config)
    resumed = second.services.jobs.get(job.id)
    assert resumed.state == "interrupted"
    second.post(f"/s/{name}/messages", data={"message": "meanwhile, a question"})
    reply = second.services.activities.last(name)
    wait_for(lambda: reply.finished, what="the chat reply")
    wait_for(lambda: len(fountain.turns(fountain.loads(session_text(second, name)))) == 2
             and fountain.turns(fountain.loads(session_text(second, name)))[1].reply, what="the reply recorded")
    second.post(f"/s/{name}/analysis/{job.id}/resume")
    list(second.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    wait_settled(second, resumed)
    play = fountain.loads(session_text(second, name))
    headings = [s.heading for s in play.scenes]
    # Harvey's order (issue 26): the analysis, the asking turn with its answer, then the later turn
    assert headings[0].startswith("INT. CHUNK ANALYSIS — big.md") and len(headings) == 3
    turns = fountain.turns(play)
    assert [t.user_text for t in turns] == ["Summarize big.md", "meanwhile, a question"]
    assert turns[0].reply.startswith("SYNTHESIZED") and turns[0].analysis is not None
    assert turns[1].reply == "plain chat reply"                  # map_or_reduce's answer to a chat message
    before = len(scripted.chats())
    second.post(f"/s/{name}/messages", data={"message": "and now?"})
    wait_for(lambda: len(scripted.chats()) > before, what="the next request")
    history = [m["content"] for m in scripted.chats()[-1].body["messages"][1:]]
    assert history[0] == "Summarize big.md" and history[1].startswith("SYNTHESIZED")
    assert history[2] == "meanwhile, a question"


def test_a_turn_changed_elsewhere_fails_the_job_clearly_and_keeps_the_answer(app):
    live, scripted = app
    scripted.script = slow_maps(0.03)
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    wait_for(lambda: job.done_count >= 1, what="one chunk")
    path = live.services.store.folder / f"{name}.spmd"
    path.write_text(path.read_text().replace("Summarize big.md", "Something else entirely"))   # another device
    wait_state(job, "failed", timeout=60)
    assert "could not be written into the session" in job.message and "kept below" in job.message
    assert job.answer.startswith("SYNTHESIZED") and job_dir(live, job).exists()   # nothing lost
    page = live.get(f"/s/{name}").text
    assert "SYNTHESIZED" in page and "Discard this analysis" in page
    assert "SYNTHESIZED" not in path.read_text()                  # not written over the other turn


# -- problem 13 (analysis half) --------------------------------------------------------------

def test_resuming_a_job_whose_file_was_deleted_is_a_clear_message(tmp_path, scripted, make_live):
    scripted.script = slow_maps(0.03)
    config = big_file_config(tmp_path, scripted)
    first = make_live(config)
    name = first.open_session()
    job, _ = start_job(first, name, "Summarize.")
    wait_for(lambda: job.done_count >= 2, what="two chunks")
    first.close()
    (Path(config.workspace) / "big.md").unlink()
    second = make_live(config)
    response = second.post(f"/s/{name}/analysis/{job.id}/resume")
    assert response.status_code == 200
    assert "big.md cannot be read any more" in response.text and "Discard this analysis" in response.text
    resumed = second.services.jobs.get(job.id)
    assert resumed.state == "interrupted"
    second.post(f"/s/{name}/analysis/{job.id}/discard")
    assert resumed.state == "discarded" and not job_dir(second, resumed).exists()


def test_deleting_a_session_discards_its_open_jobs(app):
    live, scripted = app
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    assert job.state == "proposed" and job_dir(live, job).exists()
    response = live.post(f"/sessions/{name}/delete")
    assert response.status_code == 200
    assert job.state == "discarded" and not job_dir(live, job).exists()
    assert live.services.jobs.for_session(name) == []
    assert scripted.chats() == []


@pytest.mark.parametrize("name", ["harvey-session-19990101-000000", "not a session", "x" * 300])
def test_a_bad_session_name_in_analysis_urls_is_404(app, name):
    live, _ = app
    real = live.open_session()
    live.post(f"/s/{real}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(real)
    for action in ("start", "decline", "cancel", "after-cancel", "resume", "discard"):
        assert live.post(f"/s/{name}/analysis/{job.id}/{action}").status_code == 404, action
    assert live.get(f"/s/{name}/analysis/{job.id}/events").status_code == 404
    assert live.post(f"/s/{name}/analysis/direct", data={"file": "big.md"}).status_code == 404
    assert job.state == "proposed"


# -- problem 10 (analysis half): memory stays flat -------------------------------------------

def test_memory_stays_flat_over_repeated_analyses(app, monkeypatch):
    """Analyses one after another: what the analysis code still holds does not grow with their count.

    Six untraced analyses warm up what is allocated once (caches, the waitress threads' buffers,
    the settled-jobs list, cut to 2 here so it is full early; finished activities go at once);
    then memory is traced and what the analysis code and the event logs hold after analysis 8 is
    compared with analysis 11: under 1 KB per analysis (a runner that kept every job's log held
    ~70 KB each, a kept Job with its log ~20 KB). Tracing slows the app ~10x, hence few traced
    runs; 30 analyses with their figures: bench/bench_analysis_memory.py.
    """
    from app.analysis import runner as runner_module

    live, scripted = app
    monkeypatch.setattr(runner_module, "KEEP_SETTLED", 2)
    live.services.activities.grace = 0.0
    (Path(live.config.workspace) / "big.md").write_text(big_markdown(sections=4))
    snapshots, chunks = {}, []
    try:
        for n in range(1, 12):
            chunks.append(analyse_then_delete(live))
            if n == 6:
                tracemalloc.start(8)
            elif n in (8, 11):
                snapshots[n] = held_by_analysis(scripted)
    finally:
        tracemalloc.stop()
    runner = live.services.jobs
    assert min(chunks) >= 4
    assert runner.jobs == {} and runner.logs == {} and len(runner._settled) <= 2
    growth = snapshots[11] - snapshots[8]
    print(f"held by the analysis code, analyses 8 -> 11: {growth} B ({growth / 3:.0f} B each)")
    assert growth < 3 * 1024, growth                              # < 1 KB per analysis


def analyse_then_delete(live) -> int:
    """One whole analysis of big.md in a new session, which is then deleted; its chunk count."""
    name = live.services.store.create("tiny:1b").name
    job, _ = start_job(live, name, "Summarize.")
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    wait_settled(live, job)
    live.post(f"/sessions/{name}/delete")
    return job.chunks


def held_by_analysis(scripted) -> int:
    """Bytes still allocated from app/analysis or app/events.py (traced), after a collection; the
    scripted server's request records are the test's, not the app's, so they are cleared first."""
    with scripted._lock:
        scripted.requests.clear()
    gc.collect()
    analysis = [tracemalloc.Filter(True, "*/app/analysis/*", all_frames=True),
                tracemalloc.Filter(True, "*/app/events.py", all_frames=True)]
    return sum(stat.size for stat in tracemalloc.take_snapshot().filter_traces(analysis).statistics("filename"))


def test_a_job_whose_session_was_deleted_while_the_server_was_down_is_discarded_at_start(tmp_path, scripted,
                                                                                          make_live):
    scripted.script = map_or_reduce
    config = big_file_config(tmp_path, scripted)
    first = make_live(config)
    name = first.open_session()
    first.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = first.services.jobs.open_for(name)
    first.close()
    (first.services.store.folder / f"{name}.spmd").unlink()      # gone while the server was down
    second = make_live(config)
    assert second.services.jobs.find(job.id) is None or second.services.jobs.find(job.id).state == "discarded"
    assert second.services.jobs.jobs == {} and not job_dir(second, job).exists()


def test_a_message_after_a_read_chunks_card_declines_that_card_in_its_own_turn(app):
    live, scripted = app
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "hello first"})
    reply = live.services.activities.last(name)
    wait_for(lambda: reply.finished, what="the first reply")
    wait_for(lambda: fountain.turns(fountain.loads(session_text(live, name)))[0].reply, what="the reply recorded")
    live.post(f"/s/{name}/analysis/direct", data={"file": "big.md"})
    job = live.services.jobs.open_for(name)
    assert job.turn == 1 and job.state == "proposed"
    live.post(f"/s/{name}/messages", data={"message": "never mind, another question"})
    wait_settled(live, job)
    assert job.state == "declined"
    wait_for(lambda: len(fountain.turns(fountain.loads(session_text(live, name)))) == 3, what="the third turn")
    turns = fountain.turns(fountain.loads(session_text(live, name)))
    assert [t.user_text for t in turns] == ["hello first", "/read-chunks big.md", "never mind, another question"]
    assert any("chunk analysis declined" in n for n in turns[1].notes)
    assert not any("chunk analysis declined" in n for n in turns[0].notes + turns[2].notes)
    assert turns[0].reply                                          # the first reply is untouched


def test_ollama_lost_during_the_synthesis_then_retry_runs_only_the_synthesis(app):
    live, scripted = app

    def slow_synthesis(body):
        reply = map_or_reduce(body)
        if not is_map_body(body):
            reply.token_delay, reply.piece_size = 0.05, 2
        return reply

    scripted.script = slow_synthesis
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    wait_state(job, "synthesizing")
    wait_for(lambda: len(reduces(scripted)) == 1, what="the synthesis request")
    scripted.kill()
    wait_state(job, "interrupted")
    assert "during the synthesis" in job.message and job.done_count == job.chunks
    page = live.get(f"/s/{name}").text
    assert "Retry the synthesis" in page and "Resume from chunk" not in page
    maps = len(scripted.map_requests())
    scripted.revive()
    live.post(f"/s/{name}/analysis/{job.id}/resume")
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    wait_settled(live, job)
    assert job.state == "done" and len(scripted.map_requests()) == maps == job.chunks   # no chunk redone
    assert len(reduces(scripted)) == 2


def test_a_resume_tapped_as_the_card_turns_interrupted_is_followed_to_its_own_end(app, monkeypatch):
    """The interrupted run's last event ("state", which ends a follower's stream) is logged in the
    same locked step as the change: a Resume tapped the moment the card says "interrupted" starts
    a run whose new follower never ends on the earlier run's event. Here that event is held back
    until the Resume has been queued (or 1 s has passed): logged outside the lock, it would land
    after the resumed run's first event id and end the new follower's stream at once."""
    live, scripted = app
    scripted.script = slow_maps(0.03)
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    runner = live.services.jobs
    log_ = runner.log_for(job)
    queued, append, submit = threading.Event(), log_.append, runner._submit

    def held_append(event, data=""):
        if event == "state" and data == "interrupted" and not queued.is_set():
            queued.wait(1.0)
        return append(event, data)

    def submitted(j):
        submit(j)
        queued.set()

    monkeypatch.setattr(log_, "append", held_append)
    monkeypatch.setattr(runner, "_submit", submitted)
    wait_for(lambda: job.done_count >= 2, what="two chunks")
    scripted.kill()
    wait_state(job, "interrupted")
    scripted.revive()
    live.post(f"/s/{name}/analysis/{job.id}/resume")
    events = list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    assert job.state == "done", [e for e, _, _ in events]
    assert [d for e, d, _ in events if e == "state"] and "SYNTHESIZED" in events[-2][1]


def test_after_a_resume_a_new_follower_sees_this_run_to_its_end(app):
    live, scripted = app
    scripted.script = slow_maps(0.03)
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    wait_for(lambda: job.done_count >= 2, what="two chunks")
    scripted.kill()
    wait_state(job, "interrupted")
    finished_before = job.done_count
    scripted.revive()
    live.post(f"/s/{name}/analysis/{job.id}/resume")
    events = list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))   # no Last-Event-ID
    assert job.state == "done"                     # the stream ended with this run, not the earlier one
    states = [d for e, d, _ in events if e == "state"]
    assert len(states) == 1 and "SYNTHESIZED" in states[0]
    partials = [d for e, d, _ in events if e == "partial"]
    assert len(partials) == job.chunks - finished_before     # this run's partials, each once
