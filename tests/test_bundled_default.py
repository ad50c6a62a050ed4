"""The default bundled model (``harvey serve --demo``, scripts/run.sh) answers, end to end (issue 31).

Through the app under waitress against the real demo server running ``app.cli.DEMO_MODEL``:
a plain chat question gets an answer that neither repeats the prompt nor is empty, and a
small chunked analysis finishes with partial answers read from the model's JSON and a
synthesis that does not echo its prompt (SmolLM2-135M did both: bench/RESULTS.md, issue 31).
Bounded: a 2048-token window, short replies, one small file.
"""

import dataclasses
import difflib
from pathlib import Path

import pytest

from app.analysis import mapreduce
from app.cli import DEMO_MODEL
from app.config import ChunkingConfig, ModelConfig
from app.sessions import fountain
from conftest import make_config, require

pytestmark = [pytest.mark.realmodel, pytest.mark.slow]
ECHO_CHARS = 40
NOTES = "".join(f"## {title}\n\n" + " ".join(sentences) + "\n\n" for title, sentences in (
    ("Garden", ["The tomatoes were planted on 3 May in the south bed.", "Slugs ate half of the lettuce,",
                "so Anna set beer traps by the fence and they helped within a week.",
                "The beans climb the new poles that Tom cut from the hazel hedge.",
                "Water the seedlings every evening while the weather stays dry."] * 2),
    ("Bikes", ["The blue bike needs a new chain before the trip.", "Tom pumped the tyres to 4 bar.",
               "The brakes of the red bike squeak and must be adjusted.",
               "Anna bought two new lights and a lock at the market on Saturday."] * 3),
    ("Trip", ["The trip to the lake is planned for 14 June.", "Anna brings the tent and the sleeping bags.",
              "Tom brings the stove, the pot and enough gas for two days.",
              "Before the trip the bikes must be ready and the food must be bought."] * 3)))


def shared_span(reply: str, prompt: str) -> int:
    """Characters of the longest span the reply repeats verbatim from the prompt (blanks squashed)."""
    a, b = " ".join(reply.lower().split()), " ".join(prompt.lower().split())
    return difflib.SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b)).size


@pytest.fixture(scope="module")
def default_demo():
    from harvey_demo import server as demo_server

    require(demo_server.model_available(DEMO_MODEL), demo_server.bundled.get(DEMO_MODEL).install_hint)
    with demo_server.DemoServer(model_name=DEMO_MODEL, threads=1) as server:
        yield server


def config_for(tmp_path, server):
    config = make_config(tmp_path, server.url, model=DEMO_MODEL)
    return dataclasses.replace(config, ollama=dataclasses.replace(config.ollama, timeout_s=300.0),
                               models={DEMO_MODEL: ModelConfig(context_window=2048)})


def test_the_default_demo_model_answers_a_question(tmp_path, default_demo, make_live):
    config = config_for(tmp_path, default_demo)
    live = make_live(config)
    name = live.open_session()
    question = "What is the capital of France? Answer in one sentence."
    live.post(f"/s/{name}/messages", data={"message": question})
    gen = live.services.activities.last(name)
    assert gen is not None and gen.wait_ended(600), "the default demo model did not answer in time"
    assert gen.status == "done" and gen.text.strip()
    assert "paris" in gen.text.lower(), gen.text
    assert shared_span(gen.text, config.system_prompt) < ECHO_CHARS, gen.text
    assert shared_span(gen.text, question) < len(question) - 1, gen.text
    turn = fountain.turns(fountain.loads((live.services.store.folder / f"{name}.spmd").read_text()))[0]
    assert turn.reply == gen.text and turn.model == DEMO_MODEL


def test_the_default_demo_model_runs_a_small_analysis(tmp_path, default_demo, make_live):
    config = config_for(tmp_path, default_demo)
    config = dataclasses.replace(config, chunking=ChunkingConfig(chunk_size_tokens=300, map_reply_tokens=160))
    workspace = Path(config.workspace)
    workspace.mkdir(parents=True)
    (workspace / "notes.md").write_text(NOTES, encoding="utf-8")
    live = make_live(config)
    session = live.open_session()
    live.post(f"/s/{session}/analysis/direct", data={"file": "notes.md"})
    job = live.services.jobs.open_for(session)
    assert job is not None and 2 <= job.chunks <= 4, job.chunks
    instruction = "What must be done before the trip?"
    live.post(f"/s/{session}/analysis/{job.id}/start", data={"instruction": instruction})
    events = list(live.sse(f"/s/{session}/analysis/{job.id}/events", timeout=600, total=800))
    assert events and job.state == "done", (job.state, job.message)
    assert all(r.status == "ok" for r in job.results.values())
    # the map step's JSON was read as MAP_SCHEMA's object (a confidence is set only then)
    assert any(r.confidence is not None for r in job.results.values()), [r.text for r in job.results.values()]
    text = (live.services.store.folder / f"{session}.spmd").read_text()
    answer = fountain.turns(fountain.loads(text))[-1].reply
    assert answer.strip() and f"synthesis: model={DEMO_MODEL} — ok" in text
    fixed_prompt = mapreduce.REDUCE_SYSTEM + "\n" + mapreduce.reduce_prompt(instruction, [], "")
    assert shared_span(answer, fixed_prompt) < ECHO_CHARS, answer
