"""A message sent while its model's counter is still loading waits for it, for a bounded while.

After a restart the first message used to be estimated: the counter loads in the background (from
disk or from the server's vocabulary), and a 135M model's own 417-token reply, estimated, was
budgeted at least 31 tokens short (the next reply cut to 33 tokens, seen in CI). Through waitress,
with the scripted Ollama serving SmolLM2-135M's real vocabulary and holding it back
(``verbose_gate``): the message's request is counted, and a vocabulary that does not come in time
leaves the message estimated, not stuck.
"""

from __future__ import annotations

import threading

import pytest

from app.budget import count_messages, estimate_messages
from app.chat import prepare
from conftest import make_config, record_requests
from scripted_ollama import ScriptedOllama
from vocab import model_info, smollm_gguf
from waiting import wait_for

MODEL = "smol:135m"
# Dense for SmolLM2's tokenizer (about 1 token per 1.4 bytes), where the estimate says 4 bytes a token.
MESSAGE = "数字を数えてください: 一、二、三、四、五、六、七、八、九、十。 " * 3


@pytest.fixture(scope="module")
def smollm_info():
    return model_info(smollm_gguf())


def _started(tmp_path, make_live, info, wait_s, monkeypatch):
    """The app against a scripted server whose vocabulary waits for the test's gate; the app's
    chat requests recorded as it budgeted them, and its counter asks that wait."""
    monkeypatch.setattr(prepare, "COUNTER_WAIT_S", wait_s)
    server = ScriptedOllama(models={MODEL: 4096}).start()
    server.model_info[MODEL] = info
    server.verbose_gate = threading.Event()
    live = make_live(make_config(tmp_path, server.url, model=MODEL))
    models, waits = live.services.models, []
    ask = models.counter

    def counter(model, wait=False):
        if wait and wait is not True:
            waits.append(wait)
        return ask(model, wait=wait)

    models.counter = counter
    return server, live, waits, record_requests(live)


def _send(live, name, text):
    """POST the message on another thread (it may wait for the counter); the thread."""
    posting = threading.Thread(target=live.post, args=(f"/s/{name}/messages",), kwargs={"data": {"message": text}})
    posting.start()
    return posting


def test_a_message_waits_for_the_counter_and_is_counted(tmp_path, make_live, smollm_info, monkeypatch):
    server, live, waits, sent = _started(tmp_path, make_live, smollm_info, 120.0, monkeypatch)
    try:
        name = live.open_session()
        posting = _send(live, name, MESSAGE)
        wait_for(lambda: waits and server.verbose_shows == 1, 30, "the message to wait for the vocabulary")
        assert not sent, "nothing is sent while the counter loads"
        server.verbose_gate.set()
        posting.join(60)
        assert not posting.is_alive()
        wait_for(lambda: sent, 30, "the reply's request")
        counter = live.services.models.counter(MODEL)
        assert counter is not None
        template = live.services.calibration.templates.cost(MODEL)
        counted = count_messages(sent[0].messages, counter, template) + template[1]
        assert sent[0].tokens == counted != estimate_messages(sent[0].messages, sent[0].bytes_per_token)
    finally:
        server.verbose_gate.set()
        server.stop()


def test_a_vocabulary_that_does_not_come_in_time_leaves_the_message_estimated(tmp_path, make_live, smollm_info,
                                                                                monkeypatch):
    server, live, waits, sent = _started(tmp_path, make_live, smollm_info, 0.2, monkeypatch)
    try:
        name = live.open_session()
        posting = _send(live, name, MESSAGE)
        posting.join(60)
        assert not posting.is_alive() and waits and set(waits) == {0.2}
        wait_for(lambda: sent, 30, "the reply's request")
        assert live.services.models.counter_state(MODEL)[0] == "building"
        assert sent[0].tokens == estimate_messages(sent[0].messages, sent[0].bytes_per_token)
    finally:
        server.verbose_gate.set()
        server.stop()
