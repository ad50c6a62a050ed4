"""Session pages through waitress: list, search, read, download, import, rename, delete, restore."""

import dataclasses
import http.client
import io
import logging
import re
import shutil
import zipfile
from urllib.parse import quote
from datetime import datetime, timedelta

import pytest
from bs4 import BeautifulSoup

from app.sessions import fountain, index as sessions
from app.sessions.names import valid_name
from conftest import make_config, send_and_finish
from scripted_ollama import ScriptedOllama

T0 = datetime(2026, 3, 1, 9, 0, 0)

# The terminal Harvey's layout: title page with Model and Backend, chat scenes (one
# reply cut into paragraphs, one with notes), an EXT route scene, an AGENT MODE
# scene, plain "THE END.", CRLF line ends.
HARVEY_FILE = """\
Title: Pi tuning
Credit: Recorded by Harvey
Author: RSDOIEL
Date: 2026-05-04 08:30:00
Draft date: 2026-05-04
Model: LLAMA3.1 (ollama)
Backend: ollama


FADE IN:


INT. HARVEY AND RSDOIEL TALKING 2026-05-04 08:30:00

Harvey and RSDOIEL are in chat mode. Model: LLAMA3.1. Workspace: /home/pi/harvey.

RSDOIEL
How do I lower the Pi's swappiness?

HARVEY
Forwarding to LLAMA3.1.

LLAMA3.1
Set vm.swappiness in /etc/sysctl.conf.

Then run sysctl -p to apply it.

ollama (llama3.1:8b) · 20 reply + 300 ctx · 2.1s · 9.5 tok/s



EXT. PI2 AND RSDOIEL 2026-05-04 08:31:00

Harvey routing to PI2. Workspace: /home/pi/harvey.

RSDOIEL
@pi2 check the fan

HARVEY
Forwarding to PI2.

PI2
The fan spins at 3000 rpm.



INT. AGENT MODE 2026-05-04 08:32:00

HARVEY
Harvey proposes to write 1 file(s) to the workspace.

RSDOIEL
yes

[[write: sysctl.conf — ok]]



INT. HARVEY AND RSDOIEL TALKING 2026-05-04 08:33:00

Harvey and RSDOIEL are in chat mode. Model: LLAMA3.1. Workspace: /home/pi/harvey.

[[rag: 2 chunks from notes, top score 0.81]]

RSDOIEL
And what value suits 1 GB of RAM?

HARVEY
Forwarding to LLAMA3.1.

[[tool: read_file({"path":"notes.md"}) — ok]]

LLAMA3.1
Try 10.

ollama (llama3.1:8b) · 4 reply + 420 ctx · 0.9s · 4.4 tok/s


THE END.
""".replace("\n", "\r\n")


# -- helpers -------------------------------------------------------------------------------

def write_session(store, when, exchanges, title="Harvey Session", analysis=None):
    """A session written by the app's own writer; ``exchanges``: (message, reply, model)."""
    name = store.create("tiny:1b", title=title, now=when).name
    for i, (message, reply, model) in enumerate(exchanges):
        turn = fountain.Turn(when + timedelta(minutes=i), message, model, reply,
                             fountain.stats_line(model, "ollama", 10, 100, 1.0))
        if analysis and i == len(exchanges) - 1:
            turn.analysis = analysis
        for scene in fountain.turn_scenes(turn, store.user_name, store.workspace):
            store.append_scene(name, scene)
    return name


def an_analysis(file="report.md", results=("ok", "ok", "error: timeout")):
    return fountain.ChunkAnalysis(file, len(results), "tiny:1b", "paragraph", 1500,
                                  "Summarize each part.", T0, list(results), "ok")


def soup(response):
    return BeautifulSoup(response.text, "html.parser")


def listed(live, query=None):
    """(name, title, meta text) of each session the list shows, in order."""
    response = live.get("/sessions/", params={"q": query} if query is not None else None)
    assert response.status_code == 200
    return [(a["href"].rsplit("/", 1)[-1], a.get_text(strip=True), " ".join(li.select_one(".meta").text.split()))
            for li in soup(response).select("#sessions li.session-item") for a in [li.select_one("a.session-link")]]


def files_in(folder):
    """Every file below the sessions folder (hidden temporaries and the trash included)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def upload(live, content, filename="session.spmd"):
    if not live.token:
        live.get("/sessions/")          # the token, without the chat page creating a session
    return live.post("/sessions/import", files={"file": (filename, content, "application/octet-stream")})


def raw_status(live, method, path, body=b"", headers=None):
    """Send ``path`` byte for byte (httpx would resolve ``..`` before sending)."""
    conn = http.client.HTTPConnection("127.0.0.1", live.server.effective_port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        return conn.getresponse().status
    finally:
        conn.close()


# -- the list ------------------------------------------------------------------------------

def test_list_shows_every_session_newest_first_with_its_facts(live):
    store = live.services.store
    old = write_session(store, T0, [("hello", "hi", "tiny:1b")], title="Oldest")
    mid = write_session(store, T0 + timedelta(days=1),
                        [("one", "1", "tiny:1b"), ("two", "2", "other:7b")], title="Two models")
    new = write_session(store, T0 + timedelta(days=2), [("read report.md", "Summary.", "tiny:1b")],
                        title="With analysis", analysis=an_analysis())
    rows = listed(live)
    assert [r[0] for r in rows] == [new, mid, old]
    assert [r[1] for r in rows] == ["With analysis", "Two models", "Oldest"]
    by_name = {r[0]: r[2] for r in rows}
    assert "2026-03-02 09:00:00" in by_name[mid] and "tiny:1b, other:7b" in by_name[mid]
    assert "2 turns" in by_name[mid] and "1 turn " in by_name[old]
    assert "chunk analysis" in by_name[new] and "chunk analysis" not in by_name[mid]
    size = (store.folder / f"{old}.spmd").stat().st_size
    assert f"{size} B" in by_name[old]


def test_each_session_shows_a_one_line_preview_of_its_last_exchange(live):
    """#16: the list and the chat's recent sessions say what a session was last about, in one line."""
    store = live.services.store
    long_reply = "**The fan** is loud because the `CPU` is hot; see [the guide](http://x/y). " + "More words. " * 20
    name = write_session(store, T0, [("first question", "first answer", "tiny:1b"),
                                     ("Why is the fan loud?", long_reply, "tiny:1b")])
    item = BeautifulSoup(live.get("/sessions/").text, "html.parser").select_one("#sessions .session-item")
    preview = item.select_one(".preview").get_text()
    assert preview.startswith("The fan is loud because the CPU is hot; see the guide. More words.")
    assert preview.endswith("…") and len(preview) <= 90 and "\n" not in preview
    recent = BeautifulSoup(live.get(f"/s/{name}").text, "html.parser").select_one(".recent .preview")
    assert recent.get_text() == preview


def test_search_keeps_sessions_holding_every_word(live):
    store = live.services.store
    fan = write_session(store, T0, [("Why is the fan loud?", "The CPU is hot: add a heatsink.", "tiny:1b")])
    swap = write_session(store, T0 + timedelta(hours=1), [("Tune swap", "Lower vm.swappiness.", "tiny:1b")])
    assert [r[0] for r in listed(live, "HEATSINK")] == [fan]           # reply text, any case
    assert [r[0] for r in listed(live, "swap swappiness")] == [swap]   # every word must be there
    assert listed(live, "heatsink swappiness") == []
    assert "No session holds all of these words" in live.get("/sessions/?q=zebra").text
    assert {r[0] for r in listed(live, "")} == {fan, swap}


def test_list_parses_only_files_that_changed(live, monkeypatch):
    store = live.services.store
    assert store.index().warmed.wait(5)                                   # the start-up warm-up is done
    names = [write_session(store, T0 + timedelta(hours=i), [(f"q{i}", f"a{i}", "tiny:1b")]) for i in range(4)]
    parsed = []
    real = sessions._summarize
    monkeypatch.setattr(sessions, "_summarize", lambda name, *a: parsed.append(name) or real(name, *a))
    listed(live)
    assert sorted(parsed) == sorted(names)
    parsed.clear()
    listed(live)
    listed(live, "q1")
    assert parsed == []                                                   # nothing changed: nothing parsed
    store.rename(names[2], "Renamed on disk")
    (store.folder / f"{names[0]}.spmd").unlink()
    rows = listed(live)
    assert parsed == [names[2]]
    assert [r[0] for r in rows] == [names[3], names[2], names[1]]
    assert rows[1][1] == "Renamed on disk"


def test_sessions_are_indexed_in_the_background_at_start(tmp_path, scripted, make_live, monkeypatch):
    config = make_config(tmp_path, scripted.url)
    first = make_live(config)
    names = [write_session(first.services.store, T0 + timedelta(hours=i), [("q", "a", "tiny:1b")]) for i in range(3)]
    first.close()
    live = make_live(config)                                              # a new app finds them on disk
    assert live.services.store.index().warmed.wait(5)
    parsed = []
    monkeypatch.setattr(sessions, "_summarize", lambda *a: parsed.append(a) or pytest.fail("parsed again"))
    assert [r[0] for r in listed(live)] == names[::-1] and parsed == []


# -- reading -------------------------------------------------------------------------------

def test_reading_renders_the_screenplay_safely(live):
    store = live.services.store
    name = write_session(store, T0, [
        ("Show me **bold** <b>raw</b>", "Some **bold**, `code` and <script>alert(1)</script>\n\n```\nx = 1\n```",
         "tiny:1b"),
        ("Summarize report.md", "The report says three things.", "tiny:1b"),
    ], title="Reading test", analysis=an_analysis())
    store.append_scene(name, fountain.Scene("INT. CONTEXT RECALL 2026-03-01 09:30:00",
                                            [fountain.Element("note", "recall: m1 (memory) — score 0.9")]))
    response = live.get(f"/sessions/{name}")
    assert response.status_code == 200
    page = soup(response)
    headings = [h.get_text() for h in page.select(".scene-heading")]
    assert headings[0] == "INT. HARVEY AND TESTER TALKING 2026-03-01 09:00:00"
    assert "INT. CONTEXT RECALL 2026-03-01 09:30:00" in headings
    cues = [c.get_text() for c in page.select(".scene .cue")]
    assert cues[:3] == ["TESTER", "HARVEY", "TINY"]
    user, harvey, reply = page.select(".scene .dialogue")[:3]
    assert user.get_text() == "Show me **bold** <b>raw</b>" and not user.find("b")   # the user's words as typed
    assert harvey.get_text() == "Forwarding to TINY."
    assert reply.find("strong").get_text() == "bold" and reply.find("pre")           # Markdown
    assert not page.find("script", string=lambda s: s and "alert" in s)
    assert "<script>alert(1)</script>" in reply.get_text()                            # shown as text
    assert "Harvey and TESTER are in chat mode." in page.select_one(".action").get_text()
    assert page.find("p", class_="note", string="[[recall: m1 (memory) — score 0.9]]")
    block = page.select_one("details.chunk-analysis")
    assert block is not None and not block.has_attr("open")                          # collapsed
    assert "INT. CHUNK ANALYSIS — report.md" in block.summary.get_text()
    facts = " ".join(block.select_one("dl").get_text(" ").split())
    assert "report.md" in facts and "paragraph" in facts and "1500" in facts and "tiny:1b" in facts
    assert [li.get_text() for li in block.select("ol.chunk-results li")] == ["ok", "ok", "error: timeout"]
    assert page.select_one(f'a[href="/s/{name}"]').get_text() == "Continue in chat"
    assert page.select_one(f'a[href="/sessions/{name}/download"]')
    assert page.select_one(f'form[action="/sessions/{name}/delete"] input[name=csrf_token]')
    assert page.select_one(f'form[action="/sessions/{name}/title"] input[name=title]')["value"] == "Reading test"


def long_session(store, turns, analysis_every=0):
    """A session of ``turns`` turns written at once (one file write), every ``analysis_every``-th with
    a chunk analysis (three scenes); returns (name, every scene heading in file order)."""
    name = store.create("tiny:1b", now=T0).name
    play = fountain.Screenplay(dict(store.load(name).play.title_page), [])
    for i in range(turns):
        turn = fountain.Turn(T0 + timedelta(seconds=i), f"question {i}", "tiny:1b", f"answer **{i}**")
        if analysis_every and i % analysis_every == analysis_every - 1:
            turn.analysis = dataclasses.replace(an_analysis(file=f"part{i}.md"), when=T0 + timedelta(seconds=i))
        play.scenes += fountain.turn_scenes(turn, store.user_name, store.workspace)
    store.path(name).write_text(fountain.dumps(play), encoding="utf-8")
    return name, [scene.heading for scene in play.scenes]


def shown_headings(page):
    """The scene headings a screenplay page or fragment shows, in order (chunk analyses by their summary)."""
    return [h.get_text() for h in page.select(".scene-heading, details.chunk-analysis > summary")]


def test_the_screenplay_page_shows_the_newest_scenes_and_loads_earlier_ones_once_each(live):
    from app.web.sessions import PAGE_SCENES

    name, headings = long_session(live.services.store, 2 * PAGE_SCENES + 7, analysis_every=9)
    assert len(headings) > 2 * PAGE_SCENES + 7                     # the analyses add scenes
    page = soup(live.get(f"/sessions/{name}"))
    shown = shown_headings(page)
    assert shown == headings[-PAGE_SCENES:]                          # the newest page, oldest first
    assert page.select_one("dl.title-page") is not None
    collected = shown
    control = page.select_one(".earlier a")
    pages = 1
    while control is not None:
        before = len(headings) - len(collected)
        assert control["href"] == f"/sessions/{name}?before={before}"
        assert control["hx-get"] == f"/sessions/{name}/scenes?before={before}"
        fragment = soup(live.get(control["hx-get"]))
        part = shown_headings(fragment)
        assert 0 < len(part) <= PAGE_SCENES
        collected = part + collected
        control = fragment.select_one(".earlier a")
        pages += 1
    assert collected == headings                                     # every scene exactly once, in order
    assert pages == -(-len(headings) // PAGE_SCENES)


def test_an_earlier_page_of_the_screenplay_opens_without_javascript(live):
    from app.web.sessions import PAGE_SCENES

    name, headings = long_session(live.services.store, PAGE_SCENES + 5)
    page = soup(live.get(f"/sessions/{name}", params={"before": 5}))
    assert shown_headings(page) == headings[:5]
    assert page.select_one(".earlier") is None                        # nothing before the first scene
    assert page.select_one(f'.later a[href="/sessions/{name}"]')     # back to the newest
    assert "question 0" in page.get_text() and "answer" in page.get_text()


@pytest.mark.parametrize("before", ["0", "-1", "x", "100000"])
def test_a_page_of_scenes_outside_the_session_is_a_clear_400(live, before):
    name, _ = long_session(live.services.store, 3)
    for path in (f"/sessions/{name}", f"/sessions/{name}/scenes"):
        response = live.get(path, params={"before": before})
        assert response.status_code == 400 and "no earlier scenes" in response.text
    assert live.get(f"/sessions/{name}/scenes").status_code == 400


def test_chat_page_links_to_the_list(live):
    name = live.open_session()
    page = soup(live.get(f"/s/{name}"))
    assert live.get(page.find("a", string="Sessions")["href"]).status_code == 200


# -- download ------------------------------------------------------------------------------

def test_download_is_the_stored_file_byte_for_byte(live):
    raw = ("\ufeff" + HARVEY_FILE).encode("utf-8")                     # BOM and CRLF kept
    name = upload(live, raw).url.path.rsplit("/", 1)[-1]
    path = live.services.store.folder / f"{name}.spmd"
    response = live.get(f"/sessions/{name}/download")
    assert response.status_code == 200
    assert response.content == path.read_bytes() == raw
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.headers["content-disposition"] == f"attachment; filename={name}.spmd"
    own = write_session(live.services.store, T0, [("two\n\nparagraphs", "x", "tiny:1b")])
    assert live.get(f"/sessions/{own}/download").content == (path.parent / f"{own}.spmd").read_bytes()


def test_download_all_zips_every_session_but_not_the_trash(live):
    store = live.services.store
    names = [write_session(store, T0 + timedelta(hours=i), [(f"q{i}", f"a{i}", "tiny:1b")]) for i in range(3)]
    store.delete(names[0])
    response = live.get("/sessions/download-all")
    assert response.status_code == 200 and response.headers["content-type"] == "application/zip"
    assert response.headers["content-disposition"].startswith("attachment; filename=harvey-sessions-")
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        assert sorted(archive.namelist()) == sorted(f"{n}.spmd" for n in names[1:])
        for n in names[1:]:
            assert archive.read(f"{n}.spmd") == (store.folder / f"{n}.spmd").read_bytes()


# -- rename, delete, restore -----------------------------------------------------------------

def test_rename_changes_the_title_not_the_file_name(live):
    name = write_session(live.services.store, T0, [("q", "a", "tiny:1b")])
    response = live.post(f"/sessions/{name}/title", data={"title": "  Fan   noise  "})
    assert response.status_code == 200 and response.url.path == f"/sessions/{name}"
    assert soup(response).select_one("h1").get_text() == "Fan noise"
    assert "Title: Fan noise\n" in (live.services.store.folder / f"{name}.spmd").read_text()
    assert listed(live)[0][:2] == (name, "Fan noise")


def test_delete_moves_to_the_trash_and_restore_brings_it_back(live):
    store = live.services.store
    name = write_session(store, T0, [("keep me", "kept", "tiny:1b")], title="Precious")
    before = (store.folder / f"{name}.spmd").read_bytes()
    response = live.post(f"/sessions/{name}/delete")
    assert response.status_code == 200 and response.url.path == "/sessions/"
    assert not (store.folder / f"{name}.spmd").exists()
    assert (store.folder / ".trash" / f"{name}.spmd").read_bytes() == before
    page = soup(response)
    assert "Moved “Precious” to the trash" in page.select_one(".flash").get_text()   # by its title (issue 45)
    assert name not in [r[0] for r in listed(live)]
    trash = page.select_one("#trash")
    assert "Precious" in trash.get_text() and "Trash (1)" in trash.summary.get_text()
    assert live.get(f"/sessions/{name}").status_code == 404
    assert live.get(f"/s/{name}").status_code == 404
    restore = trash.select_one("form")["action"]
    assert restore == f"/sessions/trash/{name}/restore"
    response = live.post(restore)
    assert response.status_code == 200 and response.url.path == f"/sessions/{name}"
    assert (store.folder / f"{name}.spmd").read_bytes() == before
    assert [r[0] for r in listed(live)] == [name]
    assert store.trashed() == []


def test_delete_and_restore_never_overwrite(live):
    store = live.services.store
    name = write_session(store, T0, [("first", "1", "tiny:1b")])
    first = (store.folder / f"{name}.spmd").read_bytes()
    assert live.post(f"/sessions/{name}/delete").status_code == 200
    shutil.copy(store.folder / ".trash" / f"{name}.spmd", store.folder / f"{name}.spmd")
    store.rename(name, "Second of that name")
    second = (store.folder / f"{name}.spmd").read_bytes()
    assert live.post(f"/sessions/{name}/delete").status_code == 200          # same name in the trash twice
    assert sorted(p.name for p in (store.folder / ".trash").iterdir()) == [f"{name}-2.spmd", f"{name}.spmd"]
    (store.folder / f"{name}.spmd").write_bytes(b"Title: Newer\n\nFADE IN:\n")  # the name is taken again
    response = live.post(f"/sessions/trash/{name}/restore")
    assert response.url.path == f"/sessions/{name}-2"
    assert (store.folder / f"{name}-2.spmd").read_bytes() == first
    assert (store.folder / f"{name}.spmd").read_bytes() == b"Title: Newer\n\nFADE IN:\n"
    assert live.post(f"/sessions/trash/{name}-2/restore").url.path == f"/sessions/{name}-3"
    assert (store.folder / f"{name}-3.spmd").read_bytes() == second


def test_state_changes_need_the_token(live):
    store = live.services.store
    name = write_session(store, T0, [("q", "a", "tiny:1b")])
    live.get("/sessions/")
    assert live.http.post(f"/sessions/{name}/delete").status_code == 403
    assert live.http.post(f"/sessions/{name}/title", data={"title": "x"}).status_code == 403
    assert live.http.post("/sessions/import", files={"file": ("a.spmd", HARVEY_FILE.encode())}).status_code == 403
    assert store.names() == [name] and store.load(name).title == "Harvey Session"
    form = soup(live.get(f"/sessions/{name}")).select_one(f'form[action="/sessions/{name}/delete"]')
    fields = {i["name"]: i["value"] for i in form.select("input[type=hidden]")}
    assert live.http.post(form["action"], data=fields).status_code == 200     # the plain form's own field
    assert store.names() == []


def test_busy_session_is_not_deleted(live, scripted):
    from scripted_ollama import Reply

    scripted.script = Reply(text="z" * 200, piece_size=1, token_delay=0.02)
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "long one"})
    assert live.post(f"/sessions/{name}/delete").status_code == 409
    live.services.activities.last(name).stop()
    assert live.services.store.exists(name)


# -- import --------------------------------------------------------------------------------

@pytest.fixture
def harvey_models(tmp_path, make_live):
    """An app whose Ollama has the imported file's model installed."""
    with ScriptedOllama(models={"llama3.1:8b": 8192, "tiny:1b": 8192}) as server:
        yield make_live(make_config(tmp_path, server.url)), server


def test_import_of_a_terminal_harvey_file_reads_and_continues(harvey_models):
    live, server = harvey_models
    response = upload(live, HARVEY_FILE.encode(), "my-session.spmd")
    assert response.status_code == 200
    name = response.url.path.rsplit("/", 1)[-1]
    assert name == "harvey-session-20260504-083000"                     # from the title page Date
    path = live.services.store.folder / f"{name}.spmd"
    assert path.read_bytes() == HARVEY_FILE.encode()
    page = soup(response)
    headings = [h.get_text() for h in page.select(".scene-heading")]
    assert "EXT. PI2 AND RSDOIEL 2026-05-04 08:31:00" in headings and "INT. AGENT MODE 2026-05-04 08:32:00" in headings
    assert page.find("p", class_="note", string="[[write: sysctl.conf — ok]]")
    assert page.select_one("h1").get_text() == "Pi tuning"
    assert listed(live)[0] == (name, "Pi tuning",
                               "2026-05-04 08:30:00 · llama3.1:8b · 2 turns · " f"{path.stat().st_size / 1024:.1f} KB")

    send_and_finish(live, name, "And for 4 GB?")
    chat = server.chats()[-1].body
    assert chat["model"] == "llama3.1:8b"                                # the session's own model
    assert chat["messages"][1:] == [
        {"role": "user", "content": "How do I lower the Pi's swappiness?"},
        {"role": "assistant", "content": "Set vm.swappiness in /etc/sysctl.conf.\n\nThen run sysctl -p to apply it."},
        {"role": "user", "content": "And what value suits 1 GB of RAM?"},
        {"role": "assistant", "content": "Try 10."},
        {"role": "user", "content": "And for 4 GB?"},
    ]
    play = fountain.read_file(path)
    assert [s.heading.split(" 2026")[0] for s in play.scenes][:4] == [
        "INT. HARVEY AND RSDOIEL TALKING", "EXT. PI2 AND RSDOIEL", "INT. AGENT MODE", "INT. HARVEY AND RSDOIEL TALKING"]
    assert [t.user_text for t in fountain.turns(play)][-1] == "And for 4 GB?"


@pytest.mark.parametrize("fixture", ["harvey_exact.spmd", "harvey_variants.spmd", "seed000_chunk.spmd"])
def test_import_of_the_fixtures_keeps_their_turns(live, fixture):
    from pathlib import Path

    raw = (Path(__file__).parent / "data" / "spmd" / fixture).read_bytes()
    response = upload(live, raw, fixture)
    assert response.status_code == 200
    name = response.url.path.rsplit("/", 1)[-1]
    expected = fountain.turns(fountain.loads(raw.decode()))
    assert fountain.turns(live.services.store.load(name).play) == expected
    assert len(soup(response).select(".scene-heading")) + len(soup(response).select("details.chunk-analysis")) \
        == len([s for s in fountain.loads(raw.decode()).scenes if s.heading])


def test_import_names_come_from_the_date_else_now(live):
    store = live.services.store
    first = upload(live, HARVEY_FILE.encode(), "harvey-session-20990101-000000.spmd").url.path.rsplit("/", 1)[-1]
    second = upload(live, HARVEY_FILE.encode(), ".hidden.spmd").url.path.rsplit("/", 1)[-1]
    undated = upload(live, b"Title: No date\n\nINT. KITCHEN - DAY\n\nA kettle boils.\n", "x.fountain")
    third = undated.url.path.rsplit("/", 1)[-1]
    assert first == "harvey-session-20260504-083000"                     # never the upload's own name
    assert second != first and third not in (first, second)
    today = datetime.now().strftime("%Y%m%d")
    assert second.startswith(f"harvey-session-{today}") and third.startswith(f"harvey-session-{today}")
    assert "A kettle boils." in undated.text
    odd = upload(live, HARVEY_FILE.replace("2026-05-04 08:30:00", "0999-01-01 00:00:00", 1).encode())
    assert odd.status_code == 200 and odd.url.path.startswith(f"/sessions/harvey-session-{today}")
    before = files_in(store.folder.parent)
    response = upload(live, HARVEY_FILE.encode(), "../../outside.spmd")
    assert response.status_code == 400 and "not a plain file name" in response.text   # a path is refused
    assert not [f for f in files_in(store.folder.parent) if f not in before and not f.startswith("sessions/")]
    assert all(valid_name(n) for n in store.names())


BAD_IMPORTS = [
    ("notes.spmd", b"Just some notes\nwith two lines.\n", "not a Fountain screenplay"),
    ("latin1.spmd", "Title: Caf\u00e9\n\nINT. CAF\u00c9 - DAY\n".encode("latin-1"), "not UTF-8"),
    ("image.spmd", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", "not UTF-8"),
    ("nul.fountain", b"Title: x\n\nINT. A\x00B\n", "not a text file"),
    ("empty.spmd", b"", "empty"),
    ("session.txt", HARVEY_FILE.encode(), "Only .spmd and .fountain"),
]


@pytest.mark.parametrize("filename, content, words", BAD_IMPORTS, ids=[b[0] for b in BAD_IMPORTS])
def test_bad_imports_are_refused_and_nothing_is_written(live, caplog, filename, content, words):
    write_session(live.services.store, T0, [("q", "a", "tiny:1b")])
    before = files_in(live.services.store.folder)
    with caplog.at_level(logging.INFO):
        response = upload(live, content, filename)
    assert response.status_code == 400
    assert words in soup(response).select_one("#import-error").get_text()
    assert files_in(live.services.store.folder) == before
    assert "session import refused" in caplog.text
    assert "Just some notes" not in caplog.text and "swappiness" not in caplog.text   # no contents in the log


@pytest.mark.parametrize("extra", [10 * 1024, 512 * 1024], ids=["over-our-limit", "over-flask-limit"])
def test_too_large_import_is_refused_with_413(tmp_path, scripted, make_live, extra):
    config = make_config(tmp_path, scripted.url)
    live = make_live(dataclasses.replace(config, server=dataclasses.replace(config.server, max_upload_mb=1)))
    big = HARVEY_FILE.encode() + b"x" * (1024 * 1024 + extra)
    before = files_in(live.services.store.folder)
    response = upload(live, big)
    assert response.status_code == 413
    assert "limited to 1 MB" in response.text
    assert files_in(live.services.store.folder) == before == []


# -- names -----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [
    "/sessions/..", "/sessions/%2e%2e", "/sessions/%2E%2E/download", "/sessions/..%2Fsecret",
    "/sessions/..%2Fsecret/download", "/sessions/%2e%2e%2fsecret/download", "/sessions/%2e%2e%2F%2e%2e%2Fetc%2Fpasswd",
    "/sessions/harvey-session-20260101-000000%0A", "/sessions/harvey-session-20260101-000000.spmd",
    "/sessions/harvey-session-20260101-000000%2F..%2F..%2Fsecret/download",
    "/sessions/%2e%2e%2fsessions%2fharvey-session-20260101-000000/download",
    "/sessions/harvey-session-20260101-000001",                       # the pattern, but no such file
    "/sessions/.trash", "/sessions/harvey-session-\u0662\u0660\u0662\u0666\u0660\u0661\u0660\u0661-000000",
])
def test_names_outside_the_pattern_are_404(live, path):
    store = live.services.store
    write_session(store, datetime(2026, 1, 1), [("q", "a", "tiny:1b")])     # harvey-session-20260101-000000
    (store.folder.parent / "secret.spmd").write_text("Title: secret\n")
    store.folder.joinpath(".trash").mkdir(exist_ok=True)
    assert raw_status(live, "GET", quote(path, safe="/%")) == 404


def test_state_changes_with_bad_names_are_404(live):
    store = live.services.store
    name = write_session(store, datetime(2026, 1, 1), [("q", "a", "tiny:1b")])
    store.delete(name)
    live.get("/sessions/")
    cookie = "; ".join(f"{k}={v}" for k, v in live.http.cookies.items())
    headers = {"X-CSRF-Token": live.token, "Cookie": cookie, "Content-Length": "0"}
    for path in ["/sessions/%2e%2e/delete", "/sessions/..%2F.trash%2F" + name + "/delete",
                 "/sessions/trash/%2e%2e/restore", "/sessions/trash/..%2F" + name + "/restore",
                 "/sessions/trash/" + name + "%0A/restore", "/sessions/%2e%2e/title"]:
        assert raw_status(live, "POST", path, headers=headers) == 404, path
    assert (store.folder / ".trash" / f"{name}.spmd").exists() and store.names() == []
    assert raw_status(live, "POST", f"/sessions/trash/{name}/restore", headers=headers) == 303
    assert store.names() == [name]


def test_a_session_imported_back_beside_its_source_is_marked(live):
    """Issue 45: a downloaded session imported again had its source's title and no mark."""
    store = live.services.store
    source = write_session(store, T0, [("keep me", "kept", "tiny:1b")], title="Precious")
    text = (store.folder / f"{source}.spmd").read_bytes()
    response = upload(live, text.replace(b"Date: ", b"Date: x"), "precious.spmd")  # (a Date of its own: a new name)
    name = response.url.path.rsplit("/", 1)[-1]
    assert name != source
    titles = dict((n, t) for n, t, _ in listed(live))
    assert titles[source] == "Precious" and re.fullmatch(r"Precious \(imported \d{4}-\d\d-\d\d\)", titles[name])
    fresh = upload(live, text.replace(b"Precious", b"Unique").replace(b"Date: ", b"Date: y"), "unique.spmd")
    fresh_name = fresh.url.path.rsplit("/", 1)[-1]
    assert dict((n, t) for n, t, _ in listed(live))[fresh_name] == "Unique"    # no twin: kept as it came
