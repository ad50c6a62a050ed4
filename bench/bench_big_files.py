"""Issue 23 item 4: peak memory of `harvey serve` when a chat message names a very large file.

Run from the repository root:  python bench/bench_big_files.py [--text-mb 150] [--pages 300] [--write]

Per case, in a fresh temporary folder:
1. the scripted Ollama server (``tests/scripted_ollama.py``) runs in its own process;
2. ``python -m app.cli serve --config harvey.yaml`` runs as a subprocess (the real entry point);
3. a chat page is opened, then one message names the file ("Summarize big.txt"); the answer
   (the chunked-analysis alert card, or the included file's reply) is read in full;
4. "peak": VmHWM (the kernel's high-water mark of RSS) of the serve process from /proc/PID/status,
   "idle": VmRSS before the message.

Cases: (a) a ``--text-mb`` MB plain-text file (paragraphs of English-like prose), (b) a
``--pages``-page PDF made with fpdf2 (one paragraph-filled page each).  No timing is asserted;
the wall time of the message is printed for information only.  ``--write`` replaces this
benchmark's section of bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import html
import re
import sys
import tempfile
import time
from pathlib import Path

import httpx

from _harness import header, rss_kb, table, write_section
from bench_memory import start_servers, stop_all

SECTION = "## Big files named in a chat (issue 23 item 4)"
WORDS = ("the quick brown fox jumps over a lazy dog while harvey reads every page of the long report "
         "about budgets tokens windows chunks and models on a small computer").split()


def make_text(path: Path, megabytes: int) -> None:
    """``megabytes`` MB of prose paragraphs, written in pieces (the benchmark itself stays small)."""
    para = []
    for i in range(120):
        para.append(WORDS[(i * 7) % len(WORDS)])
    block = (" ".join(para) + ".\n\n").encode()
    piece = block * max(1, (1 << 20) // len(block))
    with open(path, "wb") as fh:
        written = 0
        while written < megabytes << 20:
            fh.write(piece)
            written += len(piece)


def make_pdf(path: Path, pages: int) -> None:
    """A ``pages``-page PDF of prose (fpdf2, core font: no font files needed)."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    text = " ".join(WORDS[(i * 5) % len(WORDS)] for i in range(450))
    for number in range(pages):
        pdf.add_page()
        pdf.multi_cell(0, 5, f"Page {number + 1}. {text}")
    pdf.output(str(path))


def one_case(filename: str, make) -> dict:
    """Start the app, name ``filename`` in a message, report idle RSS and the peak (VmHWM)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-bigfiles-"))
    (tmp / "workspace").mkdir()
    make(tmp / "workspace" / filename)
    size = (tmp / "workspace" / filename).stat().st_size
    procs: list = []
    try:
        serve, app_port = start_servers(tmp, "0.001", procs)
        with httpx.Client(base_url=f"http://127.0.0.1:{app_port}", timeout=600.0, follow_redirects=True) as http:
            page = http.get("/")
            token = re.search(r'"X-CSRF-Token": "([^"]+)"', html.unescape(page.text)).group(1)
            name = page.url.path.rsplit("/", 1)[-1]
            time.sleep(1)
            idle, _ = rss_kb(serve.pid)
            t0 = time.monotonic()
            answer = http.post(f"/s/{name}/messages", data={"message": f"Summarize {filename}"},
                               headers={"X-CSRF-Token": token, "HX-Request": "true"})
            seconds = time.monotonic() - t0
            _, peak = rss_kb(serve.pid)
        card = "/analysis/" in answer.text and "/start" in answer.text
        found = re.search(r"about ([\d,]+) tokens", html.unescape(answer.text))
        chunks = re.search(r"(\d+) chunks of up to", html.unescape(answer.text))
        return {"size": size, "idle": idle, "peak": peak, "seconds": seconds, "status": answer.status_code,
                "card": card, "tokens": found.group(1) if found else "?",
                "chunks": chunks.group(1) if chunks else "?"}
    finally:
        stop_all(procs, tmp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text-mb", type=int, default=150)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--write", action="store_true", help="replace this section of bench/RESULTS.md")
    args = parser.parse_args()
    cases = [(f"(a) {args.text_mb} MB text file", "big.txt", lambda p: make_text(p, args.text_mb)),
             (f"(b) {args.pages}-page PDF", "big.pdf", lambda p: make_pdf(p, args.pages))]
    rows = []
    for label, filename, make in cases:
        r = one_case(filename, make)
        print(label, r, flush=True)
        rows.append([label, f"{r['size'] / 2**20:.1f} MB", r["status"], "yes" if r["card"] else "no",
                     r["tokens"], r["chunks"], f"{r['idle'] / 1024:.0f} MB", f"{r['peak'] / 1024:.0f} MB", f"{r['seconds']:.1f} s"])
    out = table(["file named in the message", "file size", "HTTP", "alert card", "card's tokens", "card's chunks",
                 "idle RSS", "peak RSS (VmHWM)", "answer time (info)"], rows)
    print(out)
    if args.write:
        command = "python bench/bench_big_files.py " + " ".join(sys.argv[1:])
        write_section(SECTION, f"{SECTION}\n\n{header('Peak RSS when a message names a big file', command)}\n"
                               f"{out}\n")


if __name__ == "__main__":
    main()
