"""The Ollama client against the scripted server: real HTTP on loopback."""

import threading
import time

import pytest

from app import ollama
from scripted_ollama import Reply, ScriptedOllama


@pytest.fixture
def server():
    with ScriptedOllama() as s:
        yield s


def client_for(server, read_timeout=5.0):
    return ollama.OllamaClient(server.url, connect_timeout=1.0, read_timeout=read_timeout)


def test_streams_pieces_then_final_counts(server):
    server.script = Reply(text="abcdefghij", piece_size=3)
    stream = client_for(server).chat("tiny:1b", [{"role": "user", "content": "x" * 400}], num_ctx=2048)
    pieces = list(stream)
    assert pieces == ["abc", "def", "ghi", "j"]
    assert stream.final.prompt_eval_count == 100
    assert stream.final.eval_count == 4
    assert stream.final.done_reason == "stop"


def test_every_chat_request_carries_num_ctx_and_truncate_false(server):
    client = client_for(server)
    for ctx in (2048, 4096):
        client.chat_text("tiny:1b", [{"role": "user", "content": "hi"}], num_ctx=ctx)
    chats = server.chats()
    assert [c.num_ctx for c in chats] == [2048, 4096]
    assert all(c.body["truncate"] is False for c in chats)


def test_show_reads_trained_context_length_and_caches(server):
    client = client_for(server)
    facts = client.show("other:7b")
    assert facts.context_length == 32768 and facts.architecture == "llama"
    client.show("other:7b")
    assert len([r for r in server.requests if r.path == "/api/show"]) == 1


def test_list_models_and_embed(server):
    client = client_for(server)
    assert client.list_models() == ["tiny:1b", "other:7b"]
    vectors = client.embed("tiny:1b", ["a", "bb"])
    assert len(vectors) == 2 and len(vectors[0]) == server.embed_size


def test_unreachable_is_named_and_says_the_url():
    client = ollama.OllamaClient("http://127.0.0.1:9", connect_timeout=0.5)
    assert client.is_up() is False
    with pytest.raises(ollama.OllamaUnreachable, match="127.0.0.1:9"):
        client.chat("m", [], num_ctx=512)
    with pytest.raises(ollama.OllamaUnreachable):
        client.list_models()


@pytest.mark.parametrize("fault, error", [
    ("model_404", ollama.ModelNotFound),
    ("http_500", ollama.OllamaHTTPError),
    ("midstream_error", ollama.StreamError),
    ("drop", ollama.StreamError),
    ("hang", ollama.OllamaTimeout),
])
def test_each_fault_becomes_its_named_error(server, fault, error):
    server.script = Reply(text="0123456789" * 3, fault=fault)
    client = client_for(server, read_timeout=0.5)
    got = []
    with pytest.raises(error) as info:
        for piece in client.chat("tiny:1b", [{"role": "user", "content": "hi"}], num_ctx=512):
            got.append(piece)
    assert str(info.value)  # a message a person can read
    if fault in ("midstream_error", "drop"):
        assert got == ["0123", "4567"]  # what arrived before the fault


def test_unknown_model_says_how_to_install(server):
    with pytest.raises(ollama.ModelNotFound, match="ollama pull nope:1b"):
        client_for(server).chat("nope:1b", [], num_ctx=512)


def test_context_exceeded_is_named(server):
    with pytest.raises(ollama.ContextExceeded):
        client_for(server).chat("tiny:1b", [{"role": "user", "content": "x" * 5000}], num_ctx=512)


def test_cancel_from_another_thread_stops_within_a_second(server):
    server.script = Reply(text="y" * 4000, token_delay=0.05)
    stream = client_for(server).chat("tiny:1b", [{"role": "user", "content": "go"}], num_ctx=512)
    first = threading.Event()
    done = threading.Event()
    received = []

    def read():
        for piece in stream:
            received.append(piece)
            first.set()
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert first.wait(2)
    cancelled_at = time.monotonic()
    stream.cancel()
    assert done.wait(1.0), "reader did not stop within 1 s of cancel"
    assert time.monotonic() - cancelled_at < 1.0
    assert stream.cancelled and stream.final is None
    assert 0 < len(received) < 1000
    rec = server.chats()[-1]
    assert rec.finished.wait(2) and rec.disconnected, "server did not see the connection close"
