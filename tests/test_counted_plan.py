"""The plan on the card is what runs (issue 30): chunks packed by the model's own token count.

Through waitress, with the scripted Ollama serving SmolLM2-135M's real vocabulary in ``/api/show``
(the app builds its counter from it) and counting every prompt with llama.cpp's own tokenizer over
the same GGUF (``count_fn``): on Markdown, Python, C, HTML and plain text, the chunks the card
shows are the map calls that run and the N of every "Chunk n of N"; no map request exceeds the
window by the true count; the chunks are filled by that count.  A model without tokenizer data
is planned by bytes per token as before.
"""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest

from app import chunking
from conftest import make_config
from scripted_ollama import ScriptedOllama
from test_analysis import map_or_reduce, session_text, wait_settled
from waiting import wait_for
from token_texts import JAPANESE, SCRIPTS, WORDS, _html_text, _markdown, _prose
from vocab import LlamaCpp, model_info, smollm_gguf

MODEL = "smol:135m"


@pytest.fixture(scope="module")
def smollm():
    path = smollm_gguf()
    return model_info(path), LlamaCpp(path)


def _grow(piece, count, target: int, joiner: str = "\n\n") -> str:
    """Pieces joined until the true count reaches ``target`` (deterministic: a seeded ``piece``)."""
    parts: list[str] = []
    step = 8
    while True:
        parts.extend(piece() for _ in range(step))
        if count(joiner.join(parts)) >= target:
            return joiner.join(parts) + "\n"


def _python(rng: random.Random) -> str:
    name = "_".join(rng.choice(WORDS).strip("'") for _ in range(2)).replace("'", "")
    body = "\n".join(f"    {w} = {rng.randint(0, 999)}  # {_prose(rng, 1)}" for w in
                     (rng.choice(["x", "y", "total", "count", "size"]) for _ in range(rng.randint(2, 9))))
    return f'def {name}_{rng.randint(0, 99)}(a, b=None):\n    """{_prose(rng, 2)}"""\n{body}\n    return a\n'


def _c(rng: random.Random) -> str:
    lines = "\n".join(f"\t{rng.choice(['n', 'i', 'len'])} += {rng.randint(1, 99)}; /* {_prose(rng, 1)} */"
                      for _ in range(rng.randint(2, 8)))
    return (f"/* {_prose(rng, 2)} */\nstatic int f{rng.randint(0, 10**6)}(const char *s, size_t n)\n{{\n"
            f"\tint i = 0;\n{lines}\n\treturn i;\n}}\n")


def _file(kind: str, count, target: int) -> tuple[str, str]:
    rng = random.Random(kind)
    if kind == "md":
        return "notes.md", _grow(lambda: _markdown(rng), count, target)
    if kind == "py":
        return "tool.py", _grow(lambda: _python(rng), count, target, "\n\n")
    if kind == "c":
        return "lib.c", "#include <stdio.h>\n\n" + _grow(lambda: _c(rng), count, target, "\n")
    if kind == "html":
        body = _grow(lambda: _html_text(rng), count, target, "\n")
        return "page.html", f"<html><head><title>Page</title></head><body>\n{body}</body></html>\n"
    # a letter with quotations in other scripts (denser in tokens than English: an estimate's trap)
    return "letter.txt", _grow(lambda: _prose(rng, rng.randint(2, 6)) + " " + " ".join(
        rng.sample(SCRIPTS, 2)) + " " + JAPANESE[:rng.randint(20, 90)], count, target)


def _chunk_text(rec, label) -> str:
    """A map request's chunk text: after its "Chunk n of N" line, before its closing line."""
    from app.analysis.mapreduce import without_closing

    return without_closing(rec.body["messages"][-1]["content"][label.end():])


def _prompt(rec) -> str:
    """A chat request's last message (a request without messages: "")."""
    return ((rec.body.get("messages") or [{}])[-1].get("content") or "")


def _card_chunks(page: str) -> tuple[int, int]:
    found = re.search(r"(\d+) chunks? of up to ([\d,]+) tokens", page)
    assert found, "the card shows its chunks"
    return int(found.group(1)), int(found.group(2).replace(",", ""))


def _run(tmp_path, make_live, server, kind: str, target: int):
    """Ask for a summary of a ``kind`` file of about ``target`` true tokens, start it from the card
    as it is, wait for the answer; the card's figures, the job and the map requests."""
    config = make_config(tmp_path, server.url, model=MODEL)
    workspace = Path(config.workspace)
    workspace.mkdir(parents=True)
    count = server.count_fn or (lambda text: math.ceil(len(text.encode()) / 4))
    name, text = _file(kind, count, target)
    (workspace / name).write_text(text, encoding="utf-8")
    live = make_live(config)
    live.services.models.counter(MODEL, wait=True)          # built (the first page may not wait for it)
    session = live.open_session()
    live.post(f"/s/{session}/messages", data={"message": f"Summarize {name}"})
    job = live.services.jobs.open_for(session)
    card = live.get(f"/s/{session}").text
    chunks, size = _card_chunks(card)
    live.post(f"/s/{session}/analysis/{job.id}/start", data={"instruction": "Summarize each part.", "scope": "all"})
    wait_settled(live, job, timeout=120)
    maps = [(rec, m) for rec in server.chats()
            if (m := re.search(r"\nChunk (\d+) of (\d+)(?: \([^\n]*\))?:\n", rec.body["messages"][-1]["content"]))]
    return live, session, job, chunks, size, maps, workspace / name


@pytest.mark.parametrize("kind", ["md", "py", "c", "html", "txt"])
def test_the_plan_on_the_card_is_what_runs(tmp_path, smollm, make_live, kind):
    info, reference = smollm
    with ScriptedOllama(models={MODEL: 8192}, script=map_or_reduce) as server:
        server.model_info[MODEL] = info
        server.count_fn = reference.count
        live, session, job, chunks, size, maps, path = _run(tmp_path, make_live, server, kind, 14000)
        assert job.state == "done" and job.counter and job.tokens_counted
        # the card's count is the run's: every map call, the N of every "Chunk n of N", the job, the record
        assert len(maps) == chunks
        assert sorted(int(m.group(1)) for _, m in maps) == list(range(1, chunks + 1))
        assert {int(m.group(2)) for _, m in maps} == {chunks}
        assert job.total == job.chunks == job.file_chunks == chunks and not job.replans
        assert job.done_count == chunks            # (the progress rows say "chunk n/{job.total}")
        assert re.search(rf"\b{chunks} chunks\b", session_text(live, session))
        # no map request exceeds the window by the true count (with its reply's cap)
        for rec, _ in maps:
            assert server.prompt_tokens(rec.body) + rec.body["options"]["num_predict"] <= rec.num_ctx
        # filled by the true count: each chunk's text is within the card's size, and the chunks
        # but the last hold most of it (issue 30: 90 % on average, none under 80 %)
        sizes = [reference.count(_chunk_text(rec, m)) for rec, m in sorted(maps, key=lambda p: int(p[1].group(1)))]
        assert max(sizes) <= size
        assert sum(sizes[:-1]) / (len(sizes) - 1) >= 0.9 * size and min(sizes[:-1]) >= 0.8 * size, (sizes, size)
        true = reference.count(chunking.read_document(path).text)
        assert chunks <= math.ceil(true / size) + 2, (chunks, true, size)


def test_a_model_without_tokenizer_data_is_planned_by_bytes_as_before(tmp_path, make_live):
    with ScriptedOllama(models={MODEL: 8192}, script=map_or_reduce) as server:
        live, session, job, chunks, size, maps, path = _run(tmp_path, make_live, server, "md", 14000)
        assert live.services.models.counter_state(MODEL)[0] == "estimated"
        assert job.state == "done" and not job.counter and not job.tokens_counted
        doc = chunking.read_document(path, chunking.ChunkSettings(size_tokens=job.size_tokens,
                                                                  bytes_per_token=job.bytes_per_token))
        assert chunks == chunking.plan_document(doc).chunks        # packed by bytes per token, as before
        assert {int(m.group(1)) for _, m in maps} == set(range(1, job.total + 1))


@pytest.mark.parametrize("fill", [0.85, 1.0])       # 1.0: the card under-counts its chunks, the run asks first
def test_a_file_too_large_to_count_in_a_request_is_counted_by_the_worker(tmp_path, smollm, make_live, monkeypatch,
                                                                         fill):
    """The card of a file too large to count while it is drawn says "about" (a counted sample); the
    worker counts it, packs it by the true count, and runs no more chunks than the card said
    without asking; what runs is never re-planned."""
    from app.analysis import plan

    monkeypatch.setattr(plan, "COUNT_IN_REQUEST_BYTES", 1000)
    monkeypatch.setattr(plan, "COUNTED_FILL", fill)
    with ScriptedOllama(models={MODEL: 8192}, script=map_or_reduce) as server:
        config, live, name, session, job = _asked_about_a_file(tmp_path, server, smollm, make_live)
        card = live.get(f"/s/{session}").text
        chunks, _ = _card_chunks(card)
        assert job.fingerprint == "" and not job.tokens_counted and re.search(r"about [\d,]+ tokens", card)
        live.post(f"/s/{session}/analysis/{job.id}/start", data={"instruction": "Summarize each part.",
                                                                  "scope": "all"})
        wait_for(lambda: job.state in ("done", "confirm"), 120, f"the run ends or asks (it is {job.state})")
        true = smollm[1].count(chunking.read_document(Path(config.workspace) / name).text)
        assert job.counter and job.tokens_counted and job.file_tokens == true and not job.replans
        maps = [int(m.group(1)) for rec in server.chats()
                if (m := re.search(r"\nChunk (\d+) of (\d+)", rec.body["messages"][-1]["content"]))]
        assert sorted(maps) == list(range(1, min(chunks, job.chunks) + 1))     # never past the card's count
        assert (job.state == "confirm") == (job.chunks > chunks) == (fill == 1.0)
        for rec in server.chats():
            assert server.prompt_tokens(rec.body) + rec.body["options"]["num_predict"] <= rec.num_ctx


def test_the_cards_one_button_says_what_it_runs(tmp_path, smollm, make_live):
    """More chunks than ``max_chunks``: the card's choice decides, and its button does not say
    "Read all N" beside a checked "Only the first M" (issue 30)."""
    import dataclasses

    info, reference = smollm
    with ScriptedOllama(models={MODEL: 8192}, script=map_or_reduce) as server:
        server.model_info[MODEL] = info
        server.count_fn = reference.count
        config = make_config(tmp_path, server.url, model=MODEL)
        config = dataclasses.replace(config, chunking=dataclasses.replace(config.chunking, max_chunks=3))
        workspace = Path(config.workspace)
        workspace.mkdir(parents=True)
        name, text = _file("md", reference.count, 14000)
        (workspace / name).write_text(text, encoding="utf-8")
        live = make_live(config)
        session = live.open_session()
        card = live.post(f"/s/{session}/messages", data={"message": f"Summarize {name}"}).text
        button = re.search(r'<button class="button primary read-all" type="submit"[^>]*>([^<]*)</button>', card).group(1)
        assert re.search(r'value="all" required checked', card)      # a summary is read whole by default (issue 42)
        assert "all" not in button.lower() and "chosen" in button


# -- the chunker by the count, without a server ------------------------------------------------

class _WordCounter:
    """A counter whose tokens are words (and the spaces before them), except that a text holding
    "HEAVY" counts double: where the count of a cut-out piece is not what its token starts said."""

    name = "words"

    def count(self, text: str) -> int:
        n = len(re.findall(r"\s*\S+", text))
        return 2 * n if "HEAVY" in text else n

    def starts(self, text: str):
        from array import array

        return array("i", (m.start() for m in re.finditer(r"\s*\S+", text)))


def _prose_doc(size: int = 200) -> chunking.Document:
    rng = random.Random(7)
    paragraphs = [_prose(rng, rng.randint(2, 6)) for _ in range(80)]
    paragraphs[40] = "HEAVY " + paragraphs[40]
    return chunking.make_document("\n\n".join(paragraphs) + "\n", "prose", chunking.ChunkSettings(size_tokens=size))


def test_counted_chunks_tile_the_text_and_each_fits_by_its_own_count():
    counter = _WordCounter()
    plain = _prose_doc()
    doc = chunking.with_counter(plain, counter)
    chunks = chunking.chunk_document(doc)
    assert len(chunks) > 5 and doc.tokens == len(doc.token_starts)
    assert all(c.tokens == counter.count(c.text) <= 200 for c in chunks)
    assert "".join(doc.text[c.body_start:c.end] for c in chunks).strip() == doc.text.strip()
    assert [c.tokens for c in chunks] == list(chunking.plan_document(doc).chunk_tokens)
    # the chunk that counts double was split until it fits; the others are filled by the count
    heavy = [c for c in chunks if "HEAVY" in c.text]
    assert heavy and all(c.tokens <= 200 for c in heavy)
    assert heavy[0].tokens // 2 < 0.6 * 200          # packed as ~190 words, it counted ~380: it was halved
    assert sum(c.tokens for c in chunks[:-1] if "HEAVY" not in c.text) / len(chunks[:-1]) >= 0.75 * 200


def test_the_sizing_is_in_the_fingerprint_and_bytes_stay_as_they_were():
    plain = _prose_doc()
    doc = chunking.with_counter(plain, _WordCounter())
    assert doc.settings.counter == "words" and doc.fingerprint != plain.fingerprint
    assert doc.settings.fingerprint != plain.settings.fingerprint
    assert chunking.ChunkSettings(size_tokens=200).fingerprint == plain.settings.fingerprint
    # without a counter nothing changes: the chunks of the byte-sized document are its own
    again = chunking.make_document(plain.text, "prose", chunking.ChunkSettings(size_tokens=200))
    assert chunking.chunk_document(again) == chunking.chunk_document(plain)


def test_a_counted_run_resumed_after_a_restart_keeps_the_cards_chunks(tmp_path, smollm, make_live):
    """The worker packs the file again after a restart (the job names its counter): the same chunks,
    no finished one redone, every "Chunk n of N" with the card's N."""
    from test_analysis import slow_maps, wait_state

    with ScriptedOllama(models={MODEL: 8192}, script=slow_maps(0.03)) as server:
        config, first, name, session, job = _asked_about_a_file(tmp_path, server, smollm, make_live)
        chunks, _ = _card_chunks(first.get(f"/s/{session}").text)
        first.post(f"/s/{session}/analysis/{job.id}/start", data={"instruction": "Summarize.", "scope": "all"})
        wait_for(lambda: job.done_count >= 3, 60, "three chunks")
        first.close()
        wait_state(first, job, ("interrupted",))
        finished = {i for i, r in job.results.items() if r.status == "ok"}
        second = make_live(config)
        resumed = second.services.jobs.get(job.id)
        assert resumed.state == "interrupted" and resumed.counter
        before = len(server.chats())
        second.post(f"/s/{session}/analysis/{job.id}/resume")
        wait_for(lambda: resumed.state == "done", 120, f"the resumed run ends (it is {resumed.state})")
        labels = [m for c in server.chats()
                  if (m := re.search(r"\nChunk (\d+) of (\d+)", _prompt(c)))]
        assert {int(m.group(2)) for m in labels} == {chunks} and resumed.chunks == chunks
        redone = [int(m.group(1)) - 1 for c in server.chats()[before:]
                  if (m := re.search(r"\nChunk (\d+) of \d+", _prompt(c)))]
        assert not set(redone) & finished and sorted(set(redone) | finished) == list(range(chunks))


def _asked_about_a_file(tmp_path, server, smollm, make_live, tokens: int = 14000):
    """The app (its counter built) over ``server`` serving SmolLM2's vocabulary, a Markdown file of
    about ``tokens`` true tokens in its workspace, and a session that asked to summarize it: the
    config, the app, the file's name, the session and the job its card waits with."""
    info, reference = smollm
    server.model_info[MODEL] = info
    server.count_fn = reference.count
    config = make_config(tmp_path, server.url, model=MODEL)
    workspace = Path(config.workspace)
    workspace.mkdir(parents=True)
    name, text = _file("md", reference.count, tokens)
    (workspace / name).write_text(text, encoding="utf-8")
    live = make_live(config)
    live.services.models.counter(MODEL, wait=True)
    session = live.open_session()
    live.post(f"/s/{session}/messages", data={"message": f"Summarize {name}"})
    return config, live, name, session, live.services.jobs.open_for(session)


def test_a_counted_job_whose_counter_is_away_is_interrupted_not_failed(tmp_path, smollm, make_live, monkeypatch):
    """The model's counter planned the job; when the run starts it cannot be had (its server loading,
    a restart before the vocabulary came back): the job is interrupted with Retry, never failed with
    "the file changed" (a failed job can only be discarded, and its answers with it); Retry, once the
    counter is back, runs the card's plan."""
    info, reference = smollm
    with ScriptedOllama(models={MODEL: 8192}, script=map_or_reduce) as server:
        server.model_info[MODEL] = info
        server.count_fn = reference.count
        config = make_config(tmp_path, server.url, model=MODEL)
        workspace = Path(config.workspace)
        workspace.mkdir(parents=True)
        name, text = _file("md", reference.count, 14000)
        (workspace / name).write_text(text, encoding="utf-8")
        live = make_live(config)
        models = live.services.models
        assert models.counter(MODEL, wait=True) is not None
        session = live.open_session()
        live.post(f"/s/{session}/messages", data={"message": f"Summarize {name}"})
        job = live.services.jobs.open_for(session)
        assert job.counter and job.tokens_counted
        counter = models.counter
        monkeypatch.setattr(models, "counter", lambda model, wait=False: None)     # away for the run
        live.post(f"/s/{session}/analysis/{job.id}/start", data={"instruction": "Summarize each part.", "scope": "all"})
        wait_for(lambda: job.state in ("interrupted", "failed", "done"), 60, "the run to stop")
        assert job.state == "interrupted", job.message
        assert "not available yet" in job.message and "Retry" in job.message
        wait_for(lambda: not live.services.activities.busy(session), what="the session given back")
        monkeypatch.setattr(models, "counter", counter)
        live.post(f"/s/{session}/analysis/{job.id}/resume")
        wait_settled(live, job, timeout=120)
        assert job.state == "done" and job.done_count == job.chunks
