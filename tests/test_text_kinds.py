"""The token estimate's one guess about meaning, measured (issue 43 item 4): what kind of text a file is.

Where no tokenizer is at hand the app sizes a file as its bytes over a bytes-per-token figure, and
that figure depends on the kind of text: ``budget.calibration_kind`` guesses it.  A guess that says
"another language" for an English word list doubles the file's size (a file that fits is not sent);
one that says "English prose" for a log halves it (the window overflows).  Measured here on two
labelled corpora of realistic files (``tests/data/text_kinds``: ``tuned.yaml`` used to set the
rules, ``held_out.yaml`` written afterwards by a helper that never saw them), by the labels and by
the real tokenizers' counts, and through waitress with the issue's case.
"""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import yaml

from app.budget import KIND_FACTORS, calibration_kind
from conftest import make_config
from test_budget import send

DATA = Path(__file__).parent / "data" / "text_kinds"
EXPECTED = {"english": "prose", "foreign": "foreign", "data": "data"}


def corpus(name: str) -> list[dict]:
    return yaml.safe_load((DATA / name).read_text(encoding="utf-8"))


def scores(items: list[dict]) -> dict[str, tuple[float, float]]:
    """Precision and recall of each label's kind."""
    said = [calibration_kind("prose", item["text"]) for item in items]
    out = {}
    for label, kind in EXPECTED.items():
        hits = sum(1 for item, k in zip(items, said) if k == kind and item["label"] == label)
        called = sum(1 for k in said if k == kind)
        truth = sum(1 for item in items if item["label"] == label)
        out[label] = (hits / called if called else 1.0, hits / truth if truth else 1.0)
    return out


# Pinned at what was measured.  Tuned: every label right but one English list of quantities
# ("- 3 x red apple", which tokenizes at 0.59 of English prose: sized as few words, on purpose).
# Held-out, first run: English 1.0 / 1.0, foreign 1.0 / 0.95, data 0.94 / 1.0 (a Hindi text taken
# for data: its vowel signs are combining marks, not letters; they count as letters since).
# Main's guess before issue 43: tuned English .80 / .57, foreign .33 / 1.0, data - / 0 (it had no
# "data"); held-out English .86 / .79, foreign .53 / 1.0.
PINNED = {
    "tuned.yaml": {"english": (1.0, 0.85), "foreign": (0.83, 1.0), "data": (1.0, 1.0)},
    "held_out.yaml": {"english": (1.0, 1.0), "foreign": (1.0, 1.0), "data": (1.0, 1.0)},
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_kind_guess_is_measured_on_labelled_files(name):
    got = scores(corpus(name))
    for label, (precision, recall) in PINNED[name].items():
        assert got[label][0] >= precision - 1e-9 and got[label][1] >= recall - 1e-9, (label, got[label])


def test_english_words_without_small_words_are_not_another_language():
    """The issue's files: English words, none of "the", "of", "and" (a keyword list, a list of titles)."""
    keywords = "\n".join(f"spare {n} cable, blue {n} router, old {n} battery" for n in
                         ("garden", "kitchen", "office", "attic", "garage") * 12)
    assert calibration_kind("prose", keywords) == "prose"
    german = "Der Hund und die Katze sind nicht im Garten, sie sind mit dem Kind auf der Straße. " * 8
    assert calibration_kind("prose", german) == "foreign"
    log = "\n".join(f"2026-12-06 10:{m:02d}:{m % 60:02d} INFO worker[{4000 + m}] job {m * 37} done in 0.{m}s"
                    for m in range(40))
    assert calibration_kind("prose", log) == "data"
    assert calibration_kind("source", log) == "source"          # code keeps its own kind


# -- by the tokenizers' own counts ----------------------------------------------------------

def errors(counter, items: list[dict]) -> list[tuple[str, float]]:
    """Each text's estimate error when the chat figure is the corpus's English prose figure (what a
    chat calibration learns): estimated tokens / true tokens - 1."""
    bpt = {item["id"]: len(item["text"].encode()) / counter.count(item["text"]) for item in items}
    english = statistics.median(bpt[i["id"]] for i in items if i["label"] == "english")
    return [(item["id"], bpt[item["id"]] / (english * KIND_FACTORS[calibration_kind("prose", item["text"])]) - 1)
            for item in items]


@pytest.fixture(scope="module")
def counters():
    from vocab import gemma_gguf, model_info, smollm_gguf
    from app.modelserver.tokens import counter_from_info
    return {"SmolLM2": counter_from_info(model_info(smollm_gguf())),
            "Gemma 3": counter_from_info(model_info(gemma_gguf()))}


# Measured on both corpora together (80 texts): how many the estimate sizes below their true count by
# more than the 20 % the estimate path keeps free (chunking.threshold 0.8: the window could overflow),
# and how many at more than twice their count (a file that fits is refused).  Main's guess: SmolLM2 25
# under (logs and CSV at half their count) and 4 doubled (English keyword lists, headlines, notes);
# Gemma 3 22 and 14.  Now SmolLM2 6 and 0 (a GPS track, a film list with years, Korean, Japanese,
# Vietnamese); Gemma 3 5 and 9: its 262k vocabulary packs other languages twice as densely as
# SmolLM2's, which the prior ("foreign" 0.5) is set for, until the kind's first call teaches its figure.
PINNED_ERRORS = {"SmolLM2": (6, 0), "Gemma 3": (5, 9)}


@pytest.mark.parametrize("model", sorted(PINNED_ERRORS))
def test_the_estimate_is_cautious_without_doubling_by_the_real_tokenizers(counters, model):
    items = corpus("tuned.yaml") + corpus("held_out.yaml")
    measured = errors(counters[model], items)
    under = [i for i, e in measured if e < -0.20]
    doubled = [i for i, e in measured if e > 1.0]
    most_under, most_doubled = PINNED_ERRORS[model]
    assert len(under) <= most_under and len(doubled) <= most_doubled, (under, doubled)


# -- through the app -------------------------------------------------------------------------

def test_files_whose_calibrated_size_fits_are_sent(tmp_path, scripted, make_live):
    """Issue 43 item 4: three plain-text files of about 2,600 tokens, 6,800 free, six calibration samples
    agreeing at 3.6 bytes a token, no tokenizer: two files are sent, not one."""
    scripted.token_ratio = 4 / 3.6
    config = make_config(tmp_path, scripted.url)
    workspace = Path(config.workspace)
    workspace.mkdir(parents=True)
    for n, room in enumerate(("garden", "kitchen", "office")):
        rows = [f"{room} shelf {chr(65 + i % 26)}: spare cable, blue router, old battery, paper lantern, glass jar"
                for i in range(110)]
        (workspace / f"inventory-{n}.txt").write_text("\n".join(rows)[:9400])
    live = make_live(config)
    name = live.open_session()
    for i in range(6):
        send(live, name, f"note {i}: " + "keep this in mind for later please " * 30)
    assert live.services.calibration.samples("tiny:1b") >= 6
    fragment = send(live, name, "Compare inventory-0.txt, inventory-1.txt and inventory-2.txt")
    prompt = scripted.chats()[-1].body["messages"][-1]["content"]
    sent = [n for n in range(3) if f'<file name="inventory-{n}.txt">' in prompt]
    assert len(sent) == 2, fragment
    assert "1 file exceeded the context budget" in fragment
