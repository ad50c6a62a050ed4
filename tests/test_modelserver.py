"""The model-server interface against the scripted Ollama-API server: real HTTP on loopback.

Covers the stream (pieces, usage), each typed error, and the cancel contract of
``app.modelserver.base``: from another thread, before iteration, while connecting, while
waiting for the first byte, mid-reply, twice, and after the end.
"""

import socket
import threading
import time

import pytest

from app import modelserver
from app.config import Config, ModelServerConfig
from app.modelserver import errors
from app.modelserver.ollama import OllamaServer
from scripted_ollama import Reply, ScriptedOllama
from waiting import StreamReader
from waiting import wait_until

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server():
    with ScriptedOllama() as s:
        yield s


def server_for(scripted, read_timeout=5.0):
    return OllamaServer(scripted.url, connect_timeout=1.0, read_timeout=read_timeout)


# -- the stream --------------------------------------------------------------------------

def test_streams_pieces_then_usage(server):
    server.script = Reply(text="abcdefghij", piece_size=3)
    stream = server_for(server).chat("tiny:1b", [{"role": "user", "content": "x" * 400}], num_ctx=2048)
    assert list(stream) == ["abc", "def", "ghi", "j"]
    assert stream.text == "abcdefghij"
    usage = stream.usage
    assert usage.prompt_tokens == 100 and usage.generated_tokens == 4
    assert usage.stopped_by == "stop" and not usage.cut_off
    assert usage.seconds > 0 and usage.generate_seconds > 0 and usage.tokens_per_second > 0


def test_a_reply_cut_by_the_budget_says_so(server):
    server.script = Reply(text="z" * 40, done_reason="length")
    text, usage = server_for(server).chat_text("tiny:1b", HI, num_ctx=512, num_predict=10)
    assert text == "z" * 40 and usage.cut_off and usage.stopped_by == "length"


def test_chat_sends_nothing_until_iterated(server):
    stream = server_for(server).chat("tiny:1b", HI, num_ctx=512)
    assert server.chats() == []          # chat() returned without any network call
    assert list(stream) and len(server.chats()) == 1


def test_every_chat_request_carries_the_window_the_budget_and_truncate_false(server):
    models = server_for(server)
    for ctx in (2048, 4096):
        models.chat_text("tiny:1b", HI, num_ctx=ctx, num_predict=77, temperature=0)
    chats = server.chats()
    assert [c.num_ctx for c in chats] == [2048, 4096]
    assert all(c.body["truncate"] is False and c.body["options"]["num_predict"] == 77 for c in chats)
    assert all(c.body["options"]["temperature"] == 0 and c.body["keep_alive"] == "30m" for c in chats)


def test_facts_window_and_models_are_cached(server):
    models = server_for(server)
    facts = models.facts("other:7b")
    assert facts.context_length == 32768 and facts.architecture == "llama"
    assert models.window("other:7b") == 32768
    assert len([r for r in server.requests if r.path == "/api/show"]) == 1
    assert models.models() == ["tiny:1b", "other:7b"]
    assert models.models() == ["tiny:1b", "other:7b"]
    assert len([r for r in server.requests if r.path == "/api/tags"]) == 1
    models.forget_models()
    models.models()
    assert len([r for r in server.requests if r.path == "/api/tags"]) == 2


def test_a_failed_model_list_is_never_cached(server):
    models = server_for(server)
    server.down = True
    with pytest.raises(errors.ServerError):
        models.models()
    server.down = False
    assert models.models() == ["tiny:1b", "other:7b"]


def test_embed_version_is_up_and_count_tokens(server):
    models = server_for(server)
    vectors = models.embed("tiny:1b", ["a", "bb"])
    assert len(vectors) == 2 and len(vectors[0]) == server.embed_size
    assert models.version() == "0.33.0-scripted" and models.is_up()
    assert models.count_tokens("tiny:1b", "hello") is None        # Ollama has no tokenizer endpoint
    assert str(models) == f"Ollama at {server.url}"


def test_connect_chooses_the_server_from_the_config(server):
    models = modelserver.connect(Config(model_server=ModelServerConfig(url=server.url + "/", keep_alive="")))
    assert isinstance(models, modelserver.ModelServer) and models.url == server.url
    models.chat_text("tiny:1b", HI, num_ctx=512)
    assert "keep_alive" not in server.chats()[-1].body


# -- typed errors --------------------------------------------------------------------------

def test_unreachable_is_named_and_says_the_url():
    models = OllamaServer("http://127.0.0.1:9", connect_timeout=0.5)
    assert models.is_up() is False
    with pytest.raises(errors.Unreachable, match="127.0.0.1:9") as info:
        list(models.chat("m", [], num_ctx=512))
    assert info.value.transient and info.value.kind == "unreachable"
    with pytest.raises(errors.Unreachable):
        models.models()


@pytest.mark.parametrize("fault, error, kind, transient", [
    ("model_404", errors.ModelNotFound, "model_not_found", False),
    ("http_500", errors.ServerError, "http_error", False),     # a runner crash: the same request repeats it
    ("midstream_error", errors.ModelFailed, "model_failed", False),   # the server's own answer, not a lost line
    ("drop", errors.StreamBroken, "stream_error", True),
    ("hang", errors.Timeout, "timeout", True),
    ("context", errors.ContextExceeded, "context_exceeded", False),
])
def test_each_fault_becomes_its_typed_error(server, fault, error, kind, transient):
    server.script = Reply(text="0123456789" * 3, fault=fault)
    got = []
    with pytest.raises(error) as info:
        for piece in server_for(server, read_timeout=0.5).chat("tiny:1b", HI, num_ctx=512):
            got.append(piece)
    assert str(info.value) and info.value.kind == kind and info.value.transient is transient
    assert isinstance(info.value, modelserver.ModelError) and info.value.status in (404, 502)
    if fault in ("midstream_error", "drop"):
        assert got == ["0123", "4567"]  # what arrived before the fault


def test_a_server_that_is_down_answers_503_which_is_transient(server):
    server.down = True
    with pytest.raises(errors.ServerError) as info:
        list(server_for(server).chat("tiny:1b", HI, num_ctx=512))
    assert info.value.http_status == 503 and info.value.transient and info.value.status == 502


def test_unknown_model_says_how_to_install(server):
    with pytest.raises(errors.ModelNotFound, match="ollama pull nope:1b") as info:
        list(server_for(server).chat("nope:1b", [], num_ctx=512))
    assert info.value.model == "nope:1b"


def test_a_prompt_over_the_window_is_refused_not_cut(server):
    with pytest.raises(errors.ContextExceeded):
        server_for(server).chat_text("tiny:1b", [{"role": "user", "content": "x" * 5000}], num_ctx=512)
    assert server.chats()[-1].refused == "context"


def test_a_server_that_cannot_do_a_json_schema_refuses_the_format(server):
    server.refuse_format = True
    models = server_for(server)
    with pytest.raises(errors.FormatRefused) as info:
        models.chat_text("tiny:1b", HI, num_ctx=512, format={"type": "object"})
    assert info.value.kind == "format_refused" and not info.value.transient
    text, _ = models.chat_text("tiny:1b", HI, num_ctx=512)     # free text still works
    assert text == "You said: hi"


# -- cancel ----------------------------------------------------------------------------------

def test_cancel_mid_reply_from_another_thread_ends_the_reader_and_the_server_sees_it(server):
    server.script = Reply(text="y" * 4000, token_delay=0.05)
    stream = server_for(server).chat("tiny:1b", [{"role": "user", "content": "go"}], num_ctx=512)
    reader = StreamReader(stream)
    assert reader.first.wait(5)
    stream.cancel()
    assert reader.done.wait(1.0), "the reader did not end within 1 s of cancel"
    assert isinstance(reader.error, errors.Cancelled) and reader.error.kind == "cancelled"
    assert stream.cancelled and stream.usage is None
    assert 0 < len(reader.pieces) < 1000 and stream.text == "".join(reader.pieces)
    rec = server.chats()[-1]
    assert rec.finished.wait(5) and rec.disconnected, "the server did not see the connection close"


def test_cancel_while_waiting_for_the_first_byte(server):
    """A Pi loading a model: the headers take 10 s; Stop 0.5 s in must end it at once."""
    server.script = Reply(text="never sent", first_byte_delay=10.0)
    stream = server_for(server, read_timeout=30).chat("tiny:1b", HI, num_ctx=512)
    reader = StreamReader(stream)
    wait_until(lambda: server.chats(), 5, "the request to reach the server")
    time.sleep(0.5)                      # the scenario: Stop half a second into the wait
    assert not reader.done.is_set()
    stream.cancel()
    assert reader.done.wait(1.0), "the reader did not end within 1 s of cancel"
    assert isinstance(reader.error, errors.Cancelled) and reader.pieces == []
    rec = server.chats()[-1]
    wait_until(lambda: rec.disconnected, 5, "the server to see the client hang up")


def test_cancel_before_iteration_sends_nothing(server):
    stream = server_for(server).chat("tiny:1b", HI, num_ctx=512)
    stream.cancel()
    with pytest.raises(errors.Cancelled):
        list(stream)
    assert server.chats() == [] and stream.cancelled and stream.text == ""


def _unanswered_listener():
    """A listener whose accept queue is full: a further connect waits (its SYN is dropped)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        fillers.append(s)
    probe = socket.socket()
    probe.settimeout(0.3)
    try:
        probe.connect(("127.0.0.1", port))
        hangs = False
    except socket.timeout:
        hangs = True
    finally:
        probe.close()
    return listener, fillers, port, hangs


def test_cancel_while_connecting_ends_by_the_connect_timeout():
    listener, fillers, port, hangs = _unanswered_listener()
    try:
        if not hangs:
            pytest.skip("this kernel accepts past a full backlog; no connect to wait on")
        stream = OllamaServer(f"http://127.0.0.1:{port}", connect_timeout=2.0).chat("m", HI, num_ctx=512)
        reader = StreamReader(stream)
        time.sleep(0.3)                  # the reader is inside connect()
        stream.cancel()
        assert reader.done.wait(5.0), "the reader did not end after the connect timeout"
        assert isinstance(reader.error, errors.Cancelled), reader.error
    finally:
        for s in (*fillers, listener):
            s.close()


def test_cancel_twice_and_after_the_end_change_nothing(server):
    stream = server_for(server).chat("tiny:1b", HI, num_ctx=512)
    assert "".join(stream) == "You said: hi"
    stream.cancel()
    stream.cancel()
    assert not stream.cancelled and stream.usage is not None      # a finished reply stays finished

    server.script = Reply(text="y" * 400, token_delay=0.05)
    stream = server_for(server).chat("tiny:1b", HI, num_ctx=512)
    reader = StreamReader(stream)
    assert reader.first.wait(5)
    stream.cancel()
    stream.cancel()
    assert reader.done.wait(1.0) and isinstance(reader.error, errors.Cancelled)


def test_a_stream_is_iterated_once(server):
    stream = server_for(server).chat("tiny:1b", HI, num_ctx=512)
    list(stream)
    with pytest.raises(RuntimeError):
        iter(stream)
