"""PDF and Word files (issue 18): loaders, pages and headings, honest failures, the budget.

The PDFs are made here with fpdf2 (multi-page, scanned, encrypted) and one is a
real manual that Debian ships; the Word files are made with python-docx.
"""

import io
import re
from pathlib import Path

import pytest

from app import chunking, documents
from conftest import make_config, require

REAL_PDF = Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf")      # Debian's libtasn1-doc: 36 pages


def make_pdf(path: Path, pages: list[str], password: str | None = None, image_pages: tuple[int, ...] = ()):
    """A PDF with one text page per entry (image-only for the 1-based numbers in ``image_pages``)."""
    from fpdf import FPDF
    from PIL import Image

    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    for number, text in enumerate(pages, 1):
        pdf.add_page()
        if number in image_pages:
            picture = io.BytesIO()
            Image.new("RGB", (60, 40), (200, 30, 30)).save(picture, format="PNG")
            pdf.image(picture, x=20, y=20, w=120)
        else:
            pdf.multi_cell(0, 6, text)
    if password:
        pdf.set_encryption(owner_password="owner-" + password, user_password=password)
    pdf.output(str(path))
    return path


def make_docx(path: Path):
    from docx import Document

    doc = Document()
    doc.add_heading("Annual report", level=1)
    doc.add_paragraph("An opening paragraph about the year.")
    doc.add_heading("Finance", level=2)
    doc.add_paragraph("Revenue grew by eleven percent.")
    table = doc.add_table(rows=3, cols=2)
    for r, (a, b) in enumerate([("Quarter", "Revenue"), ("Q1", "10"), ("Q2", "12")]):
        table.cell(r, 0).text, table.cell(r, 1).text = a, b
    doc.add_heading("Staff", level=2)
    doc.add_paragraph("# not a heading, just a hash at the start of a sentence.")
    doc.add_paragraph("Headcount stayed flat.", style="List Bullet")
    doc.save(str(path))
    return path


PAGES = [f"Page {n} says the marker word PLANTED{n} once, in the middle of ordinary prose about apples."
         for n in range(1, 7)]


# -- loaders, as units --------------------------------------------------------------------

def test_a_pdf_becomes_its_pages_text_with_page_offsets(tmp_path):
    extracted = documents.extract(make_pdf(tmp_path / "six.pdf", PAGES))
    assert extracted.format == "pdf" and extracted.page_count == 6 and extracted.kind == "prose"
    for n in range(1, 7):
        at = extracted.text.index(f"PLANTED{n}")
        assert extracted.pages_of(at, at + 9) == (n, n)
    assert extracted.pages_of(0, len(extracted.text)) == (1, 6)


def test_pdf_chunks_know_their_pages_and_together_hold_the_whole_text(tmp_path):
    pages = [(f"Paragraph {n}.{k} of a long page, about pears and plums and nothing else at all. " * 4)
             for n in range(1, 13) for k in range(1)]
    path = make_pdf(tmp_path / "long.pdf", pages)
    doc = chunking.read_document(path, chunking.ChunkSettings(size_tokens=200))
    chunks = chunking.chunk_document(doc)
    assert len(chunks) > 3
    spans = [doc.source.pages_of(c.start, c.end) for c in chunks]
    assert spans[0][0] == 1 and spans[-1][1] == 12 and all(a <= b for a, b in spans)
    covered = "".join(doc.text[c.body_start:c.end] for c in chunks)
    for n in range(1, 13):
        assert f"Paragraph {n}.0" in covered


def test_a_scanned_pdf_says_it_has_no_text_layer(tmp_path):
    path = make_pdf(tmp_path / "scan.pdf", ["", "", ""], image_pages=(1, 2, 3))
    with pytest.raises(documents.NoTextLayer, match=r"no text layer: 0 characters on 3 pages.*needs OCR"):
        documents.extract(path)


def test_pages_that_hold_only_images_are_named(tmp_path):
    path = make_pdf(tmp_path / "mixed.pdf", ["Words on page one.", "", "Words on page three."], image_pages=(2,))
    assert documents.extract(path).image_pages == (2,)


def test_an_encrypted_pdf_says_so(tmp_path):
    path = make_pdf(tmp_path / "locked.pdf", PAGES[:2], password="secret")
    with pytest.raises(documents.EncryptedDocument, match="encrypted PDF"):
        documents.extract(path)


def test_a_damaged_pdf_says_so(tmp_path):
    good = make_pdf(tmp_path / "good.pdf", PAGES).read_bytes()
    (tmp_path / "broken.pdf").write_bytes(good[:200])
    with pytest.raises(documents.DamagedDocument):
        documents.extract(tmp_path / "broken.pdf")
    (tmp_path / "fake.docx").write_bytes(b"not a zip at all")
    with pytest.raises(documents.DamagedDocument):
        documents.extract(tmp_path / "fake.docx")


def test_word_headings_become_the_heading_path_and_tables_stay_whole(tmp_path):
    extracted = documents.extract(make_docx(tmp_path / "report.docx"))
    assert extracted.kind == "markdown" and extracted.format == "docx"
    assert "# Annual report" in extracted.text and "## Finance" in extracted.text
    assert "| Quarter | Revenue |\n|---|---|\n| Q1 | 10 |" in extracted.text
    assert "\\# not a heading" in extracted.text                 # body text is never read as structure
    doc = chunking.read_document(tmp_path / "report.docx", chunking.ChunkSettings(size_tokens=64))
    paths = {path for c in chunking.chunk_document(doc) for path in (c.heading_path, *c.sections)}
    assert ("Annual report", "Finance") in paths and ("Annual report", "Staff") in paths


def test_extraction_is_cached_until_the_file_changes(tmp_path, monkeypatch):
    path = make_pdf(tmp_path / "cached.pdf", PAGES)
    calls = []
    real = documents._pdf
    monkeypatch.setattr(documents, "_pdf", lambda p: calls.append(p) or real(p))
    documents.extract(path)
    documents.extract(path)
    assert len(calls) == 1
    make_pdf(path, PAGES[:3])
    assert documents.extract(path).page_count == 3 and len(calls) == 2


def test_the_real_manual_reads_as_text_with_36_pages():
    require(REAL_PDF.exists(), "Debian's libtasn1-doc is needed for the real PDF")
    extracted = documents.extract(REAL_PDF)
    assert extracted.page_count == 36
    assert "Abstract Syntax Notation One" in extracted.text and "\x00" not in extracted.text
    assert "asn1_create_element" in extracted.text


@pytest.mark.parametrize("name, data, what", [
    ("photo.jpg", b"\xff\xd8\xff\xe0" + bytes(4000), "a JPEG image"),
    ("bundle.zip", b"PK\x03\x04" + bytes(4000), "a ZIP archive"),
    ("tool", b"\x7fELF" + bytes(4000), "a program"),
    ("blob.dat", b"abc\x00def" * 100, "a binary file"),
])
def test_files_that_are_not_text_are_named_by_what_they_are(tmp_path, name, data, what):
    (tmp_path / name).write_bytes(data)
    assert documents.sniff(tmp_path / name) == what


# -- through the app --------------------------------------------------------------------------

@pytest.fixture
def docs_live(tmp_path, scripted, make_live):
    config = make_config(tmp_path, scripted.url)
    Path(config.workspace).mkdir(parents=True)
    return Path(config.workspace), make_live(config)


def wait_reply(live, name):
    from test_turns import wait_for

    wait_for(lambda: live.services.activities.holder(name) is None, what="the reply")


def test_a_small_pdf_is_read_into_the_chat_as_its_text(docs_live, scripted):
    workspace, live = docs_live
    make_pdf(workspace / "short.pdf", PAGES[:2])
    name = live.open_session()
    fragment = live.post(f"/s/{name}/messages", data={"message": "What does short.pdf say?"}).text
    assert "Context overflow" not in fragment
    wait_reply(live, name)
    prompt = scripted.chats()[-1].body["messages"][-1]["content"]
    assert "PLANTED1" in prompt and "PLANTED2" in prompt and "%PDF" not in prompt and "endobj" not in prompt


@pytest.mark.parametrize("make, expected", [
    (lambda p: make_pdf(p, ["", ""], image_pages=(1, 2)), "no text layer: 0 characters on 2 pages"),
    (lambda p: make_pdf(p, PAGES[:2], password="pw"), "encrypted PDF"),
])
def test_a_scanned_or_encrypted_pdf_gets_its_message_and_nothing_is_sent(docs_live, scripted, make, expected):
    workspace, live = docs_live
    make(workspace / "paper.pdf")
    name = live.open_session()
    fragment = live.post(f"/s/{name}/messages", data={"message": "Summarise paper.pdf"}).text
    assert expected in fragment and "Nothing was sent" in fragment
    assert scripted.chats() == []
    assert "Summarise paper.pdf" in (live.services.store.folder / f"{name}.spmd").read_text()   # kept


def test_a_large_binary_file_gets_a_clear_card_not_an_analysis_offer(docs_live, scripted):
    workspace, live = docs_live
    (workspace / "backup.zip").write_bytes(b"PK\x03\x04" + bytes(2_000_000))
    name = live.open_session()
    response = live.post(f"/s/{name}/messages", data={"message": "look at backup.zip"})
    assert response.status_code == 200
    assert "backup.zip is a ZIP archive, not text" in response.text and "Context overflow" not in response.text
    assert scripted.chats() == []


def test_a_pdf_too_large_for_the_context_gets_the_card_sized_from_its_text(docs_live, scripted):
    workspace, live = docs_live
    pages = [f"Page {n}: " + "a sentence about the history of orchards and their keepers. " * 40 for n in range(60)]
    path = make_pdf(workspace / "book.pdf", pages)
    text_tokens = len(documents.extract(path).text.encode()) / 4
    name = live.open_session()
    fragment = live.post(f"/s/{name}/messages", data={"message": "Summarise book.pdf"}).text
    assert "Context overflow" in fragment and scripted.chats() == []
    shown = int(fragment.split("<dt>Size</dt><dd>about ")[1].split(" tokens")[0].replace(",", ""))
    assert abs(shown - text_tokens) / text_tokens < 0.15, (shown, text_tokens, path.stat().st_size / 4)


def run_analysis(live, scripted, name, message):
    """Send ``message`` (it names a file too large for the context), start the card, wait for the end."""
    import re as _re

    from test_turns import wait_for

    card = live.post(f"/s/{name}/messages", data={"message": message}).text
    assert "Context overflow" in card, card[:300]
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "List the marker words.", "scope": "all"})
    wait_for(lambda: "synthesis: model=" in (live.services.store.folder / f"{name}.spmd").read_text(),
             timeout=60, what="the analysis")
    maps = [c.body["messages"][-1]["content"] for c in scripted.chats()
            if _re.search(r"\nChunk \d+ of \d+", c.body["messages"][-1]["content"])]
    return card, job, maps


def test_a_pdf_analysis_labels_each_map_prompt_with_its_pages_and_sends_all_its_text(docs_live, scripted):
    workspace, live = docs_live
    pages = [f"Page {n} holds MARK{n:03d} among sentences about rivers and their bridges. " * 30 for n in range(40)]
    path = make_pdf(workspace / "atlas.pdf", pages)
    extracted = documents.extract(path)
    name = live.open_session()
    card, job, maps = run_analysis(live, scripted, name, "Summarise atlas.pdf")
    assert "on 40 pages" in card and job.pages == 40
    assert maps and all(re.search(r"\nChunk \d+ of \d+ \(pages? \d+(–\d+)?\):\n", m) for m in maps)
    sent = "".join(maps)
    for n in range(40):
        assert f"MARK{n:03d}" in sent                          # every page's text reached a map prompt
    words = set(extracted.text.split())
    assert words <= set(sent.split())


def test_a_word_analysis_labels_each_map_prompt_with_its_heading_path(docs_live, scripted):
    from docx import Document

    workspace, live = docs_live
    doc = Document()
    doc.add_heading("Handbook", level=1)
    for part in range(12):
        doc.add_heading(f"Part {part}", level=2)
        for k in range(6):
            doc.add_paragraph(f"Part {part} paragraph {k} keeps TOKEN{part:02d}{k} among words about ferries. " * 12)
    doc.save(str(workspace / "handbook.docx"))
    name = live.open_session()
    card, job, maps = run_analysis(live, scripted, name, "Summarise handbook.docx")
    assert len(maps) > 1 and all("(in: Handbook › Part " in m for m in maps)
    sent = "".join(maps)
    assert all(f"TOKEN{part:02d}{k}" in sent for part in range(12) for k in range(6))
