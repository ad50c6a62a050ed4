"""Citations open their passages (issue #15): the domain module, the links, the route through waitress."""

import dataclasses
import re

import pytest
from bs4 import BeautifulSoup

from app import chunking
from app.analysis import passages
from app.render import markdown
from app.sessions import fountain
from app.workspace import Workspace
from cited import (SETTINGS, analysis_of, chunk_holding, cited_session, passage_for, record_cited_turn,
                   write_notes)
from test_documents import make_pdf


# -- the domain module ----------------------------------------------------------------------

def test_quotes_are_found_whatever_their_spacing_and_case_and_the_rest_is_listed():
    text = "The vault code is 4471 and it opens\nthe north door. The VAULT  code is on a card."
    spans, missing = passages.quote_spans(text, ["vault code", "opens the NORTH door", "“4471”", "a blue key", " "])
    assert [text[a:b] for a, b in spans] == ["vault code", "4471", "opens\nthe north door", "VAULT  code"]
    assert missing == ["a blue key"]


def test_overlapping_quotes_make_one_mark_and_pieces_rebuild_the_text():
    text = "alpha beta gamma delta"
    spans, _ = passages.quote_spans(text, ["beta gamma", "gamma delta"])
    assert spans == [(6, 22)]
    pieces = passages.pieces(text, spans)
    assert "".join(p.text for p in pieces) == text
    assert [(p.text, p.marked) for p in pieces] == [("alpha ", False), ("beta gamma delta", True)]


def test_line_range_is_inclusive_and_empty_past_the_end():
    text = "one\ntwo\nthree\nfour"
    assert text[slice(*passages.line_range(text, 2, 3))] == "two\nthree"
    assert text[slice(*passages.line_range(text, 4, 9))] == "four"
    assert text[slice(*passages.line_range(text, 7, 8))] == ""


def _analysed(tmp_path, quotes):
    path = write_notes(tmp_path / "workspace")
    doc = chunking.read_document(path, SETTINGS)
    passage = passage_for(doc, chunk_holding(doc, "vault code"), quotes)
    return Workspace(tmp_path / "workspace"), path, analysis_of(doc, "notes.md", [passage]), passage


def test_show_reads_the_chunk_as_analysed_and_marks_its_quotes(tmp_path):
    workspace, path, analysis, passage = _analysed(tmp_path, ["VAULT code is 4471", "a sentence nowhere"])
    shown = passages.show(workspace, analysis, passage)
    doc = chunking.read_document(path)
    assert not shown.changed and not shown.problem
    assert "".join(p.text for p in shown.pieces) == doc.text[passage.start:passage.end]
    assert [p.text for p in shown.pieces if p.marked] == ["vault code is 4471"]
    assert shown.missing == ["a sentence nowhere"]


def test_a_changed_file_is_said_and_the_text_now_at_those_lines_is_shown(tmp_path):
    workspace, path, analysis, passage = _analysed(tmp_path, ["vault code is 4471"])
    path.write_text(path.read_text().replace("4471", "9090"), encoding="utf-8")
    shown = passages.show(workspace, analysis, passage)
    assert shown.changed and not shown.problem
    lines = path.read_text().split("\n")[passage.lines[0] - 1:passage.lines[1]]
    assert "".join(p.text for p in shown.pieces) == "\n".join(lines)
    assert shown.missing == ["vault code is 4471"]


def test_a_changed_file_too_short_for_those_lines_says_so(tmp_path):
    workspace, path, analysis, passage = _analysed(tmp_path, ["vault code is 4471"])
    path.write_text("# Keys\n\nshort now\n", encoding="utf-8")
    shown = passages.show(workspace, analysis, passage)
    assert shown.changed and not shown.pieces
    assert f"nothing at lines {passage.lines[0]}–{passage.lines[1]}" in shown.problem


@pytest.mark.parametrize("damage", ["delete", "binary", "outside"])
def test_a_file_gone_or_unreadable_or_outside_gives_a_reason_not_an_exception(tmp_path, damage):
    workspace, path, analysis, passage = _analysed(tmp_path, ["vault code is 4471"])
    if damage == "delete":
        path.unlink()
    elif damage == "binary":
        path.write_bytes(b"\x00\x01\x02 binary")
    else:
        analysis = dataclasses.replace(analysis, file="../secret.md")
        (tmp_path / "secret.md").write_text("vault code is 4471")
    shown = passages.show(workspace, analysis, passage)
    assert not shown.pieces and "cannot be read now" in shown.problem
    assert ("outside the workspace" in shown.problem) == (damage == "outside")


# -- citations as links ---------------------------------------------------------------------

def test_only_cited_numbers_with_a_passage_become_links_and_code_stays_code():
    html = markdown("Due [12] and [12, 40], see `[12]` and [7].\n\n```\nx[12]\n```\n",
                    cite=lambda n: f"/p/{n}" if n == 12 else None)
    soup = BeautifulSoup(html, "html.parser")
    assert [a["href"] for a in soup.select("a.cite")] == ["/p/12", "/p/12"]
    assert all(a["hx-get"] == a["href"] and a["hx-target"] == "#passage-body" for a in soup.select("a.cite"))
    assert soup.get_text() == BeautifulSoup(markdown("Due [12] and [12, 40], see `[12]` and [7].\n\n```\nx[12]\n```\n"),
                                            "html.parser").get_text()
    assert "[7]" in soup.get_text() and soup.select_one("code").get_text() == "[12]"


# -- through waitress -----------------------------------------------------------------------

def _links(live, name):
    soup = BeautifulSoup(live.get(f"/s/{name}").text, "html.parser")
    return soup, soup.select(".msg.reply .text a.cite")      # the answer's own (not its Sources line)


def test_the_chat_links_the_citations_and_the_file_keeps_them_plain(live):
    s = cited_session(live)
    soup, links = _links(live, s["name"])
    hrefs = [a["href"] for a in links]
    base = f"/s/{s['name']}/turns/{s['turn']}/passages/"
    assert hrefs == [f"{base}{s['keys']}", f"{base}{s['keys']}", f"{base}{s['staff']}"]
    reply = soup.select_one(f"#reply-{s['turn']}")
    assert f"[{s['missing']}]" in reply.get_text() and f"[{s['keys']}, {s['staff']}]" in reply.get_text()
    assert soup.select_one("dialog#passage #passage-body") is not None
    stored = live.services.store.path(s["name"]).read_text()
    assert s["reply"].split(" [")[0] in stored and f"[{s['keys']}, {s['staff']}]" in stored
    assert "<a" not in stored and "passages/" not in stored


def test_a_turn_without_passages_gets_no_links(live):
    path = write_notes(live.config.workspace_path)
    doc = chunking.read_document(path, SETTINGS)
    name = live.open_session()
    record_cited_turn(live.services.store, name, analysis_of(doc, "notes.md", []), "The code is 4471 [1].")
    assert _links(live, name)[1] == []


def test_the_passage_fragment_shows_file_heading_lines_and_marked_quotes(live):
    s = cited_session(live)
    response = live.get(f"/s/{s['name']}/turns/{s['turn']}/passages/{s['keys']}", headers={"HX-Request": "true"})
    assert response.status_code == 200
    soup = BeautifulSoup(response.text, "html.parser")
    assert soup.select_one("html") is None                   # a fragment for the dialog
    facts = dict(zip([d.get_text() for d in soup.select("dt")], [d.get_text() for d in soup.select("dd")]))
    passage = live.services.store.load(s["name"]).turns[s["turn"]].analysis.passages[s["keys"]]
    assert facts == {"File": "notes.md", "Section": "Keys", "Lines": f"{passage.lines[0]}–{passage.lines[1]}"}
    assert soup.select_one(".passage-text").get_text() == s["doc"].text[passage.start:passage.end]
    assert [m.get_text() for m in soup.select("mark")] == ["vault code is 4471", "it opens\nthe north door"]
    assert soup.select_one(".passage-changed") is None and soup.select_one(".passage-missing") is None


def test_without_javascript_the_link_opens_a_page_of_its_own(live):
    s = cited_session(live, quotes=("vault code is 4471", "words the chunk never had"))
    response = live.get(f"/s/{s['name']}/turns/{s['turn']}/passages/{s['keys']}")
    soup = BeautifulSoup(response.text, "html.parser")
    assert response.status_code == 200 and soup.select_one("title").get_text().startswith(f"Chunk {s['keys']} of")
    assert soup.select_one("a.button")["href"] == f"/s/{s['name']}#turn-{s['turn']}"
    assert [m.get_text() for m in soup.select("mark")] == ["vault code is 4471"]
    assert "not found in the passage" in soup.select_one(".passage-missing").get_text()
    assert "words the chunk never had" in soup.select_one(".passage-missing").get_text()


def test_a_changed_file_and_a_deleted_file_are_said_without_a_server_error(live):
    s = cited_session(live)
    url = f"/s/{s['name']}/turns/{s['turn']}/passages/{s['keys']}"
    s["path"].write_text(s["path"].read_text().replace("4471", "1234"), encoding="utf-8")
    soup = BeautifulSoup(live.get(url).text, "html.parser")
    assert "the file changed since the analysis; this is the text now at those lines" in \
        soup.select_one(".passage-changed").get_text().lower()
    assert "1234" in soup.select_one(".passage-text").get_text()
    s["path"].unlink()
    response = live.get(url)
    assert response.status_code == 200
    assert "cannot be read now" in BeautifulSoup(response.text, "html.parser").select_one(".passage-problem").get_text()


@pytest.mark.parametrize("where", ["chunk", "uncited", "turn", "session", "bad-name"])
def test_anything_but_a_recorded_passage_is_a_404(live, where):
    s = cited_session(live)
    name, turn, chunk = s["name"], s["turn"], s["keys"]
    if where == "chunk":
        chunk = 9999
    elif where == "uncited":
        chunk = s["missing"]
    elif where == "turn":
        turn = 7
    elif where == "session":
        name = "harvey-session-20000101-000000"
    else:
        name = "..%2Fetc"
    response = live.get(f"/s/{name}/turns/{turn}/passages/{chunk}")
    assert response.status_code == 404


def test_the_session_page_links_the_citations_too(live):
    s = cited_session(live)
    soup = BeautifulSoup(live.get(f"/sessions/{s['name']}").text, "html.parser")
    hrefs = [a["href"] for a in soup.select(".screenplay a.cite")]
    assert hrefs and all(h.startswith(f"/s/{s['name']}/turns/{s['turn']}/passages/") for h in hrefs)
    assert soup.select_one("dialog#passage #passage-body") is not None


def test_a_pdf_passage_shows_its_pages_and_the_extracted_text(live):
    pages = [f"Page {n} is about apples and pears in plain prose. " * 8 for n in range(1, 5)]
    pages[2] = "The vault code is 4471 on page three. " + pages[2]
    live.config.workspace_path.mkdir(parents=True, exist_ok=True)
    path = make_pdf(live.config.workspace_path / "manual.pdf", pages)
    doc = chunking.read_document(path, SETTINGS)
    chunk = chunk_holding(doc, "vault code")
    passage = passage_for(doc, chunk, ["the VAULT code is 4471"])
    assert passage.pages is not None and passage.pages[0] <= 3 <= passage.pages[1]
    name = live.open_session()
    turn = record_cited_turn(live.services.store, name, analysis_of(doc, "manual.pdf", [passage]),
                             f"The code is 4471 [{passage.chunk}].")
    assert [a["href"] for a in _links(live, name)[1]] == [f"/s/{name}/turns/{turn}/passages/{passage.chunk}"]
    soup = BeautifulSoup(live.get(f"/s/{name}/turns/{turn}/passages/{passage.chunk}",
                                  headers={"HX-Request": "true"}).text, "html.parser")
    facts = dict(zip([d.get_text() for d in soup.select("dt")], [d.get_text() for d in soup.select("dd")]))
    first, last = passage.pages
    assert facts["Page" if first == last else "Pages"] == (str(first) if first == last else f"{first}–{last}")
    assert soup.select_one(".passage-text").get_text() == doc.text[passage.start:passage.end]
    assert [m.get_text() for m in soup.select("mark")] == ["The vault code is 4471"]
    assert soup.select_one(".passage-changed") is None
