"""Issue 14: chunks for analysis fill the room; every boundary rule still holds.

The checks that matter are made independently of the chunker: top-level definitions by
Python's own ``ast``, lines and headings by plain string scans.
"""
from __future__ import annotations

import ast
import math
import re
import sys
import sysconfig
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.chunking import (  # noqa: E402
    ANALYSIS_FILL, LABEL_MAX_BYTES, Chunk, ChunkSettings, chunk_document, chunk_file, chunk_label,
    chunk_text, estimate_tokens, make_document, plan_document,
    plan_file,
)
from app.chunking import _units  # noqa: E402  (the block scanner itself)
from app.analysis.mapreduce import map_prompt, map_prompt_overhead  # noqa: E402

HYP = hsettings(max_examples=80, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
STDLIB = Path(sysconfig.get_paths()["stdlib"])


def _utf8(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def boundaries(chunks):
    return [c.end for c in chunks[:-1]]


# ---------------------------------------------------------------- filling

def sections_doc(n: int, words: int) -> str:
    return "".join(f"## Part {i}\n\n" + " ".join(f"w{i}x{j}" for j in range(words)) + ".\n\n"
                   for i in range(n))


def test_analysis_carries_sections_on_until_the_chunk_is_filled():
    text = sections_doc(40, 30)                     # sections of ~240 bytes, chunks of 1200
    s = ChunkSettings(size_tokens=300, overlap="none")
    chunks = chunk_text(text, "markdown", s)
    retrieval = chunk_text(text, "markdown", ChunkSettings(size_tokens=300, overlap="none",
                                                           purpose="retrieval"))
    fewest = math.ceil(estimate_tokens(text) / 300)
    assert len(chunks) <= fewest + 1 < len(retrieval)
    for c in chunks[:-1]:
        assert c.tokens >= ANALYSIS_FILL * 300, c.tokens
    for c in chunks:                                # headings inside the text, all in the label
        own = text[c.body_start:c.end]
        titles = re.findall(r"^## (.+)$", own, re.M)
        listed = [p[-1] for p in c.sections if p]
        for title in titles:
            assert title in listed
        assert c.sections[0] == c.heading_path


def test_a_filled_chunk_ends_at_a_heading_only_when_the_next_section_does_not_fit():
    s = ChunkSettings(size_tokens=100, overlap="none", carry_heading=False)   # 400 bytes
    first = "## A\n\n" + "a " * 160 + "\n\n"          # ~330 bytes: more than 75 % of the room
    small = "## B\n\nbb bb.\n\n"
    big = "## C\n\n" + "c " * 120 + "\n\n"            # ~250 bytes: not in the room left
    chunks = chunk_text(first + small + big, "markdown", s)
    assert "## B" in chunks[0].text and chunks[0].sections == (("A",), ("B",))
    assert chunks[1].text.startswith("## C")          # C starts a chunk, not cut in two
    # under the fill, a section that does not fit carries on into the chunk (then is cut)
    short = "## A\n\n" + "a " * 60 + "\n\n"
    text = short + "## C\n\n" + "\n".join("c " * 20 for _ in range(12)) + "\n\n"
    chunks = chunk_text(text, "markdown", s)
    assert "## C" in chunks[0].text and chunks[0].tokens >= 0.75 * 100


def test_purpose_and_fill_are_validated_and_in_the_fingerprint():
    with pytest.raises(ValueError):
        ChunkSettings(purpose="search")
    with pytest.raises(ValueError):
        ChunkSettings(fill=1.5)
    prints = {ChunkSettings().fingerprint, ChunkSettings(purpose="retrieval").fingerprint,
              ChunkSettings(fill=0.9).fingerprint}
    assert len(prints) == 3
    assert ChunkSettings(fill=0.75).fingerprint == ChunkSettings().fingerprint   # the default
    assert ChunkSettings(purpose="retrieval").fill_share == 0.25


def test_tables_join_analysis_chunks_and_repeat_their_header():
    rows = "\n".join(f"| r{i} | {'v' * 20} |" for i in range(60))
    text = "Intro paragraph here.\n\n| name | value |\n|---|---|\n" + rows + "\n\nAfter.\n"
    s = ChunkSettings(size_tokens=150, overlap="none")
    chunks = chunk_text(text, "markdown", s)
    assert chunks[0].text.startswith("Intro paragraph here.\n\n| name | value |\n|---|---|\n| r0 |")
    for c in chunks[1:]:
        own = text[c.body_start:c.end]
        if own.startswith("| r"):
            assert c.text.startswith("| name | value |\n|---|---|\n| r")
    assert "After." in chunks[-1].text and chunks[-1].text.startswith("| name")   # text joins


# ---------------------------------------------------------------- lines

@st.composite
def wrapped_text(draw):
    """Paragraphs of lines of random length (some longer than a chunk)."""
    paras = []
    for _ in range(draw(st.integers(1, 6))):
        lines = [" ".join("wé"[draw(st.integers(0, 1))] * draw(st.integers(1, 9))
                          for _ in range(draw(st.integers(1, 30))))
                 for _ in range(draw(st.integers(1, 8)))]
        paras.append("\n".join(lines))
    return "\n\n".join(paras) + "\n"


@HYP
@given(wrapped_text(), st.integers(12, 120), st.sampled_from(["prose", "markdown"]),
       st.sampled_from(["analysis", "retrieval"]), st.sampled_from(["paragraph", "none"]))
def test_no_cut_inside_a_line_that_fits_a_chunk(text, size, kind, purpose, overlap):
    s = ChunkSettings(size_tokens=size, purpose=purpose, overlap=overlap)
    doc = make_document(text, kind, s)
    t = doc.text
    for b in boundaries(chunk_document(doc)):
        g0, g1 = b, b                       # the whitespace between the two chunks
        while g0 > 0 and t[g0 - 1].isspace():
            g0 -= 1
        while g1 < len(t) and t[g1].isspace():
            g1 += 1
        if "\n" in t[g0:g1]:
            continue
        ls = t.rfind("\n", 0, b) + 1
        le = t.find("\n", b)
        line = t[ls: len(t) if le < 0 else le]
        assert _utf8(line) > s.max_bytes, f"cut inside a line of {_utf8(line)} bytes at {b}"


# ---------------------------------------------------------------- source

def top_level_defs(t: str) -> list[tuple[int, int]]:
    """[start, end) of top-level def/class with decorators, from ast (not the chunker)."""
    tree = ast.parse(t)
    starts = [0]
    for line in t.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            out.append((starts[first - 1], min(len(t), starts[node.end_lineno] - 1)))
    return out


def assert_no_small_definition_split(t: str, chunks, budget: int) -> None:
    for a, e in top_level_defs(t):
        if _utf8(t[a:e]) <= budget:
            for b in boundaries(chunks):
                assert not a < b <= e - 1 or t[b:e].strip() == "", (
                    f"small definition split at {b}: {t[a:a + 60]!r}")


@pytest.mark.parametrize("name", ["typing.py", "argparse.py", "inspect.py", "json/decoder.py"])
@pytest.mark.parametrize("size", [400, 1500])
@pytest.mark.parametrize("purpose", ["analysis", "retrieval"])
def test_stdlib_top_level_definitions_are_never_split(name, size, purpose):
    path = STDLIB / name
    if not path.is_file():
        pytest.skip("stdlib source not installed")
    s = ChunkSettings(size_tokens=size, bytes_per_token=3.1, purpose=purpose)
    doc, chunks = chunk_file(path, s)
    assert_no_small_definition_split(doc.text, chunks, s.max_bytes)


METHOD = "    def m{j}(self, x):\n        return x + {j}\n"
DOCSTRING = '    """Example::\n\ndef not_a_definition():\n    pass\n    """\n'


@st.composite
def python_module(draw):
    """Top-level functions and classes with nested methods, decorators, comments and
    docstrings holding column-0 'def' lines (all valid Python)."""
    parts = ['"""Module.\n\ndef in_the_module_docstring():\n    pass\n"""\n\nimport os\n']
    for i in range(draw(st.integers(1, 14))):
        deco = draw(st.sampled_from(["", "@staticmethod\n", "# a comment\n", "@a.b(1)\n# c\n"]))
        if draw(st.booleans()):
            body = "".join(METHOD.format(j=j) + "\n" for j in range(draw(st.integers(0, 8))))
            doc = DOCSTRING if draw(st.booleans()) else ""
            parts.append(f"{deco}class C{i}:\n{doc}    x = {i}\n\n{body}")
        else:
            inner = "".join(f"    def inner{j}():\n        return {j}\n\n"
                            for j in range(draw(st.integers(0, 4))))
            doc = DOCSTRING if draw(st.booleans()) else ""
            parts.append(f"{deco}def f{i}(a):\n{doc}{inner}    return a\n")
        parts.append("X%d = %d\n" % (i, i) if draw(st.booleans()) else "")
    return "\n\n".join(parts)


@HYP
@given(python_module(), st.integers(30, 400), st.sampled_from(["analysis", "retrieval"]),
       st.sampled_from(["paragraph", "none"]))
def test_generated_python_definitions_are_never_split(text, size, purpose, overlap):
    s = ChunkSettings(size_tokens=size, purpose=purpose, overlap=overlap)
    doc = make_document(text, "source", s)
    chunks = chunk_document(doc)
    assert_no_small_definition_split(doc.text, chunks, s.max_bytes)
    # the block scanner (issue 14's typing.py finding): units start only at top-level
    # signatures, never at a nested def nor at a def line inside a docstring
    for start, _end, _typ, _info in _units(doc.text, "source"):
        if start:
            line = doc.text[start:doc.text.find("\n", start)]
            assert not line.startswith((" ", "\t", "def not_a_definition", "def in_the_module")), line


def test_nested_methods_and_docstring_defs_do_not_start_units():
    cls = "class Big:\n" + "".join(METHOD.format(j=j) + "\n" for j in range(30))
    text = '"""Doc.\n\ndef fake():\n    pass\n"""\n\n' + cls + "\n\ndef after():\n    return 1\n"
    s = ChunkSettings(size_tokens=400, overlap="none")       # the class fits: it stays whole
    chunks = chunk_text(text, "source", s)
    assert_no_small_definition_split(text, chunks, s.max_bytes)
    small = ChunkSettings(size_tokens=60, overlap="none")     # the class does not fit
    chunks = chunk_text(text, "source", small)
    for c in chunks[1:]:
        start = text[c.body_start:]
        assert not start.startswith("def fake")
        assert start.startswith(("    def m", "class Big", "def after")), start[:30]


# ---------------------------------------------------------------- label, prompt, lines

def fake_chunk(sections, index=2, first=0, last=0, text="body\n"):
    return Chunk(index=index, start=0, body_start=0, end=len(text), text=text,
                 heading_path=sections[0] if sections else (), kind="text", tokens=2, id="x",
                 fingerprint="f", sections=tuple(sections), first_line=first, last_line=last)


def test_chunk_label_says_where_the_chunk_starts_and_stays_bounded():
    """The path of the section the chunk starts in; the headings it goes on into are in its text."""
    c = fake_chunk([("fs", "Promises API", "read()"), ("fs", "Promises API", "write()"),
                    ("fs", "Callback API")])
    assert chunk_label(c, 12) == "Chunk 3 of 12 (in: fs › Promises API › read())"
    assert chunk_label(fake_chunk([], first=10, last=42), 12) == "Chunk 3 of 12 (lines 10–42)"
    assert chunk_label(fake_chunk([()]), 5) == "Chunk 3 of 5"
    assert chunk_label(fake_chunk([(), ("Intro",)]), 5) == "Chunk 3 of 5 (in: Intro)"
    assert chunk_label(fake_chunk([("A", "B")]), 5, pages=(4, 5)) == "Chunk 3 of 5 (pages 4–5) (in: A › B)"
    deep = tuple(f"Chapter {i} " + "é" * 30 for i in range(20))
    label = chunk_label(fake_chunk([deep]), 999)
    assert _utf8(label) <= LABEL_MAX_BYTES and label.endswith(deep[-1] + ")") and "(in: …" in label
    huge = [("x" * 2000,)]
    assert _utf8(chunk_label(fake_chunk(huge), 999)) <= LABEL_MAX_BYTES


path_st = st.lists(st.text(alphabet="ab é漢·›;", min_size=1, max_size=40), min_size=0, max_size=4)


@hsettings(max_examples=200, deadline=None)
@given(st.lists(path_st.map(tuple), max_size=30), st.integers(1, 9999),
       st.one_of(st.none(), st.integers(10, 999)), st.text(max_size=200))
def test_map_prompt_never_passes_its_overhead(sections, total, words, task):
    c = fake_chunk(sections or [()], index=total - 1)
    prompt = map_prompt(task, c, total, words)
    assert c.text in prompt and prompt.startswith(task + "\n\n---\nChunk ")
    assert _utf8(prompt) - _utf8(c.text) <= _utf8(map_prompt_overhead(task, total, words))
    assert _utf8(chunk_label(c, total)) <= LABEL_MAX_BYTES
    if words is not None:
        assert prompt.endswith(f"at most {words} words.")


def test_lines_and_plan_sizes_match_the_chunks():
    text = "".join(f"# H{i}\n\n" + "\n".join(f"line {i}.{j} of text" for j in range(9)) + "\n\n"
                   for i in range(50))
    s = ChunkSettings(size_tokens=80)
    doc = make_document(text, "markdown", s)
    chunks = chunk_document(doc)
    lines = text.split("\n")
    for c in chunks:
        own = text[c.body_start:c.end].rstrip()
        assert lines[c.first_line - 1] == text[:c.body_start].split("\n")[-1] + own.split("\n")[0]
        assert lines[c.last_line - 1].endswith(own.split("\n")[-1])
    plan = plan_document(doc)
    assert plan.chunk_tokens == tuple(c.tokens for c in chunks)


# ---------------------------------------------------------------- real documents

REAL = [Path("/usr/share/doc/nodejs/api/fs.md"), Path("/usr/share/doc/nodejs/api/crypto.md"),
        STDLIB / "typing.py", Path("/usr/include/zlib.h"), Path("/usr/share/common-licenses/GPL-3")]


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_documents_plan_near_the_fewest_calls(path):
    """Issue 14's target per document: at most 1.3 x ceil(tokens / size)."""
    if not path.is_file():
        pytest.skip(f"{path} not on this machine")
    plan = plan_file(path, ChunkSettings())
    fewest = math.ceil(plan.tokens / plan.size_tokens)
    assert plan.chunks <= 1.3 * fewest, (plan.chunks, fewest)
