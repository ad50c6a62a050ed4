"""Issue 35's model-call faults, each as a user or a server would cause it, through waitress and the
scripted servers: a chat reply's own cap (0), a reply cut at its cap (1), an error inside the stream
(2), an OpenAI-compatible stream without ``data: [DONE]`` (3), and from 7: Stop during the question's
embedding, a passages request the server refuses as too long, and a server restarted with another
window."""

import dataclasses
import re
from pathlib import Path

import pytest

from app.analysis import execute, mapreduce
from app.chat.prepare import CONTINUE_PROMPT
from app.config import ChatConfig, RetrievalConfig
from app.modelserver import errors
from app.modelserver.openai import OpenAIServer
from app.sessions import fountain
from conftest import make_config
from haystacks import bag_vector, haystack
from scripted_ollama import Reply, prose
from scripted_openai import Reply as OpenAIReply
from scripted_openai import ScriptedOpenAI
from test_analysis import big_file_config, map_or_reduce, start_job, wait_settled, wait_state
from test_chat import follow_reply, send, session_file
from test_retrieval_answer import EMBEDDER, FACT, QUESTION, answer_from_passages, ask_by_retrieval
from waiting import wait_for


def chat_config(tmp_path, url, **changes):
    config = make_config(tmp_path, url)
    return dataclasses.replace(config, **changes)


def openai_config(tmp_path, url):
    config = make_config(tmp_path, url)
    return dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, api="openai"))


# -- 0: a chat reply has a cap of its own ----------------------------------------------------------

def test_0_a_chat_reply_is_capped_by_its_own_setting_and_the_budget_line_shows_it(tmp_path, scripted, make_live):
    live = make_live(make_config(tmp_path, scripted.url))          # tiny:1b: a window of 8192
    name = live.open_session()
    assert "replies up to 1024 tokens" in live.get(f"/s/{name}").text
    send(live, name, "hello")
    follow_reply(live, name)
    assert scripted.chats()[-1].body["options"]["num_predict"] == 1024   # not every free token of the window

    other = make_live(chat_config(tmp_path / "b", scripted.url, chat=ChatConfig(reply_tokens=200)))
    name = other.open_session()
    assert "replies up to 200 tokens" in other.get(f"/s/{name}").text
    send(other, name, "hello again")
    follow_reply(other, name)
    assert scripted.chats()[-1].body["options"]["num_predict"] == 200


# -- 1: a reply cut at its cap says so, and Continue asks for the rest -----------------------------

def test_1_a_reply_cut_at_its_cap_is_noted_and_continue_appends_the_rest(tmp_path, scripted, make_live):
    scripted.honor_num_predict = True           # Ollama stops at num_predict and says done_reason "length"
    scripted.script = lambda body: Reply(
        text=" and that is the whole story." if body["messages"][-1]["content"] == CONTINUE_PROMPT
        else "word " * 40)
    live = make_live(chat_config(tmp_path, scripted.url, chat=ChatConfig(reply_tokens=16)))
    name = live.open_session()
    send(live, name, "tell me everything")
    _, final = follow_reply(live, name)
    assert "Cut at 16 tokens" in final and ">Continue</button>" in final
    assert "[[reply: cut at 16 tokens" in session_file(live, name)
    cut = fountain.turns(fountain.loads(session_file(live, name)))[0].reply
    assert cut == ("word " * 40)[:64].strip()

    response = live.post(f"/s/{name}/turns/0/continue")
    assert response.status_code == 200, response.text
    _, final = follow_reply(live, name, 0)
    messages = scripted.chats()[-1].body["messages"]
    assert [m["role"] for m in messages[-3:]] == ["user", "assistant", "user"]
    assert messages[-3]["content"] == "tell me everything" and messages[-2]["content"] == cut
    assert messages[-1]["content"] == CONTINUE_PROMPT
    turns = fountain.turns(fountain.loads(session_file(live, name)))
    assert len(turns) == 1 and turns[0].reply == cut + " and that is the whole story."
    assert "cut at" not in session_file(live, name) and "Cut at" not in final
    assert "that is the whole story" in final
    again = live.post(f"/s/{name}/turns/0/continue")          # nothing is cut any more: said below, turn kept
    assert again.status_code == 409 and "was not cut" in again.text
    assert again.headers["HX-Retarget"] == "#conversation" and len(scripted.chats()) == 2


def test_1_continue_is_offered_only_where_the_window_allows(tmp_path, scripted, make_live):
    scripted.models["tiny:1b"] = 1024           # the cut reply takes most of the window
    scripted.honor_num_predict = True
    scripted.script = Reply(text=prose(2000))
    live = make_live(make_config(tmp_path, scripted.url))
    name = live.open_session()
    send(live, name, "go on for ever")
    _, final = follow_reply(live, name)
    cap = scripted.chats()[-1].body["options"]["num_predict"]
    assert f"Cut at {cap} tokens" in final and "fills the model's window" in final
    assert ">Continue</button>" not in final
    refused = live.post(f"/s/{name}/turns/0/continue")
    assert refused.status_code == 409 and "no room left" in refused.text and len(scripted.chats()) == 1


@pytest.mark.parametrize("reply, outcome, error", [
    (Reply(text="all of it"), "complete", None),
    (Reply(text="word " * 40), "cut", None),                                      # at num_predict
    (Reply(text="0123456789" * 3, fault="midstream_error"), "failed", errors.ModelFailed),   # its own error
    (Reply(text="0123456789" * 3, fault="http_500"), "failed", errors.ServerError),
    (Reply(text="0123456789" * 3, fault="drop"), "lost", errors.ConnectionDropped),   # the server lost
])
def test_1_the_end_of_a_call_decides_its_outcome(scripted, reply, outcome, error):
    from app.budget import Calibration
    from app.modelserver.ollama import OllamaServer
    from app.work.activity import Activity
    from app.work.calls import ModelCalls, Request

    scripted.honor_num_predict, scripted.script = True, reply
    calls = ModelCalls(OllamaServer(scripted.url), Calibration(None, 4.0))
    activity = Activity("a1", "s", "reply", 0)
    request = Request("tiny:1b", [{"role": "user", "content": "hi"}], window=2048, num_predict=16, bytes_per_token=4.0)
    call = None
    try:
        with calls.stream(activity, request) as call:
            list(call)
    except errors.ModelError as exc:
        assert type(exc) is error
    assert call.outcome == outcome and call.cut_off is (outcome == "cut") and activity.in_flight == 0
    if error is not None:
        assert isinstance(call.error, error)


def test_1_the_synthesis_is_told_its_length_gets_the_room_and_says_when_it_was_cut(tmp_path, scripted, make_live):
    def script(body):
        reply = map_or_reduce(body)
        if reply.text.startswith("SYNTHESIZED"):
            reply.done_reason = "length"        # the model wrote until its cap
        return reply

    scripted.script = script
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize each section.")
    wait_settled(live, job)
    reduce = scripted.chats()[-1]
    cap = reduce.body["options"]["num_predict"]
    assert cap > live.config.budget.reply_tokens        # the room the window leaves, not a fixed 512
    assert reduce.prompt_bytes / 4 + cap <= reduce.num_ctx
    words = re.search(r"Answer in at most (\d+) words", reduce.body["messages"][-1]["content"])
    assert words and int(words.group(1)) == mapreduce.answer_words(cap)
    reply = fountain.turns(fountain.loads(session_file(live, name)))[0].reply
    assert reply.startswith("SYNTHESIZED") and f"The synthesis was cut at {cap:,} tokens" in reply


# -- 2: an error inside the stream is the server's answer, not a lost server ------------------------

def test_2_an_error_line_in_the_stream_is_retried_once_then_recorded_and_the_run_goes_on(
        tmp_path, scripted, make_live, monkeypatch):
    monkeypatch.setattr(execute, "RETRY_PAUSES_S", (0.01, 0.02, 0.04))

    def script(body):
        if re.search(r"\nChunk 2 of \d+", body["messages"][-1]["content"]):
            return Reply(text="a partial answer that breaks", fault="midstream_error")   # the runner fails
        return map_or_reduce(body)

    scripted.script = script
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    wait_settled(live, job)
    assert job.state == "done", job.message
    assert scripted.map_requests().count(2) == 2                 # sent once more, not four times
    assert job.results[1].status == "error" and "failed mid-reply" in job.results[1].error
    synthesis = scripted.chats()[-1].body["messages"][-1]["content"]
    assert "Chunks with no answer (failed or not run): 2." in synthesis
    text = session_file(live, name)
    assert f"chunk-result: 2/{job.chunks} — error:" in text and "chunk-unread: lines" in text


def test_2_a_lost_server_still_pauses_the_job(tmp_path, scripted, make_live, monkeypatch):
    monkeypatch.setattr(execute, "RETRY_PAUSES_S", (0.01, 0.02, 0.04))
    scripted.script = lambda body: (Reply(text="a reply the connection cuts", fault="drop")
                                    if re.search(r"\nChunk 2 of \d+", body["messages"][-1]["content"])
                                    else map_or_reduce(body))
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    job, _ = start_job(live, name, "Summarize.")
    wait_state(live, job, ("interrupted",))
    assert scripted.map_requests().count(2) == 1 + len(execute.RETRY_PAUSES_S)
    assert "could not be reached" in job.message


# -- 3: an OpenAI-compatible stream without data: [DONE] -------------------------------------------

def test_3_an_openai_stream_that_ends_cleanly_without_done_is_a_whole_reply(tmp_path, make_live):
    with ScriptedOpenAI(script=OpenAIReply(text="A whole reply, no [DONE] after it.", send_done=False)) as server:
        live = make_live(openai_config(tmp_path, server.url))
        name = live.open_session()
        send(live, name, "hello")
        _, final = follow_reply(live, name)
        turn = fountain.turns(fountain.loads(session_file(live, name)))[0]
        assert turn.reply == "A whole reply, no [DONE] after it." and not turn.notes
        assert "failed" not in final and "Re-send" not in final
        assert turn.stats and "reply +" in turn.stats       # the usage that arrived is the reply's

        # a body that ends before any finish reason is still a reply that broke off
        server.script = OpenAIReply(text="0123456789" * 3, fault="drop")
        with pytest.raises(errors.StreamBroken):
            list(OpenAIServer(server.url).chat("tiny:1b", [{"role": "user", "content": "hi"}], num_ctx=4096))


@pytest.mark.parametrize("finish, outcome", [("stop", "complete"), ("length", "cut")])
def test_3_without_done_the_finish_reason_still_says_whether_the_reply_was_cut(finish, outcome):
    from app.budget import Calibration
    from app.work.activity import Activity
    from app.work.calls import ModelCalls, Request

    with ScriptedOpenAI(script=OpenAIReply(text="a reply", finish_reason=finish, send_done=False)) as server:
        calls = ModelCalls(OpenAIServer(server.url), Calibration(None, 4.0))
        request = Request("tiny:1b", [{"role": "user", "content": "hi"}], window=4096, num_predict=16,
                          bytes_per_token=4.0)
        with calls.stream(Activity("a1", "s", "reply", 0), request) as call:
            assert "".join(call) == "a reply"
        assert call.outcome == outcome and call.usage.generated_tokens == 2


# -- 7: the question's embedding, a refused passages request, a restarted server's window -----------

@pytest.fixture
def harbour_slow(tmp_path, scripted, make_live):
    """harbour.md with the embedding model, and a read timeout far longer than any wait here (a
    call that is not cut by the Stop would go on for a minute)."""
    scripted.script = answer_from_passages
    scripted.embed_fn = bag_vector
    scripted.models[EMBEDDER] = 2048
    config = make_config(tmp_path, scripted.url)
    config = dataclasses.replace(config, retrieval=RetrievalConfig(),
                                 model_server=dataclasses.replace(config.model_server, timeout_s=120.0))
    Path(config.workspace).mkdir(parents=True, exist_ok=True)
    (Path(config.workspace) / "harbour.md").write_text(haystack(150, {131: FACT}), encoding="utf-8")
    yield make_live(config)
    scripted.embed_release.set()


def test_7_stop_cuts_the_questions_embedding(harbour_slow, scripted):
    scripted.hold_embed = lambda texts: any(t.startswith("search_query: ") for t in texts)
    live = harbour_slow
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": QUESTION})
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": QUESTION, "way": "retrieve"})
    wait_for(lambda: any("search_query: " in str(r.body.get("input")) for r in scripted.embeds()), 120,
             "the question's embedding")
    held = next(r for r in scripted.embeds() if "search_query: " in str(r.body.get("input")))
    assert live.post(f"/s/{name}/analysis/{job.id}/cancel").status_code == 204
    wait_for(lambda: held.disconnected, 30, "the embedding call cut by the Stop")
    wait_for(lambda: job.state == "choose", 30, f"the job stopped (it is {job.state})")
    assert not scripted.embed_release.is_set() and scripted.chats() == []


def test_7_a_passages_request_refused_as_too_long_drops_the_lowest_passages(tmp_path, scripted, make_live):
    scripted.embed_fn = bag_vector
    scripted.models[EMBEDDER] = 2048
    refused = []

    def script(body):
        if body["messages"][-1]["content"].startswith("Passages from") and not refused:
            refused.append(True)
            return Reply(fault="context")       # the server counts the request longer than the app did
        reply = answer_from_passages(body)
        reply.done_reason = "length"            # and the answer runs to its cap
        return reply

    scripted.script = script
    config = dataclasses.replace(make_config(tmp_path, scripted.url), retrieval=RetrievalConfig())
    Path(config.workspace).mkdir(parents=True, exist_ok=True)
    (Path(config.workspace) / "harbour.md").write_text(haystack(150, {131: FACT}), encoding="utf-8")
    live = make_live(config)
    name = live.open_session()
    job, _ = ask_by_retrieval(live, name)
    asks = [c for c in scripted.chats() if c.body["messages"][-1]["content"].startswith("Passages from")]
    assert [c.refused for c in asks] == ["context", None]
    sent = [re.findall(r"^\[(\d+)\] \(", c.body["messages"][-1]["content"], re.M) for c in asks]
    assert 0 < len(sent[1]) < len(sent[0]) and set(sent[1]) < set(sent[0])
    assert [str(p["chunk"]) for p in job.rag] == sent[1]            # the sources are what was sent
    reply = fountain.turns(fountain.loads(session_file(live, name)))[0].reply
    assert "Bartholomew Quince" in reply and "left out" in reply
    cap = asks[1].body["options"]["num_predict"]        # told its length, given the room the window leaves
    assert cap > live.config.budget.reply_tokens and asks[1].prompt_bytes / 4 + cap <= asks[1].num_ctx
    assert f"Answer in at most {mapreduce.answer_words(cap)} words" in asks[1].body["messages"][-1]["content"]
    assert f"The answer was cut at {cap:,} tokens" in reply


def test_7_a_restarted_servers_window_is_read_again(tmp_path, make_live):
    with ScriptedOpenAI(models={"tiny:1b": 4096}) as server:
        live = make_live(openai_config(tmp_path, server.url))
        name = live.open_session()
        assert " of 4096 tokens free" in live.get(f"/s/{name}").text
        server.kill()                               # llama-server stopped, started again with -c 2048
        send(live, name, "hello")
        assert "not running" in follow_reply(live, name)[1]     # the reply found the server gone
        server.models["tiny:1b"] = 2048
        server.revive()
        assert " of 2048 tokens free" in live.get(f"/s/{name}").text


def test_7_the_servers_window_is_read_again_after_its_age(monkeypatch):
    from app.modelserver import openai

    with ScriptedOpenAI(models={"tiny:1b": 4096}) as server:
        models = OpenAIServer(server.url)
        assert models.window("tiny:1b") == 4096
        server.models["tiny:1b"] = 2048
        assert models.window("tiny:1b") == 4096     # kept a while: a page asks several times
        monkeypatch.setattr(openai, "PROPS_MAX_AGE_S", 0.0)
        monkeypatch.setattr(OpenAIServer, "facts_max_age", 0.0)
        assert models.window("tiny:1b") == 2048


# -- issue 43 item 2: a continuation that fails or is stopped keeps what it added, and the reply stays cut --

def cut_then(tmp_path, scripted, make_live, continuation):
    """A reply cut at its cap of 16 tokens, then Continue answered by ``continuation``: (live, name, cut)."""
    scripted.honor_num_predict = True
    scripted.script = lambda body: (continuation if body["messages"][-1]["content"] == CONTINUE_PROMPT
                                    else Reply(text=prose(40)))
    live = make_live(chat_config(tmp_path, scripted.url, chat=ChatConfig(reply_tokens=16)))
    name = live.open_session()
    send(live, name, "tell me everything")
    follow_reply(live, name)
    cut = fountain.turns(fountain.loads(session_file(live, name)))[0]
    assert "cut at 16 tokens" in session_file(live, name)
    return live, name, cut


def test_43_2_a_failed_continuation_keeps_what_it_added_and_continue_works_again(tmp_path, scripted, make_live):
    rest = " and then the tide came in, slowly, over the flats."
    live, name, cut = cut_then(tmp_path, scripted, make_live,
                               Reply(text=rest, piece_size=8, fault="midstream_error", fault_after=3))
    assert live.post(f"/s/{name}/turns/0/continue").status_code == 200
    _, final = follow_reply(live, name, 0)
    turn = fountain.turns(fountain.loads(session_file(live, name)))[0]
    assert turn.reply == cut.reply + rest[:24]                       # what the continuation added is kept
    assert "Cut at 16 tokens" in final and ">Continue</button>" in final and "continuation failed" in final
    assert turn.stats == cut.stats                                   # the reply's own counts are kept
    scripted.script = lambda body: Reply(text=" The end.")
    assert live.post(f"/s/{name}/turns/0/continue").status_code == 200     # Continue works again
    follow_reply(live, name, 0)
    turn = fountain.turns(fountain.loads(session_file(live, name)))[0]
    assert turn.reply == cut.reply + rest[:24] + " The end." and "cut at" not in session_file(live, name)
    assert scripted.chats()[-1].body["messages"][-2]["content"] == cut.reply + rest[:24]
    # the stats line counts the whole reply: the 16 cut tokens and the continuation's 3 (one per piece of 4)
    assert fountain.reply_tokens(turn.stats) == 16 + 3


def test_43_2_a_stopped_continuation_keeps_what_it_added_and_continue_works_again(tmp_path, scripted, make_live):
    live, name, cut = cut_then(tmp_path, scripted, make_live, Reply(text=" " + prose(400), piece_size=6, token_delay=0.5))
    assert live.post(f"/s/{name}/turns/0/continue").status_code == 200
    gen = live.services.activities.last(name)
    wait_for(lambda: len(gen.pieces) >= 3, 30, what="the continuation to stream")   # (the cut part, two pieces)
    assert live.post(f"/s/{name}/stop", data={"activity": gen.id}).status_code == 204
    _, final = follow_reply(live, name, 0)
    turn = fountain.turns(fountain.loads(session_file(live, name)))[0]
    assert turn.reply.startswith(cut.reply) and len(turn.reply) > len(cut.reply)
    assert "Cut at 16 tokens" in final and ">Continue</button>" in final and "continuation was stopped" in final
    assert "Stopped: the reply above" not in final
