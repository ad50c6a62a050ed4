"""The first hour, second round (issue 45): figures and names a new user sees."""
from __future__ import annotations

from pathlib import Path

from bs4 import BeautifulSoup

from app.analysis import record
from app.analysis.job import Job
from app.render import markdown
from conftest import make_config
from test_budget import send


def session_with_file(tmp_path, scripted, make_live, file: str, text: str, message: str, config=None):
    """The app with ``file`` in its workspace and ``message`` sent in a new session: (live, session)."""
    config = config or make_config(tmp_path, scripted.url)
    Path(config.workspace).mkdir(parents=True, exist_ok=True)
    (Path(config.workspace) / file).write_text(text)
    live = make_live(config)
    name = live.open_session()
    send(live, name, message)
    return live, name


def test_a_file_name_with_underscores_keeps_them_in_the_title_the_tab_and_the_list(tmp_path, scripted, make_live):
    live, name = session_with_file(tmp_path, scripted, make_live, "_pydecimal.py", "def add(a, b):\n    return a + b\n",
                                   "Summarize _pydecimal.py for me")
    page = BeautifulSoup(live.get(f"/s/{name}").text, "html.parser")
    assert "_pydecimal.py" in page.title.get_text()
    listing = BeautifulSoup(live.get("/").text, "html.parser").get_text()
    assert "Summarize _pydecimal.py for me" in " ".join(listing.split())


def test_the_partial_answers_note_keeps_a_file_names_underscores_in_its_italics():
    """``_Note: … of _pydecimal.py …_`` closed its italics at the name's underscore and dropped it."""
    job = Job(id="j", session="s", turn=0, file="_pydecimal.py", user_text="", instruction="Summarize.", model="m",
              file_tokens=1, remaining=1, chunks=47, size_tokens=600, boundary="", kind="source", fingerprint="",
              window=8192, bytes_per_token=4.0, selected=4)
    html = markdown(record.coverage_note(job))
    assert "<code>_pydecimal.py</code>" in html and "<em>" in html and "_Note" not in html


def test_the_session_file_and_its_page_do_not_tell_where_the_workspace_lives(tmp_path, scripted, make_live):
    live, name = session_with_file(tmp_path, scripted, make_live, "notes.md", "# Notes\n\nThe fan is loud.\n",
                                   "Summarize notes.md")
    workspace = Path(live.config.workspace)
    spmd = (live.services.store.folder / f"{name}.spmd").read_text()
    page = live.get(f"/sessions/{name}").text
    for text in (spmd, page):
        assert str(tmp_path) not in text and str(workspace.resolve()) not in text
    assert f"Workspace: {workspace.name}." in spmd


def test_the_empty_pages_example_names_a_file_the_workspace_has_or_says_it_has_none(tmp_path, scripted,
                                                                                      make_live):
    """Issue 45: the hint said "for example notes.md" in a workspace without it."""
    config = make_config(tmp_path, scripted.url)
    live = make_live(config)
    hint = BeautifulSoup(live.get(f"/s/{live.open_session()}").text, "html.parser").select_one("#empty-hint")
    text = " ".join(hint.get_text().split())
    assert "notes.md" not in text and "no files yet" in text and hint.select_one("a[href='/files/']")
    (Path(config.workspace) / "fan-noise.txt").write_text("The fan is loud at night.\n")
    hint = BeautifulSoup(live.get(f"/s/{live.open_session()}").text, "html.parser").select_one("#empty-hint")
    assert hint.select_one("code").get_text() == "fan-noise.txt"


def test_editing_the_first_message_renames_a_session_the_user_did_not_rename(tmp_path, scripted, make_live):
    """Issue 45: the title kept the first message's words after the message was edited."""
    from conftest import send_and_finish

    live = make_live(make_config(tmp_path, scripted.url))
    name = live.open_session()
    send_and_finish(live, name, "How loud is the fan at nihgt?")
    send_and_finish(live, name, "How loud is the fan at night?", retry_of=0)
    assert live.services.store.load(name).title == "How loud is the fan at night?"
    page = BeautifulSoup(live.get(f"/s/{name}").text, "html.parser")
    assert "How loud is the fan at night?" in page.title.get_text()
    other = live.open_session()                     # a name the user gave stays through an edit
    send_and_finish(live, other, "first words")
    live.post(f"/s/{other}/title", data={"title": "Fan project"})
    send_and_finish(live, other, "better first words", retry_of=0)
    assert live.services.store.load(other).title == "Fan project"


def test_the_files_page_gives_a_file_the_figure_its_card_gives(tmp_path, scripted, make_live):
    """Issue 45: the Files page said "about 41,478 tokens" for a PDF the card sized at 9,102 (the file's
    bytes over the chat's figure, where the card measures its text and its kind)."""
    import re

    from test_coverage import big_md_card

    live, name, job = big_md_card(make_live, make_config(tmp_path, scripted.url))
    assert job is not None and job.file_tokens > 0
    page = BeautifulSoup(live.get(f"/files/?session={name}").text, "html.parser")
    row = next(li for li in page.select("#files li") if li.select_one(".file-name").get_text() == "big.md")
    shown = int(re.sub(r"\D", "", row.select_one(".tokens").get_text()))
    assert shown == job.file_tokens, (shown, job.file_tokens)
    # a row past the first 30 loads the same figure when it is scrolled to
    fragment = live.get(f"/files/tokens?session={name}&name=big.md").text
    assert f"about {job.file_tokens:,} tokens" in fragment


def test_the_status_line_says_an_estimate_is_one_and_why_the_reply_cap_passes_its_reserve(tmp_path, scripted,
                                                                                            make_live):
    """Issue 45: "replies up to 1024 tokens" beside a table reserving "− reply 512", and "6832 of 8192 free"
    that became 7489 once the counter loaded, with no word that the first was an estimate."""
    live = make_live(make_config(tmp_path, scripted.url))
    name = live.open_session()
    status = BeautifulSoup(live.get(f"/s/{name}").text, "html.parser").select_one("#status")
    free = " ".join(status.select_one(".free").get_text().split())
    assert free.startswith("about ") and free.endswith("tokens free")          # no tokenizer here: estimated
    rows = {" ".join(th.get_text().split()): " ".join(td.get_text().split())
            for th, td in (tr.select("th, td") for tr in status.select("table.breakdown tr"))}
    reserve = int(rows["− reply (kept free for the reply)"])
    cap = rows["reply cap (chat.reply_tokens)"]
    assert cap.startswith(f"{live.config.chat.reply_tokens}: the {reserve} kept free, and the rest from what is free")
    assert "sizes are estimates" in rows["bytes per token"]


def test_a_long_upload_name_keeps_its_start_and_its_end_cut_where_words_end(tmp_path, scripted, make_live):
    """Issue 45: "…final_version_approved_by_the.txt" lost the end of the name (its date) mid-phrase."""
    import re

    live = make_live(make_config(tmp_path, scripted.url))
    name = live.open_session()
    long = ("Minutes of the annual general meeting of the allotment society, final version approved by the "
            "board 2026-12-01.txt")
    response = live.post("/files/upload", data={"session": name}, files={"file": (long, b"Minutes.\n", "text/plain")},
                         headers={"HX-Request": "true"})
    stored = re.search(r'data-attached="([^"]+)"', response.text).group(1)
    assert len(stored) <= 80 and stored.endswith("board_2026-12-01.txt"), stored
    assert stored.startswith("Minutes_of_the_annual_general_meeting") and "--" in stored
    assert (Path(live.config.workspace) / stored).read_bytes() == b"Minutes.\n"


def test_the_cards_time_row_follows_the_scope_and_says_what_it_rests_on(tmp_path, scripted, make_live):
    """Issue 45: the Time row gave the all-chunks minutes while the choice above it read the first 20, and did
    not say where its speed came from."""
    import dataclasses

    from test_analysis import big_markdown

    config = make_config(tmp_path, scripted.url)
    config = dataclasses.replace(config, chunking=dataclasses.replace(config.chunking, max_chunks=3))
    live, name = session_with_file(tmp_path, scripted, make_live, "big.md", big_markdown(), "hello",
                                   config)                     # "hello": the model's speed on this machine, measured
    from app.modelserver.base import Usage
    # a slow machine's speeds, so the minutes show: 100 tokens read in 10 s, 100 written in 50 s
    live.services.calibration.observe("tiny:1b", [{"content": "x" * 400}], Usage(
        prompt_tokens=100, generated_tokens=100, seconds=60, prompt_seconds=10, generate_seconds=50))
    speed = live.services.calibration.speed("tiny:1b")
    assert speed
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    assert job is not None and job.chunks > 3
    card = BeautifulSoup(live.get(f"/s/{name}").text, "html.parser").select_one(".card.alert")
    time_row = " ".join(card.find("dt", string="Time").find_next("dd").get_text().split())
    assert f"for all {job.chunks} chunks" in time_row and "for the first 3" in time_row, time_row
    # the whole run's estimate (maps, combines, the synthesis), at a long prompt's speeds
    assert f"about {round(job.estimated_seconds / 60, 1)} minutes on this machine for all" in time_row
    long_speed = live.services.calibration.speed("tiny:1b", long_prompts=True)
    assert long_speed[0] < speed[0] and long_speed[1] < speed[1]
    more = " ".join(card.select_one("details.more").get_text().split())          # what it rests on, one tap away
    assert f"{round(speed[0])} tokens a second reading" in more and "corrected by each chunk" in more
