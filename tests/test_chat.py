"""The chat page through waitress, against the scripted Ollama server."""

import dataclasses
import time

import pytest

from app.sessions import fountain
from conftest import make_config
from waiting import wait_until
from scripted_ollama import Reply


def send(live, name, message, **form):
    response = live.post(f"/s/{name}/messages", data={"message": message, **form})
    assert response.status_code == 200, response.text
    return response.text


def follow_reply(live, name, turn=None):
    """Read the reply's SSE stream to the end: (events list, final html)."""
    if turn is None:
        turn = len(live.services.store.load(name).turns) - 1
    events = list(live.sse(f"/s/{name}/turns/{turn}/stream"))
    final = [data for event, data, _ in events if event == "final"]
    assert final and events[-1][0] == "close"
    return events, final[0]


def session_file(live, name):
    return (live.services.store.folder / f"{name}.spmd").read_text()


def test_page_shows_conversation_parts(live):
    response = live.get("/")
    assert response.status_code == 200
    page = response.text
    assert 'id="message"' in page and 'id="model"' in page and "tiny:1b" in page
    assert "tokens free" in page                       # the status line
    assert "htmx-2.0.11.min.js" in page and "https://" not in page.split("<body")[0]  # vendored, no CDN
    name = response.url.path.rsplit("/", 1)[-1]
    assert live.services.store.exists(name)


def test_reply_streams_piece_by_piece_and_is_recorded(live, scripted):
    scripted.script = Reply(text="Hello **world**, this is a streamed reply.", piece_size=5, token_delay=0.05)
    name = live.open_session()
    fragment = send(live, name, "Say hello")
    assert "Say hello" in fragment and "sse-connect" in fragment
    assert 'id="send"' in fragment and "disabled" in fragment   # send disabled while generating
    arrivals = []
    for event, data, _ in live.sse(f"/s/{name}/turns/0/stream"):
        arrivals.append((time.monotonic(), event, data))
    pieces = [a for a in arrivals if a[1] == "piece"]
    assert len(pieces) >= 5
    assert pieces[-1][0] - pieces[0][0] > 0.2          # the first piece came well before the last
    final = next(data for _, event, data in arrivals if event == "final")
    assert "<strong>world</strong>" in final           # rendered from Markdown
    assert 'id="send"' in final and "disabled" not in final.split('id="send"')[1].split(">")[0]
    text = session_file(live, name)
    assert "Say hello" in text and "Hello **world**" in text
    turns = fountain.turns(fountain.loads(text))
    assert turns[0].reply == "Hello **world**, this is a streamed reply."
    assert turns[0].stats and "tok/s" in turns[0].stats
    chat = scripted.chats()[0]
    assert chat.num_ctx == 8192 and chat.body["truncate"] is False
    assert chat.body["messages"][0]["role"] == "system"


def test_user_message_is_on_disk_before_the_reply_ends(live, scripted):
    scripted.script = Reply(text="x" * 200, piece_size=2, token_delay=0.05)
    name = live.open_session()
    send(live, name, "keep me safe")
    text = session_file(live, name)
    assert "keep me safe" in text
    assert fountain.turns(fountain.loads(text))[0].reply is None
    live.services.activities.last(name).stop()


def test_stop_cancels_within_a_second_and_keeps_what_arrived(live, scripted):
    scripted.script = Reply(text="word " * 400, piece_size=5, token_delay=0.05)
    name = live.open_session()
    send(live, name, "long please")
    gen = live.services.activities.last(name)
    wait_until(lambda: len(gen.pieces) >= 3, 10, "three pieces of the reply")
    stopped_at = time.monotonic()
    assert live.post(f"/s/{name}/stop", data={"activity": gen.id}).status_code == 204
    events, final = follow_reply(live, name)
    # The reply had ~20 s to go: ending within 5 s shows the stop took (a loose bound for a loaded
    # machine; it takes milliseconds), and the recorded text below shows it was cut short.
    assert time.monotonic() - stopped_at < 5.0
    assert "Stopped" in final
    assert scripted.chats()[0].finished.wait(2) and scripted.chats()[0].disconnected
    turn = fountain.turns(fountain.loads(session_file(live, name)))[0]
    assert turn.reply and turn.reply.startswith("word word") and len(turn.reply) < 2000


def test_reload_during_generation_follows_the_same_reply(live, scripted):
    scripted.script = Reply(text="abcdefghijklmnopqrstuvwxyz" * 4, piece_size=4, token_delay=0.03)
    name = live.open_session()
    send(live, name, "once")
    page = live.get(f"/s/{name}").text
    assert f'sse-connect="/s/{name}/turns/0/stream"' in page and "disabled" in page
    second = list(live.sse(f"/s/{name}/turns/0/stream"))
    assert second[0][0] == "snapshot"
    follow_reply(live, name)
    assert len(scripted.chats()) == 1                  # no duplicate request
    assert live.post(f"/s/{name}/messages", data={"message": "again"}).status_code == 200


def test_model_output_cannot_inject_script(live, scripted):
    scripted.script = Reply(text='<script>alert(1)</script> <img src=x onerror=alert(2)> [x](javascript:alert(3))')
    name = live.open_session()
    send(live, name, "be evil")
    events, final = follow_reply(live, name)
    assert "<script>" not in final and "<img" not in final and 'href="javascript:' not in final
    assert "&lt;script&gt;" in final
    for event, data, _ in events:
        assert "<script>" not in data
    page = live.get(f"/s/{name}").text
    assert "<script>alert" not in page


@pytest.mark.parametrize("fault, title, words", [
    ("model_404", "Model not installed", "ollama pull tiny:1b"),
    ("midstream_error", "The model failed mid-reply", "What arrived before the failure is kept"),
    ("drop", "The model failed mid-reply", "What arrived before the failure is kept"),
    ("hang", "The model timed out", "try again"),
])
def test_each_error_kind_shows_its_card_and_keeps_the_message(tmp_path, scripted, make_live, fault, title, words):
    config = make_config(tmp_path, scripted.url)
    config = dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, timeout_s=0.7))
    live = make_live(config)
    scripted.script = Reply(text="0123456789abcdef", fault=fault)
    name = live.open_session()
    fragment = send(live, name, "please answer")
    html = fragment if title in fragment else follow_reply(live, name)[1]
    assert title in html and words in html
    assert "Re-send this message" in html and 'value="please answer"' in html
    turn = fountain.turns(fountain.loads(session_file(live, name)))[0]
    assert turn.user_text == "please answer"
    assert any("error" in n for n in turn.notes)
    page = live.get(f"/s/{name}").text
    assert title in page                               # the card survives a reload


def test_ollama_down_says_so_with_the_url(tmp_path, make_live):
    live = make_live(make_config(tmp_path, "http://127.0.0.1:9"))
    name = live.open_session()
    page = live.get(f"/s/{name}").text
    assert "not running at http://127.0.0.1:9" in page
    fragment = send(live, name, "hello?")
    assert "Ollama is not running" in fragment and "http://127.0.0.1:9" in fragment
    assert "hello?" in session_file(live, name)
    health = live.http.get("/healthz").json()
    assert health["ollama"]["up"] is False and health["model"] == "tiny:1b"


def test_healthz_recovers_when_ollama_comes_up(tmp_path, make_live):
    from scripted_ollama import ScriptedOllama

    probe = ScriptedOllama()
    port = int(probe.url.rsplit(":", 1)[1])
    probe._httpd.server_close()
    live = make_live(make_config(tmp_path, f"http://127.0.0.1:{port}"))
    assert live.http.get("/healthz").json()["ollama"]["up"] is False
    with ScriptedOllama(port=port):
        health = live.http.get("/healthz").json()
        assert health["ollama"]["up"] is True and health["model_installed"] is True


def test_at_mention_routes_to_that_model_and_is_recorded(live, scripted):
    name = live.open_session()
    send(live, name, "@other:7b what are you?")
    follow_reply(live, name)
    chat = scripted.chats()[0]
    assert chat.body["model"] == "other:7b" and chat.num_ctx == 8192
    assert chat.body["messages"][-1]["content"] == "what are you?"
    text = session_file(live, name)
    assert "[[model switch: other:7b" in text
    fragment = send(live, name, "@tinyy hi")                       # a typo of an installed model: the card
    assert "Unknown model" in fragment and "tiny:1b" in fragment


def test_session_resumes_from_its_file_alone(tmp_path, scripted, make_live):
    config = make_config(tmp_path, scripted.url)
    first = make_live(config)
    name = first.open_session()
    send(first, name, "my name is Ada")
    follow_reply(first, name)
    first.close()
    second = make_live(config)                        # a new app: only the file remains
    send(second, name, "what is my name?")
    follow_reply(second, name)
    messages = scripted.chats()[-1].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == "my name is Ada"
    assert messages[2]["content"] == "You said: my name is Ada"


def test_rename_changes_the_title_page(live):
    name = live.open_session()
    response = live.post(f"/s/{name}/title", data={"title": "Pi notes"})
    assert response.status_code == 200 and 'value="Pi notes"' in response.text
    assert "Title: Pi notes" in session_file(live, name)


def test_post_without_token_is_refused(live):
    name = live.open_session()
    response = live.http.post(f"/s/{name}/messages", data={"message": "x"})
    assert response.status_code == 403
    assert "x" not in "".join(t.user_text for t in live.services.store.load(name).turns)


def test_empty_and_running_messages(live, scripted):
    scripted.script = Reply(text="z" * 100, piece_size=1, token_delay=0.02)
    name = live.open_session()
    empty = live.post(f"/s/{name}/messages", data={"message": "   "})
    assert empty.status_code == 200 and "The message is empty" in empty.text      # said (issue 33)
    assert empty.headers["HX-Retarget"] == "#composer-note" and live.services.store.load(name).turns == []
    send(live, name, "first")
    assert live.post(f"/s/{name}/messages", data={"message": "second"}).status_code == 409
    live.services.activities.last(name).stop()


def test_workspace_harvey_md_is_the_system_prompt(live, scripted):
    workspace = live.services.config.workspace_path
    (workspace / "HARVEY.md").write_text("You are Harvey. Always answer in French.")
    name = live.open_session()
    send(live, name, "hello")
    follow_reply(live, name)
    assert scripted.chats()[0].body["messages"][0] == {"role": "system",
                                                       "content": "You are Harvey. Always answer in French."}


def test_a_refusal_card_reads_the_same_after_a_reload(live):
    name = live.open_session()
    fragment = send(live, name, "@tiny:2b hello")
    page = live.get(f"/s/{name}").text
    for html in (fragment, page):
        assert "Unknown model" in html and "is not an installed model. Installed models: tiny:1b, other:7b." in \
            html.replace("&#39;", "'")
