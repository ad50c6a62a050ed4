"""Nothing a file contains can produce a 500 (issue 23 item 1).

The loaders are fuzzed (truncated, byte-flipped and hostile PDF and Word files, wrong
extensions): every outcome is text or ``documents.UnreadableDocument``. Then damaged files
go through waitress wherever a file is read: a chat message that names one, a direct
analysis, the analysis worker, and a citation's passage view.
"""

import io
import itertools
import re
import tempfile
import zipfile
from functools import lru_cache
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import chunking, documents
from cited import SETTINGS, analysis_of, passage_for, record_cited_turn
from conftest import make_config
from test_documents import PAGES, make_pdf
from waiting import wait_until

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_names = itertools.count()


@lru_cache(maxsize=None)
def good_pdf() -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        return make_pdf(Path(folder) / "good.pdf", PAGES[:3]).read_bytes()


@lru_cache(maxsize=None)
def good_docx() -> bytes:
    from docx import Document

    doc = Document()
    doc.add_heading("Report", level=1)
    doc.add_paragraph("The vault code is 4471 and it opens the north door.")
    table = doc.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(1, 1).text = "Quarter", "12"
    buffer = io.BytesIO()
    doc.save(buffer)
    return buffer.getvalue()


def rezip(data: bytes, replace: dict | None = None, drop: tuple = (), extra: dict | None = None) -> bytes:
    """The zip ``data`` with parts replaced, dropped or added (a Word file damaged inside)."""
    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            if info.filename not in drop:
                archive.writestr(info.filename, (replace or {}).get(info.filename, source.read(info.filename)))
        for name, part in (extra or {}).items():
            archive.writestr(name, part)
    return out.getvalue()


def outcome(folder: Path, suffix: str, data: bytes):
    """Extract ``data`` saved under a fresh name: the text, or the UnreadableDocument (anything else fails the test)."""
    path = folder / f"f{next(_names)}{suffix}"
    path.write_bytes(data)
    try:
        doc = chunking.read_document(path)
    except documents.UnreadableDocument as exc:
        assert str(exc) and path.name in str(exc) and str(path.parent) not in str(exc)
        return exc
    assert isinstance(doc.text, str)
    return doc.text


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


# -- the loaders, fuzzed ----------------------------------------------------------------------

@FUZZ
@given(cut=st.floats(0, 1, exclude_max=True), suffix=st.sampled_from([".pdf", ".docx"]))
def test_a_truncated_file_is_text_or_unreadable(folder, cut, suffix):
    data = good_pdf() if suffix == ".pdf" else good_docx()
    outcome(folder, suffix, data[:int(len(data) * cut)])


@FUZZ
@given(flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=40),
       suffix=st.sampled_from([".pdf", ".docx"]))
def test_a_byte_flipped_file_is_text_or_unreadable(folder, flips, suffix):
    data = bytearray(good_pdf() if suffix == ".pdf" else good_docx())
    for at, value in flips:
        data[int(len(data) * at)] = value
    outcome(folder, suffix, bytes(data))


XML_JUNK = st.one_of(st.binary(max_size=300), st.text(alphabet="<>/=\"'&;:wpr !x", max_size=300).map(str.encode))


@FUZZ
@given(part=st.sampled_from(["word/document.xml", "[Content_Types].xml", "word/styles.xml", "_rels/.rels",
                             "word/_rels/document.xml.rels"]),
       junk=XML_JUNK, keep_start=st.booleans())
def test_a_word_file_with_any_part_replaced_is_text_or_unreadable(folder, part, junk, keep_start):
    original = zipfile.ZipFile(io.BytesIO(good_docx())).read(part)
    outcome(folder, ".docx", rezip(good_docx(), {part: (original[:len(original) // 2] if keep_start else b"") + junk}))


@FUZZ
@given(junk=st.binary(max_size=400), where=st.floats(0, 1))
def test_a_pdf_with_junk_in_its_objects_is_text_or_unreadable(folder, junk, where):
    data = good_pdf()
    at = int(len(data) * where)
    outcome(folder, ".pdf", data[:at] + junk + data[at:])


@lru_cache(maxsize=None)
def hostile_word_files() -> dict[str, tuple[bytes, str]]:
    good = good_docx()
    return {
        "bad-xml": (rezip(good, {"word/document.xml": b"<w:document><broken"}), "XMLSyntaxError"),
        "bad-content-types": (rezip(good, {"[Content_Types].xml": b"<Types garbage"}), "XMLSyntaxError"),
        "no-document-xml": (rezip(good, drop=("word/document.xml",)), "no item named 'word/document.xml'"),
        "entity-bomb": (rezip(good, {"word/document.xml": (
            b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">'
            b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;">]><d>&c;&c;&c;&c;&c;&c;&c;</d>')}), "Word"),
        "deep-nesting": (rezip(good, {"word/document.xml": b"<a>" * 100_000 + b"</a>" * 100_000}), "Word"),
        "zip-bomb": (rezip(good, {"word/document.xml": b"<" + b"a" * (documents.DOCX_MAX_UNPACKED + 1)}),
                     "more than the 100 MB"),
        "pdf-named-docx": (good_pdf(), "is a PDF, not a Word (.docx) file"),
        "old-doc": (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(2000), "is an old Office document"),
        "random": (bytes(range(256)) * 8, "could not be read as a Word (.docx) file"),
        "empty": (b"", "could not be read as a Word (.docx) file"),
    }


@lru_cache(maxsize=None)
def hostile_pdfs() -> dict[str, tuple[bytes, str]]:
    good = good_pdf()
    return {
        "docx-named-pdf": (good_docx(), "is a ZIP archive, not a PDF"),
        "png-named-pdf": (b"\x89PNG\r\n\x1a\n" + bytes(500), "is a PNG image, not a PDF"),
        "random": (bytes(range(256)) * 8, "could not be read as a PDF"),
        "empty": (b"", "could not be read as a PDF"),
        "header-only": (b"%PDF-1.7\n%%EOF\n", "could not be read as a PDF"),
        "nested-arrays": (b"%PDF-1.4\n1 0 obj\n" + b"[" * 100_000 + b"\nendobj\ntrailer<</Root 1 0 R>>\n%%EOF",
                          "could not be read as a PDF"),
    }


WORD_CASES = ["bad-xml", "bad-content-types", "no-document-xml", "entity-bomb", "deep-nesting", "zip-bomb",
              "pdf-named-docx", "old-doc", "random", "empty"]
PDF_CASES = ["docx-named-pdf", "png-named-pdf", "random", "empty", "header-only", "nested-arrays"]


def test_the_case_lists_name_every_case():
    assert sorted(WORD_CASES) == sorted(hostile_word_files()) and sorted(PDF_CASES) == sorted(hostile_pdfs())


@pytest.mark.parametrize("case", WORD_CASES)
def test_a_hostile_word_file_says_what_was_wrong(tmp_path, case):
    data, words = hostile_word_files()[case]
    result = outcome(tmp_path, ".docx", data)
    assert isinstance(result, documents.UnreadableDocument) and result.kind == "damaged", result
    assert words in str(result)


@pytest.mark.parametrize("case", PDF_CASES)
def test_a_hostile_pdf_says_what_was_wrong(tmp_path, case):
    data, words = hostile_pdfs()[case]
    result = outcome(tmp_path, ".pdf", data)
    assert isinstance(result, documents.UnreadableDocument) and result.kind == "damaged", result
    assert words in str(result)


def test_a_broken_xref_or_a_cut_tail_is_repaired_or_refused_never_raised(tmp_path):
    """PDFium rebuilds a damaged cross-reference table; either way the outcome is text or the card."""
    good = good_pdf()
    broken_xref = re.sub(rb"startxref\s+\d+", b"startxref\n999999", good)
    for data in (broken_xref, good.replace(b"xref", b"xxxx"), good[:-30], good[:len(good) // 3]):
        result = outcome(tmp_path, ".pdf", data)
        assert isinstance(result, (str, documents.UnreadableDocument))
    assert "PLANTED1" in outcome(tmp_path, ".pdf", broken_xref)     # repaired, not refused


def test_an_encrypted_pdf_is_still_named_as_encrypted(tmp_path):
    result = outcome(tmp_path, ".pdf", make_pdf(tmp_path / "locked.pdf", PAGES[:1], password="pw").read_bytes())
    assert isinstance(result, documents.EncryptedDocument)


def test_the_log_says_what_went_wrong_without_the_file_name(tmp_path, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="app.documents"):
        outcome(tmp_path, ".docx", DAMAGED["report.docx"][0]())
    assert "a docx file could not be read: XMLSyntaxError" in caplog.text


# -- through waitress: wherever a file is read ------------------------------------------------

DAMAGED = {   # name: (how to make it, words the card must say)
    "report.docx": (lambda: rezip(good_docx(), {"word/document.xml": b"<w:document><broken"}), "XMLSyntaxError"),
    "types.docx": (lambda: rezip(good_docx(), {"[Content_Types].xml": b"<Types garbage"}), "XMLSyntaxError"),
    "scan.docx": (good_pdf, "is a PDF, not a Word (.docx) file"),
    "cut.pdf": (lambda: good_pdf()[:200], "could not be read as a PDF"),
}


@pytest.fixture
def bad_live(tmp_path, scripted, make_live):
    config = make_config(tmp_path, scripted.url)
    workspace = Path(config.workspace)
    workspace.mkdir(parents=True)
    for name, (make, _) in DAMAGED.items():
        (workspace / name).write_bytes(make())
    return workspace, make_live(config)


@pytest.mark.parametrize("file", sorted(DAMAGED))
def test_a_message_naming_a_damaged_file_gets_the_card_and_sends_nothing(bad_live, scripted, file):
    workspace, live = bad_live
    name = live.open_session()
    response = live.post(f"/s/{name}/messages", data={"message": f"Summarise {file} please"})
    assert response.status_code == 200, response.text[:500]
    card = BeautifulSoup(response.text, "html.parser").get_text(" ")
    assert "The file is damaged" in card and DAMAGED[file][1] in card and "Nothing was sent" in card
    assert scripted.chats() == []
    assert f"Summarise {file} please" in (live.services.store.folder / f"{name}.spmd").read_text()   # kept


@pytest.mark.parametrize("file", sorted(DAMAGED))
def test_a_direct_analysis_of_a_damaged_file_is_a_clear_400(bad_live, scripted, file):
    workspace, live = bad_live
    name = live.open_session()
    response = live.post(f"/s/{name}/analysis/direct", data={"file": file})
    assert response.status_code == 400, response.text[:500]
    assert DAMAGED[file][1] in BeautifulSoup(response.text, "html.parser").get_text(" ")
    assert live.services.jobs.open_for(name) is None and scripted.chats() == []


def test_the_worker_fails_the_job_with_the_reason_when_the_file_is_damaged_after_the_card(bad_live, scripted,
                                                                                          caplog):
    import logging

    from docx import Document

    workspace, live = bad_live
    doc = Document()
    for part in range(40):
        doc.add_paragraph(f"Part {part} is about ferries and their timetables across the bay. " * 12)
    doc.save(str(workspace / "handbook.docx"))
    name = live.open_session()
    card = live.post(f"/s/{name}/messages", data={"message": "Summarise handbook.docx"}).text
    assert "Context overflow" in card, card[:300]
    job = live.services.jobs.open_for(name)
    (workspace / "handbook.docx").write_bytes(DAMAGED["report.docx"][0]())      # damaged after the card
    with caplog.at_level(logging.INFO):
        response = live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "List the parts.",
                                                                         "scope": "all"})
        assert response.status_code == 200
        wait_until(lambda: job.state == "failed", 30, f"the job to fail (it is {job.state})")
    assert "handbook.docx cannot be read" in job.message and "XMLSyntaxError" in job.message
    assert "Traceback" not in caplog.text and scripted.chats() == []


def test_the_passage_view_of_a_file_damaged_since_the_analysis_says_so(bad_live):
    from docx import Document

    workspace, live = bad_live
    document = Document()
    document.add_heading("Keys", level=1)
    document.add_paragraph("The vault code is 4471 and it opens the north door.")
    document.save(str(workspace / "keys.docx"))
    doc = chunking.read_document(workspace / "keys.docx", SETTINGS)
    chunk = chunking.chunk_document(doc)[0]
    passage = passage_for(doc, chunk, ["vault code is 4471"])
    name = live.open_session()
    turn = record_cited_turn(live.services.store, name, analysis_of(doc, "keys.docx", [passage]),
                             f"The code is 4471 [{passage.chunk}].")
    url = f"/s/{name}/turns/{turn}/passages/{passage.chunk}"
    assert "4471" in BeautifulSoup(live.get(url).text, "html.parser").select_one(".passage-text").get_text()
    (workspace / "keys.docx").write_bytes(DAMAGED["report.docx"][0]())
    for headers in ({}, {"HX-Request": "true"}):
        response = live.get(url, headers=headers)
        assert response.status_code == 200, response.text[:500]
        problem = BeautifulSoup(response.text, "html.parser").select_one(".passage-problem").get_text(" ")
        assert "keys.docx cannot be read now" in problem and "XMLSyntaxError" in problem
