"""Chunk count and boundary quality on real documents (issue 14), against LangChain and semchunk.

Run from the repository root with the bench extra installed
(``pip install -e '.[bench]'``: langchain-text-splitters, semchunk)::

    python bench/bench_chunk_quality.py [--size-tokens 1500] [--set dev|held-out|all] [--before]

Every splitter gets the same text (``make_document(...).text``: HTML already reduced to
text by the project's loader) and the same size: ``--size-tokens`` tokens estimated as
UTF-8 bytes / 4, so "fewest possible" is ``ceil(tokens / size)`` for every one of them.

Splitters:

* ``ours``: ``ChunkSettings(purpose="analysis")`` with the app's default paragraph overlap;
  ``ours-noov``: the same without overlap; ``retrieval``: ``purpose="retrieval"`` (seed 002's
  section-first packing); ``before`` (with ``--before``): the chunker at the commit given by
  ``--before-rev`` (default: the commit before issue 14's work), loaded from git.
* ``lc``: LangChain's ``RecursiveCharacterTextSplitter`` (default separators); ``lc-lang``: its
  ``from_language`` splitter for the kind (Markdown, Python, C; HTML text as Markdown);
  both with ``chunk_overlap=0`` and the same token estimate as ``length_function``.
* ``semchunk``: ``semchunk.chunkerify(estimate, size)`` with ``offsets=True``, no overlap.

Boundary quality is judged by this script alone (not by the chunker), from the text
between two chunks: a boundary is *inside a word* when no whitespace separates the two
chunks, *inside a line* when no newline does (unless that line alone is larger than a
chunk: then a cut in it cannot be avoided). *Split fence*: inside a fenced code block that
fits a chunk. *Split row*: inside a table row. *Headerless table part*: a chunk that starts
inside a table body without the table's header row. *Split definition*: inside a
top-level definition that fits a chunk (Python: ``ast`` top-level ``def``/``class`` with
decorators; C: top-level brace blocks such as struct, enum and function bodies, found by a
brace scanner that skips comments and strings; ``extern "C" {`` does not count).
Overlap is ignored for boundaries: a chunk's own part starts where the previous one ended.

Time: median of ``--runs`` runs of the splitter alone (document already in memory).
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import math
import os
import re
import statistics
import subprocess
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import chunking  # noqa: E402
from app.chunking import ChunkSettings, chunk_document, make_document  # noqa: E402
from app.analysis.mapreduce import map_prompt, map_prompt_overhead  # noqa: E402

RUST_DOC = Path("/root/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html")
NODE_API = Path("/usr/share/doc/nodejs/api")
PYLIB = Path("/usr/lib/python3.11")

# The documents of issue 14's table (dev) and others of the same kinds (held-out).
DEV = [
    NODE_API / "fs.md", Path("/usr/share/doc/nodejs/BUILDING.md"), NODE_API / "webcrypto.md",
    RUST_DOC / "std/primitive.slice.html", RUST_DOC / "releases.md",
    Path("/usr/share/common-licenses/GPL-3"), PYLIB / "argparse.py", PYLIB / "typing.py",
]
HELD_OUT = [
    NODE_API / "http.md", NODE_API / "crypto.md", NODE_API / "cli.md",
    Path("/root/.pyenv/CHANGELOG.md"),
    NODE_API / "path.html", RUST_DOC / "std/vec/struct.Vec.html",
    Path("/usr/share/doc/python3/python-policy.html"),
    Path("/usr/share/common-licenses/Apache-2.0"), Path("/usr/share/common-licenses/LGPL-2.1"),
    Path("/usr/share/common-licenses/GFDL-1.3"),
    PYLIB / "subprocess.py", PYLIB / "inspect.py", PYLIB / "tarfile.py",
    Path("/usr/include/sqlite3.h"), Path("/usr/include/zlib.h"), Path("/usr/include/elf.h"),
    Path("/usr/include/python3.11/object.h"),
]


# ------------------------------------------------------------------ structure (independent)

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.M)
_TDELIM = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")


def fences(t: str) -> list[tuple[int, int]]:
    """Fenced code blocks (Markdown rules, simplified): [start, end) of each."""
    out, pos = [], 0
    while True:
        m = _FENCE.search(t, pos)
        if m is None:
            return out
        fence = m.group(1)
        close = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$", re.M)
        eol = t.find("\n", m.end())
        c = close.search(t, len(t) if eol < 0 else eol + 1)
        end = len(t) if c is None else c.end()
        out.append((m.start(1), end))     # from the fence marker (indentation is outside)
        pos = end


def tables(t: str, skip: list[tuple[int, int]]) -> list[tuple[int, int, int, str]]:
    """Pipe tables outside fences: (header start, body start, end, header+delimiter text)."""
    lines = t.split("\n")
    starts, p = [], 0
    for line in lines:
        starts.append(p)
        p += len(line) + 1
    out = []
    i = 1
    while i < len(lines):
        if "|" in lines[i] and "-" in lines[i] and _TDELIM.match(lines[i]) and "|" in lines[i - 1]:
            s = starts[i - 1]
            if any(a <= s < b for a, b in skip):
                i += 1
                continue
            j = i + 1
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                j += 1
            end = starts[j - 1] + len(lines[j - 1])
            out.append((s, starts[i + 1] if i + 1 < len(lines) else len(t), end,
                        lines[i - 1] + "\n" + lines[i]))
            i = j
        else:
            i += 1
    return out


def python_defs(t: str) -> list[tuple[int, int]]:
    """Top-level def/class (with decorators) of Python source, as [start, end) offsets."""
    try:
        tree = ast.parse(t)
    except SyntaxError:
        return []
    starts, p = [0], 0
    for line in t.split("\n"):
        p += len(line) + 1
        starts.append(p)
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            s = starts[first - 1]
            e = starts[node.end_lineno] - 1 if node.end_lineno < len(starts) else len(t)
            out.append((s, e))
    return out


_C_TOKENS = re.compile(r'/\*|//|"|\'|\{|\}|^[ \t]*#', re.M)


def c_blocks(t: str) -> list[tuple[int, int]]:
    """Top-level brace blocks of C-like source, from their statement start to ``}`` (or ``};``)."""
    out, depth, pos, open_at, transparent = [], 0, 0, None, 0
    last_stmt_end = 0
    while True:
        m = _C_TOKENS.search(t, pos)
        if m is None:
            return out
        tok = m.group(0)
        if tok == "/*":
            e = t.find("*/", m.end())
            pos = len(t) if e < 0 else e + 2
            if depth == 0:
                last_stmt_end = pos
            continue
        if tok == "//" or tok.lstrip().startswith("#"):
            e = t.find("\n", m.end())
            while e > 0 and tok.lstrip().startswith("#") and t[e - 1] == "\\":   # continued macro
                e = t.find("\n", e + 1)
            pos = len(t) if e < 0 else e + 1
            if depth == 0:
                last_stmt_end = pos
            continue
        if tok in "\"'":
            q = re.compile(tok + r"(?:[^" + tok + r"\\\n]|\\.)*" + tok)
            mm = q.match(t, m.start())
            pos = mm.end() if mm else m.end()
            continue
        if tok == "{":
            line_start = t.rfind("\n", 0, m.start()) + 1
            if depth == 0 and re.match(r'\s*extern\s+"C"\s*\{', t[line_start:m.end()]):
                transparent += 1
                pos = m.end()
                last_stmt_end = pos
                continue
            if depth == 0:
                seg = t[last_stmt_end:m.start()]
                k = max(seg.rfind(";"), seg.rfind("\n\n"))
                open_at = last_stmt_end + (k + 1 if k >= 0 else 0)
                while open_at < m.start() and t[open_at].isspace():
                    open_at += 1
            depth += 1
            pos = m.end()
            continue
        # "}"
        pos = m.end()
        if depth == 0:
            if transparent:
                transparent -= 1
            last_stmt_end = pos
            continue
        depth -= 1
        if depth == 0:
            sc = re.compile(r"[^;{}\n]*;").match(t, pos)    # "} name;" of a typedef
            end = sc.end() if sc else pos
            out.append((open_at, end))
            pos = end
            last_stmt_end = end


# ------------------------------------------------------------------ judging boundaries

@dataclass
class Quality:
    chunks: int = 0
    max_tokens: int = 0
    in_word: int = 0
    in_line: int = 0
    forced: int = 0          # inside a line longer than a chunk (cannot be avoided)
    fence: int = 0
    row: int = 0
    headerless: int = 0
    definition: int = 0
    seconds: float = 0.0
    notes: list = field(default_factory=list)

    @property
    def bad(self) -> int:
        return self.in_line + self.fence + self.definition + self.headerless


def _nb(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def judge(t: str, spans: list[tuple[int, int]], texts: list[str], budget: int, structure: dict) -> Quality:
    """spans: own [start, end) of each chunk in order; texts: what each chunk sends."""
    q = Quality(chunks=len(spans))
    q.max_tokens = max((math.ceil(_nb(x) / 4) for x in texts), default=0)
    fen = [(a, b) for a, b in structure["fences"] if _nb(t[a:b]) <= budget]
    defs = [(a, b) for a, b in structure["defs"] if _nb(t[a:b]) <= budget]
    tabs = structure["tables"]
    for i in range(len(spans) - 1):
        g0, g1 = spans[i][1], spans[i + 1][0]
        if g1 < g0:
            g1 = g0
        while g0 > 0 and t[g0 - 1].isspace():
            g0 -= 1
        while g1 < len(t) and t[g1].isspace():
            g1 += 1
        gap = t[g0:g1]
        if "\n" not in gap:
            ls = t.rfind("\n", 0, g0) + 1
            le = t.find("\n", g1)
            le = len(t) if le < 0 else le
            if _nb(t[ls:le]) > budget:
                q.forced += 1
            else:
                q.in_line += 1
                if not gap:
                    q.in_word += 1
                if any(a <= ls < c for a, _, c, _ in tabs):
                    q.row += 1
        if any(a < g1 and g0 < b for a, b in fen):
            q.fence += 1
        if any(a < g1 and g0 < b for a, b in defs):
            q.definition += 1
    for (s, e), text in zip(spans, texts):
        while s < e and t[s].isspace():
            s += 1
        for a, body, c, header in tabs:
            if body <= s < c and header not in text:
                q.headerless += 1
    return q


def locate(t: str, pieces: list[str]) -> list[tuple[int, int]]:
    """Offsets of non-overlapping chunk strings in t, in order."""
    out, pos = [], 0
    for p in pieces:
        i = t.find(p, pos)
        if i < 0:
            i = t.find(p.strip(), pos)
            p = p.strip()
        if i < 0:
            raise ValueError(f"chunk not found in text at {pos}: {p[:60]!r}")
        out.append((i, i + len(p)))
        pos = i + len(p)
    return out


# ------------------------------------------------------------------ splitters

def load_before(rev: str) -> types.ModuleType:
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:app/chunking.py"],
                         capture_output=True, text=True, check=True).stdout
    mod = types.ModuleType("chunking_before")
    mod.__dict__["__name__"] = "chunking_before"
    sys.modules["chunking_before"] = mod
    exec(compile(src, f"{rev}:app/chunking.py", "exec"), mod.__dict__)
    return mod


def ours(settings_kw: dict, module=chunking):
    def run(text: str, kind: str, size: int):
        s = module.ChunkSettings(size_tokens=size, **settings_kw)
        # HTML arrives as the loader's text already; the app chunks it with the Markdown rules
        doc = module.make_document(text, "markdown" if kind == "html" else kind, s)
        cs = module.chunk_document(doc)
        return [(c.body_start, c.end) for c in cs], [c.text for c in cs]
    return run


def estimate(s: str) -> int:
    return math.ceil(_nb(s) / 4)


def langchain(lang: bool):
    from langchain_text_splitters import Language, RecursiveCharacterTextSplitter

    def run(text: str, kind: str, size: int):
        kw = dict(chunk_size=size, chunk_overlap=0, length_function=estimate)
        if lang:
            language = {"markdown": Language.MARKDOWN, "html": Language.MARKDOWN,
                        "prose": Language.MARKDOWN}.get(kind)
            if kind == "source":
                language = Language.PYTHON if ".py" in run.path else Language.C
            sp = RecursiveCharacterTextSplitter.from_language(language, **kw)
        else:
            sp = RecursiveCharacterTextSplitter(**kw)
        pieces = sp.split_text(text)
        return locate(text, pieces), pieces
    run.path = ""
    return run


def semchunker():
    import semchunk

    def run(text: str, kind: str, size: int):
        pieces, offsets = semchunk.chunkerify(estimate, size)(text, offsets=True)
        return [tuple(o) for o in offsets], pieces
    return run


# ------------------------------------------------------------------ whole analyses (estimated)

TASK = "Summarize the methodology of each section."


def analysis_costs(path: Path, before_mod, window: int = 8192, reply: int = 512, margin: float = 0.10,
                   map_cap: int = 400, speed=(40.0, 5.0)) -> dict:
    """Calls and tokens of one map-reduce analysis of ``path`` with the default config, before
    (chunker of --before-rev, 400-token replies, seed 000's label) and after (analysis packing,
    ``map_prompt`` with its label and a 250-word limit, ``map_reply_budget``)."""
    from app.budget import estimate_analysis, estimate_messages, map_reply_budget
    try:
        from app.analysis import MAP_SYSTEM, REDUCE_SYSTEM
    except ImportError:            # the analysis code moves to a package: same texts
        MAP_SYSTEM = ("Answer the instruction from this chunk of a longer document only. "
                      "If nothing in it is relevant, say so in one line.")
        REDUCE_SYSTEM = ("You combine partial answers, each written from one chunk of a longer document, "
                         "into one answer to the user's instruction. Keep what matters, merge repeats, "
                         "and say if parts are missing.")
    reduce_fixed = estimate_messages([{"content": REDUCE_SYSTEM}, {"content": "Instruction: " + TASK + " " * 200}], 4.0)
    room = window - reduce_fixed - reply - math.ceil(margin * window)
    out = {}
    for label, mod in (("before", before_mod), ("after", chunking)):
        if mod is None:
            continue
        if label == "before":
            fixed = estimate_messages([{"content": MAP_SYSTEM}, {"content": TASK + "\n\n---\nChunk 99 of 99:\n"}], 4.0)
            num_predict = map_cap
            settings = mod.ChunkSettings(size_tokens=min(1500, window - fixed - map_cap - math.ceil(margin * window)))
        else:
            rb = map_reply_budget(TASK, map_cap)
            fixed = estimate_messages([{"content": MAP_SYSTEM},
                                       {"content": map_prompt_overhead(TASK, 999, rb.words)}], 4.0)
            num_predict = rb.num_predict
            settings = chunking.ChunkSettings(size_tokens=min(1500, window - fixed - num_predict
                                                             - math.ceil(margin * window)))
        doc = mod.read_document(path, settings)
        chunks = mod.chunk_document(doc)
        if label == "before":          # seed 000's prompt: the instruction, "Chunk i of N:", the text
            sizes = [c.tokens for c in chunks]
        else:                          # each chunk's real map prompt (its label, not the reserve)
            sizes = [estimate_messages([{"content": MAP_SYSTEM}, {"content": map_prompt(
                TASK, c, len(chunks), rb.words)}], 4.0) for c in chunks]
            fixed = 0
        est = estimate_analysis(sizes, map_fixed_tokens=fixed, map_reply_tokens=num_predict,
                                reduce_room_tokens=room, reduce_fixed_tokens=reduce_fixed,
                                final_reply_tokens=reply, speed=speed, document_tokens=doc.tokens)
        out[label] = est
    return out


# ------------------------------------------------------------------ main

def kind_of(path: Path) -> str:
    k = chunking.kind_for_path(path)
    return k


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-tokens", type=int, default=1500)
    ap.add_argument("--set", choices=("dev", "held-out", "all"), default="all")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", action="store_true", help="also run the chunker of --before-rev")
    ap.add_argument("--before-rev", default="fa334c2")
    ap.add_argument("--only", default="", help="comma-separated splitter names")
    ap.add_argument("--analysis", action="store_true",
                    help="also estimate whole analyses (calls, prompt tokens, generated tokens)")
    args = ap.parse_args(argv)
    size = args.size_tokens
    budget = size * 4
    paths = {"dev": DEV, "held-out": HELD_OUT, "all": DEV + HELD_OUT}[args.set]
    paths = [p for p in paths if p.is_file()]
    splitters = {
        "ours": ours({"purpose": "analysis"}),
        "ours-noov": ours({"purpose": "analysis", "overlap": "none"}),
        "retrieval": ours({"purpose": "retrieval"}),
    }
    if args.before:
        splitters["before"] = ours({}, load_before(args.before_rev))
    try:
        splitters["lc"] = langchain(False)
        splitters["lc-lang"] = langchain(True)
    except ImportError:
        print("langchain-text-splitters not installed: skipped", file=sys.stderr)
    try:
        splitters["semchunk"] = semchunker()
    except ImportError:
        print("semchunk not installed: skipped", file=sys.stderr)
    if args.only:
        keep = args.only.split(",")
        splitters = {k: v for k, v in splitters.items() if k in keep}
    results: dict[str, dict[str, Quality]] = {n: {} for n in splitters}
    docs = []
    for path in paths:
        kind = kind_of(path)
        doc = chunking.read_document(path, ChunkSettings(size_tokens=size))
        t = doc.text
        fen = fences(t) if kind in ("markdown", "html") else []
        structure = {"fences": fen, "tables": tables(t, fen) if kind != "source" else [],
                     "defs": (python_defs(t) if path.suffix == ".py" else
                              c_blocks(t) if kind == "source" else [])}
        tokens = math.ceil(_nb(t) / 4)
        docs.append((path, kind, tokens, math.ceil(tokens / size), structure))
        for name, fn in splitters.items():
            if hasattr(fn, "path"):
                fn.path = str(path)
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                spans, texts = fn(t, kind, size)
                times.append(time.perf_counter() - t0)
            q = judge(t, spans, texts, budget, structure)
            q.seconds = statistics.median(times)
            results[name][str(path)] = q
    print(f"Command: python bench/bench_chunk_quality.py --size-tokens {size} --set {args.set}"
          f" --runs {args.runs}" + (f" --before --before-rev {args.before_rev}" if args.before else "")
          + (" --analysis" if args.analysis else "") + (f" --only {args.only}" if args.only else ""))
    print(f"Machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, Python {sys.version.split()[0]}")
    print()
    names = list(splitters)
    print("Chunks per document (ratio to the fewest possible, ceil(tokens / size)):")
    print()
    print("| document | kind | tokens | fewest | " + " | ".join(names) + " |")
    print("|---|---|---:|---:|" + "---:|" * len(names))
    for path, kind, tokens, fewest, structure in docs:
        cells = []
        for n in names:
            q = results[n][str(path)]
            cells.append(f"{q.chunks} ({q.chunks / fewest:.2f})")
        print(f"| {path.name} | {kind} | {tokens:,} | {fewest} | " + " | ".join(cells) + " |")
    total_fewest = sum(d[3] for d in docs)
    print(f"| **all {len(docs)}** | | {sum(d[2] for d in docs):,} | {total_fewest} | "
          + " | ".join(f"{sum(q.chunks for q in results[n].values())} "
                       f"({sum(q.chunks for q in results[n].values()) / total_fewest:.3f})" for n in names) + " |")
    print(f"| worst document ratio | | | | "
          + " | ".join(f"{max(results[n][str(d[0])].chunks / d[3] for d in docs):.2f}" for n in names) + " |")
    print()
    print("Boundary quality over all documents (counts) and time:")
    print()
    print("| splitter | chunks | max tokens | inside a word | inside a line | (forced: line > chunk) "
          "| split fences | split table rows | table parts without header | split definitions "
          "| seconds (sum of medians) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in names:
        qs = list(results[n].values())
        print(f"| {n} | {sum(q.chunks for q in qs)} | {max(q.max_tokens for q in qs)} | "
              f"{sum(q.in_word for q in qs)} | {sum(q.in_line for q in qs)} | {sum(q.forced for q in qs)} | "
              f"{sum(q.fence for q in qs)} | {sum(q.row for q in qs)} | {sum(q.headerless for q in qs)} | "
              f"{sum(q.definition for q in qs)} | {sum(q.seconds for q in qs):.3f} |")
    print()
    bad = [(n, p, q) for n in names for p, q in results[n].items() if q.bad and n.startswith("ours")]
    for n, p, q in bad:
        print(f"- {n} {Path(p).name}: word {q.in_word}, line {q.in_line}, fence {q.fence}, "
              f"headerless {q.headerless}, definition {q.definition}")
    if args.analysis:
        before_mod = load_before(args.before_rev) if args.before else None
        print()
        print(f"Whole analyses, estimated (``estimate_analysis``; no model): instruction {TASK!r}, "
              "window 8192, reply 512, margin 10 %, map_reply_tokens 400; every reply assumed to use "
              "all of num_predict (upper bound); time at an assumed 40 prompt / 5 generated tokens "
              "per second (a 3B model on a Pi 5 generates about 5).")
        print()
        print("| document | tokens | calls before | calls after | prompt / document token before "
              "| after | generated tokens before | after | hours before | after |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        tot = {"before": [0, 0, 0, 0.0], "after": [0, 0, 0, 0.0]}
        doc_tokens = 0
        for path, kind, tokens, fewest, structure in docs:
            c = analysis_costs(path, before_mod)
            b, a = c.get("before"), c["after"]
            doc_tokens += a.document_tokens
            for k, e in c.items():
                tot[k][0] += e.calls
                tot[k][1] += e.prompt_tokens
                tot[k][2] += e.generated_tokens
                tot[k][3] += e.seconds
            cell = lambda e, f: "-" if e is None else f(e)   # noqa: E731
            print(f"| {path.name} | {a.document_tokens:,} | {cell(b, lambda e: e.calls)} | {a.calls} | "
                  f"{cell(b, lambda e: f'{e.prompt_per_document_token:.2f}')} | {a.prompt_per_document_token:.2f} | "
                  f"{cell(b, lambda e: f'{e.generated_tokens:,}')} | {a.generated_tokens:,} | "
                  f"{cell(b, lambda e: f'{e.seconds / 3600:.1f}')} | {a.seconds / 3600:.1f} |")
        if before_mod is not None:
            b, a = tot["before"], tot["after"]
            print(f"| **all** | {doc_tokens:,} | {b[0]} | {a[0]} | {b[1] / doc_tokens:.2f} | {a[1] / doc_tokens:.2f} "
                  f"| {b[2]:,} | {a[2]:,} | {b[3] / 3600:.1f} | {a[3] / 3600:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
