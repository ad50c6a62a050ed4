"""A full disk (or an SD card remounted read-only) under a running analysis (issue 35, item 5),
through waitress and the scripted Ollama server, on a real small filesystem: a tmpfs mounted for
the data folder.  The job's state cannot be saved: the session is given back, the card says why,
Cancel works, and when the disk has room again Retry finishes the job."""

import errno
import os
import re
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import require
from test_analysis import big_file_config, map_or_reduce, wait_settled
from waiting import wait_for

GATE_S = 60.0


@contextmanager
def tmpfs(folder: Path):
    """A 4 MB tmpfs mounted at ``folder`` (made here), unmounted at the end whatever happened."""
    folder.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True).returncode == 0
    require(mounted, "mounting a tmpfs needs root (a full disk is tested on a real small filesystem)")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs as the data folder."""
    with tmpfs(tmp_path / "data") as data:
        yield data


def fill(folder: Path) -> Path:
    """Write a file until the filesystem says it is full (unbuffered: a buffered file would flush what the
    disk refused once more when it is closed, and fail there)."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for size in (65536, 512, 1):
            try:
                while fh.write(b"\0" * size):
                    pass
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


@pytest.fixture
def held(tmp_path, scripted, make_live, small_disk):
    """The app with its data on the small disk; the map call of chunk 2 waits for ``gate``."""
    gate, arrived = threading.Event(), threading.Event()

    def script(body):
        if re.search(r"Chunk 2 of \d+", body["messages"][-1]["content"]):
            arrived.set()
            gate.wait(GATE_S)
        return map_or_reduce(body)

    scripted.script = script
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize each part."})
    assert arrived.wait(GATE_S), "the map call of chunk 2 never came"
    yield live, name, job, gate, small_disk
    gate.set()


def session_free(live, name) -> bool:
    return live.services.activities.holder(name) is None


def test_a_job_whose_state_cannot_be_saved_gives_its_session_back_and_says_why(held, scripted):
    live, name, job, gate, data = held
    filler = fill(data)
    gate.set()
    wait_for(lambda: job.state == "interrupted" and session_free(live, name), 60,
             f"the job given back (it is {job.state}: {job.message})")
    assert "the disk is full" in job.message
    card = live.get(f"/s/{name}").text
    assert "the disk is full" in card
    # the session takes a message again (the session files are on another disk here)
    reply = live.post(f"/s/{name}/messages", data={"message": "Hello again"})
    assert reply.status_code == 200 and "analysis is running" not in reply.text
    turn = len(live.services.store.load(name).turns) - 1
    list(live.sse(f"/s/{name}/turns/{turn}/stream"))
    # room again: Retry finishes the job, no finished chunk read twice
    filler.unlink()
    live.post(f"/s/{name}/analysis/{job.id}/resume")
    wait_settled(live, job, 60)
    maps = [c for c in scripted.chats() if re.search(r"^Chunk 1 of \d+", c.body["messages"][-1]["content"], re.M)]
    assert len(maps) == 1                                    # chunk 1 was saved before the disk filled
    assert job.state == "done"


def test_cancel_with_a_full_disk_gives_the_session_back(held, scripted):
    live, name, job, gate, data = held
    fill(data)
    response = live.post(f"/s/{name}/analysis/{job.id}/cancel")
    assert response.status_code in (200, 204)
    gate.set()
    wait_for(lambda: job.state not in ("queued", "running", "synthesizing", "cancelling")
             and session_free(live, name), 60, f"the job given back (it is {job.state}: {job.message})")
    assert "the disk is full" in job.message
    assert live.get(f"/s/{name}").status_code == 200


def test_start_with_a_full_disk_says_so_and_starts_once_there_is_room(tmp_path, scripted, make_live, small_disk):
    scripted.script = map_or_reduce
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize big.md"})
    job = live.services.jobs.open_for(name)
    filler = fill(small_disk)
    card = live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize each part."})
    assert card.status_code == 200 and "the disk is full" in card.text
    assert job.state == "proposed" and scripted.chats() == []
    filler.unlink()
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize each part."})
    wait_settled(live, job, 60)


def test_an_sd_card_remounted_read_only_gives_the_session_back(held, scripted):
    live, name, job, gate, data = held
    assert subprocess.run(["mount", "-o", "remount,ro", str(data)], capture_output=True).returncode == 0
    try:
        gate.set()
        wait_for(lambda: job.state == "interrupted" and session_free(live, name), 60,
                 f"the job given back (it is {job.state}: {job.message})")
        assert "the disk is read-only" in job.message
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(data)], capture_output=True)
    live.post(f"/s/{name}/analysis/{job.id}/resume")
    wait_settled(live, job, 60)


# -- issue 43 item 1: the disk fills while a chat reply streams ------------------------------------

@pytest.fixture
def small_sessions(tmp_path):
    """A 4 MB tmpfs as the sessions folder itself."""
    with tmpfs(tmp_path / "sessions") as sessions:
        yield sessions


def test_a_chat_reply_the_full_disk_cannot_take_stays_on_the_page_and_resend_saves_it(
        tmp_path, scripted, make_live, small_sessions):
    from conftest import make_config
    from scripted_ollama import Reply
    from test_chat import follow_reply, send

    gate, arrived = threading.Event(), threading.Event()
    answer = "The tide turns twice a day, and the harbour gates open an hour before high water."

    def script(body):
        arrived.set()
        gate.wait(GATE_S)                # the reply streams while the disk fills
        return Reply(text=answer)

    scripted.script = script
    live = make_live(make_config(tmp_path, scripted.url))
    name = live.open_session()
    send(live, name, "When do the gates open?")
    assert arrived.wait(GATE_S)
    filler = fill(small_sessions)
    gate.set()
    _, final = follow_reply(live, name)
    assert answer in final and "Not saved" in final and "the disk is full" in final
    assert "Re-send this message" in final
    page = live.get(f"/s/{name}").text                        # a reload shows it too
    assert answer in page and "Not saved" in page
    nxt = live.post(f"/s/{name}/messages", data={"message": "And at night?"})
    assert nxt.status_code == 507 and "the disk is full" in nxt.text and "still in the box" in nxt.text
    assert nxt.headers["HX-Retarget"] == "#composer-note"
    filler.unlink()                                            # room again: Re-send works and is saved
    scripted.script = lambda body: Reply(text=answer)
    again = live.post(f"/s/{name}/turns/0/resend", data={"message": "When do the gates open?"})
    assert again.status_code == 200, again.text
    follow_reply(live, name)
    saved = live.services.store.load(name).turns
    assert [t.reply for t in saved] == [answer] and live.services.store.unsaved(name) is None
    assert "Not saved" not in live.get(f"/s/{name}").text
