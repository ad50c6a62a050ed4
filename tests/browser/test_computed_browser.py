"""Issue 32 on a phone (Debian's Chromium at 390×844): the app's list, count, versions and coverage under an
answer; each item opens its passage like a citation."""

import pytest

from app import chunking
from app.sessions import notes
from browser.conftest import LAPTOP, PHONE, axe_violations, no_horizontal_scroll, wait_until
from cited import SETTINGS, analysis_of, chunk_holding, passage_for, record_cited_turn, write_notes

pytestmark = pytest.mark.browser


def computed_session(live) -> dict:
    path = write_notes(live.config.workspace_path)
    doc = chunking.read_document(path, SETTINGS)
    keys, staff = chunk_holding(doc, "vault code"), chunk_holding(doc, "Forty people")
    analysis = analysis_of(doc, path.name, [passage_for(doc, keys, ["vault code is 4471"]),
                                            passage_for(doc, staff, ["Forty people"])])
    k, s = keys.index + 1, staff.index + 1
    analysis.computed = [
        notes.item(1, 2, {"text": "code 4471", "quote": "vault code is 4471", "value": 4471, "chunks": [k]}),
        notes.item(2, 2, {"text": "forty people " + "x" * 120, "quote": "Forty people", "value": None,
                          "chunks": [s]}),
        notes.count("codes", 2, 4471.0, 1, 5, 0),
        notes.conflict({"answer": "4471", "chunks": [k], "confidence": 4}),
        notes.conflict({"answer": "4417", "chunks": [s], "confidence": 1}),
        notes.coverage(f"read {analysis.chunks} of {analysis.chunks} chunks (lines 1–20)")]
    name = live.open_session()
    index = record_cited_turn(live.services.store, name, analysis, "There are 5 codes.")
    return {"name": name, "turn": index}


def test_each_item_opens_its_passage_and_the_page_fits_a_phone(live, phone):
    s = computed_session(live)
    page = phone
    page.goto(f"{live.url}/s/{s['name']}")
    block = page.locator(f"#computed-{s['turn']}")
    text = block.text_content()
    assert "2 codes; total 4,471 over the 1 that carry a number" in text
    assert "The model's summary says 5; the app counted 2" in text
    assert "The chunks disagree" in text and "Coverage: read" in text
    items = block.locator("tr.record a.cite")
    assert items.count() == 2
    items.first.tap()
    wait_until(page, "document.getElementById('passage').open && document.querySelector('#passage mark')")
    assert page.locator("#passage mark").all_text_contents() == ["vault code is 4471"]
    page.keyboard.press("Escape")
    wait_until(page, "!document.getElementById('passage').open")
    no_horizontal_scroll(page)
    assert axe_violations(page) == []
    assert page.errors == []


def test_the_whole_file_offer_of_a_passages_answer_fits_a_phone(live, phone):
    path = write_notes(live.config.workspace_path)
    doc = chunking.read_document(path, SETTINGS)
    keys = chunk_holding(doc, "vault code")
    analysis = analysis_of(doc, path.name, [passage_for(doc, keys, [])])
    analysis.results, analysis.rag = [], f"rag: 1 chunks from {path.name}, top score 0.42"
    analysis.computed = [notes.coverage("1 passage, about 20 % of the file (section Keys)"),
                         notes.answerable(False, {"chunks": 4, "calls": 5, "minutes": 3.0})]
    name = live.open_session()
    index = record_cited_turn(live.services.store, name, analysis, "The passages do not say.")
    page = phone
    page.goto(f"{live.url}/s/{name}")
    button = page.locator(f"#computed-{index} button.read-whole")
    assert button.text_content().strip() == "Read the whole file (4 chunks, 5 model calls, about 3 min)"
    assert "Coverage: 1 passage, about 20 % of the file (section Keys)" in page.locator(f"#computed-{index}").text_content()
    no_horizontal_scroll(page)
    assert axe_violations(page) == []
    assert page.errors == []


# -- issue 40: the records table --------------------------------------------------------------------

DOSES = [("Dose 1 March", "12.5mg", 12.5), ("Dose 2 March", "7.5 mg", 7.5), ("Dose 3 March", "10mg", 10.0),
         ("Dose 4 March", "0.25 g", 0.25)]


def records_session(live) -> dict:
    path = write_notes(live.config.workspace_path)
    doc = chunking.read_document(path, SETTINGS)
    keys = chunk_holding(doc, "vault code")
    analysis = analysis_of(doc, path.name, [passage_for(doc, keys, ["vault code is 4471"])])
    k = keys.index + 1
    units = ["mg", "mg", "mg", "g"]
    items = [{"text": name, "quote": "vault code is 4471", "value": value, "unit": unit, "line": 3 + i,
              "chunks": [k]} for i, ((name, _, value), unit) in enumerate(zip(DOSES, units))]
    summary = {"op": "total", "target": "doses", "words": "total", "count": 4, "cut": 0, "read": analysis.chunks,
               "chunks": analysis.chunks, "file_states": [], "totals": {"mg": 30.0, "g": 0.25},
               "values": {"mg": 3, "g": 1}, "untyped": 0, "model_says": 30.0}
    analysis.computed = [notes.item(n, 4, it) for n, it in enumerate(items, 1)] + [notes.figures(summary)]
    name = live.open_session()
    index = record_cited_turn(live.services.store, name, analysis, "A total of 30 mg was given.")
    return {"name": name, "turn": index}


@pytest.mark.parametrize("size", [PHONE, LAPTOP], ids=["360", "1280"])
def test_the_records_table_opens_sorts_totals_and_downloads_without_the_model(live, scripted, page_for, size):
    s = records_session(live)
    page = page_for(size)
    page.goto(f"{live.url}/s/{s['name']}")
    box = page.locator(f"#computed-{s['turn']}")
    assert "total 30 mg (sum of 3 values in mg); total 0.25 g (sum of 1 value in g); not added together" in \
        box.text_content()
    box.locator("details.records > summary").click()
    table = box.locator(".records-table")
    rows = lambda: [r.text_content() for r in table.locator("tr.record td:nth-child(2)").all()]   # noqa: E731
    assert rows() == [d[0] for d in DOSES]
    table.locator("th a", has_text="Value").click()                       # ascending by value
    wait_until(page, "document.querySelector('.records-table th[aria-sort]') !== null")
    assert rows() == ["Dose 4 March", "Dose 2 March", "Dose 3 March", "Dose 1 March"]
    table.locator("th a", has_text="Value").click()                       # and back, descending
    wait_until(page, "document.querySelector('.records-table th[aria-sort=descending]') !== null")
    assert rows()[0] == "Dose 1 March"
    table.locator("select[name=op]").select_option("avg")
    table.locator("button", has_text="Compute").click()
    wait_until(page, "document.querySelector('.records-figures') !== null")
    figures = table.locator(".records-figures").text_content()
    assert "average of 3 values in mg: 10 mg" in figures and "average of 1 value in g: 0.25 g" in figures
    with page.expect_download() as download:
        table.locator("a", has_text="Download CSV").click()
    csv = open(download.value.path(), encoding="utf-8").read().splitlines()
    assert csv[0] == "n,item,value,unit,line,chunk,quote" and csv[1].startswith("1,Dose 1 March,12.5,mg,3,")
    table.locator("tr.record a.cite").first.click()                       # a row opens its passage
    wait_until(page, "document.getElementById('passage').open")
    page.keyboard.press("Escape")
    assert scripted.chats() == []                                         # no model call for any of it
    no_horizontal_scroll(page)
    assert axe_violations(page) == []
    assert page.errors == []
