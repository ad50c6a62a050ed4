"""Issue 41: a pasted link, log, trace or command is never stopped as "No such file"; what the user asks
about is read, or said to be missing.

The guess (``app/filenames.py``, which words name a workspace file and whether the user asked about it)
is run over a labelled corpus of realistic messages written for this (``data/mentions/messages.yaml``:
links, domains, traces, logs, shell sessions, code, config, remarks, and names in every form docs/using.md
allows) and its precision and recall are printed and pinned here (style-examples §18).  A third of the
corpus also goes end to end: through waitress to a scripted Ollama, checking what the model was sent.

Labels: ``read`` the workspace files the user's words point at (they must be read), ``missing`` names
the user plainly asked about that are not there (the message stops with "No such file"), ``outside``
paths outside the workspace the user asked to read (refused in those words).  Anything else in a
message must neither stop it nor be read.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from app.analysis import mapreduce
from conftest import LiveApp, make_config
from waiting import wait_for

DATA = Path(__file__).parent / "data" / "mentions"
# "tuned": the messages the rules were written against; "held-out": 188 more, written by someone else after
# the rules were done, measured once as they were (0 false stops of 106; reads precision 0.940, recall
# 0.913; stops precision 0.920, recall 0.885), then its general misses fixed.
CORPORA = {name: yaml.safe_load((DATA / file).read_text("utf-8"))
           for name, file in (("tuned", "messages.yaml"), ("held-out", "held_out.yaml"))}
for _name, _corpus in CORPORA.items():
    for _message in _corpus["messages"]:
        _message.setdefault("workspace", _corpus["workspace"])
        _message["corpus"] = _name
MESSAGES = [m for corpus in CORPORA.values() for m in corpus["messages"]]

# What the guess must keep (as measured; a change that lowers one fails).
PINNED = {"false_stops": 0, "read_precision": 0.98, "read_recall": 1.0, "stop_precision": 1.0, "stop_recall": 1.0}
# Known misses, each named with why (style-examples §19): any other wrong message fails the test.
KNOWN_MISSES = {
    "filekind-compose-yaml-name": "\"Is it docker-compose.yml or compose.yaml nowadays?\" asks which name Docker "
                                  "looks for; the workspace has homelab/docker-compose.yml, named in the user's own "
                                  "prose, so it is read (one chip, undone in one tap)",
}


def _workspace_of(message: dict) -> list[str]:
    return message["workspace"]


def _make(root: Path, files: list[str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".pdf"):                  # a real PDF, so a message that names it is sent with it
            from fpdf import FPDF

            pdf = FPDF()
            pdf.add_page()
            pdf.set_font("helvetica", size=12)
            pdf.cell(0, 10, f"The file {name}.")
            pdf.output(str(path))
        else:
            path.write_text(f"The file {name}.\n", "utf-8")


@dataclass
class Tally:
    read_right: int = 0
    read_wrong: int = 0          # read, not labelled
    read_missed: int = 0         # labelled, not read
    stops_right: int = 0         # a labelled missing/outside name said
    stops_wrong: int = 0         # said, not labelled
    stops_missed: int = 0
    false_stops: list[str] = field(default_factory=list)      # messages that name nothing missing, stopped
    wrong: list[str] = field(default_factory=list)

    def ratio(self, right: int, other: int) -> float:
        return right / (right + other) if right + other else 1.0


def judge(message: dict, named) -> tuple[set, set, set, set, set, set]:
    """(read, expected read, missing said, expected missing, outside said, expected outside)."""
    read = {f.name for f in named.found}
    said = {m.name for m in named.missing if not m.outside}
    outside = {m.name for m in named.missing if m.outside}
    return (read, set(message.get("read") or []), said, set(message.get("missing") or []),
            outside, set(message.get("outside") or []))


def test_the_corpus_is_what_the_issue_asks_for():
    ids = [(m["corpus"], m["id"]) for m in MESSAGES]
    assert len(ids) == len(set(ids)), "ids are unique in each corpus"
    plain = [m for m in MESSAGES if not (m.get("read") or m.get("missing") or m.get("outside"))]
    naming = [m for m in MESSAGES if m.get("read") or m.get("missing") or m.get("outside")]
    assert len(MESSAGES) >= 150 and len(plain) >= 100 and len(naming) >= 50
    assert len(CORPORA["tuned"]["messages"]) >= 150 and len(CORPORA["held-out"]["messages"]) >= 120
    for m in MESSAGES:
        assert set(m.get("read") or []) <= set(_workspace_of(m)), m["id"]
        assert not set(m.get("missing") or []) & set(_workspace_of(m)), m["id"]
    kinds = {m["kind"] for m in plain}
    assert {"link", "domain", "trace", "log", "shell", "code"} <= kinds


def test_no_message_that_names_no_file_is_stopped_and_what_is_asked_is_read(tmp_path, capsys):
    from app.workspace import Workspace

    tallies = {name: Tally() for name in CORPORA}
    roots: dict[tuple, Path] = {}
    for message in MESSAGES:
        tally = tallies[message["corpus"]]
        files = tuple(_workspace_of(message))
        if files not in roots:
            roots[files] = tmp_path / f"ws{len(roots)}"
            _make(roots[files], list(files))
        named = Workspace(roots[files]).named(message["text"])
        read, want_read, said, want_said, outside, want_outside = judge(message, named)
        tally.read_right += len(read & want_read)
        tally.read_wrong += len(read - want_read)
        tally.read_missed += len(want_read - read)
        stops, want_stops = said | outside, want_said | want_outside
        tally.stops_right += len(stops & want_stops)
        tally.stops_wrong += len(stops - want_stops)
        tally.stops_missed += len(want_stops - stops)
        if stops and not want_stops:
            tally.false_stops.append(message["id"])
        for name, near in (message.get("suggest") or {}).items():
            got = next((m.suggestion for m in named.missing if m.name == name), None)
            if got != near:
                tally.wrong.append(f"{message['id']}: suggested {got!r} for {name}, not {near!r}")
        if (read, said, outside) != (want_read, want_said, want_outside):
            tally.wrong.append(f"{message['id']}{' (known)' if message['id'] in KNOWN_MISSES else ''}: read {sorted(read)} (want {sorted(want_read)}), missing "
                               f"{sorted(said)} (want {sorted(want_said)}), outside {sorted(outside)} "
                               f"(want {sorted(want_outside)})")
    with capsys.disabled():
        print()
        for name, tally in tallies.items():
            figures = _figures(tally)
            print(f"issue 41, {name} corpus: {len(CORPORA[name]['messages'])} messages; " + ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()))
            for line in tally.wrong:
                print("  " + line)
    for name, tally in tallies.items():
        figures = _figures(tally)
        assert figures["false_stops"] == PINNED["false_stops"], (name, tally.false_stops)
        for key in ("read_precision", "read_recall", "stop_precision", "stop_recall"):
            assert figures[key] >= PINNED[key], (name, key, figures[key], tally.wrong)
        unexplained = [line for line in tally.wrong if " (known)" not in line]
        assert not unexplained, (name, unexplained)


def _figures(tally: Tally) -> dict:
    return {"false_stops": len(tally.false_stops),
            "read_precision": tally.ratio(tally.read_right, tally.read_wrong),
            "read_recall": tally.ratio(tally.read_right, tally.read_missed),
            "stop_precision": tally.ratio(tally.stops_right, tally.stops_wrong),
            "stop_recall": tally.ratio(tally.stops_right, tally.stops_missed)}


# -- a third of the corpus, end to end --------------------------------------------------------------

THIRD = [m for corpus in CORPORA.values() for m in corpus["messages"][::3]]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """One scripted Ollama and one app per workspace the third uses."""
    from scripted_ollama import ScriptedOllama

    apps: dict[tuple, LiveApp] = {}
    with ScriptedOllama() as scripted:
        def app_for(files: tuple) -> LiveApp:
            if files not in apps:
                root = tmp_path_factory.mktemp(f"ws{len(apps)}")
                live = LiveApp(make_config(root, scripted.url))
                _make(Path(live.config.workspace), list(files))
                apps[files] = live
            return apps[files]
        yield scripted, app_for
        for live in apps.values():
            live.close()


def _wait(condition, what: str, total: float = 20.0):
    deadline = time.monotonic() + total
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {total:g} s")
        time.sleep(0.02)


@pytest.mark.parametrize("message", THIRD, ids=[f"{m['corpus']}:{m['id']}" for m in THIRD])
def test_through_waitress(servers, message):
    scripted, app_for = servers
    live = app_for(tuple(_workspace_of(message)))
    name = live.services.store.create(live.config.model_server.model).name
    before = len(scripted.chats())
    response = live.post(f"/s/{name}/messages", data={"message": message["text"]})
    assert response.status_code == 200, response.text
    page = html.unescape(response.text)
    stops = list(message.get("missing") or []) + list(message.get("outside") or [])
    if stops:
        assert "<h2>No such file</h2>" in page or "<h2>Outside the workspace</h2>" in page
        for word in stops:
            assert f"“{word}”" in page
        assert len(scripted.chats()) == before                      # the model never saw the message
        return
    assert "<h2>No such file</h2>" not in page and "<h2>Outside the workspace</h2>" not in page
    turn = len(live.services.store.load(name).turns) - 1
    list(live.sse(f"/s/{name}/turns/{turn}/stream"))
    _wait(lambda: len(scripted.chats()) > before, "the chat request")
    sent = scripted.chats()[-1].body["messages"][-1]["content"]
    assert sent.startswith(message["text"].strip()[:200]) or message["text"].strip()[:200] in sent
    blocks = {b.split('"', 1)[0] for b in sent.split('<file name="')[1:]}
    assert blocks == set(message.get("read") or []), (blocks, message.get("read"))
    assert "could not be read" not in sent                          # nothing said to the model of a name in passing


# -- the cards and notes, through waitress -----------------------------------------------------------

@pytest.fixture
def workspace(live):
    folder = Path(live.config.workspace)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _post(live, name: str, message: str, **form) -> str:
    response = live.post(f"/s/{name}/messages", data={"message": message, **form})
    assert response.status_code == 200, response.text
    return html.unescape(response.text)


def _finish(live, name: str) -> None:
    """The last turn answered: its reply stream closed, and a list asked in the chat (issue 45), which runs as a
    job with no reply stream, read and written."""
    turn = len(live.services.store.load(name).turns) - 1
    assert list(live.sse(f"/s/{name}/turns/{turn}/stream"))[-1][0] == "close"
    wait_for(lambda: not live.services.jobs.for_session(name) and not live.services.activities.working(name), 20,
             what="the turn to be answered")


def _sent_as_written(live, scripted, message: str) -> tuple[str, dict]:
    """Send ``message`` in a new session: no card, the model gets it as written; (session, its chat request)."""
    name = live.open_session()
    page = _post(live, name, message)
    assert "<h2>No such file</h2>" not in page and "Unknown model" not in page
    _finish(live, name)
    chat = scripted.chats()[-1]
    assert chat.body["messages"][-1]["content"] == message
    return name, chat.body


def test_a_path_outside_the_workspace_is_refused_as_outside_and_never_read(live, scripted, workspace, tmp_path):
    secret = tmp_path / "other" / "secret.md"
    secret.parent.mkdir()
    secret.write_text("The vault code is SWORDFISH-7.\n")
    name = live.open_session()
    page = _post(live, name, f"Summarize {secret} for me")
    assert "Outside the workspace" in page and f"“{secret}” is outside the workspace" in page
    assert "There is no file named" not in page and scripted.chats() == []
    response = live.post(f"/s/{name}/turns/0/resend", data={"message": f"Summarize {secret} for me",
                                                            "model": "tiny:1b", "missing_ok": "1"})
    assert response.status_code == 200, response.text
    _finish(live, name)
    sent = scripted.chats()[-1].body["messages"][-1]["content"]
    assert "SWORDFISH" not in sent and f"{secret} (outside the workspace)" in sent
    turn = live.services.store.load(name).turns[-1]
    said = [n for n in turn.notes if str(secret) in n]
    assert len(said) == 1 and "outside the workspace" in said[0]


def test_a_pasted_traceback_sends_with_one_notice_and_the_model_told_only_of_the_asked_file(live, scripted,
                                                                                             workspace):
    message = ("Traceback (most recent call last):\n"
               '  File "/home/pi/app/main.py", line 12, in <module>\n'
               "    run()\n"
               '  File "/home/pi/app/scheduler.py", line 40, in run\n'
               "    jobs = load('jobs.yaml')\n"
               "FileNotFoundError: [Errno 2] No such file or directory: 'jobs.yaml'\n\n"
               "What is wrong in scheduler.py?")
    name = live.open_session()
    page = _post(live, name, message)
    assert "No such file" in page and "“scheduler.py”" in page and scripted.chats() == []
    assert "“main.py”" not in page and "“jobs.yaml”" not in page and "/home/pi/app" not in page.split("No such")[1]
    response = live.post(f"/s/{name}/turns/0/resend", data={"message": message, "model": "tiny:1b",
                                                            "missing_ok": "1"})
    assert response.status_code == 200, response.text
    _finish(live, name)
    sent = scripted.chats()[-1].body["messages"][-1]["content"]
    note = sent[len(message):]
    assert "scheduler.py" in note and "could not be read" in note
    assert "main.py" not in note and "jobs.yaml" not in note and "not available" not in note
    turn = live.services.store.load(name).turns[-1]
    notices = [n for n in turn.notes if n.startswith("notice:")]
    assert len(notices) == 1 and notices[0].count("scheduler.py") == 1, notices


def test_a_pasted_link_log_and_command_go_to_the_model_untouched(live, scripted, workspace):
    name, _ = _sent_as_written(live, scripted, (
        "But first, please read <https://www.gnu.org/licenses/why-not-lgpl.html>. Also nginx logs\n"
        '192.168.1.20 - - [06/Dec/2026:10:00:01 +0000] "GET /static/app.css HTTP/1.1" 404 153\n'
        "and pip install -r requirements.txt fails. Why?"))
    turn = live.services.store.load(name).turns[-1]
    assert not [n for n in turn.notes if n.startswith("notice:")]


def test_a_file_named_in_passing_gets_a_quiet_note_and_the_message_goes_untouched(live, scripted, workspace):
    name, _ = _sent_as_written(live, scripted, "I renamed report.docx yesterday. Anyway, what is a good name for a cat?")
    page = live.get(f"/s/{name}").text
    assert "No workspace file named report.docx; nothing was read." in html.unescape(page)


@pytest.mark.parametrize("files,message,read,card", [
    (["Makefile"], "What targets does the makefile define?", "Makefile", None),
    (["Makefile"], "What targets does the Makefle define?", None, "did you mean “Makefile”?"),
    ([], "What targets does the Makefile define?", None, "There is no file named “Makefile”"),
    (["README.md"], "what does the readme say about updates?", "README.md", None),
])
def test_extensionless_names_the_user_asks_about(live, scripted, workspace, files, message, read, card):
    for file in files:
        (workspace / file).write_text("all:\n\techo built\n")
    name = live.open_session()
    page = _post(live, name, message)
    if card:
        assert card in page and scripted.chats() == []
        return
    _finish(live, name)
    sent = scripted.chats()[-1]
    content = sent.body["messages"][-1]["content"]
    if sent.format == mapreduce.LIST_SCHEMA:      # a list question (issue 45): the file read whole on the list path
        assert "echo built" in content and live.services.store.load(name).turns[-1].analysis.file == read
    else:
        assert f'<file name="{read}">' in content


def test_a_pasted_at_rule_or_mention_is_not_a_model(live, scripted, workspace):
    name, body = _sent_as_written(live, scripted, "@import url('theme.css'); at the bottom of my stylesheet is ignored.")
    assert body["model"] == "tiny:1b"
    turn = live.services.store.load(name).turns[-1]
    assert any("“@import” is no installed model" in n for n in turn.notes)


def test_a_file_read_by_the_guess_is_undone_in_one_tap(live, scripted, workspace):
    (workspace / "notes.md").write_text("# Notes\n\nBuy milk.\n")
    name = live.open_session()
    _post(live, name, "I keep my lists in notes.md. What is a good shopping app?")
    _finish(live, name)
    assert '<file name="notes.md">' in scripted.chats()[-1].body["messages"][-1]["content"]
    page = html.unescape(live.get(f"/s/{name}").text)
    assert "Send again without it" in page and 'hx-vals=\'{"files": "0"}\'' in page
    response = live.post(f"/s/{name}/turns/0/regenerate", data={"files": "0", "model": "tiny:1b"})
    assert response.status_code == 200, response.text
    _finish(live, name)
    sent = scripted.chats()[-1].body["messages"]
    assert "<file name=" not in sent[-1]["content"] and len(sent) == 2       # the first exchange replaced
    turn = live.services.store.load(name).turns[-1]
    assert any("Sent without reading the files" in n for n in turn.notes)
