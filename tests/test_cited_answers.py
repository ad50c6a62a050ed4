"""Issue 15: chunked analysis answers you can check.

Through waitress against the scripted Ollama server: a document with facts planted
at known places; the scripted map answers report them as JSON (with quotes) for the
chunks that hold them and relevant=false for the others; the scripted reduce echoes
back what it was given, with the [n] citations it found.  Every planted fact must
reach the answer with a citation whose passage, read back from the .spmd, holds the
fact in the file's text at [start:end].
"""

import dataclasses
import json
import re
from pathlib import Path

import pytest

from app import chunking
from app.analysis import mapreduce
from app.analysis.job import ChunkResult, Job
from app.analysis.store import JobStore
from app.config import ModelConfig
from app.sessions import fountain
from scripted_ollama import Reply, prose
from test_analysis import PARAGRAPH, big_file_config, session_text
from waiting import wait_for

FACTS = {   # (section, paragraph) -> the planted sentence (no brackets: citations are the only ones)
    (2, 3): "The cooling loop of the FACT-ALPHA rig holds 417 litres of water.",
    (7, 6): "The FACT-BETA survey was signed off by Dr. Okafor on 3 March.",
    (12, 10): "FACT-GAMMA: the backup generator starts within 9 seconds.",
}
INVENTED = "the moon is made of green cheese"
DECOY = "DECOY-POINT from a chunk that says it has nothing"
MAP_LABEL = re.compile(r"\nChunk (\d+) of (\d+)(?: \([^\n]*\))?:\n(.*?)"
                       r"(?:\n---\nAnswer in at most \d+ words\.|---\nAnswer from this chunk only, in JSON: [^\n]*)?$", re.S)


def facts_markdown(sections=12, paragraphs=10) -> str:
    parts = []
    for s in range(1, sections + 1):
        parts.append(f"## Section {s}\n")
        for p in range(1, paragraphs + 1):
            fact = FACTS.get((s, p), "")
            parts.append(f"Paragraph {s}.{p}. " + PARAGRAPH * 2 + fact + " " + PARAGRAPH + "\n")
    return "\n".join(parts)


def is_reduce(body) -> bool:
    return body["messages"][0]["content"].startswith("You combine")


def chunk_of(body):
    """(chunk number, chunk text) of a map request."""
    m = MAP_LABEL.search(body["messages"][-1]["content"])
    return int(m.group(1)), m.group(3)


class Script:
    """Structured map answers that report the planted facts; a reduce that echoes its parts' points
    with their citations, plus a citation of no chunk and one of a chunk that had nothing."""

    def __init__(self, filler: int = 0, token_delay: float = 0.0):
        self.irrelevant: set[int] = set()
        self.relevant: set[int] = set()
        self.filler, self.token_delay = filler, token_delay

    def __call__(self, body) -> Reply:
        if is_reduce(body):
            return Reply(text=self.reduce(body["messages"][-1]["content"]), piece_size=200)
        return Reply(text=json.dumps(self.map(*chunk_of(body))), token_delay=self.token_delay, piece_size=40)

    def map(self, n: int, text: str) -> dict:
        found = [fact for fact in FACTS.values() if fact in text]
        if not found and not self.filler:
            self.irrelevant.add(n)
            return {"relevant": False, "points": [{"point": DECOY, "quote": ""}], "confidence": 5}
        self.relevant.add(n)
        points = [{"point": fact, "quote": "  ".join(fact.upper().split())} for fact in found]   # case, spaces
        points.append({"point": "A side note " + prose(self.filler, seed=len(points)), "quote": INVENTED})
        return {"relevant": True, "points": points, "confidence": 4}

    def reduce(self, prompt: str) -> str:
        out, others = [], set()
        for line in prompt.split("\n---\n", 1)[1].splitlines():
            m = (re.match(r"^- \[(\d+)\] (.*?)(?: \(quote: \".*\"\))?$", line)
                 or re.match(r"^\[(\d+)\] (.*)$", line))
            if m:
                nums, text = [int(m.group(1))], m.group(2)
            elif m := re.match(r"^(.*\S) \[(\d+(?:, \d+)*)\]$", line):
                text, nums = m.group(1), [int(x) for x in m.group(2).split(", ")]
            else:
                continue
            if "FACT-" in text:
                out.append(f"{text} [{', '.join(map(str, nums))}]")
            else:
                others.update(nums)
        if others:
            out.append(f"Other details [{', '.join(map(str, sorted(others)))}]")
        out.append("A guess [999]")
        if self.irrelevant:
            out.append(f"Also [{min(self.irrelevant)}]")
        return "\n".join(out)


@pytest.fixture
def facts_live(tmp_path, scripted, make_live):
    config = big_file_config(tmp_path, scripted)
    (Path(config.workspace) / "facts.md").write_text(facts_markdown())
    return make_live(config), scripted, Path(config.workspace) / "facts.md"


def run_analysis(live, instruction="Find the facts about the rig, the survey and the generator.", **form):
    """Overflow card -> Start -> the events to the end; the job, the events."""
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "What does facts.md say?"})
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": instruction, **form})
    events = list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=60, total=120))
    wait_for(lambda: job.state in ("done", "failed") and job.id not in live.services.jobs.jobs,
             60, what=f"the job to settle (it is {job.state})")
    return name, job, events


def recorded_turn(live, name):
    (turn,) = fountain.turns(fountain.loads(session_text(live, name)))
    return turn


def reduces(scripted):
    return [c for c in scripted.chats() if is_reduce(c.body)]


def maps(scripted):
    return [c for c in scripted.chats() if not is_reduce(c.body)]


def assert_facts_cited(answer: str, passages: dict, text: str) -> None:
    """Every planted fact is in the answer, each line with it cites chunks whose passage holds it."""
    for fact in FACTS.values():
        lines = [line for line in answer.splitlines() if fact in line]
        assert lines, f"{fact!r} is not in the answer:\n{answer}"
        for line in lines:
            cited = mapreduce.citations(line)
            assert cited, f"no citation after {fact!r}: {line!r}"
            for n in cited:
                p = passages[n]
                assert fact in text[p.start:p.end], f"chunk {n}'s passage does not hold {fact!r}"
                assert fact in p.quotes                    # the file's own words, not the model's casing


# -- end to end -----------------------------------------------------------------------------

def test_planted_facts_reach_the_answer_with_citations_that_open_their_passage(facts_live):
    live, scripted, path = facts_live
    script = scripted.script = Script()
    name, job, events = run_analysis(live)
    assert job.state == "done", job.message
    assert len(maps(scripted)) == job.total > 3
    for rec in maps(scripted):                                        # every map call asks for the schema
        schema = rec.format
        assert isinstance(schema, dict) and schema["type"] == "object"
        assert set(schema["required"]) == {"relevant", "points", "confidence"}
        assert schema["properties"]["confidence"] == {"type": "integer", "minimum": 0, "maximum": 5}
        assert "in JSON: relevant" in rec.body["messages"][-1]["content"]  # the closing line names the shape
    assert script.irrelevant and script.relevant
    for rec in reduces(scripted):                                     # the empty chunks dropped out
        assert rec.format is None
        prompt = rec.body["messages"][-1]["content"].split("\n---\n", 1)[1]     # the parts
        assert DECOY not in prompt and INVENTED not in prompt
        for n in script.irrelevant:
            assert f"[Chunk {n} of " not in prompt and f"[{n}]" not in prompt
        for n in script.relevant:
            assert f"[Chunk {n} of {job.total}" in prompt and f"- [{n}] A side note" in prompt
        assert "Confidence 4 of 5." in prompt
    turn = recorded_turn(live, name)
    analysis, text = turn.analysis, chunking.read_document(path).text
    assert set(analysis.passages) == script.relevant and analysis.relevant == len(script.relevant)
    assert analysis.source == "sha256:" + chunking.read_document(path).content_hash[:16]
    assert_facts_cited(turn.reply, analysis.passages, text)
    assert set(mapreduce.citations(turn.reply)) <= script.relevant   # [999] and the empty chunk's number went
    assert "A guess\n" in turn.reply and "[999]" not in turn.reply
    for n, p in analysis.passages.items():
        assert p.chunk == n and INVENTED not in " ".join(p.quotes).lower()   # an invented quote is dropped
        first, last = p.lines
        assert text.count("\n", 0, p.start) + 1 == first and first <= last
        assert p.heading.startswith("Section ")
    line = f"{len(script.relevant)} of {job.total} chunks had something relevant"
    assert any(line in d for e, d, _ in events if e == "progress")   # the card says it
    assert f"notice: {line}." in session_text(live, name)            # and the answer's notice


def test_combining_rounds_keep_the_chunk_numbers(tmp_path, scripted, make_live):
    script = scripted.script = Script(filler=150)                   # long points: the parts overflow one request
    config = big_file_config(tmp_path, scripted)
    config = dataclasses.replace(config, models={"tiny:1b": ModelConfig(effective_context=2400)})
    (Path(config.workspace) / "facts.md").write_text(facts_markdown())
    live = make_live(config)
    name, job, _ = run_analysis(live, scope="all")
    assert job.state == "done", job.message
    calls = reduces(scripted)
    assert len(calls) >= 3                                           # rounds, then the final synthesis
    final = calls[-1].body["messages"][-1]["content"]
    labels = re.findall(r"^\[Combined answer \d+ of \d+, chunks ([\d, -]+)\]$", final, re.M)
    assert labels                                                    # combined parts name their chunks
    assert "keep every chunk number" in calls[0].body["messages"][-1]["content"]   # a round is told
    turn = recorded_turn(live, name)
    assert_facts_cited(turn.reply, turn.analysis.passages, chunking.read_document(
        Path(config.workspace) / "facts.md").text)
    assert set(mapreduce.citations(turn.reply)) <= set(turn.analysis.passages)


def test_free_text_and_invalid_json_map_answers_still_produce_an_answer(facts_live):
    live, scripted, _ = facts_live
    kinds = {}

    def script(body):
        if is_reduce(body):
            prompt = body["messages"][-1]["content"]
            return Reply(text="Combined: " + " ".join(re.findall(r"^\[\d+\] .*$", prompt, re.M)))
        n, _ = chunk_of(body)
        kind = ["free", "broken", "shape", "nothing"][(n - 1) % 4]
        kinds[n] = kind
        return Reply(text={"free": f"Chunk {n} describes the three-phase experiment.",
                           "broken": '{"relevant": true, "points": [{"point": "cut off',
                           "shape": json.dumps({"relevant": "yes", "points": "many", "confidence": 9}),
                           "nothing": "Nothing relevant in this chunk."}[kind])

    scripted.script = script
    name, job, _ = run_analysis(live)
    assert job.state == "done", job.message
    (final,) = reduces(scripted)
    prompt = final.body["messages"][-1]["content"]
    for n, kind in kinds.items():
        assert (f"[Chunk {n} of " in prompt) == (kind != "nothing")       # a one-line "nothing" drops out
    assert all(r.confidence is None and not r.points for r in job.results.values())   # read as free text
    turn = recorded_turn(live, name)
    assert turn.reply.startswith("Combined: [1] Chunk 1 describes")
    relevant = [n for n, kind in kinds.items() if kind != "nothing"]
    assert turn.analysis.relevant == len(relevant) and set(turn.analysis.passages) == set(relevant)


def test_an_instruction_whose_answer_grows_with_the_text_is_asked_in_free_text(facts_live):
    """(Found in review.) A translation or "list every ..." is no list of a few short points."""
    live, scripted, _ = facts_live
    scripted.script = lambda body: Reply(text="SYNTH" if is_reduce(body) else
                                         f"Chunk {chunk_of(body)[0]}, translated.")
    name, job, _ = run_analysis(live, instruction="Translate each section into French.")
    assert job.state == "done", job.message
    assert maps(scripted) and all(c.format is None for c in maps(scripted))
    assert all(r.status == "ok" and r.relevant for r in job.results.values())


def test_a_server_that_refuses_format_gets_free_text_map_calls(facts_live):
    live, scripted, _ = facts_live
    scripted.refuse_format = True
    scripted.script = lambda body: Reply(text="SYNTH [1] [2]" if is_reduce(body) else
                                         f"Chunk {chunk_of(body)[0]} has notes.")
    name, job, _ = run_analysis(live)
    assert job.state == "done", job.message
    refused = [c for c in scripted.chats() if c.refused == "format"]
    assert len(refused) == 1 and refused[0].format is not None        # asked once, then remembered
    answered = [c for c in maps(scripted) if c.refused is None]
    assert len(answered) == job.total and all(c.format is None for c in answered)
    assert all(r.status == "ok" and r.relevant for r in job.results.values())
    assert recorded_turn(live, name).reply == "SYNTH [1] [2]"


def test_no_relevant_chunk_means_no_synthesis_call_and_a_plain_answer(facts_live):
    live, scripted, _ = facts_live
    scripted.script = lambda body: Reply(text=json.dumps({"relevant": False, "points": [], "confidence": 5}))
    name, job, _ = run_analysis(live, "Find the price of tea.")
    assert job.state == "done", job.message
    assert reduces(scripted) == [] and len(maps(scripted)) == job.total
    turn = recorded_turn(live, name)
    assert turn.reply.startswith("No chunk of facts.md had anything relevant to the instruction")
    assert turn.analysis.relevant == 0 and turn.analysis.passages == {} and turn.analysis.synthesis == "ok"
    assert f"notice: 0 of {job.total} chunks had something relevant." in session_text(live, name)


def test_a_restart_mid_run_still_records_the_passages_of_chunks_done_before(tmp_path, scripted, make_live):
    script = scripted.script = Script(token_delay=0.02)
    config = big_file_config(tmp_path, scripted)
    path = Path(config.workspace) / "facts.md"
    path.write_text(facts_markdown())
    first = make_live(config)
    name = first.open_session()
    first.post(f"/s/{name}/messages", data={"message": "What does facts.md say?"})
    job = first.services.jobs.open_for(name)
    first.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Find the facts."})
    wait_for(lambda: job.done_count >= 3, 60, what="three chunks")
    first.close()
    wait_for(lambda: job.state == "interrupted", 60, what=f"the job interrupted (it is {job.state})")
    before = {i + 1 for i, r in job.results.items() if r.status == "ok" and r.relevant}
    assert before                                                    # facts.md's chunk 1 or 2 holds FACT-ALPHA
    second = make_live(config)
    resumed = second.services.jobs.get(job.id)
    assert resumed.source.startswith("sha256:") and resumed.results[min(before) - 1].lines
    second.post(f"/s/{name}/analysis/{job.id}/resume")
    list(second.sse(f"/s/{name}/analysis/{job.id}/events", timeout=60, total=120))
    wait_for(lambda: resumed.state == "done" and resumed.id not in second.services.jobs.jobs, 60,
             what="the resumed job")
    turn = recorded_turn(second, name)
    assert before <= set(turn.analysis.passages) == script.relevant
    assert_facts_cited(turn.reply, turn.analysis.passages, chunking.read_document(path).text)


def test_a_decided_answer_recovered_after_a_crash_keeps_its_passages(tmp_path, scripted, make_live):
    script = scripted.script = Script()
    config = big_file_config(tmp_path, scripted)
    (Path(config.workspace) / "facts.md").write_text(facts_markdown())
    live = make_live(config)
    name, job, _ = run_analysis(live)
    assert job.state == "done", job.message
    recorded = recorded_turn(live, name).analysis
    jobs = JobStore(Path(config.data_dir) / "jobs")                # job.json and results as the crash left them
    jobs.save(job)
    for result in job.results.values():
        jobs.add_result(job, result)
    path = live.services.store.folder / f"{name}.spmd"
    play = fountain.loads(path.read_text())
    asked = recorded_turn(live, name)
    del play.scenes[-2:]                                          # the scene and the answer, not yet written:
    pending = fountain.Turn(asked.when, asked.user_text, asked.model, harvey=asked.harvey)   # the card's turn
    play.scenes.extend(fountain.turn_scenes(pending, "tester", config.workspace))
    path.write_text(fountain.dumps(play))
    live.close()
    again = make_live(config)
    assert again.services.jobs.get(job.id).state == "done"
    turn = recorded_turn(again, name)
    assert turn.analysis.passages == recorded.passages and set(recorded.passages) == script.relevant
    assert (turn.analysis.source, turn.analysis.relevant) == (recorded.source, recorded.relevant)


def test_the_client_sends_format_only_when_given(scripted):
    from app.modelserver.ollama import OllamaServer

    client = OllamaServer(scripted.url)
    scripted.script = Reply(text='{"relevant": false, "points": [], "confidence": 5}')
    try:
        text, _ = client.chat_text("tiny:1b", [{"role": "user", "content": "x"}], num_ctx=512,
                                   format=mapreduce.MAP_SCHEMA)
        client.chat_text("tiny:1b", [{"role": "user", "content": "x"}], num_ctx=512)
    finally:
        client.close()
    with_format, without = scripted.chats()
    assert with_format.format == mapreduce.MAP_SCHEMA and "format" not in without.body
    assert mapreduce.read_map_reply(text, "x").confidence == 5          # a scripted JSON reply reads back


# -- the pieces ------------------------------------------------------------------------------

CHUNK = "## Costs\n\nThe pump costs  412 euros.\nIt runs for ten years.\n"


@pytest.mark.parametrize("reply", [
    '{"relevant": true, "points": [], "confidence": 6}',                    # confidence out of range
    '{"relevant": true, "points": [], "confidence": true}',                 # a bool is not a confidence
    '{"relevant": 1, "points": [], "confidence": 3}',                        # relevant must be a bool
    '{"relevant": true, "points": "x", "confidence": 3}',
    '{"relevant": true, "points": [{"quote": "x"}], "confidence": 3}',     # a point needs its text
    '{"relevant": true, "points": [{"point": 3, "quote": "x"}], "confidence": 3}',
    '[1, 2]', '{"relevant": true', 'The pump costs 412 euros.',
])
def test_a_reply_without_the_schema_shape_is_read_as_free_text(reply):
    answer = mapreduce.read_map_reply(reply, CHUNK)
    assert (answer.confidence, answer.points, answer.text, answer.relevant) == (None, [], reply, True)


def test_a_structured_reply_keeps_only_the_quotes_the_chunk_holds_in_its_own_words():
    reply = json.dumps({"relevant": True, "confidence": 3, "points": [
        {"point": "The pump costs 412 euros.", "quote": "“the PUMP costs 412\neuros…”"},
        {"point": "It is blue.", "quote": "the pump is blue"},
        {"point": "  ", "quote": "The pump"}]})
    answer = mapreduce.read_map_reply("```json\n" + reply + "\n```", CHUNK)
    assert answer.relevant and answer.confidence == 3
    assert answer.points == [{"point": "The pump costs 412 euros.", "quote": "The pump costs  412 euros"},
                             {"point": "It is blue.", "quote": ""}]
    empty = mapreduce.read_map_reply('{"relevant": true, "points": [], "confidence": 2}', CHUNK)
    assert not empty.relevant                                       # "relevant" with nothing to say is not


def test_a_json_reply_cut_off_by_its_reply_budget_keeps_its_whole_points():
    """Small models can loop in a list until num_predict stops them mid-JSON (seen with SmolLM2)."""
    cut = ('{"relevant": true, "points": [{"point": "The pump costs 412 euros.", "quote": "the pump costs 412 euros"},'
           ' {"point": "It runs for ten years.", "quote": "It runs for ten years"}, {"point": "It ru')
    answer = mapreduce.read_map_reply(cut, CHUNK)
    assert answer.relevant and answer.confidence is None
    assert [p["point"] for p in answer.points] == ["The pump costs 412 euros.", "It runs for ten years."]
    assert answer.points[0]["quote"] == "The pump costs  412 euros"
    nothing = mapreduce.read_map_reply('{"relevant": false, "points": [], "confid', CHUNK)
    assert not nothing.relevant and nothing.points == []


@pytest.mark.parametrize("text,relevant", [
    ("Nothing relevant in this chunk.", False), ("No relevant information.", False), ("", False),
    ("This chunk does not mention the pump.", False), ("N/A", False),
    ("No, the pump runs for ten years.", True), ("The pump costs 412 euros.", True),
    ("Nothing relevant here.\nBut the pump costs 412 euros.", True),
])
def test_free_text_is_relevant_unless_one_line_says_nothing_is(text, relevant):
    assert mapreduce.read_map_reply(text, CHUNK).relevant is relevant


def test_citations_are_resolved_to_relevant_chunks():
    answer = "A [1]. B [3, 7]. C [Chunk 2-4]. D [9]. E [x](http://e). F [12–13]."
    fixed, removed = mapreduce.resolve_citations(answer, {1, 3, 4, 13})
    assert fixed == "A [1]. B [3]. C [3, 4]. D. E [x](http://e). F [13]."
    assert removed == 4 and mapreduce.citations(fixed) == [1, 3, 4, 13]


def test_resolving_citations_leaves_code_indexes_and_reference_links_alone():
    """(Found in review.) ``argv[1]`` in code, ``x[3]`` and ``[1]: url`` are not citations."""
    answer = "Use `sys.argv[1]` [2].\n```py\nitems[2]\n```\nAlso x[3] and [3, 9].\n\n[1]: http://x"
    fixed, removed = mapreduce.resolve_citations(answer, {2, 9})
    assert fixed == "Use `sys.argv[1]` [2].\n```py\nitems[2]\n```\nAlso x[3] and [9].\n\n[1]: http://x"
    assert removed == 1 and mapreduce.citations(answer) == [2, 3, 9]


def test_chunk_results_round_trip_and_old_job_files_still_load(tmp_path):
    store = JobStore(tmp_path / "jobs")
    job = Job(id="abc", session="s", turn=0, file="f.md", user_text="u", instruction="i", model="tiny:1b",
              file_tokens=1, remaining=1, chunks=2, size_tokens=1, boundary="paragraph", kind="markdown",
              fingerprint="fp", window=8192, bytes_per_token=4.0, source="sha256:0123456789abcdef")
    store.save(job)
    result = ChunkResult(0, "ok", "- p", relevant=True, points=[{"point": "p", "quote": "q q"}], confidence=4,
                         start=10, end=99, lines=[2, 5], pages=[1, 2], section="A › B")
    store.add_result(job, result)
    (loaded,) = JobStore(tmp_path / "jobs").load_all()
    assert loaded.source == job.source and loaded.results[0] == result and loaded.results[0].quotes == ["q q"]
    old = {k: v for k, v in json.loads((tmp_path / "jobs/abc/job.json").read_text()).items()
           if k not in ("source", "format_refused")}
    (tmp_path / "jobs/abc/job.json").write_text(json.dumps(old))
    (tmp_path / "jobs/abc/results.jsonl").write_text(json.dumps(
        {"index": 0, "status": "ok", "text": "old answer", "error": "", "seconds": 1.0, "heading": ""}) + "\n")
    (loaded,) = JobStore(tmp_path / "jobs").load_all()
    assert loaded.source == "" and not loaded.format_refused
    assert (loaded.results[0].relevant, loaded.results[0].points, loaded.results[0].lines) == (True, [], None)
