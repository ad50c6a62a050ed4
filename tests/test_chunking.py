"""Tests for app.chunking.

The invariants from the issue are checked by one function, ``check_invariants``,
over hypothesis-generated documents (whose structure the generator records, so
"inside a table row / fenced block" is known independently of the chunker) and
over real files: this project's sources, the stdlib, Markdown READMEs with
tables, and a book-length plain-text file built here.
"""
from __future__ import annotations

import importlib.metadata
import os
import random
import re
import sysconfig
from pathlib import Path

import sys

import pytest
from hypothesis import HealthCheck, example, given, settings as hsettings, strategies as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:       # run from anywhere, app/ may be a namespace package
    sys.path.insert(0, str(ROOT))

from app.chunking import (  # noqa: E402
    ANALYSIS_OVERLAP_SHARE, OVERLAP_SHARE, BinaryDocumentError, ChunkingError, ChunkSettings, DocumentNotFoundError,
    chunk_document, chunk_file, chunk_text, estimate_tokens, html_to_text,
    kind_for_path, make_document, plan_file, plan_text,
)

WS = " \t\n\r\x0b\x0c"


# ---------------------------------------------------------------- checker

def _utf8(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def _word_is_huge(t: str, b: int, budget: int) -> bool:
    """True if the non-space run around offset b is larger than a chunk."""
    lo, hi = max(0, b - budget - 2), min(len(t), b + budget + 2)
    left = b
    while left > lo and not t[left - 1].isspace():
        left -= 1
    right = b
    while right < hi and not t[right].isspace():
        right += 1
    if (left == lo and lo > 0) or (right == hi and hi < len(t)):
        return True             # runs past the window: longer than budget chars
    return _utf8(t[left:right]) > budget


def check_invariants(doc, chunks, s: ChunkSettings, structure: dict | None = None) -> None:
    """Assert invariants 1-5 (and 4 against recorded structure when given)."""
    t, budget = doc.text, s.max_bytes
    if not t.strip(WS) or not t.strip():
        assert len(chunks) <= 1
        return
    # 1. own parts tile the document
    assert chunks, "non-blank text must give chunks"
    assert chunks[0].body_start == 0
    assert chunks[-1].end == len(t)
    for prev, c in zip(chunks, chunks[1:]):
        assert c.body_start == prev.end
        assert c.start >= prev.body_start, "overlap comes from the previous chunk only"
    ids = set()
    for i, c in enumerate(chunks):
        assert c.index == i
        assert 0 <= c.start <= c.body_start < c.end <= len(t)
        # 2. the slice is verbatim in the text; only a heading / header is added
        piece = t[c.start:c.end]
        assert c.text.endswith(piece)
        prefix = c.text[: len(c.text) - len(piece)]
        for line in prefix.split("\n"):
            if line:
                assert t.rfind(line, 0, c.body_start) >= 0, (i, line)
        if prefix and not prefix.startswith("|") and not prefix.startswith("<table"):
            # a carried heading line (then maybe a repeated table header)
            head = prefix.split("\n\n", 1)
            assert len(head) == 2 and c.heading_path, (i, prefix)
            assert c.heading_path[-1] in head[0]
        # 3. size, overlap and prefix included
        est = estimate_tokens(c.text, s.bytes_per_token)
        assert est == c.tokens
        assert est <= s.size_tokens, (i, est, s.size_tokens)
        assert c.kind in ("text", "table", "code")
        assert c.fingerprint == s.fingerprint
        ids.add(c.id)
    assert len(ids) == len(chunks)
    # 4. no boundary inside a word unless the word alone is larger than a chunk
    for c in chunks[:-1]:
        b = c.end
        x, y = t[b - 1], t[b]
        if x.isspace() or y.isspace() or x in "。！？" or (x == ">" and y == "<"):
            continue
        assert _word_is_huge(t, b, budget), f"cut inside a word at {b}: {t[b-20:b+20]!r}"
        assert c.sections and c.sections[0] == c.heading_path
        assert len(set(c.sections)) == len(c.sections)
    if structure:
        _check_structure(t, chunks, budget, structure, s.purpose)


def _check_structure(t, chunks, budget, structure, purpose="retrieval") -> None:
    """Invariant 4 for rows and fences; every part of a cut table starts with its header;
    retrieval: 'tables never mix with text'."""
    bounds = [c.end for c in chunks[:-1]]
    for fs, fe in structure.get("fences", ()):
        if _utf8(t[fs:fe]) <= budget:
            assert not any(fs < b < fe for b in bounds), ("cut in fence", fs, fe)
    for rs, re_ in structure.get("rows", ()):
        if _utf8(t[rs:re_]) <= budget:
            assert not any(rs < b < re_ for b in bounds), ("cut in row", rs, re_)
    tables = structure.get("tables", ())
    for ts, te in tables:
        nl = t.find("\n", t.find("\n", ts) + 1)
        header = t[ts:nl + 1]                     # header row + delimiter row
        if _utf8(header) > budget // 2:
            continue
        for c in chunks:
            row_end = t.find("\n", c.body_start)
            row = t[c.body_start: len(t) if row_end < 0 else row_end + 1]
            if nl < c.body_start < te and _utf8(header) + _utf8(row) <= budget:
                assert header in c.text[: len(c.text) - (c.end - c.start)], ("no header", c.index)
    if purpose == "analysis":
        for c in chunks:
            if c.kind == "table":
                assert any(ts < c.end and c.body_start < te for ts, te in tables)
        return
    for c in chunks:
        own = (c.body_start, c.end)
        hits = [(ts, te) for ts, te in tables if ts < own[1] and own[0] < te]
        if hits:
            assert c.kind == "table", ("text chunk holds a table", c.index)
            outside = t[own[0]:hits[0][0]] + t[hits[-1][1]:own[1]]
            for line in outside.split("\n"):
                assert (not line.strip() or line.lstrip().startswith("#")
                        or line.startswith("Table")), line
            assert len(hits) == 1
        if c.kind == "table":
            assert hits, "table chunk without a table"


# ---------------------------------------------------------------- generator

LETTERS = "aeiouklmnrsé漢ß😀"
word = st.text(alphabet=LETTERS, min_size=1, max_size=12)
punct = st.sampled_from(["", "", "", ",", ";", ".", "!", "?", ":"])


@st.composite
def paragraph(draw):
    n = draw(st.integers(1, 60))
    parts = []
    for i in range(n):
        w = draw(word) + draw(punct)
        if i:
            parts.append(draw(st.sampled_from([" ", " ", " ", "\n"])))
        parts.append(w)
    return "".join(parts).rstrip(":;,") + "."


@st.composite
def huge_word(draw):
    return draw(st.sampled_from("xé漢")) * draw(st.integers(20, 900))


@st.composite
def fence(draw):
    lines = draw(st.lists(st.sampled_from(
        ["x = 1", "", "# not a heading", "| a | b |", "|---|---|", "- item", "    indented",
         "def f():", "    return 漢字"]), min_size=0, max_size=40))
    return "```py\n" + "\n".join(lines) + ("\n" if lines else "") + "```"


@st.composite
def table(draw):
    cols = draw(st.integers(1, 4))
    nrows = draw(st.integers(0, 40))
    cell = st.text(alphabet=LETTERS + " ", min_size=1, max_size=30).map(str.strip).filter(bool)
    rows = ["| " + " | ".join(draw(cell) for _ in range(cols)) + " |" for _ in range(nrows + 1)]
    rows.insert(1, "|" + "|".join(["---"] * cols) + "|")
    caption = draw(st.sampled_from(["", "", "Table 1: results", "Table: sizes"]))
    return caption, rows


@st.composite
def markdown_doc(draw):
    """A Markdown document and the structure the chunker must respect."""
    kinds = st.sampled_from(["para", "para", "para", "heading", "list", "fence",
                             "table", "huge"])
    out, pos = [], 0
    structure: dict[str, list] = {"fences": [], "rows": [], "tables": []}

    def add(s):
        nonlocal pos
        out.append(s)
        pos += len(s)

    add(draw(st.sampled_from(["", "", "\n\n", "  \n"])))
    for _ in range(draw(st.integers(0, 25))):
        k = draw(kinds)
        if k == "para":
            add(draw(paragraph()))
        elif k == "heading":
            add("#" * draw(st.integers(1, 4)) + " " + draw(word))
        elif k == "list":
            items = draw(st.lists(paragraph(), min_size=1, max_size=6))
            add("\n".join("- " + i.replace("\n", " ") for i in items))
        elif k == "fence":
            f = draw(fence())
            structure["fences"].append((pos, pos + len(f)))
            add(f)
        elif k == "huge":
            add(draw(huge_word()))
        else:
            caption, rows = draw(table())
            if caption:
                add(caption + "\n")
            start = pos
            for r in rows:
                structure["rows"].append((pos, pos + len(r)))
                add(r + "\n")
            structure["tables"].append((start, pos - 1))
        add(draw(st.sampled_from(["\n\n", "\n\n", "\n\n\n", "\n \n"])))
    return "".join(out), structure


setting_st = st.builds(
    ChunkSettings,
    size_tokens=st.integers(8, 160),
    min_tokens=st.one_of(st.none(), st.integers(0, 8)),
    overlap=st.sampled_from(["paragraph", "sentence", "none"]),
    bytes_per_token=st.sampled_from([4.0, 3.1, 2.0]),
    carry_heading=st.booleans(),
    purpose=st.sampled_from(["analysis", "retrieval"]),
    fill=st.one_of(st.none(), st.sampled_from([0.0, 0.5, 0.75, 1.0])),
)

HYP = hsettings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@HYP
@given(markdown_doc(), setting_st)
@example(("```py\n```\n\n| a | a |\n|---|---|\n\n\n", {"fences": [(0, 9)], "rows": [(11, 20), (21, 30)],
                                                        "tables": [(11, 30)]}),
         ChunkSettings(size_tokens=8, overlap="paragraph", carry_heading=False, purpose="analysis"))
@example(("# a\n\n| h |\n|---|\n| b |\n| " + "c" * 22 + " |\n",    # heading + header + row > budget
          {"fences": [], "rows": [(5, 10), (11, 16), (17, 22), (23, 49)], "tables": [(5, 49)]}),
         ChunkSettings(size_tokens=20, overlap="none", bytes_per_token=2.0, purpose="retrieval"))
@example(("| h |\n|---|\n| " + "x" * 24 + " |\n| " + "x" * 24 + " |\n",   # row fits without its newline
          {"fences": [], "rows": [(0, 5), (6, 11), (12, 40), (41, 69)], "tables": [(0, 69)]}),
         ChunkSettings(size_tokens=20, overlap="none", bytes_per_token=2.0, purpose="retrieval"))
def test_invariants_generated_markdown(doc_structure, s):
    """The invariants, and the same chunks from the same text every time (one test: drawing the
    documents is nine tenths of its cost, so each is used for both)."""
    text, structure = doc_structure
    doc = make_document(text, "markdown", s)
    assert doc.text == text
    check_invariants(doc, chunk_document(doc), s, structure)
    assert chunk_text(text, "markdown", s) == chunk_text(text, "markdown", s)


@HYP
@given(st.text(), st.sampled_from(["prose", "markdown", "source", "html"]), setting_st)
def test_invariants_arbitrary_text(text, kind, s):
    doc = make_document(text, kind, s)
    check_invariants(doc, chunk_document(doc), s)


@hsettings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(
    ["def f(x):\n    return x\n", "class A:\n    pass\n", "\n", "    y = 1\n",
     "func main() {\n}\n", "fn go() {}\n", "int add(int a, int b) {\n  return a+b;\n}\n",
     "// comment\n", "@decorator\n", "x" * 300 + "\n", "impl Foo {}\n"]), max_size=60),
    setting_st)
def test_invariants_generated_source(lines, s):
    doc = make_document("".join(lines), "source", s)
    chunks = chunk_document(doc)
    check_invariants(doc, chunks, s)
    assert all(c.kind == "code" for c in chunks)


# ---------------------------------------------------------------- real files

def _project_files():
    """The repository's own files; not what a test run leaves behind (tests/artifacts: the browser
    tests' screenshots), so a fresh clone and a second run collect the same tests."""
    for sub in ("app", "static", "templates", "tests", "bench", "scripts", "deploy"):
        for p in sorted((ROOT / sub).rglob("*")):
            if p.is_file() and p.stat().st_size < 3_000_000 and not {"__pycache__", "artifacts"} & set(p.parts):
                yield p
    for name in ("pyproject.toml", "README.md"):
        if (ROOT / name).is_file():
            yield ROOT / name


PROJECT_FILES = list(_project_files())


@pytest.mark.parametrize("path", PROJECT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_invariants_project_files(path):
    s = ChunkSettings(size_tokens=400)
    try:
        doc, chunks = chunk_file(path, s)
    except BinaryDocumentError:
        return
    check_invariants(doc, chunks, s)


def test_project_sources_are_chunked_as_source():
    doc, chunks = chunk_file(ROOT / "app" / "chunking" / "packer.py", ChunkSettings(size_tokens=300))
    assert doc.kind == "source" and doc.boundary == "block"
    check_invariants(doc, chunks, ChunkSettings(size_tokens=300))
    starts = [doc.text[c.body_start:c.body_start + 80] for c in chunks[1:]]
    at_block = [s for s in starts if re.match(r"\s*(def |class |@|#|_\w+ = )", s)]
    assert len(at_block) >= len(starts) // 2, starts


STDLIB = Path(sysconfig.get_paths()["stdlib"])


@pytest.mark.parametrize("name", ["argparse.py", "typing.py", "json/decoder.py"])
@pytest.mark.parametrize("size", [200, 1500])
def test_invariants_stdlib_sources(name, size):
    path = STDLIB / name
    if not path.is_file():
        pytest.skip("stdlib source not installed")
    s = ChunkSettings(size_tokens=size, bytes_per_token=3.1)
    doc, chunks = chunk_file(path, s)
    check_invariants(doc, chunks, s)


def _readmes():
    found = []
    try:
        meta = importlib.metadata.distribution("xllamacpp").read_text("METADATA")
        if meta:
            found.append(("xllamacpp METADATA", meta))
    except importlib.metadata.PackageNotFoundError:
        pass
    for p in ("/usr/share/doc/nodejs/api/fs.md", "/usr/share/doc/nodejs/api/cli.md",
              "/root/.pyenv/README.md"):
        if os.path.isfile(p):
            found.append((p, Path(p).read_text(encoding="utf-8", errors="replace")))
    found.append(("synthetic README", _synthetic_readme()))
    return found


def _synthetic_readme(seed=7) -> str:
    r = random.Random(seed)
    words = "model chunk token budget raspberry context paragraph table row".split()
    parts = ["# Project\n"]
    for sec in range(40):
        parts.append(f"## Section {sec}\n")
        for _ in range(r.randint(0, 5)):
            parts.append(" ".join(r.choice(words) for _ in range(r.randint(5, 120))) + ".\n")
        if sec % 3 == 0:
            parts.append(f"Table {sec}: measurements\n")
            rows = ["| name | value | note |", "|:---|---:|---|"]
            for _ in range(r.randint(2, 150)):
                note = " ".join(r.choice(words) for _ in range(r.randint(1, 12)))
                rows.append(f"| {r.choice(words)} | {r.randint(0, 9999)} | {note} |")
            parts.append("\n".join(rows) + "\n")
        if sec % 4 == 1:
            parts.append("```sh\n" + "\n\n".join(f"echo {w}" for w in words) + "\n```\n")
    return "\n".join(parts)


READMES = _readmes()


@pytest.mark.parametrize("name,text", READMES, ids=[n for n, _ in READMES])
@pytest.mark.parametrize("size", [120, 600, 1500])
@pytest.mark.parametrize("purpose", ["analysis", "retrieval"])
def test_invariants_readmes_with_tables(name, text, size, purpose):
    s = ChunkSettings(size_tokens=size, purpose=purpose)
    doc = make_document(text, "markdown", s)
    chunks = chunk_document(doc)
    check_invariants(doc, chunks, s)
    if purpose == "analysis":
        return
    if "|---" in text or "|:---" in text:
        assert any(c.kind == "table" for c in chunks)
    for c in chunks:   # no own part mixes a pipe table row with prose
        own = doc.text[c.body_start:c.end]
        if c.kind == "text":
            assert not re.search(r"^ {0,3}\|?[ \t]*:?-{3,}:?[ \t]*\|", own, re.M), c.index


def _book(n_paragraphs=6000, seed=3) -> str:
    """A deterministic plain-text 'book' (~2.5 MB), hard-wrapped at 72 columns."""
    r = random.Random(seed)
    vocab = ("the of and to a in that he was it his for as with had but "
             "whale captain ship sea voyage harpoon deck crew Ishmael Ahab").split()
    out = []
    for i in range(n_paragraphs):
        if i % 300 == 0:
            out.append(f"CHAPTER {i // 300 + 1}.")
        sents = []
        for _ in range(r.randint(1, 9)):
            s = " ".join(r.choice(vocab) for _ in range(r.randint(4, 30)))
            sents.append(s[0].upper() + s[1:] + r.choice(".!?"))
        para, line = [], ""
        for w in " ".join(sents).split(" "):
            if len(line) + len(w) + 1 > 72:
                para.append(line)
                line = w
            else:
                line = f"{line} {w}" if line else w
        para.append(line)
        out.append("\n".join(para))
    return "\r\n\r\n".join(out).replace("\n", "\r\n").replace("\r\r\n", "\r\n")


def test_book_length_plain_text(tmp_path):
    path = tmp_path / "book.txt"
    path.write_bytes(_book().encode())
    s = ChunkSettings()
    doc, chunks = chunk_file(path, s)
    assert doc.kind == "prose" and "\r" not in doc.text
    assert len(doc.text) > 2_000_000
    check_invariants(doc, chunks, s)
    # packing: chunks are reasonably full (seed 000 recombines short paragraphs)
    full = [c for c in chunks[:-1] if c.tokens >= 0.75 * s.size_tokens]
    assert len(full) >= 0.9 * (len(chunks) - 1)
    # paragraph overlap: each chunk starts with the previous chunk's last paragraph,
    # or, when that paragraph is over the overlap cap, with its last sentences
    cap = s.max_bytes // (ANALYSIS_OVERLAP_SHARE if s.purpose == "analysis" else OVERLAP_SHARE)
    for prev, c in zip(chunks, chunks[1:]):
        assert c.start < c.body_start
        last_paragraph = doc.text.rfind("\n\n", prev.body_start, prev.end - 2) + 2
        if len(doc.text[last_paragraph:prev.end].encode()) <= cap:
            assert c.start == last_paragraph
        else:
            assert re.fullmatch(r"[.!?]\s", doc.text[c.start - 2:c.start]) and c.start > last_paragraph
    assert plan_file(path, s).chunks == len(chunks)


# ---------------------------------------------------------------- behaviour

def test_estimate_tokens():
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("é") == 1 and estimate_tokens("éé", 1.0) == 4
    assert estimate_tokens("x" * 31, 3.1) == 10
    assert estimate_tokens("\ud800") == 1        # lone surrogate does not raise


def test_settings_validation_and_fingerprint():
    with pytest.raises(ValueError):
        ChunkSettings(overlap="lines")
    with pytest.raises(ValueError):
        ChunkSettings(size_tokens=2)
    with pytest.raises(ValueError):
        ChunkSettings(bytes_per_token=0)
    assert ChunkSettings().min_size == 375
    assert ChunkSettings().max_bytes == 6000
    assert ChunkSettings(bytes_per_token=3.1).max_bytes == 4650
    a, b = ChunkSettings(), ChunkSettings(size_tokens=1000)
    assert a.fingerprint != b.fingerprint
    assert a.fingerprint == ChunkSettings().fingerprint


def test_ids_change_with_settings_and_text():
    text = "Hello world.\n\n" * 300
    a = chunk_text(text, "prose", ChunkSettings(size_tokens=200))
    b = chunk_text(text, "prose", ChunkSettings(size_tokens=100))
    c = chunk_text(text + "More.", "prose", ChunkSettings(size_tokens=200))
    assert {x.id for x in a}.isdisjoint({x.id for x in b})
    assert a[0].id != c[0].id
    assert a[0].fingerprint != b[0].fingerprint


def test_empty_and_whitespace():
    assert chunk_text("") == []
    for kind in ("prose", "markdown", "source", "html"):
        assert len(chunk_text(" \n\n\t \n" * 1000, kind)) <= 1


def test_one_huge_line():
    s = ChunkSettings(size_tokens=100)
    text = "y" * 200_000
    doc = make_document(text, "prose", s)
    chunks = chunk_document(doc)
    check_invariants(doc, chunks, s)
    assert len(chunks) == 500
    text = ("é" * 5000 + " ") * 30
    doc = make_document(text, "markdown", s)
    check_invariants(doc, chunk_document(doc), s)


def test_sentence_then_word_cuts():
    s = ChunkSettings(size_tokens=30, overlap="none")
    text = "Alpha beta gamma delta epsilon. " * 60
    chunks = chunk_text(text, "prose", s)
    assert len(chunks) > 5
    for c in chunks[:-1]:
        assert text[c.body_start:c.end].endswith(". "), text[c.body_start:c.end]
    # no sentence ends: clause, then word boundaries
    text = "alpha beta, gamma delta " * 60
    for c in chunk_text(text, "prose", s)[:-1]:
        assert text[c.end - 1] == " "


def test_pack_until_size_and_paragraph_boundaries():
    s = ChunkSettings(size_tokens=100, overlap="none")
    paras = [f"Paragraph {i} " + "word " * (i % 17 + 3) for i in range(200)]
    text = "\n\n".join(paras)
    chunks = chunk_text(text, "prose", s)
    for c in chunks[:-1]:
        own = text[c.body_start:c.end]
        assert own.endswith("\n\n")                # cut between paragraphs
        nxt = len(paras[text.count("\n\n", 0, c.end)]) + 2
        assert c.tokens + estimate_tokens("x" * nxt) > s.size_tokens  # next would not fit


def test_merge_small_sections():
    s = ChunkSettings(size_tokens=200, overlap="none", purpose="retrieval")
    text = "".join(f"## S{i}\n\nShort line {i}.\n\n" for i in range(20))
    chunks = chunk_text(text, "markdown", s)
    assert len(chunks) < 10
    assert "## S1\n" in chunks[0].text               # next heading went into the chunk
    assert chunks[0].heading_path == ("S0",)
    # big enough sections start new chunks at their heading
    body = "Some words here. " * 30
    text = "".join(f"## S{i}\n\n{body}\n\n" for i in range(6))
    chunks = chunk_text(text, "markdown", ChunkSettings(size_tokens=300, overlap="none",
                                                       purpose="retrieval"))
    for c in chunks:
        assert text[c.body_start:].startswith("## S")
    assert [c.heading_path for c in chunks] == [(f"S{i}",) for i in range(6)]


def test_heading_not_orphaned_and_carried():
    s = ChunkSettings(size_tokens=120, overlap="none")
    body = "\n\n".join("Sentence number %d is here." % i for i in range(80))
    text = "# Top\n\n## Part\n\n" + body
    chunks = chunk_text(text, "markdown", s)
    assert chunks[0].heading_path == ("Top", "Part")
    for c in chunks[1:]:
        assert c.text.startswith("## Part\n\n")      # carried heading
        assert c.heading_path == ("Top", "Part")
    no_carry = chunk_text(text, "markdown", ChunkSettings(size_tokens=120, overlap="none",
                                                         carry_heading=False))
    assert all(c.text == text[c.start:c.end] for c in no_carry)


def test_overlap_modes():
    paras = ["First sentence of %d. Second sentence of %d." % (i, i) for i in range(60)]
    text = "\n\n".join(paras)
    for mode in ("paragraph", "sentence", "none"):
        for purpose, size in (("retrieval", 200), ("analysis", 200), ("analysis", 400)):
            s = ChunkSettings(size_tokens=size, overlap=mode, purpose=purpose)
            cap = s.max_bytes // (OVERLAP_SHARE if purpose == "retrieval" else ANALYSIS_OVERLAP_SHARE)
            chunks = chunk_text(text, "prose", s)
            check_invariants(make_document(text, "prose", s), chunks, s)
            for prev, c in zip(chunks, chunks[1:]):
                carried = text[c.start:c.body_start]
                last_para = text[prev.body_start:prev.end].rstrip().split("\n\n")[-1]
                assert len(carried.encode()) <= cap
                if mode == "none":
                    assert carried == ""
                elif mode == "paragraph" and len(last_para) + 2 <= cap:
                    assert carried.rstrip() == last_para
                else:       # the last sentence (a paragraph over the cap shrinks to it)
                    assert carried.startswith("Second sentence of")
                assert c.text.startswith(carried) and c.tokens <= size


def test_overlap_never_forces_a_cut():
    s = ChunkSettings(size_tokens=100, overlap="paragraph")
    unit = "word " * 78 + "end."                    # fits alone, not with overlap
    text = "Lead paragraph here.\n\n" + unit + "\n\n" + unit
    chunks = chunk_text(text, "prose", s)
    for c in chunks[:-1]:
        assert text[c.end - 2:c.end] == "\n\n"


def test_tables_alone_and_row_groups():
    rows = "\n".join(f"| r{i} | {'v' * 20} |" for i in range(200))
    text = ("Intro paragraph.\n\nTable 7: widths\n| name | value |\n|---|---|\n" + rows
            + "\n\nAfter paragraph.\n")
    s = ChunkSettings(size_tokens=200, purpose="retrieval")
    doc = make_document(text, "markdown", s)
    chunks = chunk_document(doc)
    check_invariants(doc, chunks, s)
    tables = [c for c in chunks if c.kind == "table"]
    assert len(tables) > 3
    assert tables[0].text.startswith("Table 7: widths\n| name | value |\n|---|---|\n| r0 |")
    for c in tables[1:]:
        assert c.text.startswith("| name | value |\n|---|---|\n| r")
        assert c.start == c.body_start               # no text overlap into tables
    assert chunks[0].kind == "text" and "| name" not in chunks[0].text
    assert chunks[-1].kind == "text" and chunks[-1].start == chunks[-1].body_start
    small = "Para.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nPara two."
    kinds = [c.kind for c in chunk_text(small, "markdown",
                                        ChunkSettings(size_tokens=500, purpose="retrieval"))]
    assert kinds == ["text", "table", "text"]


@pytest.mark.parametrize("purpose", ["retrieval", "analysis"])
def test_continued_table_drops_heading_before_header(purpose):
    """A row group after the first starts with the table's header when header + row fit, even
    when the carried heading does not fit as well: the heading goes, the header stays (hypothesis
    found the header dropped with it)."""
    s = ChunkSettings(size_tokens=20, overlap="none", bytes_per_token=2.0, purpose=purpose)
    assert s.max_bytes == 40
    head, header = "# a\n\n", "| h |\n|---|\n"
    for k, prefix in ((18, head + header), (22, header), (30, "")):
        row = "| " + "c" * k + " |\n"            # 17 + k + 5 > 40 from k = 19; 12 + k + 5 > 40 from k = 24
        text = head + header + "| b |\n" + row
        doc = make_document(text, "markdown", s)
        chunks = chunk_document(doc)
        check_invariants(doc, chunks, s)
        assert [c.text for c in chunks] == [head + header + "| b |\n", prefix + row], k


def test_newline_between_rows_is_a_table_group():
    """A row that fits a group only without its newline leaves that newline to a group of its own
    when the next row does not fit with it: that group is still part of the table (kind "table"),
    not text inside a table (hypothesis found it labelled "text")."""
    s = ChunkSettings(size_tokens=20, overlap="none", bytes_per_token=2.0, purpose="retrieval")
    row = "| " + "x" * 24 + " |"                 # header (12) + row (28) = 40 = the budget
    text = "| h |\n|---|\n" + row + "\n" + row + "\n"
    doc = make_document(text, "markdown", s)
    chunks = chunk_document(doc)
    check_invariants(doc, chunks, s, {"fences": [], "rows": [(0, 5), (6, 11), (12, 40), (41, 69)],
                                      "tables": [(0, 69)]})
    gaps = [c for c in chunks if text[c.body_start:c.end] == "\n" and c.end < len(text)]
    assert gaps and all(c.kind == "table" for c in gaps)


def test_fenced_code_kept_whole():
    code = "```python\n" + "\n\n".join(f"x{i} = {i}" for i in range(40)) + "\n```"
    prose = "Some prose words here. " * 18
    text = prose + "\n\n" + code + "\n\n" + prose
    s = ChunkSettings(size_tokens=150, overlap="none")
    chunks = chunk_text(text, "markdown", s)
    fs = text.index("```")
    fe = text.index("```", fs + 3) + 3
    assert estimate_tokens(text[fs:fe]) <= 150
    assert not any(fs < c.end < fe for c in chunks)
    assert any(c.kind == "code" for c in chunks)


def test_source_blocks_split_at_signatures():
    funcs = [f"def f{i}(a):\n    x = a + {i}\n\n    return x * 2\n" for i in range(50)]
    text = "import os\n\n\n" + "\n\n".join(funcs)
    s = ChunkSettings(size_tokens=60, overlap="none")
    chunks = chunk_text(text, "source", s)
    for c in chunks[1:]:
        assert text[c.body_start:].startswith("def f"), text[c.body_start:c.body_start + 30]
    go = "package main\n\n// add adds\nfunc add(a, b int) int {\n\treturn a + b\n}\n\n" * 40
    for c in chunk_text(go, "source", ChunkSettings(size_tokens=40, overlap="none"))[1:]:
        assert go[c.body_start:].startswith(("// add", "package", "func"))
    c_src = "static int foo(int a)\n{\n  return a;\n}\n\n" * 50
    for c in chunk_text(c_src, "source", ChunkSettings(size_tokens=40, overlap="none"))[1:]:
        assert c_src[c.body_start:].startswith("static int foo")


def test_kind_for_path():
    assert kind_for_path("a/b.md") == "markdown"
    assert kind_for_path("x.HTML") == "html"
    assert kind_for_path("x.py") == "source" and kind_for_path("x.go") == "source"
    assert kind_for_path("x.txt") == "prose" and kind_for_path("x.unknown") == "prose"
    assert kind_for_path("Makefile") == "prose"


def test_file_errors_and_decoding(tmp_path):
    with pytest.raises(DocumentNotFoundError):
        chunk_file(tmp_path / "missing.txt")
    with pytest.raises(ChunkingError):
        chunk_file(tmp_path)
    (tmp_path / "b.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00IHDR")
    with pytest.raises(BinaryDocumentError):
        chunk_file(tmp_path / "b.bin")
    (tmp_path / "c.bin").write_bytes(bytes(range(1, 32)) * 50 + b"\xff\xfe\xfd")
    with pytest.raises(BinaryDocumentError):
        chunk_file(tmp_path / "c.bin")
    (tmp_path / "l1.txt").write_bytes("Caf\xe9 cr\xe8me.\r\nLine two.\r".encode("latin-1"))
    doc, chunks = chunk_file(tmp_path / "l1.txt")
    assert doc.text == "Café crème.\nLine two.\n" and doc.decode_note
    (tmp_path / "mixed.txt").write_bytes("Ünïcode ok ".encode() + b"\xff bad byte")
    doc, _ = chunk_file(tmp_path / "mixed.txt")
    assert doc.text.startswith("Ünïcode ok") and "\ufffd" in doc.text and doc.decode_note
    (tmp_path / "u.md").write_bytes("\ufeff# Title\r\n\r\nBody.".encode())
    doc, chunks = chunk_file(tmp_path / "u.md")
    assert doc.text == "# Title\n\nBody." and doc.decode_note is None
    assert chunks[0].heading_path == ("Title",)
    assert doc.path.endswith("u.md") and doc.kind == "markdown" and doc.fingerprint
    # a file and the same text chunked directly give the same ids
    for name, data in (("plain.md", "# T\n\nBody é.\n".encode()), ("u.md", None)):
        if data is not None:
            (tmp_path / name).write_bytes(data)
        doc, chunks = chunk_file(tmp_path / name)
        assert doc.content_hash == make_document(doc.text, "markdown").content_hash
        assert [c.id for c in chunks] == [c.id for c in chunk_text(doc.text, "markdown")]


HTML = """<!DOCTYPE html><html><head><title>T</title><style>p{}</style></head><body>
<h1>Report</h1><p>First   paragraph
with <b>bold</b> text.</p><script>var x = 1;</script>
<h2>Results</h2>
<table><caption>Table 1: scores</caption>
<tr><th>name</th><th>score</th></tr>
<tr><td>a|b</td><td>1</td></tr><tr><td>c</td><td>2</td></tr></table>
<ul><li>one</li><li>two</li></ul><pre>code
  kept</pre></body></html>"""


def test_html_extraction_and_tables(tmp_path):
    text = html_to_text(HTML)
    assert "# Report" in text and "## Results" in text
    assert "First paragraph with bold text." in text
    assert "var x" not in text and "p{}" not in text
    assert "Table 1: scores\n| name | score |\n|---|---|\n| a\\|b | 1 |\n| c | 2 |" in text
    assert "- one\n- two" in text and "```\ncode\n  kept\n```" in text
    path = tmp_path / "r.html"
    path.write_text(HTML)
    for purpose in ("retrieval", "analysis"):
        s = ChunkSettings(size_tokens=40, purpose=purpose)
        doc, chunks = chunk_file(path, s)
        assert doc.kind == "html" and doc.text == text
        check_invariants(doc, chunks, s)
        kinds = ("table",) if purpose == "retrieval" else ("table", "text")
        assert any(c.kind in kinds and "| c | 2 |" in c.text for c in chunks)


def test_html_odd_input():
    assert html_to_text("\ud800<p>x</p>") == "\ufffd\n\nx\n"     # lone surrogate
    assert html_to_text("index.html") == "index.html\n"             # no bs4 warning
    assert html_to_text("<div>" * 3000 + "deep" + "</div>" * 3000) == "deep\n"
    assert chunk_text("<html></html>", "html") == []


def test_crlf_is_normalised_in_chunk_text():
    text = "Line one.\r\n\r\nLine two.\rLine three."
    doc = make_document(text, "prose")
    assert doc.text == "Line one.\n\nLine two.\nLine three."
    chunks = chunk_text(text, "prose")
    assert chunks[-1].end == len(doc.text)


def test_raw_html_table_in_markdown():
    rows = "".join(f"<tr><td>{i}</td><td>{'w ' * 10}</td></tr>\n" for i in range(60))
    text = "Intro.\n\n<table>\n<tr><th>n</th><th>w</th></tr>\n" + rows + "</table>\n\nEnd."
    s = ChunkSettings(size_tokens=100)
    doc = make_document(text, "markdown", s)
    chunks = chunk_document(doc)
    check_invariants(doc, chunks, s)
    tables = [c for c in chunks if c.kind == "table"]
    assert len(tables) > 2
    for c in tables[1:]:
        assert c.text.startswith("<table>\n<tr><th>n</th><th>w</th></tr>\n<tr><td>")


def test_plan_counts_without_texts():
    text = "Words and more words. " * 5000
    p = plan_text(text, "prose", ChunkSettings(size_tokens=500))
    assert p.chunks == len(chunk_text(text, "prose", ChunkSettings(size_tokens=500)))
    assert p.largest_tokens <= 500 and p.tokens == estimate_tokens(text)
    assert p.summary.startswith(f"This text makes {p.chunks} chunks of ~500 tokens")


def test_import_needs_no_flask():
    import subprocess
    import sys
    code = ("import sys; sys.modules['flask'] = None; "
            "import app.chunking as m; "
            "assert 'bs4' not in sys.modules and 'pypdfium2' not in sys.modules and 'docx' not in sys.modules; "
            "print(len(m.chunk_text('a b', 'prose')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "1"
