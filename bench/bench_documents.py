"""Benchmark PDF text extraction: the app's pypdfium2 against pure-Python pypdf (issue 18).

Run from the repository root:  python bench/bench_documents.py [--pages 300] [--runs 3] [--write]

The 300-page PDF is made with fpdf2 (a test dependency): a heading and five
paragraphs of prose per page. A real manual Debian ships (libtasn1-doc, 36 pages)
is measured too when present. Each extraction runs in its own process, so its
peak RSS (VmHWM) is its own; times are medians of ``--runs``. pypdf is the
alternative (``pip install pypdf``); it is not a dependency of the app.
``--write`` replaces the "## PDF extraction" section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import ROOT, header, median, table, write_section  # noqa: E402

SECTION = "## PDF extraction (issue 18)"
REAL_PDF = Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf")
WORDS = ("the of and to in is was for on that with as by at from analysis model context chunk document page "
         "section result method data value system orchard keeper record").split()

CHILD = r"""
import json, sys, time
which, path = sys.argv[1], sys.argv[2]
started = time.perf_counter()
if which == "pypdfium2 (app)":
    sys.path.insert(0, sys.argv[3])
    from app import documents
    extracted = documents._pdf(path)
    pages, chars = extracted.page_count, len(extracted.text)
else:
    from pypdf import PdfReader
    texts = [page.extract_text() or "" for page in PdfReader(path).pages]
    pages, chars = len(texts), sum(map(len, texts))
seconds = time.perf_counter() - started
hwm = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
print(json.dumps({"pages": pages, "chars": chars, "seconds": seconds, "peak_kb": hwm}))
"""


def make_pdf(path: Path, pages: int) -> None:
    from fpdf import FPDF

    rng = random.Random(1)
    pdf = FPDF()
    for number in range(1, pages + 1):
        pdf.add_page()
        pdf.set_font("Helvetica", "B", 14)
        pdf.cell(0, 10, f"Section {number}: results of part {number}", new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", size=10)
        for _ in range(5):
            pdf.multi_cell(0, 5, " ".join(rng.choice(WORDS) for _ in range(90)) + ".")
            pdf.ln(2)
    pdf.output(str(path))


def measure(which: str, path: Path, runs: int) -> dict | None:
    results = []
    for _ in range(runs):
        proc = subprocess.run([sys.executable, "-c", CHILD, which, str(path), str(ROOT)], capture_output=True,
                              text=True, timeout=600)
        if proc.returncode != 0:
            if "No module named 'pypdf'" in proc.stderr:
                return None
            raise SystemExit(proc.stderr)
        results.append(json.loads(proc.stdout))
    return {"pages": results[0]["pages"], "chars": results[0]["chars"],
            "seconds": median([r["seconds"] for r in results]), "peak_kb": max(r["peak_kb"] for r in results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        made = Path(tmp) / f"generated-{args.pages}.pdf"
        make_pdf(made, args.pages)
        files = [(f"generated, {args.pages} pages ({made.stat().st_size // 1024} KB)", made)]
        if REAL_PDF.exists():
            files.append((f"libtasn1.pdf, Debian's manual ({REAL_PDF.stat().st_size // 1024} KB)", REAL_PDF))
        for label, path in files:
            for which in ("pypdfium2 (app)", "pypdf"):
                found = measure(which, path, args.runs)
                if found is None:
                    rows.append([label, which, "not installed", "", "", ""])
                    continue
                rows.append([label, which, found["pages"], f"{found['chars']:,}", f"{found['seconds']:.2f}",
                             f"{found['peak_kb'] / 1024:.0f}"])
    text = "\n".join([
        SECTION, "",
        header("Text extraction, each run in its own process",
               f"python bench/bench_documents.py --pages {args.pages} --runs {args.runs}"),
        table(["PDF", "library", "pages", "characters", "seconds (median)", "peak RSS (MB)"], rows), "",
        "Peak RSS includes the Python interpreter (about 10 MB) and, for the app, its import of pypdfium2.", "",
    ])
    print(text)
    if args.write:
        write_section(SECTION, text)

if __name__ == "__main__":
    main()
