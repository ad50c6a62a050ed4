"""The counter of an OpenAI-compatible server (issue 30): its own ``/tokenize``, asked over HTTP.

The reference is llama.cpp's server itself (xllamacpp over SmolLM2-135M's GGUF): the app's
``OpenAIServer`` talking to it must count every text of ``token_texts.texts()`` as its
``/tokenize`` does, a long text in bounded pieces that add up to the whole. A scripted vLLM
``/tokenize`` is the other dialect; a server without one (404) keeps the estimate, asked once.
"""

from __future__ import annotations

import html

import pytest

from app.modelserver import remote_counter
from app.modelserver.openai import OpenAIServer
from app.modelserver.remote_counter import RemoteCounter
from app.modelserver.tokens import counter_from_info
from scripted_openai import ScriptedOpenAI
from token_texts import texts
from vocab import LlamaCpp, model_info, smollm_gguf


@pytest.fixture(scope="module")
def smollm_server():
    path = smollm_gguf()
    reference = LlamaCpp(path)
    server = OpenAIServer(f"http://{reference._host}:{reference._port}", connect_timeout=2.0, read_timeout=120.0)
    yield server, reference, path
    server.close()


def _tokenize_bodies(server: ScriptedOpenAI) -> list[dict]:
    return [r.body for r in server.requests if r.path == "/tokenize"]


def test_llama_servers_counter_counts_as_its_tokenize(smollm_server):
    """Every kind of text, counted by the app through the server, is the server's own count."""
    server, reference, _ = smollm_server
    counter = server.counter("smollm", wait=True)
    assert isinstance(counter, RemoteCounter) and counter.dialect == "llama" and counter.segmentable
    assert server.counter_state("smollm") == ("exact", counter.name) and "/tokenize" in counter.name
    wrong = [kind for kind, text in texts()[::2] if counter.ids(text) != reference.tokenize(text)]
    assert wrong == []
    for _, text in texts()[::7]:
        assert counter.count(text) == len(reference.tokenize(text))
    assert counter.count("<|im_start|>user\nhi<|im_end|>") == 5        # specials parsed, as in a prompt


def test_a_long_text_goes_in_bounded_pieces_that_add_up(smollm_server, monkeypatch):
    """A text longer than a request may carry is sent in pieces cut where no token spans, and their
    sum is the server's count of the whole (asked whole here, once, as the reference)."""
    server, reference, _ = smollm_server
    counter = server.counter("smollm", wait=True)
    text = "\n".join(t for _, t in texts()) * 3
    assert len(text) > 2 * remote_counter.PIECE_CHARS
    sent = []
    post = counter._post
    monkeypatch.setattr(counter, "_post", lambda path, body: sent.append(len(body["content"])) or post(path, body))
    assert counter.count(text) == len(reference.tokenize(text))
    assert len(sent) >= 3 and max(sent) <= remote_counter.PIECE_CHARS
    sent.clear()
    assert counter.count(text) == len(reference.tokenize(text)) and sent == []      # kept: not asked again


def test_starts_are_the_tokens_starts(smollm_server):
    """Where each token starts, from the server's pieces: the same places the app's own tokenizer
    (built from the same GGUF) gives, so the chunker packs the same chunks either way."""
    server, _, path = smollm_server
    counter = server.counter("smollm", wait=True)
    local = counter_from_info(model_info(path))
    text = "\n\n".join(t for _, t in texts()[::3])
    starts = counter.starts(text)
    assert len(starts) == local.count(text)
    assert list(starts) == list(local.starts(text))


def test_vllms_tokenize_is_the_other_dialect():
    with ScriptedOpenAI(kind="vllm", models={"org/tiny": 2048}) as vllm:
        vllm.vllm_tokenize = True
        models = OpenAIServer(vllm.url, connect_timeout=1.0, read_timeout=5.0)
        counter = models.counter("org/tiny", wait=True)
        assert counter is not None and counter.dialect == "vllm"
        assert counter.count("x" * 400) == 100
        assert _tokenize_bodies(vllm)[-1] == {"model": "org/tiny", "prompt": "x" * 400, "add_special_tokens": False}
        starts = counter.starts("y" * 80)
        assert len(starts) == 20 and list(starts) == sorted(starts) and starts[-1] < 80


def test_a_server_without_tokenize_keeps_the_estimate_and_is_asked_once():
    with ScriptedOpenAI(kind="vllm", models={"org/tiny": 2048}) as vllm:
        models = OpenAIServer(vllm.url, connect_timeout=1.0, read_timeout=5.0)
        assert models.counter("org/tiny", wait=True) is None
        state, why = models.counter_state("org/tiny")
        assert state == "estimated" and "no /tokenize" in why
        assert models.counter("org/tiny") is None and models.counter("org/tiny", wait=True) is None
        assert vllm.paths().count("/tokenize") == 1


def test_the_card_says_the_servers_count(tmp_path, make_live):
    """Through waitress with llama-server's dialect: the card's size is the server's count of the
    file (no "about"), and the job names what counted."""
    from pathlib import Path

    from test_analysis import big_markdown
    from test_openai_server import openai_config

    with ScriptedOpenAI(kind="llama") as llama:
        config = openai_config(tmp_path, llama.url)
        Path(config.workspace).mkdir(parents=True)
        text = big_markdown()
        (Path(config.workspace) / "big.md").write_text(text)
        live = make_live(config)
        assert live.services.models.counter("tiny:1b", wait=True) is not None
        name = live.open_session()
        page = live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"}).text
        job = live.services.jobs.open_for(name)
        assert job.tokens_counted and job.file_tokens == llama.tokens(text)
        assert "/tokenize" in job.counter and f"counted with {job.counter}" in html.unescape(page)
        assert f"{job.file_tokens:,} tokens" in page and f"about {job.file_tokens:,}" not in page


@pytest.mark.slow
def test_a_sentencepiece_servers_counter_counts_as_its_tokenize():
    """Gemma 3's SentencePiece (262k tokens) through llama.cpp's server: the same ids, and whether a
    long text may be counted in pieces is what the vocabulary's own split says (``tokens._segmentable``)."""
    from app.modelserver.tokens import _segmentable
    from vocab import gemma_gguf

    path = gemma_gguf()
    reference = LlamaCpp(path)
    server = OpenAIServer(f"http://{reference._host}:{reference._port}", connect_timeout=2.0, read_timeout=120.0)
    try:
        counter = server.counter("gemma", wait=True)
        assert counter is not None and counter.segmentable == _segmentable(model_info(path))
        wrong = [kind for kind, text in texts()[::3] if counter.ids(text) != reference.tokenize(text)]
        assert wrong == []
        text = "\n".join(t for _, t in texts()) * 2
        assert counter.count(text) == len(reference.tokenize(text))
    finally:
        server.close()


def test_harvey_check_says_the_server_counts_or_why_not():
    from app.cli import _token_counts

    with ScriptedOpenAI(kind="llama") as llama, ScriptedOpenAI(kind="vllm", models={"org/tiny": 2048}) as vllm:
        said = _token_counts(OpenAIServer(llama.url, connect_timeout=1.0, read_timeout=5.0), "tiny:1b")
        assert said == "token counts exact (the server's own tokenizer (llama.cpp /tokenize, tiny:1b))"
        said = _token_counts(OpenAIServer(vllm.url, connect_timeout=1.0, read_timeout=5.0), "org/tiny")
        assert said.startswith("token counts estimated from bytes per token: ") and "has no /tokenize (HTTP 404)" in said


def test_a_count_the_server_fails_leaves_the_page_with_the_estimate(tmp_path, make_live):
    """llama-server answering /tokenize with a 500 after its counter was built: the chat page still
    draws (it was a 502), its status line on the estimate; a message sent meanwhile is kept with a
    card that says the count failed; once the server counts again so does the page."""
    from test_openai_server import openai_config
    from waiting import wait_until

    with ScriptedOpenAI(kind="llama") as llama:
        live = make_live(openai_config(tmp_path, llama.url))
        assert live.services.models.counter("tiny:1b", wait=True) is not None
        name = live.open_session()
        live.post(f"/s/{name}/messages", data={"message": "hello " * 50})
        wait_until(lambda: not live.services.activities.busy(name), 20, "the reply to be recorded")
        llama.tokenize_fails = 100           # the reply's text is new: the status line must count it
        page = live.get(f"/s/{name}")
        assert llama.tokenize_fails < 100, "the page asked the server for no count"
        assert page.status_code == 200 and "tokens free" in page.text
        sent = live.post(f"/s/{name}/messages", data={"message": "a new question to count"})
        assert sent.status_code == 200, sent.text[-500:]
        turns = live.services.store.load(name).turns
        assert turns[-1].user_text == "a new question to count"          # the message is kept
        assert "/tokenize answered HTTP 500" in html.unescape(sent.text)       # and the card says why
        llama.tokenize_fails = 0
        again = live.get(f"/s/{name}")
        assert again.status_code == 200 and "tokens free" in again.text


def test_a_server_loading_its_model_is_asked_again_for_its_counter():
    """llama-server answers /tokenize with an error while its model loads: that is not "no counter"
    for the life of the process (it was), the counter is built when asked again."""
    with ScriptedOpenAI(kind="llama") as llama:
        llama.tokenize_fails = 1
        models = OpenAIServer(llama.url, connect_timeout=1.0, read_timeout=5.0)
        assert models.counter("tiny:1b", wait=True) is None
        assert models.counter_state("tiny:1b")[0] != "estimated"
        assert models.counter("tiny:1b", wait=True) is not None
