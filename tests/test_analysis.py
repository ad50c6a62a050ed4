"""Chunked analysis through waitress against the scripted Ollama server."""

import dataclasses
import re
from html import unescape
import threading
import time
from pathlib import Path

import pytest

from fountain import FountainParser

from app.analysis import mapreduce
from app.analysis.store import JobStore
from app.sessions import fountain
from app.budget import estimate_messages
from waiting import wait_for
from conftest import make_config
from scripted_ollama import Reply
from test_fountain import jouvence_dialogue

PARAGRAPH = ("The methodology section describes a three-phase experiment with careful controls, "
             "and the results are discussed at length with tables and figures. ")


def big_markdown(sections=12, paragraphs=10) -> str:
    parts = []
    for s in range(sections):
        parts.append(f"## Section {s + 1}\n")
        for p in range(paragraphs):
            parts.append(f"Paragraph {s + 1}.{p + 1}. " + PARAGRAPH * 4 + "\n")
    return "\n".join(parts)


def map_or_reduce(body):
    """Answer map calls with their chunk number; synthesis calls with a fixed text."""
    prompt = body["messages"][-1]["content"]
    found = re.search(r"Chunk (\d+) of (\d+)(?: \([^\n]*\))?:", prompt)
    if found:
        return Reply(text=f"Partial answer for chunk {found.group(1)}.")
    if "partial answers" in prompt:
        return Reply(text="SYNTHESIZED: the methodology is a three-phase experiment.")
    return Reply(text="plain chat reply")


def big_file_config(tmp_path, scripted, **chunking):
    """A config whose workspace holds big.md, with chunking settings changed as given."""
    config = make_config(tmp_path, scripted.url)
    config = dataclasses.replace(config, chunking=dataclasses.replace(config.chunking, **chunking))
    Path(config.workspace).mkdir(parents=True)
    (Path(config.workspace) / "big.md").write_text(big_markdown())
    return config


@pytest.fixture
def setup(tmp_path, scripted, make_live):
    scripted.script = map_or_reduce
    config = big_file_config(tmp_path, scripted)
    workspace = Path(config.workspace)
    (workspace / "small.md").write_text("# Small\n\nA short note about the Pi.\n")
    live = make_live(config)
    return live, scripted, workspace


def session_text(live, name):
    return (live.services.store.folder / f"{name}.spmd").read_text()


def wait_state(live, job, states, timeout=30):
    wait_for(lambda: job.state in states, timeout, f"job state in {states} (it is {job.state})")


def wait_settled(live, job, timeout=30):
    """The job's outcome is in the session file and the runner has let it go."""
    wait_for(lambda: job.state in ("done", "dropped", "declined", "discarded")
             and job.id not in live.services.jobs.jobs, timeout, f"job settled (it is {job.state})")


def test_overflow_shows_the_card_and_sends_nothing(setup):
    live, scripted, _ = setup
    name = live.open_session()
    fragment = live.post(f"/s/{name}/messages", data={"message": "Summarize the methodology in big.md"}).text
    assert "Context overflow" in fragment and "big.md" in fragment
    assert re.search(r"about [\d,]+ tokens", fragment) and "in the current context" in fragment
    assert re.search(r"\d+ chunks of up to 1,500 tokens, split at paragraph boundaries", fragment)
    assert ">Summarize the methodology in big.md</textarea>" in fragment
    assert "What to do with each chunk" in fragment and "No, back to the chat" in fragment   # plain words (issue 45)
    assert 'or "no" to return to the conversation' not in fragment
    assert scripted.chats() == []
    text = session_text(live, name)
    assert "Context overflow: big.md is approximately" in text


def test_small_file_is_read_into_the_chat(setup):
    live, scripted, _ = setup
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "What does small.md say?"})
    job = live.services.activities.last(name)
    wait_for(lambda: job.finished, what="the reply")
    prompt = scripted.chats()[0].body["messages"][-1]["content"]
    assert '<file name="small.md">' in prompt and "A short note about the Pi." in prompt


def test_no_returns_to_the_conversation_and_sends_nothing(setup):
    live, scripted, _ = setup
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    html = live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "  No "}).text
    assert "declined" in html and "Answer from the most relevant passages" not in html
    assert job.state == "declined" and scripted.chats() == []
    assert "chunk analysis declined" in session_text(live, name)


def test_full_run_records_the_scene_and_the_answer(setup):
    live, scripted, _ = setup
    scripted.script = slow_maps(0.01)
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    html = live.post(f"/s/{name}/analysis/{job.id}/start",
                     data={"instruction": "Summarize the methodology of each section."}).text
    assert "sse-connect" in html
    events = list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    names = [e for e, _, _ in events]
    assert "progress" in names and "partial" in names and names[-1] == "close"
    assert any("Processing chunk 1/" in d for e, d, _ in events if e == "progress")
    assert "SYNTHESIZED" in [d for e, d, _ in events if e == "state"][0]
    assert job.state == "done"
    chats = scripted.chats()
    maps = [c for c in chats if re.search(r"\nChunk \d+ of \d+(?: \([^\n]*\))?:\n", c.body["messages"][-1]["content"])]
    assert len(maps) == job.chunks and len(chats) == job.chunks + 1
    assert {c.num_ctx for c in chats} == {8192}
    for c in chats:
        assert estimate_messages(c.body["messages"], 4.0) + c.body["options"]["num_predict"] <= c.num_ctx
    first = maps[0].body["messages"][-1]["content"]
    # the label names the section it starts in (chunk 1 has the plan's total: the rest were re-planned after it)
    assert re.match(r"Summarize the methodology of each section.\n\n---\nChunk 1 of \d+ \(in: Section 1",
                    first)
    # short partial answers (#14), and the JSON shape, after the chunk where a small model still sees them
    assert first.endswith(f"---\n{mapreduce.MAP_JSON_ASK} At most 250 words.")
    text = session_text(live, name)
    play = fountain.loads(text)
    headings = [s.heading for s in play.scenes]
    # Harvey's order (issue 26): the analysis, then the turn that asked with the answer as its reply;
    # the note in Harvey's units and names (chunk-size in bytes, the raw model name) and ours (tokens).
    assert headings[0].startswith("INT. CHUNK ANALYSIS — big.md") and " TALKING " in headings[1]
    assert re.search(rf"chunk: file=big.md, chunks={job.chunks}, model={re.escape(job.model)}, boundary=paragraph, "
                     rf"chunk-size={round(1500 * job.map_bpt)}, chunk-tokens=1500\]\]", text)
    assert text.count("chunk-result:") == job.chunks and f"synthesis: model={job.model} — ok" in text
    turns = fountain.turns(play)
    assert len(turns) == 1 and turns[0].reply.startswith("SYNTHESIZED")
    assert fountain.dumps(fountain.loads(text)) == text                     # round-trips
    assert FountainParser().validate(text) == []                            # third-party parsers
    dialogue = jouvence_dialogue(text)
    assert ("TESTER", "Summarize the methodology of each section.") in dialogue
    assert ("TINY", "SYNTHESIZED: the methodology is a three-phase experiment.") in dialogue
    # the next turn carries the synthesized answer in its history, not the file
    live.post(f"/s/{name}/messages", data={"message": "thanks"})
    wait_for(lambda: len(scripted.chats()) > len(chats), what="the next turn's request")
    history = scripted.chats()[-1].body["messages"]
    assert history[1]["content"] == "Summarize big.md" and history[2]["content"].startswith("SYNTHESIZED")
    assert all(PARAGRAPH not in m["content"] for m in history)


def start_job(live, name, instruction, **form):
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    html = live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": instruction, **form}).text
    return job, unescape(html)


def test_at_model_routes_every_map_and_synthesis_call(setup):
    live, scripted, _ = setup
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize each part. @other:7b")
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    assert job.state == "done"
    chats = scripted.chats()
    assert chats and {c.body["model"] for c in chats} == {"other:7b"}
    assert all("@other" not in c.body["messages"][-1]["content"] for c in chats)
    assert "model=other:7b" in session_text(live, name)   # the raw name, as Harvey writes it (issue 26)


def test_unknown_model_is_reported_on_the_card_before_anything_starts(setup):
    live, scripted, _ = setup
    name = live.open_session()
    job, html = start_job(live, name, "Summarize. @nosuch")
    assert "'@nosuch' is not an installed model" in html and "Answer from the most relevant passages" in html
    assert job.state == "proposed" and scripted.chats() == []


def test_more_chunks_than_the_limit_needs_an_explicit_choice(tmp_path, scripted, make_live):
    scripted.script = map_or_reduce
    live = make_live(big_file_config(tmp_path, scripted, max_chunks=5))
    name = live.open_session()
    fragment = live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"}).text
    job = live.services.jobs.open_for(name)
    assert f"{job.chunks} chunks; the limit is 5." in fragment and f"{job.chunks - 5} left out)" in fragment
    html = live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize."}).text
    assert "Choose whether to analyse all" in html and scripted.chats() == []
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize.", "scope": "first"})
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    assert job.state == "done" and len(scripted.chats()) == 5 + 1
    assert f"chunks={job.chunks}," in session_text(live, name) and job.chunks > 5    # the whole file's count
    assert "[[chunk-unread: lines " in session_text(live, name)                      # and what was not read


def slow_maps(delay):
    def script(body):
        reply = map_or_reduce(body)
        reply.token_delay = delay
        return reply
    return script


def test_progress_arrives_while_running_and_replays_after_reconnect(setup):
    live, scripted, _ = setup
    scripted.script = slow_maps(0.02)
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    seen = []
    for event, data, eid in live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30):
        seen.append((event, eid, job.done_count))
        if event == "partial" and len([s for s in seen if s[0] == "partial"]) == 2:
            break                              # the phone went to sleep
    assert seen[-1][2] < job.chunks            # events came while the run was going
    last_id = seen[-1][1]
    replay = list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30,
                           headers={"Last-Event-ID": last_id}))
    ids = [int(eid.rpartition("-")[2]) for e, _, eid in replay if eid and e != "close"]
    assert ids and ids[0] == int(last_id.rpartition("-")[2]) + 1 and ids == sorted(ids)
    partials = [d for e, d, _ in replay if e == "partial"]
    assert len(partials) == job.chunks - 2     # exactly what was missed, nothing twice
    assert job.state == "done"


def test_cancel_closes_the_request_in_flight_then_synthesize_or_drop(setup):
    live, scripted, _ = setup

    def long_maps(body):
        reply = map_or_reduce(body)
        if "Partial answer" in reply.text:
            reply.text, reply.piece_size, reply.token_delay = reply.text + " more" * 100, 5, 0.01
        return reply

    scripted.script = long_maps
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    wait_for(lambda: job.done_count >= 2 and len(scripted.chats()) >= 3, what="the third chunk's request")
    requests_before = len(scripted.chats())
    in_flight = scripted.chats()[-1]
    assert live.post(f"/s/{name}/analysis/{job.id}/cancel").status_code == 204
    wait_state(live, job, ("choose",))
    assert in_flight.finished.wait(10) and in_flight.disconnected   # closed, not read to its end
    assert len(scripted.chats()) == requests_before           # no new chunk started (the state is final)
    html = live.get(f"/s/{name}").text
    assert "Synthesize the partial answers" in html and "Drop them" in html
    done = job.done_count
    html = live.post(f"/s/{name}/analysis/{job.id}/after-cancel", data={"keep": "yes"}).text
    wait_settled(live, job)
    synthesis = scripted.chats()[-1].body["messages"][-1]["content"]
    assert synthesis.count("[Chunk ") == done and "no answer" in synthesis
    deadline = time.monotonic() + 10                          # the record follows the state change
    while "synthesis: model=" not in session_text(live, name) and time.monotonic() < deadline:
        time.sleep(0.02)
    text = session_text(live, name)
    assert "— cancelled]]" in text and "synthesis: model=tiny:1b — ok" in text


def test_drop_after_cancel_records_a_cancelled_scene_and_no_answer(setup):
    live, scripted, _ = setup
    scripted.script = slow_maps(0.05)
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    wait_for(lambda: job.done_count >= 1, what="one chunk")
    live.post(f"/s/{name}/analysis/{job.id}/cancel")
    wait_state(live, job, ("choose",))
    live.post(f"/s/{name}/analysis/{job.id}/after-cancel", data={"keep": "no"})
    assert job.state == "dropped"
    wait_settled(live, job)
    turns = fountain.turns(fountain.loads(session_text(live, name)))
    assert turns[0].reply is None and turns[0].analysis.synthesis == "cancelled"


def test_failing_chunk_is_retried_then_recorded_and_the_run_completes(setup, monkeypatch):
    from app.analysis import execute
    monkeypatch.setattr(execute, "RETRY_PAUSES_S", (0.01, 0.02, 0.04))
    live, scripted, _ = setup
    attempts = {}

    def script(body):
        prompt = body["messages"][-1]["content"]
        found = re.search(r"\nChunk (\d+) of \d+(?: \([^\n]*\))?:\n", prompt)
        if found and found.group(1) in ("2", "3"):
            attempts[found.group(1)] = attempts.get(found.group(1), 0) + 1
            if found.group(1) == "2" or attempts["3"] == 1:
                return Reply(text="broken", fault="http_500")      # 2 always fails; 3 fails once
        return map_or_reduce(body)

    scripted.script = script
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    assert job.state == "done"
    assert attempts == {"2": 2, "3": 2}      # a 500 is the server's answer: sent once more, then recorded
    assert job.results[1].status == "error" and job.results[2].status == "ok"
    synthesis = scripted.chats()[-1].body["messages"][-1]["content"]
    assert "Chunks with no answer (failed or not run): 2." in synthesis
    text = session_text(live, name)
    assert f"chunk-result: 2/{job.chunks} — error:" in text
    assert "had no answer" in fountain.turns(fountain.loads(text))[0].reply


def test_hierarchical_reduce_when_partials_overflow_and_every_request_fits(tmp_path, scripted, make_live):
    def verbose(body):
        prompt = body["messages"][-1]["content"]
        found = re.search(r"\nChunk (\d+) of \d+(?: \([^\n]*\))?:\n", prompt)
        if found:
            # (distinct words: a reply of one word over and over is a loop the app stops, issue 44)
            return Reply(text=f"Chunk {found.group(1)} findings: " + " ".join(f"detail{i}" for i in range(250)),
                         piece_size=400)
        if "[Combined answer" in prompt:
            return Reply(text="FINAL ANSWER")
        return Reply(text="combined batch: " + " ".join(f"x{i}" for i in range(100)), piece_size=400)

    scripted.script = verbose
    scripted.models["tiny:1b"] = 4096
    live = make_live(big_file_config(tmp_path, scripted, chunk_size_tokens=1000))
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.", scope="all")
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=60))
    assert job.state == "done"
    chats = scripted.chats()
    reduces = [c for c in chats if not re.search(r"\nChunk \d+ of \d+(?: \([^\n]*\))?:\n", c.body["messages"][-1]["content"])]
    assert len(reduces) >= 3                       # batches, then the final combination
    assert all(c.refused is None for c in chats)
    for c in chats:
        assert c.num_ctx == 4096
        assert scripted.prompt_tokens(c.body) + c.body["options"]["num_predict"] <= c.num_ctx
    assert fountain.turns(fountain.loads(session_text(live, name)))[0].reply == "FINAL ANSWER"


def test_restart_mid_run_resumes_without_repeating_finished_chunks(tmp_path, scripted, make_live):
    scripted.script = slow_maps(0.03)
    config = big_file_config(tmp_path, scripted)
    first = make_live(config)
    name = first.open_session()
    job, _ = start_job(first, name, "Summarize.")
    wait_for(lambda: job.done_count >= 3, what="three chunks")
    first.close()                                   # the server goes away mid-run
    wait_state(first, job, ("interrupted",))
    finished = {i for i, r in job.results.items() if r.status == "ok"}
    second = make_live(config)
    resumed = second.services.jobs.get(job.id)
    assert resumed.state == "interrupted" and set(resumed.results) >= finished
    page = second.get(f"/s/{name}").text
    assert "was interrupted" in page and "Resume from chunk" in page
    before = len(scripted.chats())
    second.post(f"/s/{name}/analysis/{job.id}/resume")
    list(second.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    assert resumed.state == "done"
    redone = [int(m.group(1)) - 1 for c in scripted.chats()[before:]
              if (m := re.search(r"\nChunk (\d+) of \d+(?: \([^\n]*\))?:\n", c.body["messages"][-1]["content"]))]
    assert len(redone) == len(set(redone))          # no chunk asked twice
    assert not set(redone) & finished               # no finished chunk redone
    assert sorted(redone + sorted(finished)) == list(range(resumed.chunks))


def test_resume_refuses_a_changed_file(tmp_path, scripted, make_live):
    scripted.script = slow_maps(0.03)
    config = big_file_config(tmp_path, scripted)
    big = Path(config.workspace) / "big.md"
    first = make_live(config)
    name = first.open_session()
    job, _ = start_job(first, name, "Summarize.")
    wait_for(lambda: job.done_count >= 2, what="two chunks")
    first.close()
    big.write_text(big_markdown() + "\nA new paragraph.\n")
    second = make_live(config)
    html = second.post(f"/s/{name}/analysis/{job.id}/resume").text
    assert "has changed since the analysis started" in html
    assert second.services.jobs.get(job.id).state == "interrupted"


def test_direct_analysis_from_the_file_list(setup):
    live, scripted, _ = setup
    name = live.open_session()
    page = live.get(f"/files/?session={name}").text
    assert "big.md" in page and "Analyse in chunks" in page
    response = live.post(f"/s/{name}/analysis/direct", data={"file": "small.md"})
    assert response.status_code == 200 and "Chunk analysis of small.md" in response.text
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "List the topics."})
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    assert job.state == "done" and job.chunks == 1
    refused = live.post(f"/s/{name}/analysis/direct", data={"file": "../etc/passwd"})
    assert refused.status_code == 400 and "outside the workspace" in refused.text


def test_finished_jobs_leave_no_files_and_a_decided_answer_survives_a_crash(tmp_path, scripted, make_live):
    scripted.script = map_or_reduce
    config = big_file_config(tmp_path, scripted)
    live = make_live(config)
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    jobs_dir = Path(config.data_dir) / "jobs"
    assert job.state == "done" and not (jobs_dir / job.id).exists()
    # a crash after the answer was decided but before it reached the session file
    text_before = session_text(live, name)
    JobStore(jobs_dir).save(job)                           # job.json as the crash left it
    path = live.services.store.folder / f"{name}.spmd"
    play = fountain.loads(text_before)
    # the analysis and the answer not yet written: the asking turn alone (issue 26 writes them as
    # Harvey does, the analysis scene before the asking turn, whose reply is the answer)
    asked = fountain.turns(play)[0]
    play.scenes = fountain.turn_scenes(fountain.Turn(asked.when, asked.user_text, harvey=asked.harvey),
                                       "tester", str(config.workspace))
    path.write_text(fountain.dumps(play))
    live.close()
    again = make_live(config)
    turns = fountain.turns(fountain.loads(path.read_text()))
    assert turns[0].reply.startswith("SYNTHESIZED") and turns[0].analysis is not None
    assert not (jobs_dir / job.id).exists()
    assert again.services.jobs.get(job.id).state == "done"


def test_a_stale_page_following_an_unknown_job_is_told_to_close(setup):
    live, _, _ = setup
    name = live.open_session()
    events = list(live.sse(f"/s/{name}/analysis/000000000000/events"))
    assert events == [("close", "", "0")]


def test_one_job_at_a_time_the_next_waits_and_says_so(setup):
    live, scripted, _ = setup
    scripted.script = slow_maps(0.02)
    first_session = live.open_session()
    first, _ = start_job(live, first_session, "Summarize.")
    second_session = live.services.store.create("tiny:1b").name
    second, html = start_job(live, second_session, "Summarize too.")
    assert second.state == "queued"
    # Issue 44: it names what it waits for, links to it and offers to stop it.
    assert "Waiting for the analysis of" in html and "big.md" in html and "Stop that analysis" in html
    assert f'/s/{first_session}#turn-' in html and f"/analysis/{first.id}/cancel" in html
    wait_settled(live, first, timeout=60)
    wait_settled(live, second, timeout=60)
    chats = scripted.chats()
    firsts = [i for i, c in enumerate(chats) if c.body["messages"][-1]["content"].startswith("Summarize.\n")]
    seconds = [i for i, c in enumerate(chats) if c.body["messages"][-1]["content"].startswith("Summarize too.")]
    assert max(firsts) < min(seconds)                     # never interleaved on the model


def test_routing_to_a_model_with_a_smaller_window_plans_the_chunks_again(setup):
    live, scripted, _ = setup
    scripted.models["other:7b"] = 2048
    name = live.open_session()
    job, html = start_job(live, name, "Summarize. @other:7b", scope="all")
    # The smaller window makes more chunks than the limit, which the card did not offer: choose again.
    assert job.state == "proposed" and "choose again" in html and job.chunks > live.config.chunking.max_chunks
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize. @other:7b", "scope": "all"})
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=60))
    assert job.state == "done" and job.window == 2048 and job.size_tokens < 1500
    chats = scripted.chats()
    assert {c.body["model"] for c in chats} == {"other:7b"} and {c.num_ctx for c in chats} == {2048}
    assert all(c.refused is None for c in chats)
    assert all(r.status == "ok" for r in job.results.values())


def test_an_empty_synthesis_gives_the_chunks_answers_not_an_empty_reply(setup):
    """A small model (SmolLM2-135M, seen in a full run) can end its synthesis at once: the reply was empty
    and the chunks' answers lost from the chat.  They are the answer then, each cited, and it says so."""
    live, scripted, _ = setup

    def script(body):
        reply = map_or_reduce(body)
        return Reply(text="") if reply.text.startswith("SYNTHESIZED") else reply

    scripted.script = script
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize each part.")
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    assert job.state == "done", job.message
    reply = fountain.turns(fountain.loads(session_text(live, name)))[-1].reply
    assert reply.startswith("The model wrote no synthesis, so here are the chunks' own answers:")
    assert "Partial answer for chunk 1. [1]" in reply and f"[{job.total}]" in reply
