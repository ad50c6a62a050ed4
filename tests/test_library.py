"""The user's prompt library (issue #15): earlier chunk instructions offered on the alert card."""

import os
import re
import shutil
from datetime import datetime, timedelta
from html import unescape
from pathlib import Path

import pytest

from app.analysis import library
from app.sessions import fountain
from app.sessions.index import INSTRUCTION_CHARS, INSTRUCTIONS_PER_SESSION, Instruction, SessionIndex
from app.sessions.store import SessionStore
from test_analysis import big_file_config, map_or_reduce, wait_settled

DATA = Path(__file__).parent / "data" / "spmd"
T0 = datetime(2026, 7, 1, 9, 0, 0)


def mined(text, file, days=0, session="harvey-session-20260701-090000"):
    return Instruction(text, file, T0 + timedelta(days=days), session)


# -- ranking and dedup ------------------------------------------------------------------------

def test_same_extension_then_same_kind_then_the_rest_newest_first_within_each():
    items = [mined("Old markdown.", "notes.md", 0), mined("Newest text file.", "log.txt", 9),
             mined("New markdown.", "a/b/README.MD", 5), mined("A Python file.", "x.py", 8),
             mined("A markdown page.", "page.markdown", 7), mined("Prose.", "essay.rst", 3)]
    got = [s.label for s in library.suggest(items, "big.md")]
    assert got == ["New markdown.", "Old markdown.", "A markdown page.",
                   "Newest text file.", "A Python file."]       # five at most: "Prose." (oldest) goes


def test_paged_documents_go_together_and_source_with_source():
    items = [mined("From a docx.", "r.docx", 1), mined("From markdown.", "r.md", 5), mined("From a pdf.", "old.pdf", 0)]
    assert [s.label for s in library.suggest(items, "report.PDF")] == ["From a pdf.", "From a docx.", "From markdown."]
    items = [mined("Prose.", "r.txt", 5), mined("Go code.", "main.go", 1), mined("Same ext.", "b.py", 0)]
    assert [s.label for s in library.suggest(items, "a.py")] == ["Same ext.", "Go code.", "Prose."]


def test_no_timestamp_counts_as_oldest_and_the_session_name_breaks_ties():
    items = [Instruction("Undated.", "a.md", None, "harvey-session-20270101-000000"),
             mined("Earlier session.", "a.md", 1, "harvey-session-20260101-000000"),
             mined("Later session.", "a.md", 1, "harvey-session-20260201-000000")]
    assert [s.label for s in library.suggest(items, "b.md")] == ["Later session.", "Earlier session.", "Undated."]


def test_the_same_instruction_modulo_whitespace_case_and_directive_is_offered_once_best_variant_first():
    items = [mined("summarize   EACH\nsection.", "x.txt", 9),
             mined("Summarize each section. @llama3", "a.md", 2),
             mined("Summarize each section.", "b.md", 1),
             mined("List the tables.", "c.md", 0)]
    got = library.suggest(items, "big.md")
    assert [(s.label, s.text, s.model, s.file) for s in got] == [
        ("Summarize each section.", "Summarize each section. @llama3", "llama3", "a.md"),
        ("List the tables.", "List the tables.", "", "c.md")]


def test_the_prefilled_instruction_and_empty_ones_are_not_offered():
    items = [mined("Summarize the methodology in big.md", "big.md", 1), mined("@llama3", "big.md", 2),
             mined("  ", "big.md", 3), mined("Find the dates.", "big.md", 0)]
    got = library.suggest(items, "big.md", current="summarize the  methodology in big.md @other")
    assert [s.text for s in got] == ["Find the dates."]


def test_limit():
    items = [mined(f"Instruction {i}.", "a.md", i) for i in range(12)]
    assert [s.label for s in library.suggest(items, "a.md", limit=3)] == ["Instruction 11.", "Instruction 10.",
                                                                         "Instruction 9."]
    assert len(library.suggest(items, "a.md")) == library.SHOWN


# -- mined from session files, through the index --------------------------------------------

def analysis_turn(instruction, file="report.md", when=T0):
    a = fountain.ChunkAnalysis(file, 2, "tiny:1b", "paragraph", 1500, instruction, when, ["ok", "ok"], "ok")
    return fountain.Turn(when=when, user_text=f"Summarize {file}", model="tiny:1b", reply="The answer.", analysis=a)


@pytest.fixture
def store(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    return SessionStore(folder, user_name="tester", backend="ollama", workspace=str(tmp_path))


def test_the_index_keeps_both_layouts_instructions_and_learns_the_recorders_asking_message(store):
    """Issue 26: Harvey's recorder writes no instruction; its analysis of a message learns that message,
    its /read-chunks (no message, no instruction in the file) gives nothing."""
    shutil.copy(DATA / "seed000_chunk.spmd", store.folder / "harvey-session-20260627-100400.spmd")
    shutil.copy(DATA / "harvey_chunk_recorder.spmd", store.folder / "harvey-session-20260628-090000.spmd")
    name = store.create("tiny:1b", now=T0).name
    store.append_turn(name, analysis_turn("Extract every date.", "plan.pdf", T0))
    got = store.index().instructions()
    assert [(i.text, i.file, i.when, i.session) for i in got] == [
        ("Extract every date.", "plan.pdf", T0, name),
        ("Summarize report.md for me.", "report.md", datetime(2026, 6, 28, 9, 0, 10),
         "harvey-session-20260628-090000"),
        ("Summarize the methodology and findings of each section. @llama3", "document.md",
         datetime(2026, 6, 27, 10, 4, 8), "harvey-session-20260627-100400")]


def test_a_write_through_the_store_is_seen_even_when_mtime_and_size_stay_the_same(store):
    name = store.create("tiny:1b", now=T0).name
    store.append_turn(name, analysis_turn("Extract every date."))
    index = store.index()
    assert [i.text for i in index.instructions()] == ["Extract every date."]
    path = store.path(name)
    before = path.stat()
    turn = store.load(name).turns[0]
    store.replace_turn(name, 0, analysis_turn("Extract every name."), expect=turn.user_text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))     # a coarse clock: same stamp, same size
    assert path.stat().st_size == before.st_size
    assert [i.text for i in index.instructions()] == ["Extract every name."]


def test_memory_is_bounded_per_session(store):
    name = store.create("tiny:1b", now=T0).name
    store.append_turn(name, analysis_turn("x" * (INSTRUCTION_CHARS + 1)))
    for i in range(INSTRUCTIONS_PER_SESSION + 5):
        store.append_turn(name, analysis_turn(f"Instruction {i}.", when=T0 + timedelta(minutes=i)))
    got = SessionIndex(store.folder).instructions()
    assert len(got) == INSTRUCTIONS_PER_SESSION
    assert got[0].text == f"Instruction {INSTRUCTIONS_PER_SESSION + 4}." and got[-1].text == "Instruction 5."


# -- through waitress ---------------------------------------------------------------------------

def offered(fragment: str) -> list[str]:
    """The suggestions' fill texts, in the order the card shows them."""
    return [unescape(t) for t in re.findall(r'<button class="button suggestion"[^>]*data-text="([^"]*)"', fragment)]


@pytest.fixture
def app(tmp_path, scripted, make_live):
    scripted.script = map_or_reduce
    config = big_file_config(tmp_path, scripted)
    folder = Path(config.sessions_dir)
    folder.mkdir(parents=True)
    # The terminal Harvey's files, as it writes them into a shared folder (one with, one without instructions).
    shutil.copy(DATA / "seed000_chunk.spmd", folder / "harvey-session-20260627-100400.spmd")
    shutil.copy(DATA / "harvey_chunk_recorder.spmd", folder / "harvey-session-20260628-090000.spmd")
    live = make_live(config)
    store = live.services.store
    for day, (instruction, file) in enumerate([("List the tables of each chunk.", "data.csv"),
                                               ("Find every date. @tiny:1b", "old.md"),
                                               ("Quote the definitions.", "notes.md"),
                                               ("Name the functions.", "main.py")]):
        when = T0 + timedelta(days=day)
        name = store.create("tiny:1b", now=when).name
        store.append_turn(name, analysis_turn(instruction, file, when))
    return live, scripted


def test_a_new_card_lists_past_instructions_best_first_and_a_new_one_shows_up_next_time(app):
    live, scripted = app
    name = live.open_session()
    fragment = live.post(f"/s/{name}/messages", data={"message": "Summarize the methodology in big.md"}).text
    # The terminal Harvey's analysis of "Summarize report.md for me." offers that message (issue 26).
    assert offered(fragment) == ["Quote the definitions.", "Find every date. @tiny:1b", "Summarize report.md for me.",
                                 "Summarize the methodology and findings of each section. @llama3",
                                 "Name the functions."]
    assert ">Find every date.</span>" in fragment and "@tiny:1b</span>" in fragment   # label without, meta with
    assert scripted.chats() == []
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Extract  the methodology only."})
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=30))
    wait_settled(live, job)
    fragment = live.post(f"/s/{name}/messages", data={"message": "And the results in big.md?"}).text
    assert offered(fragment)[:2] == ["Extract  the methodology only.", "Quote the definitions."]
    assert len(offered(fragment)) == library.SHOWN


def test_no_past_instruction_no_list(tmp_path, scripted, make_live):
    scripted.script = map_or_reduce
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    fragment = live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"}).text
    assert "Answer from the most relevant passages" in fragment and 'class="library"' not in fragment
