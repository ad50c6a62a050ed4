"""Issue 33, "the first hour": what a new user stumbles on, through waitress against scripted Ollama.

A named file that is not there is never sent as if it were; any workspace file can be named
(extensionless, quoted with spaces); uploads keep their extension; the picker offers chat
models only; the small things.
"""

import html
import re
from pathlib import Path

import pytest

from conftest import make_config, send_and_finish


@pytest.fixture
def workspace(live):
    folder = Path(live.config.workspace)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _send(live, name, message, **form):
    response = live.post(f"/s/{name}/messages", data={"message": message, **form})
    assert response.status_code == 200, response.text
    return html.unescape(response.text)


def _last_user_message(scripted) -> str:
    return scripted.chats()[-1].body["messages"][-1]["content"]


# -- a named file that is not there ------------------------------------------------------------

def test_a_missing_file_is_said_and_nothing_is_sent(live, scripted, workspace):
    name = live.open_session()
    page = _send(live, name, "Summarize notes.md for me")
    assert "No such file" in page and "“notes.md”" in page
    assert str(live.config.workspace) in page                       # where it looked
    assert "Send without it" in page and "Re-send this message" not in page
    assert scripted.chats() == []                                    # the model never saw it
    turn = live.services.store.load(name).turns[-1]
    assert turn.user_text == "Summarize notes.md for me" and turn.reply is None


def test_a_misspelt_name_offers_its_near_match_in_one_tap(live, scripted, workspace):
    (workspace / "licenses.txt").write_text("MIT for the parser, Apache-2.0 for the rest.\n")
    name = live.open_session()
    page = _send(live, name, "What does licences.txt say?")
    assert "did you mean “licenses.txt”" in page and scripted.chats() == []
    fix = re.search(r'name="message" value="([^"]*)">\s*<input[^>]*name="model"[^>]*>\s*'
                    r'<button class="button" type="submit">Send with licenses.txt</button>', page)
    assert fix and fix.group(1) == "What does licenses.txt say?"
    response = live.post(f"/s/{name}/turns/0/resend", data={"message": fix.group(1), "model": "tiny:1b"})
    assert response.status_code == 200, response.text
    list(live.sse(f"/s/{name}/turns/0/stream"))
    assert '<file name="licenses.txt">' in _last_user_message(scripted)
    turns = live.services.store.load(name).turns
    assert len(turns) == 1 and turns[0].user_text == "What does licenses.txt say?"   # the refusal replaced


def test_send_without_it_tells_the_model_plainly(live, scripted, workspace):
    name = live.open_session()
    _send(live, name, "Summarize notes.md for me")
    response = live.post(f"/s/{name}/turns/0/resend", data={"message": "Summarize notes.md for me",
                                                            "model": "tiny:1b", "missing_ok": "1"})
    assert response.status_code == 200, response.text
    list(live.sse(f"/s/{name}/turns/0/stream"))
    sent = _last_user_message(scripted)
    assert "notes.md" in sent and "could not be read" in sent
    assert "Do not guess" not in sent and "not available" not in sent       # issue 41: told, not told to refuse
    turn = live.services.store.load(name).turns[-1]
    said = [n for n in turn.notes if "notes.md" in n]
    assert turn.reply and len(said) == 1 and "No workspace file named notes.md" in said[0]


def test_words_that_are_not_files_still_send(live, scripted, workspace):
    name = live.open_session()
    send_and_finish(live, name, "e.g. version 1.2 of example.com, i.e. the 'best' one")
    assert len(scripted.chats()) == 1


# -- any workspace file can be named -------------------------------------------------------------

def test_an_extensionless_file_is_named_by_its_real_name(live, scripted, workspace):
    (workspace / "Makefile").write_text("all:\n\techo built\n")
    name = live.open_session()
    send_and_finish(live, name, "What does the Makefile do?")
    assert '<file name="Makefile">' in _last_user_message(scripted)


def test_a_quoted_name_with_spaces_is_named(live, scripted, workspace):
    (workspace / "q3 report.md").write_text("# Q3\n\nRevenue rose 4%.\n")
    name = live.open_session()
    send_and_finish(live, name, 'Summarize "q3 report.md" please')
    assert '<file name="q3 report.md">' in _last_user_message(scripted)


def test_an_unquoted_name_with_spaces_is_named(live, scripted, workspace):
    (workspace / "q3 report.md").write_text("# Q3\n\nRevenue rose 4%.\n")
    name = live.open_session()
    send_and_finish(live, name, "Summarize q3 report.md please")        # issue 41: the workspace's own name
    assert '<file name="q3 report.md">' in _last_user_message(scripted)


def test_a_misspelt_name_with_spaces_offers_the_quoted_one(live, scripted, workspace):
    (workspace / "q3 report.md").write_text("# Q3\n\nRevenue rose 4%.\n")
    name = live.open_session()
    raw = live.post(f"/s/{name}/messages", data={"message": "Summarize q3 reprt.md please"}).text
    assert scripted.chats() == [] and "Send with q3 report.md" in raw
    values = [html.unescape(v) for v in re.findall(r'name="message" value="([^"]*)"', raw)]
    assert 'Summarize "q3 report.md" please' in values


# -- cards that cannot help -----------------------------------------------------------------------

def test_a_not_text_card_offers_no_resend(live, scripted, workspace):
    (workspace / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    name = live.open_session()
    page = _send(live, name, "Describe photo.png")
    assert "not text" in page and "Re-send this message" not in page and scripted.chats() == []


# -- uploads and the Files page ---------------------------------------------------------------------

LONG = ("quarterly-report-of-the-raspberry-pi-fan-noise-measurements-" * 4)[:223] + ".md"


def test_a_long_upload_keeps_its_extension_and_can_be_named(live, scripted, workspace):
    name = live.open_session()
    response = live.post("/files/upload", data={"session": name},
                         files={"file": (LONG, b"# Fan\n\nloud\n", "text/markdown")})
    assert response.status_code == 200, response.text
    stored = re.search(r'data-attached="([^"]+)"', response.text).group(1)
    assert stored.endswith(".md") and len(stored) <= 80 and (workspace / stored).is_file()
    send_and_finish(live, name, f"Summarize {stored}")
    assert f'<file name="{stored}">' in _last_user_message(scripted)


def test_the_files_page_names_the_folder_and_offers_nothing_for_a_binary(live, scripted, workspace):
    (workspace / "notes.md").write_text("# Notes\n")
    (workspace / "tool").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(1000) + bytes(range(256)) * 160)
    name = live.open_session()
    page = html.unescape(live.get(f"/files/?session={name}").text)
    assert str(live.config.workspace) in page
    rows = {m.group(1): m.group(2) for m in re.finditer(r'<strong class="file-name">([^<]+)</strong>(.*?)</li>',
                                                         page, re.S)}
    assert "Ask about it" in rows["notes.md"] and "Analyse in chunks" in rows["notes.md"]
    assert "Ask about it" not in rows["tool"] and "Analyse" not in rows["tool"]
    assert "tokens" not in rows["tool"] and "not text" in rows["tool"]


def test_analysing_a_binary_from_the_files_page_says_why_without_the_server_path(live, scripted, workspace):
    (workspace / "tool").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(1000))
    name = live.open_session()
    response = live.post(f"/s/{name}/analysis/direct", data={"file": "tool", "back": "files"},
                         headers={"HX-Request": ""})
    assert response.status_code == 200 and "/files/" in str(response.url)
    flash = html.unescape(re.search(r'<p class="flash error"[^>]*>(.*?)</p>', response.text, re.S).group(1))
    assert flash.startswith("tool cannot be analysed") and str(live.config.workspace_path) + "/" not in flash
    plain = live.post(f"/s/{name}/analysis/direct", data={"file": "tool"}, headers={"HX-Request": ""})
    assert plain.status_code == 400 and str(live.config.workspace_path) + "/" not in plain.text


# -- the picker offers chat models only -------------------------------------------------------------

def _picker(page: str) -> list[str]:
    select = re.search(r'<select id="model".*?</select>', page, re.S).group(0)
    return re.findall(r'<option value="([^"]+)"', select)


def test_the_picker_offers_chat_models_only(tmp_path, make_live):
    from scripted_ollama import ScriptedOllama

    with ScriptedOllama(models={"tiny:1b": 8192, "all-minilm": 512, "nomic-embed-text": 2048,
                                "granite-vectors": 512}) as server:
        server.capabilities = {"tiny:1b": ["completion"], "all-minilm": ["embedding"],
                               "granite-vectors": ["embedding"]}
        live = make_live(make_config(tmp_path, server.url))
        picker = _picker(live.get("/").text)
        # all-minilm and granite-vectors by what /api/show says; nomic-embed-text (no capabilities) by its name
        assert picker == ["tiny:1b"]


def test_harvey_check_shows_an_embedding_model_as_one(tmp_path):
    import os
    import subprocess
    import sys

    from scripted_ollama import ScriptedOllama

    root = Path(__file__).resolve().parent.parent
    with ScriptedOllama(models={"tiny:1b": 8192, "all-minilm": 512}) as server:
        server.capabilities = {"tiny:1b": ["completion"], "all-minilm": ["embedding"]}
        (tmp_path / "harvey.yaml").write_text(f"model_server:\n  url: {server.url}\n  model: tiny:1b\n"
                                              f"workspace: {tmp_path / 'ws'}\nsessions_dir: {tmp_path / 's'}\n"
                                              f"data_dir: {tmp_path / 'd'}\n")
        result = subprocess.run([sys.executable, "-m", "app.cli", "check"], cwd=tmp_path, capture_output=True,
                                text=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=30)
    assert "all-minilm: embedding model (retrieval search by meaning)" in result.stdout, result.stdout
    assert "* tiny:1b: trained context 8192" in result.stdout


# -- the session page lists each answer's sources ---------------------------------------------------

def test_the_session_page_lists_an_answers_sources_and_opens_their_passages(live):
    from bs4 import BeautifulSoup

    from cited import cited_session

    s = cited_session(live)
    soup = BeautifulSoup(live.get(f"/sessions/{s['name']}").text, "html.parser")
    listed = soup.select(".screenplay .sources a.cite")
    assert listed, "no Sources line on the session page"
    assert all(a["href"].startswith(f"/s/{s['name']}/turns/{s['turn']}/passages/") and
               a["hx-target"] == "#passage-body" for a in listed)
    chat = BeautifulSoup(live.get(f"/s/{s['name']}").text, "html.parser")
    assert [a["href"] for a in listed] == [a["href"] for a in chat.select(".sources a.cite")]
    opened = live.get(listed[0]["href"], headers={"HX-Request": "true"})
    assert opened.status_code == 200 and "passage" in opened.text


# -- the small things --------------------------------------------------------------------------------

from test_retrieval_answer import QUESTION, document_embeds, harbour  # noqa: E402,F401 (the fixture)
from waiting import wait_for  # noqa: E402


def test_a_stopped_passages_answer_reads_sensibly_and_its_button_says_what_it_cancels(harbour, scripted):
    scripted.embed_delay = 0.1
    live = harbour(embed_batch=2)
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": QUESTION})
    job = live.services.jobs.open_for(name)
    card = live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": QUESTION, "way": "retrieve"}).text
    assert "Cancel the answer" in card and "Cancel analysis" not in card
    wait_for(lambda: len(document_embeds(scripted)) >= 2, 60, "a batch embedded")
    assert live.post(f"/s/{name}/analysis/{job.id}/cancel").status_code == 204
    wait_for(lambda: job.state == "choose", 60, f"the job stopped (it is {job.state})")
    live.post(f"/s/{name}/analysis/{job.id}/after-cancel", data={"keep": "no"})
    wait_for(lambda: job.id not in live.services.jobs.jobs, 30, "the cancelled job recorded")
    page = html.unescape(live.get(f"/s/{name}").text)
    assert "Answer from 0 passages" not in page and "(0 in all)" not in page
    summary = re.search(r'<details class="card analysis-summary">\s*<summary>(.*?)</summary>', page, re.S)
    assert summary and "stopped before any passage was sent" in summary.group(1), page[-3000:]


def test_the_chunk_scene_says_when_the_job_started(tmp_path, scripted, make_live):
    from test_analysis import big_file_config, map_or_reduce

    def slow_synthesis(body):
        reply = map_or_reduce(body)
        if reply.text.startswith("SYNTHESIZED"):
            import time
            time.sleep(1.2)              # the scene is written at least a second after the start
        return reply

    scripted.script = slow_synthesis
    live = make_live(big_file_config(tmp_path, scripted))
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "Summarize the methodology in big.md"})
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "Summarize the methodology."})
    wait_for(lambda: job.state == "done" and job.id not in live.services.jobs.jobs, 60, "the analysis recorded")
    from datetime import datetime

    started = datetime.fromtimestamp(job.started).strftime("%H:%M:%S")
    page = html.unescape(live.get(f"/sessions/{name}").text)
    shown = re.search(r"<dt>Started</dt><dd>([^<]*)</dd>", page).group(1)
    assert shown.endswith(started), (shown, started)


def test_the_session_list_preview_keeps_underscores_in_code(live, scripted):
    from scripted_ollama import Reply

    scripted.script = Reply(text="Call `read_chunk_scene(max_len)` with _care_.")
    name = live.open_session()
    send_and_finish(live, name, "how?")
    listing = html.unescape(live.get("/sessions/").text)
    previews = re.findall(r'<p class="preview">([^<]*)</p>', listing)
    assert len(previews) == 1 and previews[0].startswith("Call read_chunk_scene(max_len) with care"), previews
    assert "_care" not in previews[0]                                  # emphasis marks still go


def test_retry_after_says_what_the_page_says(tmp_path, scripted, make_live, monkeypatch):
    import dataclasses

    import httpx

    from app import auth

    monkeypatch.setattr(auth, "SCRYPT_N", 2 ** 10)
    config = dataclasses.replace(make_config(tmp_path, scripted.url), auth="password")
    auth.set_password(config.data_path, "correct horse battery")
    live = make_live(config)
    checked = 0
    with httpx.Client(base_url=live.url, timeout=10.0) as client:
        for _ in range(6):
            token = client.get("/login").text.split('name="csrf_token" value="')[1].split('"')[0]
            response = client.post("/login", data={"password": "guess", "csrf_token": token})
            said = re.search(r"(?:Wait|try again in) (\d+) seconds", response.text)
            if "Retry-After" in response.headers:
                assert said and said.group(1) == response.headers["Retry-After"], (said, response.headers)
                checked += 1
    assert checked >= 1


def test_pyproject_names_its_license_the_way_current_setuptools_wants():
    import tomllib

    root = Path(__file__).resolve().parent.parent
    data = tomllib.loads((root / "pyproject.toml").read_text())
    assert data["project"]["license"] == "AGPL-3.0-or-later"          # SPDX string: no deprecation box
    assert any(r.replace(" ", "").startswith("setuptools>=77") for r in data["build-system"]["requires"])


def test_an_extensionless_lower_case_upload_is_named_in_quotes_and_found(live, scripted, workspace):
    name = live.open_session()
    response = live.post("/files/upload", data={"session": name}, files={"file": ("notes", b"the fan is loud\n")})
    named = html.unescape(re.search(r'data-attached="([^"]+)"', response.text).group(1))
    assert named == '"notes"'
    send_and_finish(live, name, f"Summarize {named}")
    assert '<file name="notes">' in _last_user_message(scripted)


def test_an_openai_servers_embedding_model_is_not_in_the_picker(tmp_path, make_live):
    import dataclasses

    from scripted_openai import ScriptedOpenAI

    with ScriptedOpenAI(models={"qwen-chat": 4096, "jina-vectors-v3": 512}) as server:
        server.types = {"qwen-chat": "llm", "jina-vectors-v3": "embeddings"}   # a name that does not say it embeds
        config = make_config(tmp_path, server.url, model="qwen-chat")
        config = dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, api="openai"))
        live = make_live(config)
        assert _picker(live.get("/").text) == ["qwen-chat"]


# -- name matching, word by word (app/filenames.py) ---------------------------------------------------

@pytest.mark.parametrize("text,found,missing", [
    ("Summarize notes.md for me", [], [("notes.md", "notes")]),
    ("What about licences.txt?", [], [("licences.txt", "licenses.txt")]),
    ("Explain the Makefile.", ["Makefile"], []),
    ("what is in LICENSE?", ["LICENSE"], []),
    ('Summarize "q3 report.md"', ["q3 report.md"], []),
    ("Summarize `q3 report.md` now", ["q3 report.md"], []),
    ('read "see licenses.txt" please', ["licenses.txt"], []),
    ("the notes are nice, and notes.txt", [], []),                  # in passing: a quiet note only
    ("Summarize notes.txt", [], [("notes.txt", "")]),
    ('the "notes" file', ["notes"], []),
    ("e.g. version 1.2 of example.com, i.e. it's 'fine' and v2.0", [], []),
    ("Compare docs/b.md and docs/a.md", ["docs/a.md"], [("docs/b.md", "docs/a.md")]),
])
def test_which_words_name_a_file(tmp_path, text, found, missing):
    from app.workspace import Workspace

    for name in ["licenses.txt", "Makefile", "LICENSE", "q3 report.md", "notes", "docs/a.md"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    named = Workspace(tmp_path).named(text)
    assert [f.name for f in named.found] == found
    assert [(m.name, m.suggestion) for m in named.missing] == missing


def test_the_refusal_reads_back_and_the_fix_quotes_a_name_with_spaces():
    from app import filenames

    missing = [filenames.Missing("licences.txt", "licenses.txt"), filenames.Missing("report.md", "q3 report.md")]
    detail = filenames.missing_text(missing, "./data/workspace")
    assert filenames.missing_in(detail) == missing
    assert filenames.with_name("Compare licences.txt and q3 report.md", "report.md", "q3 report.md") == \
        'Compare licences.txt and "q3 report.md"'
    assert filenames.mention("notes") == '"notes"' and filenames.mention("Makefile") == "Makefile"
    assert filenames.with_name("Summarize notes.md", "notes.md", "notes") == 'Summarize "notes"'   # found again
