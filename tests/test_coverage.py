"""Issue 22 (items 1, 2, 8, 9) and issue 23 item 2: an analysis never claims more than was read.

Through waitress against the scripted Ollama server: a file denser than planned pauses the job
at the calls the user agreed to and asks (read the rest, or synthesize what was read); what was
not read is named in the answer and in the ``INT. CHUNK ANALYSIS`` scene; a second device's
refused Start writes nothing onto the running job; every answer lists its sources; a reference
list's ``[1]`` stays text. Every wait has a deadline.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import threading
import time
from html import unescape
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from app.analysis.job import TRANSITIONS, ChunkResult, Job, StateMachine
from app.sessions import fountain, notes
from conftest import make_config
from scripted_ollama import Reply
from test_analysis import big_markdown, map_or_reduce, session_text
from test_analysis_state import MAP, is_map, wait_for, wait_settled, wait_state
from test_cited_answers import FACTS, Script, facts_live, run_analysis  # noqa: F401 (a fixture)
from test_replan import PARAGRAPH_MARK, covered

TRUE_BPT = 2.0          # the scripted server's tokens: every byte of this file costs twice the plan's guess


def dense_script(body) -> Reply:
    """Map answers with their chunk number; the prompt counted at TRUE_BPT, so the first map call
    shows the file is denser than planned and the rest is re-planned into more chunks."""
    reply = map_or_reduce(body)
    size = sum(len((m.get("content") or "").encode()) for m in body["messages"])
    return Reply(text=reply.text, prompt_eval_count=math.ceil(size / TRUE_BPT))


def dense_config(tmp_path, url: str, max_chunks: int | None = None):
    """Chunks as large as the window allows (``chunk_size_tokens`` above the room): a file denser than
    planned cannot be read in the card's count of larger chunks (issue 43 lets a re-plan grow the chunks
    where the window has room), so the re-plan needs more chunks than the card."""
    config = make_config(tmp_path, url)
    changes = dict(chunk_size_tokens=100_000, **({"max_chunks": max_chunks} if max_chunks else {}))
    return dataclasses.replace(config, chunking=dataclasses.replace(config.chunking, **changes))


def planned_chunks(tmp_path, scripted, make_live, window_sized: bool = True) -> int:
    """How many chunks the plan makes of big.md (before any call measured it); ``window_sized``: in
    ``dense_config``, else in the default config."""
    config = (dense_config if window_sized else make_config)(tmp_path / "probe", scripted.url)
    Path(config.workspace).mkdir(parents=True)
    (Path(config.workspace) / "big.md").write_text(big_markdown())
    probe = make_live(config)
    name = probe.open_session()
    probe.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    chunks = probe.services.jobs.open_for(name).chunks
    probe.close()
    return chunks


def big_md_card(make_live, config):
    """The app with big.md in its workspace and the card of "Summarize big.md" in a new session:
    (live, session, job)."""
    Path(config.workspace).mkdir(parents=True, exist_ok=True)
    (Path(config.workspace) / "big.md").write_text(big_markdown())
    live = make_live(config)
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    return live, name, live.services.jobs.open_for(name)


@pytest.fixture
def dense(tmp_path, scripted, make_live):
    """big.md with max_chunks at the plan's count: the user agrees to the whole file, then the
    re-plan after chunk 1 needs more chunks than that."""
    scripted.script = dense_script
    limit = planned_chunks(tmp_path, scripted, make_live)
    live, name, job = big_md_card(make_live, dense_config(tmp_path, scripted.url, max_chunks=limit))
    assert job.chunks == limit and job.selected == limit           # the whole file, within the limit
    before = len(scripted.chats())
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize."})
    wait_state(job, "confirm", "done", "failed", timeout=60)
    return live, scripted, name, job, limit, before


def maps_of(scripted):
    return [rec for rec in scripted.chats() if is_map(rec)]


def test_a_re_plan_past_the_agreed_calls_pauses_and_asks(dense):
    live, scripted, name, job, limit, _ = dense
    assert job.state == "confirm", job.message
    assert job.replans and job.chunks > limit and job.total == limit      # denser: more chunks than agreed
    numbers = [int(MAP.search(rec.body["messages"][-1]["content"]).group(1)) for rec in maps_of(scripted)]
    # every agreed chunk, no more (chunk 1, sized at the window's room by the plan's figure, was refused at
    # the true count and read in halves: what showed the file denser)
    assert sorted(set(numbers)) == list(range(1, limit + 1)) and len(numbers) - numbers.count(1) == limit - 1
    assert not [rec for rec in scripted.chats() if not is_map(rec)]      # and no synthesis yet
    card = unescape(live.get(f"/s/{name}").text)
    more = job.chunks - limit
    assert f"Read the rest ({more} more call{'s' if more != 1 else ''}" in card
    assert "Synthesize what was read" in card and "Discard this analysis" in card
    assert f"{limit} of the {job.chunks} chunks of the file have an answer" in card     # honest counts
    last = notes.where(job.unread[-1])
    assert job.unread and last.startswith("lines ") and last in card                     # and what is unread
    assert job.id in live.services.jobs.jobs and not live.services.jobs.busy(name)  # waits for the user


def test_read_the_rest_reads_every_chunk_to_the_end_of_the_file(dense):
    live, scripted, name, job, limit, _ = dense
    live.post(f"/s/{name}/analysis/{job.id}/read-on", data={"rest": "yes"})
    wait_settled(live, job, timeout=60)
    assert job.state == "done", job.message
    assert covered(maps_of(scripted)) == set(PARAGRAPH_MARK.findall(big_markdown()))   # the file's end too
    numbers = sorted(int(MAP.search(rec.body["messages"][-1]["content"]).group(1)) for rec in maps_of(scripted))
    assert sorted(set(numbers)) == list(range(1, job.chunks + 1))        # each chunk once (chunk 1 in halves)
    assert len(numbers) - numbers.count(1) == job.chunks - 1
    turn = fountain.turns(fountain.loads(session_text(live, name)))[0]
    assert turn.analysis.chunks == job.chunks and turn.analysis.results == ["ok"] * job.chunks
    assert turn.analysis.unread == [] and "Note: this answer covers" not in turn.reply


def test_synthesize_what_was_read_names_the_unread_lines_in_the_answer_and_the_scene(dense):
    live, scripted, name, job, limit, _ = dense
    live.post(f"/s/{name}/analysis/{job.id}/read-on", data={"rest": "no"})
    wait_settled(live, job, timeout=60)
    assert job.state == "done", job.message
    read = [int(MAP.search(rec.body["messages"][-1]["content"]).group(1)) for rec in maps_of(scripted)]
    assert sorted(set(read)) == list(range(1, limit + 1))                # nothing more was read
    turn = fountain.turns(fountain.loads(session_text(live, name)))[0]
    spans = [notes.read_unread(n) for n in turn.analysis.unread]
    assert spans and None not in spans
    # the lines named are exactly the paragraphs no map request carried, up to the file's last line
    text = big_markdown()
    lines = text.split("\n")
    named = {m for s in spans for line in lines[s["lines"][0] - 1:s["lines"][1]] for m in PARAGRAPH_MARK.findall(line)}
    sent = covered(maps_of(scripted))
    assert named == set(PARAGRAPH_MARK.findall(text)) - sent and named
    assert spans[-1]["lines"][1] == len(text.rstrip("\n").split("\n"))
    assert spans[-1]["section"].startswith("Section ")
    first, last = spans[-1]["lines"]
    assert f"Not read: lines {first}–{last}" in turn.reply               # the answer's closing note
    assert f"covers {limit} of the {job.chunks} chunks of `big.md`" in turn.reply
    # the coverage names the lines read, not the whole file's (issue 45: "lines 1–6,425 … not read: 622–6425")
    coverage = notes.read_computed(turn.analysis.computed).coverage
    assert coverage.startswith(f"read {limit} of {job.chunks} chunks (lines 1–{first - 1:,}); "), coverage
    # honest counts in the scene and the notice: chunks of the whole file, not of the run
    assert turn.analysis.chunks == job.chunks > limit and len(turn.analysis.results) == limit
    scene = session_text(live, name)
    assert f"[[chunk: file=big.md, chunks={job.chunks}," in scene and f"[[chunk-unread: lines {first}-{last}" in scene
    assert f"{limit} of the {job.chunks} were read" in scene
    page = unescape(live.get(f"/s/{name}").text)
    assert f"Not read: lines {first}–{last}" in page


def test_the_question_survives_a_restart(dense, make_live):
    live, scripted, name, job, limit, _ = dense
    config = live.config
    live.close()
    again = make_live(config)
    kept = again.services.jobs.get(job.id)
    assert kept.state == "confirm" and kept.chunks == job.chunks and kept.total == limit
    assert "Read the rest" in again.get(f"/s/{name}").text
    assert again.post(f"/s/{name}/analysis/{job.id}/resume").status_code == 200
    assert kept.state == "confirm"                                       # Resume does not answer it
    again.post(f"/s/{name}/analysis/{job.id}/read-on", data={"rest": "yes"})
    wait_settled(again, kept, timeout=60)
    assert kept.state == "done" and len(kept.results) == kept.chunks


def test_first_n_chunks_name_the_rest_as_unread(tmp_path, scripted, make_live):
    from test_analysis import big_file_config
    scripted.script = map_or_reduce
    live = make_live(big_file_config(tmp_path, scripted, max_chunks=5))
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize.", "scope": "first"})
    wait_settled(live, job, timeout=60)
    assert job.state == "done" and len(maps_of(scripted)) == 5
    turn = fountain.turns(fountain.loads(session_text(live, name)))[0]
    (span,) = [notes.read_unread(n) for n in turn.analysis.unread]
    text = big_markdown()
    lines = text.split("\n")
    named = {m for line in lines[span["lines"][0] - 1:span["lines"][1]] for m in PARAGRAPH_MARK.findall(line)}
    assert named == set(PARAGRAPH_MARK.findall(text)) - covered(maps_of(scripted))
    assert turn.analysis.chunks == job.chunks > 5
    assert f"covers 5 of the {job.chunks} chunks" in turn.reply and "were not run" in turn.reply


def test_a_failed_chunk_is_named_by_its_lines(tmp_path, scripted, make_live):
    from test_analysis import big_file_config

    def script(body):
        found = MAP.search(body["messages"][-1]["content"])
        if found and found.group(1) == "3":
            return Reply(fault="context")                 # refused, and its halves too: recorded as failed
        return map_or_reduce(body)

    scripted.script = script
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize."})
    wait_settled(live, job, timeout=60)
    turn = fountain.turns(fountain.loads(session_text(live, name)))[0]
    spans = [notes.read_unread(n) for n in turn.analysis.unread]
    assert len(spans) == 1 and "chunk 3 had no answer" in turn.reply
    thirds = [rec for rec in scripted.chats() if (m := MAP.search(rec.body["messages"][-1]["content"]))
              and m.group(1) == "3"]                   # the whole chunk, then the halves it was split into
    third = thirds[0]
    only_third = set(PARAGRAPH_MARK.findall(third.body["messages"][-1]["content"])) - covered(
        [rec for rec in maps_of(scripted) if all(rec is not t for t in thirds)])
    lines = big_markdown().split("\n")
    named = {m for line in lines[spans[0]["lines"][0] - 1:spans[0]["lines"][1]] for m in PARAGRAPH_MARK.findall(line)}
    assert named == only_third and named                      # the overlaps its neighbours read are not named


def test_cancel_then_synthesize_what_came_names_the_rest(tmp_path, scripted, make_live):
    from test_analysis import big_file_config, slow_maps
    scripted.script = slow_maps(0.03)
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize."})
    wait_for(lambda: job.done_count >= 3, what="three chunks")
    live.post(f"/s/{name}/analysis/{job.id}/cancel")
    wait_state(job, "choose")
    live.post(f"/s/{name}/analysis/{job.id}/after-cancel", data={"keep": "yes"})
    wait_settled(live, job, timeout=60)
    answered = [rec for rec in maps_of(scripted) if not rec.disconnected]
    turn = fountain.turns(fountain.loads(session_text(live, name)))[0]
    spans = [notes.read_unread(n) for n in turn.analysis.unread]
    lines = big_markdown().split("\n")
    named = {m for s in spans for line in lines[s["lines"][0] - 1:s["lines"][1]] for m in PARAGRAPH_MARK.findall(line)}
    assert named == set(PARAGRAPH_MARK.findall(big_markdown())) - covered(
        [rec for rec in answered if int(MAP.search(rec.body["messages"][-1]["content"]).group(1)) - 1 in
         {i for i, r in job.results.items() if r.status == "ok"}])
    assert f"covers {job.done_count} of the {job.chunks} chunks" in turn.reply and "Not read: lines" in turn.reply


# -- two devices -------------------------------------------------------------------------------

def test_a_refused_second_start_writes_nothing_onto_the_running_job(tmp_path, scripted, make_live):
    from test_analysis import big_file_config, slow_maps
    scripted.script = slow_maps(0.02)
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    url = f"/s/{name}/analysis/{job.id}/start"
    scripted.tags_delays = [1.0]              # the loser's @model lookup answers late
    live.services.models.forget_models()
    loser: list = []
    lookups = len([r for r in scripted.requests if r.path == "/api/tags"])
    tap = threading.Thread(target=lambda: loser.append(live.post(url, data={"instruction": "List the dates. @nosuch"})))
    tap.start()
    wait_for(lambda: len([r for r in scripted.requests if r.path == "/api/tags"]) > lookups,
             what="the loser's model lookup")             # (it has passed the "proposed" check)
    winner = live.post(url, data={"instruction": "Summarize the methods."})
    assert winner.status_code == 200 and job.state in ("queued", "running")
    tap.join(30)
    assert loser and loser[0].status_code == 200
    assert "not an installed model" not in loser[0].text               # the card as it is: running
    after = len(scripted.chats())
    wait_settled(live, job, timeout=60)
    assert job.instruction == "Summarize the methods." and "nosuch" not in job.message
    later = [rec for rec in scripted.chats()[after:] if is_map(rec)]
    assert later, "the run had chunks left after the loser's answer"
    assert all("Summarize the methods." in rec.body["messages"][-1]["content"] and "List the dates"
               not in rec.body["messages"][-1]["content"] for rec in later)
    turn = fountain.turns(fountain.loads(session_text(live, name)))[0]
    assert turn.analysis.instruction == "Summarize the methods."


def test_every_job_update_names_the_state_it_expects():
    saved = []
    machine = StateMachine(saved.append)
    job = _job()
    with pytest.raises(TypeError):
        machine.update(job, message="no state named")                  # expect is required
    job.state = "running"
    from app.analysis.job import InvalidTransition
    with pytest.raises(InvalidTransition):
        machine.update(job, expect="proposed", instruction="other")
    assert job.instruction == "Summarize." and saved == []
    machine.update(job, expect="running", message="ok")
    assert job.message == "ok" and saved == [job]


def test_the_confirm_state_is_in_the_table():
    assert "confirm" in TRANSITIONS["running"] and TRANSITIONS["confirm"] == {"queued", "discarded"}


# -- the results snapshot --------------------------------------------------------------------

def _job(**fields) -> Job:
    return Job(id="x", session="s", turn=0, file="f.md", user_text="", instruction="Summarize.", model="m",
               file_tokens=1, remaining=1, chunks=5000, size_tokens=600, boundary="", kind="markdown",
               fingerprint="", window=8192, bytes_per_token=4.0, **fields)


def test_request_threads_read_results_through_a_snapshot_while_the_worker_adds_them():
    machine = StateMachine(lambda job: None)
    job = _job()
    done, snapped = threading.Event(), threading.Event()

    def worker():
        for i in range(5000):
            machine.add_result(job, ChunkResult(i, "ok", seconds=0.01))
            if i % 500 == 250:                  # let the reader in mid-run, whatever the scheduler does
                snapped.clear()
                snapped.wait(10)
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    sizes = []
    deadline = time.monotonic() + 60
    while not done.is_set() and time.monotonic() < deadline:
        snap = machine.results(job)                                     # never "changed size during iteration"
        assert [r.index for r in snap] == list(range(len(snap)))
        job.eta_seconds()
        sizes.append(len(snap))
        snapped.set()
    thread.join(10)
    assert done.is_set() and len(machine.results(job)) == 5000
    assert any(0 < n < 5000 for n in sizes)                              # read while the worker was adding


# -- sources and citations -------------------------------------------------------------------

class NoMarkers(Script):
    """The synthesis writes the facts with no [n] marker at all (as small models often do)."""

    def reduce(self, prompt: str) -> str:
        return re.sub(r"\s*\[[\d, ]+\]", "", super().reduce(prompt))


def sources_of(page: str, turn: int) -> list[tuple[int, str]]:
    m = re.search(rf'<p class="sources" id="sources-{turn}">(.*?)</p>', page, re.S)
    assert m, "no Sources line under the answer"
    return [(int(n), url) for url, n in re.findall(r'<a class="cite" href="([^"]+)"[^>]*>(\d+)</a>', m.group(1))]


def test_an_answer_without_markers_lists_every_relevant_chunk_with_its_passage(facts_live):
    live, scripted, path = facts_live
    script = scripted.script = NoMarkers()
    name, job, _ = run_analysis(live)
    assert job.state == "done", job.message
    turn = fountain.turns(fountain.loads(session_text(live, name)))[0]
    assert not re.search(r"\[\d+\]", turn.reply) and "Sources" not in turn.reply    # the .spmd: the model's words
    listed = sources_of(live.get(f"/s/{name}").text, 0)
    assert [n for n, _ in listed] == sorted(script.relevant)
    for n, url in listed:
        passage = live.get(unescape(url), headers={"HX-Request": "true"})
        assert passage.status_code == 200 and f"Chunk {n} of facts.md" in passage.text
    shown = [" ".join(BeautifulSoup(live.get(unescape(url), headers={"HX-Request": "true"}).text,
                                    "html.parser").get_text().split()) for _, url in listed]
    for fact in FACTS.values():                                        # each fact's passage is among them
        assert any(fact in text for text in shown), fact


class WithReferences(Script):
    """The synthesis cites its facts and then copies the document's reference list."""

    def reduce(self, prompt: str) -> str:
        return (super().reduce(prompt) + "\n\nReferences\n\n[1] Smith, J. (2019). Cooling loops. Rig Journal.\n"
                "[2] Okafor, A. (2021). \"Surveys [3] and sign-offs\". Field Notes.")


def test_a_reference_list_in_the_synthesis_is_not_linked(facts_live):
    live, scripted, _ = facts_live
    script = scripted.script = WithReferences()
    name, job, _ = run_analysis(live)
    assert job.state == "done", job.message
    turn = fountain.turns(fountain.loads(session_text(live, name)))[0]
    assert "[1] Smith, J. (2019)" in turn.reply and "[2] Okafor, A." in turn.reply    # kept as written
    page = live.get(f"/s/{name}").text
    reply = re.search(r'id="reply-0">(.*?)</div>\s*(?:<p class="sources"|<div class="reply-tools")', page, re.S).group(1)
    refs = reply[reply.index("Smith, J.") - 200:]
    assert 'class="cite"' not in refs                                  # no number of the list is a link
    assert "[1] Smith" in unescape(refs) and "Surveys [3] and" in unescape(refs)
    assert 'class="cite"' in reply[:reply.index("References")]         # the synthesis's own markers are


@pytest.mark.parametrize("text, cited", [
    ("The loop holds 417 litres [3].", [3]),
    ("[1] Smith, J. (2019). Cooling loops.", []),
    ("- [2] Doe, A. Surveys.", []),
    ('He wrote "as shown in [3]" in the memo.', []),
    ("> The rig [3] was tested.", []),
    ("Use `argv[3]` here.", []),
    ("He said “see [1]” about it [3].", [3]),
    ("Two claims [1, 3] and a range [2-3].", [1, 3, 2]),
])
def test_the_document_s_own_numbers_are_never_citations_in_the_answer_or_its_links(text, cited):
    """One rule (render.documents_own) for mapreduce's citations and the rendered links."""
    from app import render
    from app.analysis import mapreduce
    assert mapreduce.citations(text) == cited
    fixed, removed = mapreduce.resolve_citations(text, {1, 3})
    assert removed == (1 if text.startswith("Two") else 0) and ("[1] Smith" in fixed or "Smith" not in text)
    html = render.markdown(fixed, cite=lambda n: f"/p/{n}")
    linked = [int(n) for n in re.findall(r'<a class="cite" href="/p/(\d+)"', html)]
    assert list(dict.fromkeys(linked)) == mapreduce.citations(fixed)          # (citations: each once)


def test_an_unread_note_round_trips_through_the_scene():
    from datetime import datetime
    spans = [{"lines": [12, 40], "pages": None, "section": "Intro"},
             {"lines": [1201, 1500], "pages": [40, 52], "section": "Results › Table [[9]] … Appendix"}]
    analysis = fountain.ChunkAnalysis(file="big.md", chunks=25, model="TINY", boundary="paragraph", chunk_size=600,
                                      instruction="Summarize.", when=datetime(2026, 7, 1, 10, 0), results=["ok"] * 20,
                                      synthesis="ok", unread=[notes.unread(s) for s in spans])
    text = fountain.dump_scene(fountain.chunk_scene(analysis, "TESTER"))
    assert "[[chunk-unread: lines 1201-1500, pages 40-52 — Results › Table [ [9] ] … Appendix]]" in text
    back = fountain.read_chunk_scene(fountain.loads(text).scenes[0])
    assert back.unread == analysis.unread and back.chunks == 25
    read = [notes.read_unread(n) for n in back.unread]
    assert read[0] == spans[0] and read[1]["lines"] == [1201, 1500] and read[1]["pages"] == [40, 52]
    assert notes.where(read[1]) == "lines 1201–1500 (pages 40–52, Results › Table [ [9] ] … Appendix)"


def test_43_3_read_the_rest_runs_the_calls_it_names_and_no_failed_chunk_again(tmp_path, scripted, make_live):
    """Issue 43 item 3: chunk 2 fails (an error inside the server's stream, every time it is asked); the
    re-plan pauses at "Read the rest (N more calls)"; Read the rest makes exactly N map calls, none of them
    chunk 2's, whose failure stays named in the answer."""
    failed_text = {}

    def script(body):
        prompt = body["messages"][-1]["content"]
        if MAP.search(prompt) and MAP.search(prompt).group(1) == "2":
            failed_text.setdefault("chunk", prompt.split("\n", 2)[-1][:200])
            return Reply(text="partial", fault="midstream_error", fault_after=1)
        return dense_script(body)

    scripted.script = dense_script
    limit = planned_chunks(tmp_path, scripted, make_live)
    scripted.script = script
    live, name, job = big_md_card(make_live, dense_config(tmp_path, scripted.url, max_chunks=limit))
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize."})
    wait_state(job, "confirm", "done", "failed", timeout=60)
    assert job.state == "confirm", job.message
    assert job.results[1].status == "error"                               # chunk 2 failed, after its retries
    card = unescape(live.get(f"/s/{name}").text)
    more = job.chunks - limit
    assert f"Read the rest ({more} more call{'s' if more != 1 else ''}" in card
    before = len(maps_of(scripted))
    live.post(f"/s/{name}/analysis/{job.id}/read-on", data={"rest": "yes"})
    wait_settled(live, job, timeout=60)
    assert job.state == "done", job.message
    after = maps_of(scripted)[before:]
    assert len(after) == more                                              # the calls agreed, no more
    assert not any(failed_text["chunk"] in rec.body["messages"][-1]["content"] for rec in after)
    turn = fountain.turns(fountain.loads(session_text(live, name)))[0]
    assert turn.analysis.results[1] != "ok"                                # and its failure is still said
    page = BeautifulSoup(live.get(f"/s/{name}").text, "html.parser")
    offer = page.select_one("form.read-rest button")                       # offered again, with its cost
    assert offer is not None and "1 chunk" in offer.get_text(), page.select_one("form.read-rest")


def test_43_4_the_card_says_why_its_sizes_are_estimated(tmp_path, scripted, make_live):
    """A model whose server gives no tokenizer: the card's size is "about", and says why (as harvey check does)."""
    live, name, _ = big_md_card(make_live, dense_config(tmp_path, scripted.url))
    assert live.services.models.counter("tiny:1b", wait=True) is None
    card = BeautifulSoup(live.get(f"/s/{name}").text, "html.parser").select_one(".card.alert")
    text = " ".join(card.select_one("dl.facts").get_text().split())
    assert "about " in text and ", estimated" in text                 # plain words on the card (issue 45) ...
    text = " ".join(card.select_one("details.more").get_text().split())  # ... the reason one tap away
    assert "estimated: the model's tokens cannot be counted here (the server gave no tokenizer" in text
    assert re.search(r"sized as Markdown at \d\.\d bytes a token", text), text     # the kind it was taken for


def test_43_4_a_denser_file_with_room_in_the_window_runs_the_cards_calls_without_asking(tmp_path, scripted,
                                                                                        make_live):
    """The card's plan is estimated (no tokenizer) and the file is denser than estimated: where the window
    has room for the card's chunks at their true size (1,500-token chunks in 8,192), the run re-sizes the
    rest to the same bytes each and makes the card's calls; on main it paused to ask for more."""
    scripted.script = dense_script
    card = planned_chunks(tmp_path, scripted, make_live, window_sized=False)
    config = make_config(tmp_path, scripted.url)
    config = dataclasses.replace(config, chunking=dataclasses.replace(config.chunking, max_chunks=card))
    live, name, job = big_md_card(make_live, config)
    assert job.chunks == card
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize."})
    wait_state(job, "confirm", "done", "failed", timeout=60)
    assert job.state == "done", (job.state, job.message)
    assert job.replans and job.measured_bpt < job.bytes_per_token          # it was denser, and re-planned
    assert len(maps_of(scripted)) <= card                                   # the card's calls, no more
    assert covered(maps_of(scripted)) == set(PARAGRAPH_MARK.findall(big_markdown()))   # the whole file
