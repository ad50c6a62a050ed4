"""Issue 14, the budget side: calibration per kind of text, the map reply budget, and the
estimate of a planned analysis (units; no server, no clock)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings as hsettings, strategies as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.budget import (  # noqa: E402
    CALIBRATION_KINDS, KIND_FACTORS, MESSAGE_OVERHEAD_TOKENS, Calibration, calibration_kind,
    estimate_analysis, map_reply_budget, reduce_batches,
)
from app.modelserver import Usage  # noqa: E402


def final(prompt_tokens, generated=100, prompt_s=2.0, eval_s=20.0):
    return Usage(prompt_tokens=prompt_tokens, generated_tokens=generated, seconds=prompt_s + eval_s,
                 prompt_seconds=prompt_s, generate_seconds=eval_s)


def messages(nbytes):
    return [{"role": "user", "content": "x" * nbytes}]


def teach(cal, model, bpt, kind=None, n=3, nbytes=6000):
    for _ in range(n):
        msgs = messages(nbytes)
        cal.observe(model, msgs, final(math.ceil(nbytes / bpt) + MESSAGE_OVERHEAD_TOKENS), kind=kind)


# ---------------------------------------------------------------- calibration per kind

def test_a_kind_learns_apart_from_chat_and_callers_without_a_kind_are_unchanged(tmp_path):
    cal = Calibration(tmp_path / "c.json")
    teach(cal, "m", 4.5)                                    # chat turns, as the app sends today
    assert cal.bytes_per_token("m") == pytest.approx(4.5, rel=0.01)
    assert cal.samples("m") == 3 and cal.samples("m", "markdown") == 0
    # no markdown sample yet: the chat figure times the measured factor
    assert cal.bytes_per_token("m", "markdown") == pytest.approx(4.5 * KIND_FACTORS["markdown"], rel=0.01)
    teach(cal, "m", 3.1, kind="markdown")
    assert cal.bytes_per_token("m", "markdown") == pytest.approx(3.1, rel=0.01)
    assert cal.bytes_per_token("m") == pytest.approx(4.5, rel=0.01)      # chat untouched
    assert cal.bytes_per_token("other", "source") == pytest.approx(4.0 * KIND_FACTORS["source"])
    with pytest.raises(ValueError):
        cal.bytes_per_token("m", "latin")


def test_conservative_is_the_smallest_recent_sample(tmp_path):
    cal = Calibration(None)
    for bpt in (3.4, 2.9, 3.2):
        teach(cal, "m", bpt, kind="html", n=1)
    assert cal.bytes_per_token("m", "html") == pytest.approx(3.2, rel=0.01)
    assert cal.bytes_per_token("m", "html", conservative=True) == pytest.approx(2.9, rel=0.01)


def test_the_old_file_format_loads_and_the_new_one_round_trips(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"bytes_per_token": {"m": [3.5, 3.7, 3.6]}, "speed": {"m": [50.0, 6.0]}}))
    cal = Calibration(path)
    assert cal.bytes_per_token("m") == pytest.approx(3.6)
    assert cal.speed("m") == (50.0, 6.0) and cal.reply_share("m") is None
    teach(cal, "m", 2.5, kind="foreign")
    cal.observe("m", messages(4000), final(1100, generated=90), kind="foreign", num_predict=300)
    again = Calibration(path)
    assert again.bytes_per_token("m") == pytest.approx(3.6)
    assert again.bytes_per_token("m", "foreign") == pytest.approx(cal.bytes_per_token("m", "foreign"))
    # a map call (it carries a document's kind): its share is the map calls', not the chat turns' (issue 45)
    assert again.reply_share("m", maps=True) == pytest.approx(0.3) and again.reply_share("m") is None
    data = json.loads(path.read_text())
    assert set(data) >= {"bytes_per_token", "by_kind", "speed", "reply_share"}


def test_a_cut_prompt_teaches_nothing_for_its_kind(tmp_path):
    cal = Calibration(None)
    warning = cal.observe("m", messages(8000), final(40), kind="source")
    assert warning and "cut the conversation" in warning and cal.samples("m", "source") == 0


@hsettings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(CALIBRATION_KINDS + (None,)),
                          st.floats(2.5, 4.0)), max_size=40))
def test_every_figure_stays_in_range_and_each_kind_keeps_its_own(observations):
    cal = Calibration(None)
    for kind, bpt in observations:
        teach(cal, "m", bpt, kind=kind, n=1)
    for kind in CALIBRATION_KINDS + (None,):
        bpt = cal.bytes_per_token("m", kind)
        assert 1.0 <= bpt <= 8.0
        own = [b for k, b in observations if (k or "chat") == (kind or "chat")][-15:]
        if own:
            assert min(own) * 0.98 <= bpt <= max(own) * 1.02


def test_calibration_kind_tells_non_english_text():
    english = "The licence grants you the right to copy and to modify the work, as long as it is free. " * 20
    german = ("Die Lizenz erlaubt es Ihnen, das Werk zu kopieren und zu verändern, solange es frei bleibt "
              "und jede Änderung gekennzeichnet wird. ") * 20
    japanese = "このライセンスは、作品を複製し改変する権利をあなたに与えます。" * 40
    assert calibration_kind("prose", english) == "prose"
    assert calibration_kind("markdown", "# Title\n\n" + english) == "markdown"
    assert calibration_kind("prose", german) == "foreign"
    assert calibration_kind("html", japanese + " " + "x " * 60) == "foreign"
    assert calibration_kind("source", german) == "source"       # code is code
    assert calibration_kind("prose", "short") == "prose"


# ---------------------------------------------------------------- map reply budget

@pytest.mark.parametrize("instruction, words", [
    ("Summarize the methodology of each section.", 250),
    ("What does this say about memory use?", 250),
    ("Summarize in 100 words", 100),
    ("Give a 50-word summary", 50),
    ("In two sentences, what is this about?", 50),
    ("Answer in one line: does it mention the Pi?", 40),
    ("Translate this into French.", None),
    ("List every function and its arguments.", None),
    ("Rewrite it in plain English.", None),
])
def test_map_reply_budget(instruction, words):
    budget = map_reply_budget(instruction, cap=400)
    assert budget.words == words
    if words is None:
        assert budget.num_predict == 400
    else:
        assert words * 1.3 <= budget.num_predict <= min(400, words * 1.4 + 16)


@hsettings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.integers(1, 4000))
def test_map_reply_budget_never_passes_the_cap(instruction, cap):
    budget = map_reply_budget(instruction, cap)
    assert 1 <= budget.num_predict <= cap
    assert budget.words is None or budget.words >= 10


# ---------------------------------------------------------------- the estimate

@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3000), max_size=200), st.integers(1, 8000))
def test_reduce_batches_keep_order_and_fit(parts, room):
    batches = reduce_batches(parts, room)
    assert [i for b in batches for i in b] == list(range(len(parts)))
    for b in batches:
        assert len(b) == 1 or sum(min(parts[i], room) for i in b) <= room


def test_estimate_counts_calls_tokens_and_time():
    chunks = [1500] * 20
    e = estimate_analysis(chunks, map_fixed_tokens=100, map_reply_tokens=366, reduce_room_tokens=5000,
                          reduce_fixed_tokens=80, final_reply_tokens=512, speed=(50.0, 5.0))
    parts = 366 + 12
    per_batch = 5000 // parts                                  # 13 partials per reduce request
    first = math.ceil(20 / per_batch)
    assert e.map_calls == 20 and e.reduce_calls == first + 1
    assert e.prompt_tokens == 20 * 1600 + first * 80 + 20 * parts + 80 + first * parts
    assert e.generated_tokens == 20 * 366 + first * 366 + 512
    assert e.seconds == pytest.approx(e.prompt_tokens / 50 + e.generated_tokens / 5)
    assert e.calls == 20 + first + 1
    half = estimate_analysis(chunks, map_fixed_tokens=100, map_reply_tokens=366, reduce_room_tokens=5000,
                             reduce_fixed_tokens=80, final_reply_tokens=512, speed=(50.0, 5.0),
                             reply_share=0.5)
    assert half.generated_tokens < e.generated_tokens and half.seconds < e.seconds
    unknown = estimate_analysis(chunks, map_fixed_tokens=100, map_reply_tokens=366, reduce_room_tokens=5000,
                                reduce_fixed_tokens=80, final_reply_tokens=512, speed=None)
    assert unknown.seconds is None and unknown.prompt_tokens == e.prompt_tokens


@hsettings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 2000), min_size=1, max_size=60), st.integers(200, 8000),
       st.integers(1, 500))
@example(chunks=[1], room=200, reply=89)       # a room for one part at a time: the synthesis went uncounted
def test_more_chunks_never_cost_less(chunks, room, reply):
    kw = dict(map_fixed_tokens=50, map_reply_tokens=reply, reduce_room_tokens=room,
              reduce_fixed_tokens=60, final_reply_tokens=300, speed=(40.0, 4.0))
    a = estimate_analysis(chunks, **kw)
    b = estimate_analysis(chunks + [chunks[-1]], **kw)
    assert b.map_calls == a.map_calls + 1
    assert b.prompt_tokens > a.prompt_tokens and b.seconds > a.seconds
    assert a.document_tokens == sum(chunks)


def test_chunks_are_timed_at_a_long_prompts_speeds(tmp_path):
    """Issue 45: a card timed at a chat turn's speeds said 0.2 minutes for a run of 1.3 (the 135M model read
    665 tokens a second in chat turns, 283 in 1,500-token chunks; bench/bench_time_estimate.py)."""
    from app.budget import LONG_PROMPT_FACTORS, LONG_READ_PER_WRITE

    path = tmp_path / "calibration.json"
    cal = Calibration(path)
    cal.observe("m", messages(400), final(100, generated=100, prompt_s=0.2, eval_s=1.0))      # a chat turn
    assert cal.speed("m") == pytest.approx((500.0, 100.0))
    write = 100.0 * LONG_PROMPT_FACTORS[1]
    assert cal.speed("m", long_prompts=True) == pytest.approx((min(500.0 * LONG_PROMPT_FACTORS[0],
                                                                   write * LONG_READ_PER_WRITE), write))
    cal.observe("m", messages(6000), final(1500, generated=200, prompt_s=6.0, eval_s=4.0))    # a chunk
    assert cal.speed("m", long_prompts=True) == pytest.approx((250.0, 50.0))                  # its own, now
    assert Calibration(path).speed("m", long_prompts=True) == pytest.approx((250.0, 50.0))    # kept
    assert cal.speed("other", long_prompts=True) is None
    # a few dozen tokens read "fast" say little: reading is held to LONG_READ_PER_WRITE times writing
    cal.observe("n", messages(400), final(100, generated=100, prompt_s=0.05, eval_s=1.0))
    assert cal.speed("n", long_prompts=True) == pytest.approx((write * LONG_READ_PER_WRITE, write))
