"""The context budget: accounting, num_ctx, files, calibration (scripted server)."""

import dataclasses
from pathlib import Path

import pytest

from app.sessions import fountain
from app.budget import MESSAGE_OVERHEAD_TOKENS, Budget, Calibration, estimate_messages, fit_history, new_budget
from app.config import Config, ModelConfig
from conftest import make_config
from scripted_ollama import Reply, prose


def wait_reply(live, name, timeout=10):
    """Until the reply is recorded in the session file (not just finished), within ``timeout``."""
    gen = live.services.activities.last(name)
    if gen is not None:
        assert gen.wait_ended(timeout), f"the reply in {name} was not recorded within {timeout} s"
    return gen


def send(live, name, message):
    response = live.post(f"/s/{name}/messages", data={"message": message})
    assert response.status_code == 200, response.text
    wait_reply(live, name)
    return response.text


# -- the accounting, as a unit ---------------------------------------------------------

def test_window_from_config_else_min_of_trained_and_default():
    config = Config(models={"a": ModelConfig(context_window=30000, effective_context=20000)})
    assert new_budget(config, "a", 131072, 4.0).window == 30000
    assert new_budget(config, "a", 131072, 4.0).effective == 20000
    assert new_budget(config, "b", 131072, 4.0).window == 8192      # default, a size a Pi can hold
    assert new_budget(config, "b", 2048, 4.0).window == 2048        # never past the trained length
    assert new_budget(config, "b", None, 4.0).window == 8192


def test_breakdown_adds_up_and_the_tracker_refuses_what_does_not_fit():
    budget = new_budget(Config(), "m", 8192, 4.0)
    history, left_out = fit_history(budget, "system prompt " * 10, [[{"content": "x" * 4000}]] * 3)
    assert left_out == 0 and len(history) == 3
    assert budget.components["reply"] == 512 and budget.components["margin"] == 820
    assert budget.remaining == budget.effective - sum(budget.components.values())
    before = budget.remaining
    assert budget.reserve("files", before) is True and budget.remaining == 0
    assert budget.reserve("memories", 1) is False and "memories" not in budget.components


def test_oldest_history_is_left_out_when_it_does_not_fit():
    budget = new_budget(Config(), "m", 2048, 4.0)
    turns = [[{"content": f"turn {i} " + "y" * 1600}] for i in range(10)]
    history, left_out = fit_history(budget, "sys", turns)
    assert left_out > 0 and history[-1]["content"].startswith("turn 9")
    assert budget.remaining >= 0


# -- through the app -------------------------------------------------------------------

@pytest.fixture
def seed_setup(tmp_path, scripted, make_live):
    """Seed 000's example: a 30,000-token window and a 10,000-token file."""
    config = make_config(tmp_path, scripted.url)
    config = dataclasses.replace(config, models={"tiny:1b": ModelConfig(context_window=30000)})
    workspace = Path(config.workspace)
    workspace.mkdir(parents=True)
    (workspace / "document.md").write_text(("Methodology paragraph. " * 20 + "\n\n") * 87)  # ~40 KB
    return config, make_live(config)


def write_history(live, name, tokens):
    """Append turns totalling about ``tokens`` tokens (bytes/4) to the session file."""
    store = live.services.store
    per_turn = 2000
    for i in range(tokens // per_turn):
        turn = fountain.Turn(when=fountain_now(), user_text=f"question {i} " + "q" * (per_turn * 2 - 20),
                             model="tiny:1b", reply="answer " + "a" * (per_turn * 2 - 20))
        store.append_turn(name, turn)


def fountain_now():
    from datetime import datetime
    return datetime(2026, 6, 27, 10, 4, 0)


def test_seed_example_the_file_comes_before_old_turns(seed_setup, scripted):
    """Seed 000's numbers under seed 003's priority (issue 13, problem 12): with 25,000 tokens of
    history the 10,000-token file is read into the request and the oldest turns make room."""
    config, live = seed_setup
    size = (Path(config.workspace) / "document.md").stat().st_size
    assert 9500 <= size / 4 <= 10500
    full = live.open_session()
    write_history(live, full, 25000)
    fragment = live.post(f"/s/{full}/messages", data={"message": "Read document.md and summarize it"}).text
    assert "Context overflow" not in fragment and "left out of this request" in fragment
    wait_reply(live, full)
    chat = scripted.chats()[-1]
    assert '<file name="document.md">' in chat.body["messages"][-1]["content"]
    assert chat.num_ctx == 30000
    assert 2 < len(chat.body["messages"]) < 2 + 2 * 12                   # some history, not all of it
    assert estimate_messages(chat.body["messages"], 4.0) + chat.body["options"]["num_predict"] <= 30000


def test_a_file_larger_than_the_room_gets_the_card_even_with_no_history(seed_setup, scripted):
    config, live = seed_setup
    (Path(config.workspace) / "document.md").write_text(("Methodology paragraph. " * 20 + "\n\n") * 300)
    empty = live.open_session()
    fragment = live.post(f"/s/{empty}/messages", data={"message": "Read document.md and summarize it"}).text
    assert "Context overflow" in fragment and scripted.chats() == []


def test_every_request_carries_the_same_num_ctx_and_none_exceeds_the_window(tmp_path, scripted, make_live):
    scripted.models["tiny:1b"] = 4096
    live = make_live(make_config(tmp_path, scripted.url))
    name = live.open_session()
    for i in range(8):
        send(live, name, f"message {i} " + "z" * 3000)
    chats = scripted.chats()
    assert len(chats) == 8 and {c.num_ctx for c in chats} == {4096}
    assert all(c.refused is None for c in chats)
    for c in chats:
        assert estimate_messages(c.body["messages"], 4.0) + c.body["options"]["num_predict"] <= c.num_ctx
    assert len(chats[-1].body["messages"]) < 2 + 2 * 7                # old turns were left out
    page = live.get(f"/s/{name}").text
    assert "older turn" in page and "left out of this request" in page


def test_a_message_larger_than_the_window_is_never_sent(tmp_path, scripted, make_live):
    scripted.models["tiny:1b"] = 1024
    live = make_live(make_config(tmp_path, scripted.url))
    name = live.open_session()
    fragment = live.post(f"/s/{name}/messages", data={"message": "w" * 20000}).text
    assert "Message too long" in fragment and scripted.chats() == []
    assert "w" * 100 in (live.services.store.folder / f"{name}.spmd").read_text()   # kept for a re-send


def test_multi_file_note_names_exactly_the_skipped_files(tmp_path, scripted, make_live):
    config = make_config(tmp_path, scripted.url)
    workspace = Path(config.workspace)
    workspace.mkdir(parents=True)
    (workspace / "a.md").write_text("alpha " * 1500)        # ~3,300 tokens at Markdown's cautious figure
    (workspace / "b.go").write_text("package b\n" * 2000)   # ~6,250 tokens at source code's
    (workspace / "c.txt").write_text("small file\n")
    live = make_live(config)
    name = live.open_session()
    fragment = send(live, name, "Compare c.txt, a.md and b.go")
    assert "1 file exceeded the context budget and was not included: b.go" in fragment
    assert "Analyse b.go in chunks" in fragment and "Analyse a.md" not in fragment
    prompt = scripted.chats()[-1].body["messages"][-1]["content"]
    assert '<file name="c.txt">' in prompt and '<file name="a.md">' in prompt and '<file name="b.go">' not in prompt
    assert "not included: b.go]" in prompt


@pytest.mark.parametrize("message, words", [
    ("what is in ../secret.txt?", "outside the workspace"),
    ("read /etc/passwd please", "outside the workspace"),
    ("read link.txt", "outside the workspace"),
])
def test_paths_outside_the_workspace_are_refused(tmp_path, scripted, make_live, message, words):
    config = make_config(tmp_path, scripted.url)
    workspace = Path(config.workspace)
    workspace.mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("TOP SECRET")
    (workspace / "link.txt").symlink_to(tmp_path / "secret.txt")
    live = make_live(config)
    name = live.open_session()
    fragment = send(live, name, message)
    assert words in fragment
    assert all("TOP SECRET" not in c.body["messages"][-1]["content"] for c in scripted.chats())


def test_binary_file_is_refused_and_html_is_reduced_to_text(tmp_path, scripted, make_live):
    config = make_config(tmp_path, scripted.url)
    workspace = Path(config.workspace)
    workspace.mkdir(parents=True)
    (workspace / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00" + bytes(range(256)) * 10)
    (workspace / "page.html").write_text("<html><head><script>var x=1;</script></head><body><h1>Title</h1>"
                                          "<p>Plain words here.</p></body></html>")
    live = make_live(config)
    name = live.open_session()
    fragment = send(live, name, "look at photo.png and page.html")
    assert "photo.png is a PNG image, not text" in fragment and "Nothing was sent" in fragment   # issue 18
    assert scripted.chats() == []
    send(live, name, "look at page.html")
    prompt = scripted.chats()[-1].body["messages"][-1]["content"]
    assert "Plain words here." in prompt and "<script>" not in prompt and "<p>" not in prompt


def test_calibration_converges_within_five_percent_and_survives_a_restart(tmp_path, scripted, make_live):
    scripted.token_ratio = 1.3
    config = make_config(tmp_path, scripted.url)
    live = make_live(config)
    name = live.open_session()
    for i in range(4):
        send(live, name, f"turn {i}: " + "calibrate me please " * 60)
    messages = scripted.chats()[-1].body["messages"]
    bpt = live.services.calibration.bytes_per_token("tiny:1b")
    estimate = estimate_messages(messages, bpt)
    actual = scripted.prompt_tokens({"messages": messages})
    before = estimate_messages(messages, 4.0)
    assert abs(before - actual) / actual > 0.15                       # uncalibrated was far off
    assert abs(estimate - actual) / actual < 0.05
    live.close()
    again = make_live(config)
    assert again.services.calibration.bytes_per_token("tiny:1b") == pytest.approx(bpt)
    assert "calibration samples" in again.get(f"/s/{name}").text


def test_calibration_ignores_a_damaged_file(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text("{not json")
    assert Calibration(path).bytes_per_token("m") == 4.0


def test_silent_truncation_is_reported_in_the_chat(tmp_path, scripted, make_live):
    scripted.script = Reply(text="ok", prompt_eval_count=40)       # an old Ollama that cut the prompt
    live = make_live(make_config(tmp_path, scripted.url))
    name = live.open_session()
    send(live, name, "long " * 2000)
    page = live.get(f"/s/{name}").text
    assert "may have cut the conversation silently" in page
    assert live.services.calibration.samples("tiny:1b") == 0       # a cut prompt teaches nothing


def test_compact_summarises_older_turns_and_later_requests_send_the_summary(tmp_path, scripted, make_live):
    live = make_live(make_config(tmp_path, scripted.url))
    name = live.open_session()
    for i in range(4):
        send(live, name, f"fact number {i}")
    scripted.script = Reply(text="SUMMARY: facts 0 and 1 were stated.")
    started = live.post(f"/s/{name}/compact").text
    assert "Summarising the older turns" in started                  # it runs in the background
    fragment = [d for e, d, _ in live.sse(f"/s/{name}/turns/4/stream") if e == "final"][0]
    assert "SUMMARY: facts 0 and 1" in fragment and "Compacted" in fragment
    summary_request = scripted.chats()[-1].body["messages"]
    assert "fact number 0" in summary_request[-1]["content"] and "fact number 3" not in summary_request[-1]["content"]
    scripted.script = Reply(text="fine")
    send(live, name, "next")
    messages = scripted.chats()[-1].body["messages"]
    contents = [m["content"] for m in messages]
    assert any("SUMMARY: facts 0 and 1" in c for c in contents)
    assert not any("fact number 0" == c for c in contents) and "fact number 3" in contents
    turns = fountain.turns(fountain.loads((live.services.store.folder / f"{name}.spmd").read_text()))
    assert [t.user_text for t in turns][:4] == [f"fact number {i}" for i in range(4)]   # the file keeps all


LONG_LINE = prose(400)[:1600]      # 1,600 characters that are not a loop (issue 44 stops "xxx…")


def test_an_estimated_past_reply_is_taken_at_the_size_its_server_counted(tmp_path, scripted, make_live):
    """With no tokenizer (the estimate), a past reply is sized by the count its stats line records
    ("N reply"), not by its bytes: a reply the server counted at 1,600 tokens, 400 by the estimate,
    no longer fits a 2,048 window beside the reply's reserve, so it is left out and said so, where the
    estimate would have sent it and overflowed.  (The bundled 135M model's own 417-token reply was
    budgeted at least 31 tokens short when estimated, seen in CI.)"""
    scripted.models["tiny:1b"] = 2048
    scripted.script = lambda body: Reply(text=LONG_LINE, piece_size=1)     # eval_count: one per piece
    live = make_live(make_config(tmp_path, scripted.url))
    name = live.open_session()
    send(live, name, "Write a long line.")
    recorded = fountain.turns(fountain.loads((live.services.store.folder / f"{name}.spmd").read_text()))[0]
    assert fountain.reply_tokens(recorded.stats) == 1600 and recorded.reply == LONG_LINE
    assert estimate_messages([{"content": recorded.reply}], 4.0) < 1600 / 3
    scripted.script = lambda body: Reply(text="Short.")
    fragment = send(live, name, "And now?")
    second = scripted.chats()[-1]
    assert LONG_LINE not in [m["content"] for m in second.body["messages"]]
    assert "1 older turn left out of this request" in fragment


def test_recorded_sizes_are_the_models_own_chat_replies():
    """Only a chat reply of the same model, its stats saying its count; an analysis's stats count all
    of its calls, another model's count is another tokenizer's."""
    from app.chat.prepare import recorded_sizes
    from app.sessions.fountain.data import ChunkAnalysis
    stats = fountain.stats_line("tiny:1b", "ollama", 900, 40, 3.0)
    chat = fountain.Turn(when=None, user_text="hi", model="tiny:1b", reply="a reply", stats=stats)
    other = dataclasses.replace(chat, model="other:7b", reply="another reply")
    analysis = dataclasses.replace(chat, reply="an answer", analysis=ChunkAnalysis(
        file="f.md", chunks=3, model="tiny:1b", boundary="heading", chunk_size=500, instruction="Summarize."))
    unsaid = dataclasses.replace(chat, reply="no stats", stats=None)
    assert recorded_sizes([chat, other, analysis, unsaid], "tiny:1b") == {"a reply": 900}
    budget = new_budget(Config(), "tiny:1b", 8192, 4.0)
    budget.recorded = {"a reply": 900}
    assert budget.messages_cost([{"content": "a reply"}, {"content": "a question"}]) == \
        900 + estimate_messages([{"content": "a question"}], 4.0) + MESSAGE_OVERHEAD_TOKENS
