"""Seed 004's opt-in LLM chunk help (app/chunking/llmhelp.py): off by default at every level,
every malformed reply the review lists falls back to the default chunker with a log line naming
why, context blocks are capped and counted, oversized groups are re-packed at paragraphs and
never cut mid-word; the call goes through ModelCalls to a real (scripted) Ollama-API server."""

import json
import logging
import math

import pytest

from app import chunking
from app.chunking import llmhelp
from app.chunking.llmhelp import Help, helped_chunks
from app.config import ChunkingConfig, load_config
from app.modelserver import Cancelled, Unreachable
from app.services import Services
from conftest import make_config
from scripted_ollama import Reply

SETTINGS = chunking.ChunkSettings(size_tokens=120, overlap="paragraph")

PARAS = [
    "# Harvest report",
    "The orchard on the north slope gave 4,200 kg of apples this year, a third more than last year.",
    "It was planted in 2011 and is watered from the spring above the barn.",
    "## Costs",
    "Picking took 31 days with six people; the wages came to 9,300 euros.",
    "The new ladders cost 640 euros and replaced the ones that broke in May.",
    "## Plans",
    "Next year the south slope gets twenty more trees of the same variety.",
    "Those need a fence against the deer, which ate half the young trees in 2019.",
    "The fence is the largest single cost in the plan and is paid from the reserve.",
]
TEXT = "\n\n".join(PARAS) + "\n"


def doc(text=TEXT, settings=SETTINGS, kind="markdown"):
    return chunking.make_document(text, kind, settings)


def pieces(d):
    return [(u[0], u[1]) for u in chunking._units(d.text, d.kind)]


def never(*args):
    raise AssertionError("the model was asked")


def answer(obj):
    """An ask that replies ``obj`` (JSON-encoded unless a str) and records each request."""
    asked = []

    def ask(messages, schema, num_predict):
        asked.append((messages, schema, num_predict))
        return obj if isinstance(obj, str) else json.dumps(obj)

    ask.asked = asked
    return ask


def assert_tiles(d, chunks):
    """[body_start, end) of consecutive chunks tile the text; each text is prefix + slice; sizes fit."""
    assert chunks[0].body_start == 0 and chunks[-1].end == len(d.text)
    for a, b in zip(chunks, chunks[1:]):
        assert a.end == b.body_start
    for c in chunks:
        assert c.text.endswith(d.text[c.start:c.end])
        assert c.tokens == math.ceil(len(c.text.encode()) / d.settings.bytes_per_token)
        assert c.tokens <= d.settings.size_tokens, (c.index, c.tokens)


def not_mid_word(d, chunks):
    t = d.text
    for c in chunks[:-1]:
        assert t[c.end - 1].isspace() or t[c.end].isspace(), repr(t[c.end - 5:c.end + 5])


# -- off by default at every level -------------------------------------------------------------

def test_every_level_is_off_by_default(tmp_path):
    assert ChunkingConfig().llm_boundaries is False and ChunkingConfig().llm_context is False
    assert not Help().on
    assert not Help.from_config(load_config(None, env={}).chunking).on
    d = doc()
    assert helped_chunks(d, Help(), never) == chunking.chunk_document(d)       # help off: never asked
    assert helped_chunks(d, Help(boundaries=True)) == chunking.chunk_document(d)   # no model: default


def test_the_config_keys_turn_it_on(tmp_path):
    path = tmp_path / "harvey.yaml"
    path.write_text("chunking:\n  llm_boundaries: true\n  llm_context: false\n")
    assert Help.from_config(load_config(path, env={}).chunking) == Help(boundaries=True, context=False)
    path.write_text("chunking:\n  llm_context: maybe\n")
    with pytest.raises(Exception, match="chunking.llm_context"):
        load_config(path, env={})


# -- a valid reply -------------------------------------------------------------------------------

def test_valid_boundaries_make_the_chunks_the_model_chose():
    d = doc(settings=chunking.ChunkSettings(size_tokens=400))
    p = pieces(d)
    assert len(p) == len(PARAS)
    ask = answer({"boundaries": [0, 3, 6]})
    chunks = helped_chunks(d, Help(boundaries=True), ask, model="big:70b")
    assert [c.body_start for c in chunks] == [p[0][0], p[3][0], p[6][0]]
    assert [c.heading_path for c in chunks] == [("Harvest report",), ("Harvest report", "Costs"),
                                                ("Harvest report", "Plans")]
    assert_tiles(d, chunks)
    assert len({c.id for c in chunks}) == 3
    assert chunks[0].fingerprint == llmhelp.help_fingerprint(d, Help(boundaries=True), "big:70b")
    assert chunks[0].fingerprint != d.settings.fingerprint
    (messages, schema, num_predict), = ask.asked
    assert schema == llmhelp.SCHEMA and num_predict >= llmhelp.MIN_REPLY_TOKENS
    assert "[9] The fence is the largest" in messages[-1]["content"]


# -- every malformed reply the review lists falls back, logged --------------------------------------

MALFORMED = [
    ("not JSON", "boundaries: 0, 3, 6", "not one JSON object"),
    ("extra prose", 'Here are the boundaries: {"boundaries": [0, 3]}', "not one JSON object"),
    ("prose after", '{"boundaries": [0, 3]} I hope this helps!', "not one JSON object"),
    ("a code fence", '```json\n{"boundaries": [0, 3]}\n```', "not one JSON object"),
    ("truncated JSON", '{"boundaries": [0, 3, 6', "not one JSON object"),
    ("an array, not an object", "[0, 3, 6]", "not an object"),
    ("no boundaries", {"chunks": [0, 3]}, 'no "boundaries"'),
    ("boundaries not a list", {"boundaries": "0, 3, 6"}, "not a list"),
    ("empty boundaries", {"boundaries": []}, "is empty"),
    ("floats", {"boundaries": [0, 3.0, 6]}, "3.0 is not a whole number"),
    ("strings", {"boundaries": [0, "3", 6]}, "'3' is not a whole number"),
    ("booleans", {"boundaries": [0, True]}, "True is not a whole number"),
    ("nulls", {"boundaries": [0, None]}, "None is not a whole number"),
    ("negative", {"boundaries": [0, -2, 6]}, "-2 is negative"),
    ("duplicates", {"boundaries": [0, 3, 3, 6]}, "3 is repeated"),
    ("unsorted", {"boundaries": [0, 6, 3]}, "not sorted (3 after 6)"),
    ("out of range", {"boundaries": [0, 3, 10]}, "10 is out of range"),
    ("not starting at 0", {"boundaries": [1, 3, 6]}, "start at 1, not 0"),
]


@pytest.mark.parametrize("reply, why", [(r, w) for _, r, w in MALFORMED], ids=[n for n, _, _ in MALFORMED])
def test_a_malformed_boundary_reply_falls_back_to_the_default_chunker_with_a_log_line(reply, why, caplog):
    d = doc()
    with caplog.at_level(logging.WARNING, logger="app.chunking.llmhelp"):
        chunks = helped_chunks(d, Help(boundaries=True), answer(reply))
    assert chunks == chunking.chunk_document(d)
    (record,) = [r for r in caplog.records if r.name == "app.chunking.llmhelp"]
    assert "fell back to the default chunker" in record.getMessage() and why in record.getMessage()


MALFORMED_CONTEXTS = [
    ("contexts not a list", {"contexts": {"1": "x"}}, '"contexts" is not a list'),
    ("context chunk a string", {"contexts": [{"chunk": "1", "context": "x"}]}, "'1' is not a whole number"),
    ("context chunk a float", {"contexts": [{"chunk": 1.0, "context": "x"}]}, "1.0 is not a whole number"),
    ("context chunk out of range", {"contexts": [{"chunk": 99, "context": "x"}]}, "99 is out of range"),
    ("context chunk negative", {"contexts": [{"chunk": -1, "context": "x"}]}, "-1 is out of range"),
    ("two contexts for a chunk", {"contexts": [{"chunk": 1, "context": "a"}, {"chunk": 1, "context": "b"}]},
     "two contexts"),
    ("context not text", {"contexts": [{"chunk": 1, "context": ["a"]}]}, "is not text"),
    ("context without a chunk", {"contexts": [{"context": "a"}]}, "is not"),
    ("unknown field", {"contexts": [{"chunk": 1, "context": "a", "why": "b"}]}, "is not"),
]


@pytest.mark.parametrize("reply, why", [(r, w) for _, r, w in MALFORMED_CONTEXTS],
                         ids=[n for n, _, _ in MALFORMED_CONTEXTS])
def test_a_malformed_context_reply_falls_back_too(reply, why, caplog):
    d = doc()
    with caplog.at_level(logging.WARNING, logger="app.chunking.llmhelp"):
        chunks = helped_chunks(d, Help(context=True), answer(reply))
    assert chunks == chunking.chunk_document(d)
    assert any(why in r.getMessage() for r in caplog.records if r.name == "app.chunking.llmhelp")


def test_a_chunk_with_no_text_is_refused():
    groups = lambda b: [(0, 5, "Hello"), (5, 9, " \n\n ")]      # noqa: E731
    with pytest.raises(llmhelp.HelpRejected, match="chunk 1 .* would hold no text"):
        llmhelp.validate('{"boundaries": [0, 1]}', 2, Help(boundaries=True), groups_of=groups)


def test_a_model_that_is_away_falls_back_and_a_stop_is_not_a_fallback(caplog):
    d = doc()

    def away(*args):
        raise Unreachable("Ollama is not answering at http://127.0.0.1:1")

    with caplog.at_level(logging.WARNING, logger="app.chunking.llmhelp"):
        assert helped_chunks(d, Help(boundaries=True), away) == chunking.chunk_document(d)
    assert "not answering" in caplog.text

    def stopped(*args):
        raise Cancelled("The call was stopped.")

    with pytest.raises(Cancelled):
        helped_chunks(d, Help(boundaries=True), stopped)


# -- context blocks: capped, counted, never cut mid-word ---------------------------------------------

def test_a_context_block_is_capped_at_a_quarter_of_the_chunk_and_counted_in_its_size():
    d = doc(settings=chunking.ChunkSettings(size_tokens=400))
    long = " ".join(f"word{i}" for i in range(400))                     # far over the cap
    chunks = helped_chunks(d, Help(boundaries=True, context=True),
                           answer({"boundaries": [0, 3, 6], "contexts": [{"chunk": 1, "context": long}]}))
    assert_tiles(d, chunks)
    costs = chunks[1]
    prefix = costs.text[:len(costs.text) - (costs.end - costs.start)]
    assert prefix.endswith(llmhelp.SEPARATOR)
    context = prefix[:-len(llmhelp.SEPARATOR)]
    assert len(prefix.encode()) <= d.settings.max_bytes // 4
    assert long.startswith(context) and long[len(context)] == " "        # cut between words
    assert costs.tokens == math.ceil(len(costs.text.encode()) / d.settings.bytes_per_token)
    assert chunks[0].text == d.text[chunks[0].start:chunks[0].end]      # no context: untouched


def test_capped_never_cuts_inside_a_word():
    assert llmhelp.capped("alpha beta gamma", 100) == "alpha beta gamma"
    assert llmhelp.capped("alpha beta gamma", 12) == "alpha beta"
    assert llmhelp.capped("alpha beta gamma", 10) == "alpha beta"
    assert llmhelp.capped("supercalifragilistic", 8) == ""
    assert llmhelp.capped("café crème brûlée", 12) == "café crème"


def test_context_only_keeps_the_default_chunks_and_prefixes_the_ones_named():
    d = doc(settings=chunking.ChunkSettings(size_tokens=60))
    default = chunking.chunk_document(d)
    assert len(default) >= 3
    chunks = helped_chunks(d, Help(context=True),
                           answer({"contexts": [{"chunk": 1, "context": "The orchard's harvest report."}]}))
    assert chunks[0].text == default[0].text                       # no context: as the default made it
    assert [c.text for c in chunks[-(len(default) - 2):]] == [c.text for c in default[2:]]
    helped = chunks[1:len(chunks) - (len(default) - 2)]              # chunk 1, re-packed if it no longer fits
    assert helped and all(c.text.startswith("The orchard's harvest report.\n\n") for c in helped)
    assert helped[0].body_start == default[1].body_start and helped[-1].end == default[1].end
    assert_tiles(d, chunks)


# -- oversized groups are re-packed at paragraphs ----------------------------------------------------

def test_an_oversized_group_is_repacked_at_paragraphs_never_mid_word():
    d = doc(settings=chunking.ChunkSettings(size_tokens=64))
    assert d.tokens > 64
    chunks = helped_chunks(d, Help(boundaries=True), answer({"boundaries": [0]}))
    assert len(chunks) > 1
    assert_tiles(d, chunks)
    not_mid_word(d, chunks)
    at_paragraph = sum(d.text[c.end - 2:c.end] == "\n\n" for c in chunks[:-1])
    assert at_paragraph >= len(chunks) // 2, [d.text[c.end - 10:c.end] for c in chunks]


def test_a_repacked_group_keeps_its_context_on_every_part_and_still_fits():
    d = doc(settings=chunking.ChunkSettings(size_tokens=64))
    chunks = helped_chunks(d, Help(boundaries=True, context=True),
                           answer({"boundaries": [0], "contexts": [{"chunk": 0, "context": "Farm report, 2024."}]}))
    assert len(chunks) > 1
    assert all(c.text.startswith("Farm report, 2024.\n\n") for c in chunks)
    assert_tiles(d, chunks)
    not_mid_word(d, chunks)


# -- through the scripted Ollama-API server, with ModelCalls ----------------------------------------

def run_help(tmp_path, scripted, help):
    svc = Services.from_config(make_config(tmp_path, scripted.url))
    activity = svc.activities.begin("llmhelp", "analysis", 0)
    try:
        window = svc.models.window("tiny:1b")
        ask = llmhelp.model_ask(svc.calls, activity, "tiny:1b", window, 4.0)
        return helped_chunks(doc(settings=chunking.ChunkSettings(size_tokens=400)), help, ask, model="tiny:1b")
    finally:
        svc.activities.end(activity)


def test_the_on_path_asks_once_through_model_calls_with_a_json_schema(tmp_path, scripted):
    scripted.script = Reply(text=json.dumps({"boundaries": [0, 6],
                                             "contexts": [{"chunk": 1, "context": "The orchard's plans."}]}))
    chunks = run_help(tmp_path, scripted, Help(boundaries=True, context=True))
    (chat,) = scripted.chats()
    assert chat.format == llmhelp.SCHEMA
    assert chat.num_ctx == 8192 and chat.body["options"]["num_predict"] >= llmhelp.MIN_REPLY_TOKENS
    assert "[9] The fence is the largest" in chat.body["messages"][-1]["content"]
    assert [c.heading_path for c in chunks] == [("Harvest report",), ("Harvest report", "Plans")]
    assert chunks[1].text.startswith("The orchard's plans.\n\n## Plans")


def test_the_default_path_makes_no_model_call(tmp_path, scripted):
    chunks = run_help(tmp_path, scripted, Help())
    assert scripted.chats() == []
    assert chunks == chunking.chunk_document(doc(settings=chunking.ChunkSettings(size_tokens=400)))


def test_a_server_reply_that_is_not_valid_falls_back_through_the_real_path(tmp_path, scripted, caplog):
    scripted.script = Reply(text='Sure! {"boundaries": [0, 6]}')
    with caplog.at_level(logging.WARNING, logger="app.chunking.llmhelp"):
        chunks = run_help(tmp_path, scripted, Help(boundaries=True))
    assert len(scripted.chats()) == 1
    assert chunks == chunking.chunk_document(doc(settings=chunking.ChunkSettings(size_tokens=400)))
    assert "not one JSON object" in caplog.text


def test_a_document_too_large_for_one_request_falls_back_without_sending_anything(tmp_path, scripted, caplog):
    svc = Services.from_config(make_config(tmp_path, scripted.url))
    activity = svc.activities.begin("llmhelp", "analysis", 0)
    big = doc("\n\n".join(f"Paragraph {i}: " + "the orchard and its trees " * 20 for i in range(400)))
    try:
        ask = llmhelp.model_ask(svc.calls, activity, "tiny:1b", svc.models.window("tiny:1b"), 4.0)
        with caplog.at_level(logging.WARNING, logger="app.chunking.llmhelp"):
            chunks = helped_chunks(big, Help(boundaries=True), ask, model="tiny:1b")
    finally:
        svc.activities.end(activity)
    assert chunks == chunking.chunk_document(big)
    assert scripted.chats() == []                                   # refused before anything was sent
    assert "would exceed the window" in caplog.text
