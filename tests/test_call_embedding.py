"""Issue 34: an embedding is made and ended the one way a chat is, ``with calls.embedding(activity,
model, texts) as call:``, against the scripted Ollama over loopback. The call is attached to the
activity while the ``with`` lasts (a Stop cuts it at any stage), and the exit decides its outcome by
the rule a chat's follows: complete, stopped, the server's answer (failed) or the server lost."""

import threading

import pytest

from app.budget import Calibration
from app.modelserver import errors
from app.modelserver.ollama import OllamaServer
from app.work.activity import Activity
from app.work.calls import COMPLETE, FAILED, LOST, STOPPED, ModelCalls
from waiting import wait_for

EMBEDDER = "nomic-embed-text:latest"


@pytest.fixture
def calls(scripted):
    scripted.models[EMBEDDER] = 64              # its input limit, in tokens
    server = OllamaServer(scripted.url)
    yield ModelCalls(server, Calibration(None, 4.0))
    scripted.embed_release.set()
    server.close()


def activity() -> Activity:
    return Activity("a1", "s", "analysis", 0)


def test_a_whole_embedding_is_complete_and_detached(calls, scripted):
    work = activity()
    with calls.embedding(work, EMBEDDER, ["a", "bb"]) as call:
        assert work.in_flight == 1                      # seen by the activity from before it is sent
        vectors = call.run()
    assert len(vectors) == 2 and call.vectors == vectors and call.outcome == COMPLETE and call.error is None
    assert work.in_flight == 0 and len(scripted.embeds()) == 1
    assert calls.embed(work, EMBEDDER, "a") == [vectors[0]] and work.in_flight == 0


@pytest.mark.parametrize("model, texts, error", [
    (EMBEDDER, ["word " * 400], errors.ContextExceeded),      # refused as longer than it reads (truncate: false)
    ("not-installed", ["a"], errors.ModelNotFound),
])
def test_the_servers_refusal_is_a_failed_call(calls, model, texts, error):
    work = activity()
    with pytest.raises(error):
        with calls.embedding(work, model, texts) as call:
            call.run()
    assert call.outcome == FAILED and isinstance(call.error, error) and isinstance(call.error, errors.ServerAnswered)
    assert work.in_flight == 0 and not call.cancelled


def test_a_server_that_is_not_there_is_a_lost_call():
    calls = ModelCalls(OllamaServer("http://127.0.0.1:9", connect_timeout=0.5), Calibration(None, 4.0))
    work = activity()
    with pytest.raises(errors.Unreachable):
        with calls.embedding(work, EMBEDDER, ["a"]) as call:
            call.run()
    assert call.outcome == LOST and isinstance(call.error, errors.TransportFailed) and work.in_flight == 0


def test_a_stop_before_the_call_sends_nothing(calls, scripted):
    work = activity()
    work.stop()
    with pytest.raises(errors.Cancelled):
        with calls.embedding(work, EMBEDDER, ["a"]) as call:
            call.run()
    assert call.outcome == STOPPED and call.error is None and scripted.embeds() == [] and work.in_flight == 0


def test_a_stop_while_the_server_is_embedding_cuts_the_call(calls, scripted):
    scripted.hold_embed = lambda texts: True
    work, ended = activity(), []

    def embed():
        try:
            with calls.embedding(work, EMBEDDER, ["a"]) as call:
                call.run()
        except errors.Cancelled:
            ended.append(call)

    thread = threading.Thread(target=embed, daemon=True)
    thread.start()
    wait_for(lambda: len(scripted.embeds()) == 1, 30, "the embedding held by the server")
    work.stop()
    thread.join(30)
    assert not thread.is_alive() and ended and ended[0].outcome == STOPPED
    wait_for(lambda: scripted.embeds()[0].disconnected, 30, "the server saw the client go")
    assert not scripted.embed_release.is_set() and work.in_flight == 0


def test_a_with_left_before_the_call_is_made_is_stopped_and_sends_nothing(calls, scripted):
    work = activity()
    with calls.embedding(work, EMBEDDER, ["a"]) as call:
        pass
    assert call.outcome == STOPPED and call.cancelled and scripted.embeds() == [] and work.in_flight == 0
