"""Quality of chunked-analysis answers: planted facts found, citations checked (issue 15).

Run from the repository root:

    python bench/bench_cited_answers.py                       # bundled SmolLM2-135M, 2 documents
    python bench/bench_cited_answers.py --ollama http://127.0.0.1:11434 --model llama3.2:3b --full
    python bench/bench_cited_answers.py --app-dir /tmp/before  # another checkout's app (the "before")
    python bench/bench_cited_answers.py --oracle              # a perfect reader: checks the bench (~5 s)

What it does, for each generated document (a fresh app each time, so every document is planned
from the same uncalibrated start):

1. It writes a Markdown "operations handbook" of realistic filler prose, lists and tables (seeded,
   so the same every run) with made-up facts planted at known places: in the first paragraph, the
   middle, the last paragraph, a table row, a list item, and one fact stated twice with different
   values in two distant places (a contradiction). The document is sized to overflow the window.
2. It starts that checkout's app as ``python -m app.cli serve`` (waitress) in a subprocess with
   PYTHONPATH = ``--app-dir`` (default: this checkout), against ``--ollama URL --model NAME`` or,
   by default, the bundled SmolLM2-135M behind Ollama's API (``harvey_demo.server.DemoServer``,
   one thread, as bench_analysis_model.py).
3. Through the chat it asks for the facts ("Find these facts in handbook-1.md: ..."), so the
   overflow card appears, starts the analysis with the same question, follows the job's progress
   stream (SSE) until it closes, with a deadline, and downloads the session's ``.spmd``.
4. It scores the final answer (the turn's reply):

   * in partial answers: planted values found in the map step's answers (the ``partial`` events
     of the progress stream), to tell what the map step missed from what the synthesis dropped;
   * recall: planted statements whose value appears in the answer (a contradiction's two values
     count as two statements);
   * citation accuracy: every citation group ``[n]`` / ``[n, m]`` covers the text before it, back
     to the previous citation or the start of the line; each planted value in that text is a cited
     claim, correct when one of the cited chunks' passages holds that statement. A chunk's passage
     is its range from the ``[[chunk-passage: ...]]`` notes of the downloaded ``.spmd``, or, for a
     chunk without one, from chunking the document with the job's own settings (size and bytes
     per token from its job.json, the config's overlap) with that checkout's chunker. An answer
     with no citation at all (the app before issue 15) gets "n/a";
   * contradictions named: both conflicting values appear in the answer;
   * model calls, prompt and generated tokens, model seconds: the app's own notice under the
     answer ("Chunk analysis: N model calls, ...", Ollama's counts).

``--oracle`` replaces the model with the test suite's scripted Ollama server answering as a perfect
reader would (each map call lists the planted values its chunk holds; the synthesis lists them with
the chunk numbers of the "[Chunk n of N]" labels as citations): with it the bench must report 100 %,
which shows that a low figure is the model's, not the bench's.

``--write LABEL`` adds the rows to the "## Cited answers (#15)" section of bench/RESULTS.md.
Nothing is written outside a temporary folder otherwise (``--save DIR`` keeps each document and
its ``.spmd`` there).
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Cited answers (#15)"
TABLE_HEAD = ("| run | app tree | model | document | bytes | chunks | relevant | in partial answers | recall | "
              "cited claims | "
              "citation accuracy | contradictions named | model calls | prompt tokens | generated tokens | "
              "model s | wall s |")
TABLE_RULE = "|" + "---|" * 4 + "---:|" * 13

# -- the planted facts ----------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    """A made-up fact: how the instruction asks for it, and how the document states it."""

    key: str              # short name, also the table row's first cell
    question: str         # what the instruction asks for
    sentence: str         # the statement in prose, with {v} for the value
    values: tuple[str, str]   # the value, and the conflicting one when the fact is contradicted


FACTS = (
    Fact("North depot access code", "the access code for the north depot",
         "The access code for the north depot is {v}.", ("4471-K", "9902-M")),
    Fact("First Kestrel Island ferry", "the departure time of the first ferry to Kestrel Island",
         "The first ferry to Kestrel Island leaves at {v}.", ("06:40", "07:25")),
    Fact("Spare archive key", "the locker that holds the spare key of the archive room",
         "The spare key for the archive room is kept in locker {v}.", ("19B", "42D")),
    Fact("Project Halcyon budget ceiling", "the budget ceiling of Project Halcyon",
         "The budget ceiling for Project Halcyon is {v} euros.", ("84,300", "61,750")),
    Fact("East lab Wi-Fi password", "the Wi-Fi password of the east lab",
         "The Wi-Fi password in the east lab is {v}.", ("marble-otter-52", "copper-heron-17")),
    Fact("Backup generator contractor", "the company that services the backup generator",
         "The backup generator is serviced by {v}.", ("Brannock Hydraulics", "Feldmar Electric")),
    Fact("Order 5521 tracking number", "the tracking number of order 5521",
         "The tracking number for order 5521 is {v}.", ("QX-90817", "TR-33016")),
    Fact("Dr. Imelda Varga's extension", "the telephone extension of Dr. Imelda Varga",
         "Dr. Imelda Varga can be reached on extension {v}.", ("3382", "5127")),
    Fact("Bay 7 pallet limit", "the weight limit per pallet in bay 7",
         "Bay 7 accepts pallets of at most {v} kilograms.", ("1,180", "2,640")),
    Fact("Ostrava shipment container", "the container number of the Ostrava shipment",
         "The Ostrava shipment travels in container {v}.", ("MSKU-718204", "HLXU-552093")),
    Fact("Lindqvist vault combination", "the combination of the Lindqvist vault",
         "The combination of the Lindqvist vault is {v}.", ("27-81-09", "64-12-55")),
    Fact("Harbour Street fire assembly point", "the fire assembly point of the Harbour Street site",
         "The fire assembly point for the Harbour Street site is {v}.", ("the Juniper car park",
                                                                        "the Alder footbridge")),
)


@dataclass(frozen=True)
class Placement:
    """Where a fact goes: ``where`` is start | end | prose | table | list; ``at`` the share of the text."""

    fact: int             # index into FACTS
    where: str
    at: float = 0.5
    value: int = 0        # 0: the fact's value; 1: its conflicting value


@dataclass(frozen=True)
class Planted:
    """A statement as it ended up in the document: the value's exact character range."""

    fact: int
    key: str
    value: str
    where: str
    start: int            # offset of the value in the document text
    end: int
    contradiction: bool = False


@dataclass
class Document:
    name: str
    text: str
    planted: list[Planted]
    questions: list[str]

    def contradictions(self) -> list[tuple[Planted, Planted]]:
        by_fact: dict[int, list[Planted]] = {}
        for p in self.planted:
            by_fact.setdefault(p.fact, []).append(p)
        return [(ps[0], ps[1]) for ps in by_fact.values() if len(ps) == 2]


def layout(first: int, full: bool) -> list[Placement]:
    """The placements of one document: facts ``first``, ``first + 1``, ... of FACTS (wrapping).

    Default: start, middle, end, a table row, a list item, and a contradiction (25 % / 75 %).
    ``full`` adds prose at 15 %, 40 %, 85 %, a second table and list, a second contradiction.
    """
    kinds = [("start", 0.0), ("prose", 0.5), ("end", 1.0), ("table", 0.35), ("list", 0.62)]
    if full:
        kinds += [("prose", 0.15), ("prose", 0.4), ("prose", 0.85), ("table", 0.7), ("list", 0.2)]
    out = [Placement((first + i) % len(FACTS), where, at) for i, (where, at) in enumerate(kinds)]
    pairs = [(0.25, 0.75)] + ([(0.1, 0.9)] if full else [])
    for j, (a, b) in enumerate(pairs):
        fact = (first + len(kinds) + j) % len(FACTS)
        out += [Placement(fact, "prose", a, 0), Placement(fact, "prose", b, 1)]
    return out


# -- the filler -----------------------------------------------------------------------------

TOPICS = ("Opening and closing the site", "Deliveries and the loading bays", "Cleaning rota",
          "Visitors and contractors", "Vehicle maintenance", "Stock counts", "Health and safety",
          "IT equipment and accounts", "Working with the harbour office", "Energy use and heating",
          "Customer returns", "Training new staff", "Record keeping", "Waste and recycling")
TEAMS = ("the facilities team", "the night shift", "the stores supervisor", "the duty manager",
         "the logistics desk", "the quality group", "the reception staff", "the maintenance crew")
THINGS = ("the loading ramps", "the forklift chargers", "the cold room", "the stock ledger",
          "the visitor log", "the roller doors", "the first-aid cabinets", "the returns cage",
          "the label printers", "the boiler room", "the drainage gullies", "the barcode scanners")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
SENTENCES = (
    "{Team} checks {thing} at the start of every shift and writes down anything unusual.",
    "If {thing} cannot be used, {team} marks the area with a sign and tells the duty manager.",
    "Most questions about {thing} can be answered by {team}, who keep the current instructions.",
    "Every {day}, {team} walks the whole site and reviews {thing} with a short checklist.",
    "New procedures are tried for {n} weeks before they replace the old ones for good.",
    "The notes from each review are kept for {n} months and then archived by {team}.",
    "Nobody works alone near {thing}; a second person stays within sight and hearing.",
    "Faults are reported on the same day, even when they look minor, because small faults grow.",
    "The aim is a site where anyone can find what they need without asking twice.",
    "When the weather turns, {team} brings the {day} inspection of {thing} forward by a day.",
    "Spare parts for {thing} are ordered through the logistics desk, never directly.",
    "A copy of this section hangs next to {thing}, and the copy there is the one that counts.",
    "Staff who spot a better way of handling {thing} are asked to tell {team}.",
    "During the busy season {team} may ask for help from other departments for up to {n} days.",
    "Keys, badges and passes are signed out in the book at reception and signed back in the same day.",
    "Any change to the rota for {thing} is agreed with {team} at least {n} days ahead.",
    "The previous arrangement caused delays, so the hand-over now happens at a fixed point.",
    "{Team} keeps the contact list up to date and reprints it when more than {n} entries change.",
)
LIST_ITEMS = (
    "Check {thing} before the first delivery.", "Log every fault in the maintenance book.",
    "Tell {team} about anything that is out of place.", "Keep the walkways clear of pallets.",
    "Switch off {thing} when the area is empty.", "Wear the high-visibility vest in the yard.",
    "Return borrowed tools by the end of the shift.", "Sign the visitor log on arrival and departure.",
)
TABLE_HEADER = ("| Item | Detail | Responsible |", "|---|---|---|")
TABLE_ROWS = (
    "| {Thing} | checked every {n} days | {team} |", "| {Thing} | serviced twice a year | {team} |",
    "| {Thing} | replaced when worn | {team} |", "| {Thing} | cleaned every {day} | {team} |",
)


def _fill(template: str, rng: random.Random) -> str:
    team, thing = rng.choice(TEAMS), rng.choice(THINGS)
    return template.format(team=team, Team=team[0].upper() + team[1:], thing=thing,
                           Thing=thing[0].upper() + thing[1:], day=rng.choice(DAYS), n=rng.randint(2, 12))


def _paragraph(rng: random.Random) -> str:
    return " ".join(_fill(t, rng) for t in rng.sample(SENTENCES, rng.randint(4, 6)))


def filler_blocks(size: int, rng: random.Random, title: str) -> list[list[str]]:
    """Blocks (heading, paragraph, list, table), each a list of lines, until about ``size`` bytes."""
    blocks: list[list[str]] = [[f"# {title}"], [_paragraph(rng)]]
    total, n = 0, 0
    while total < size:
        n += 1
        section = [[f"## {n}. {TOPICS[(n - 1) % len(TOPICS)]}"], [_paragraph(rng)], [_paragraph(rng)]]
        if n % 3 == 1:
            section.append([f"- {_fill(t, rng)}" for t in rng.sample(LIST_ITEMS, 4)])
        if n % 3 == 2:
            section.append([*TABLE_HEADER, *(_fill(t, rng) for t in rng.sample(TABLE_ROWS, 3))])
        section.append([_paragraph(rng)])
        for block in section:             # stop within a section: the size is met to a paragraph
            blocks.append(block)
            total += len("\n".join(block)) + 2
            if total >= size and n > 3:
                break
    if not _is_paragraph(blocks[-1]):
        blocks.append([_paragraph(rng)])  # the last block is a paragraph (where "end" goes)
    return blocks


def _nearest(blocks: list[list[str]], at: float, test) -> int:
    """The index of the block passing ``test`` whose start is nearest to share ``at`` of the text."""
    starts, pos = [], 0
    for b in blocks:
        starts.append(pos)
        pos += len("\n".join(b)) + 2
    candidates = [i for i, b in enumerate(blocks) if test(b)]
    return min(candidates, key=lambda i: abs(starts[i] / pos - at))


def _is_paragraph(block: list[str]) -> bool:
    return len(block) == 1 and not block[0].startswith(("#", "- ", "|"))


def _plant(blocks: list[list[str]], p: Placement) -> str:
    """Put one statement into the blocks; returns the exact statement text (unique in the document)."""
    fact = FACTS[p.fact]
    value = fact.values[p.value]
    if p.where == "table":
        i = _nearest(blocks, p.at, lambda b: b[0] == TABLE_HEADER[0])
        line = f"| {fact.key} | {value} | the duty manager |"
        blocks[i].insert(2 + (len(blocks[i]) - 2) // 2, line)
        return line
    if p.where == "list":
        i = _nearest(blocks, p.at, lambda b: b[0].startswith("- "))
        line = "- " + fact.sentence.format(v=value)
        blocks[i].insert(len(blocks[i]) // 2, line)
        return line
    sentence = fact.sentence.format(v=value)
    if p.where == "start":
        i = 1
    elif p.where == "end":
        i = len(blocks) - 1
    else:
        i = _nearest(blocks, p.at, _is_paragraph)
    parts = re.split(r"(?<=\.) ", blocks[i][0])
    cut = len(parts) if p.where == "end" else 1 if p.where == "start" else len(parts) // 2
    blocks[i][0] = " ".join(parts[:cut] + [sentence] + parts[cut:])
    return sentence


def make_document(number: int, size: int, full: bool = False, seed: int = 15) -> Document:
    """Document ``number`` (1-based): filler of about ``size`` bytes with its planted facts.

    Raises ValueError if a planted value does not occur exactly once (the filler must never
    say it by accident, or recall would count the filler).
    """
    rng = random.Random(seed * 1000 + number)
    blocks = filler_blocks(size, rng, f"Operations handbook, Harbour Street site (part {number})")
    placements = layout((number - 1) * 7, full)
    statements = [(p, _plant(blocks, p)) for p in placements]
    text = "\n\n".join("\n".join(b) for b in blocks) + "\n"
    planted, contradicted = [], {p.fact for p in placements if p.value == 1}
    for p, statement in statements:
        value = FACTS[p.fact].values[p.value]
        at = text.index(statement) + statement.index(value)
        if len(find_value(text, value)) != 1:
            raise ValueError(f"{value!r} occurs {len(find_value(text, value))} times in document {number}")
        planted.append(Planted(p.fact, FACTS[p.fact].key, value, p.where, at, at + len(value),
                               p.fact in contradicted))
    questions = list(dict.fromkeys(FACTS[p.fact].question for p in placements))
    return Document(f"handbook-{number}.md", text, planted, questions)


def instruction(doc: Document) -> str:
    """The chunk instruction: the facts to find, values exactly as written, both values of a conflict."""
    return ("Find these facts: " + "; ".join(doc.questions) + ". Give each value exactly as the text writes "
            "it. If the text gives two different values for the same fact, give both.")


# -- scoring --------------------------------------------------------------------------------

CITATION = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_WORD = re.compile(r"[0-9a-z]+")


def _words(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text.lower())]


def find_value(text: str, value: str) -> list[int]:
    """Where ``value`` occurs in ``text`` as whole words, ignoring case, punctuation and spacing
    ("4471-K" matches "4471 K", "4471-k" and "4471K"; not "14471-K" nor "4471-KB")."""
    want = [w for w, _, _ in _words(value)]
    joined = "".join(want)
    words = _words(text)
    hits = []
    for i, (w, start, _) in enumerate(words):
        if [x for x, _, _ in words[i:i + len(want)]] == want or (len(want) > 1 and w == joined):
            hits.append(start)
    return hits


@dataclass
class Claim:
    """A piece of the answer and the chunk numbers its citation group gives (empty: uncited)."""

    text: str
    cites: tuple[int, ...]


def claims(answer: str) -> list[Claim]:
    """The answer cut at citation groups: each group covers the text before it, back to the previous
    group or the start of the line; the text after a line's last group is uncited."""
    out = []
    for line in answer.splitlines():
        pos = 0
        for m in CITATION.finditer(line):
            out.append(Claim(line[pos:m.start()], tuple(int(n) for n in m.group(1).split(","))))
            pos = m.end()
        if line[pos:].strip():
            out.append(Claim(line[pos:], ()))
    return out


@dataclass
class Score:
    planted: int
    found: int
    cited_claims: int              # (claim, planted value) pairs with a citation
    correct_claims: int            # ... whose cited chunk holds that statement
    uncited_mentions: int          # planted values named in text no citation covers
    contradictions: int
    contradictions_named: int
    citations_in_answer: int
    details: list[dict] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return self.found / self.planted if self.planted else 0.0

    @property
    def accuracy(self) -> float | None:
        """None when the answer cites nothing (an app without citations): not measurable."""
        if not self.citations_in_answer or not self.cited_claims:
            return None
        return self.correct_claims / self.cited_claims


def score(answer: str, doc: Document, passages: dict[int, tuple[int, int]]) -> Score:
    """Score ``answer`` against the planted statements; ``passages``: chunk number -> (start, end)."""
    found = [p for p in doc.planted if find_value(answer, p.value)]
    cited = correct = uncited = 0
    details = []
    for claim in claims(answer):
        for p in doc.planted:
            if not find_value(claim.text, p.value):
                continue
            if not claim.cites:
                uncited += 1
                continue
            ok = any(n in passages and passages[n][0] <= p.start and p.end <= passages[n][1] for n in claim.cites)
            cited += 1
            correct += ok
            details.append({"value": p.value, "cites": claim.cites, "correct": ok})
    pairs = doc.contradictions()
    named = sum(1 for a, b in pairs if find_value(answer, a.value) and find_value(answer, b.value))
    return Score(len(doc.planted), len(found), cited, correct, uncited, len(pairs), named,
                 len(CITATION.findall(answer)), details)


def chunks_holding(p: Planted, passages: dict[int, tuple[int, int]]) -> list[int]:
    return sorted(n for n, (a, b) in passages.items() if a <= p.start and p.end <= b)


NOTICE = re.compile(r"([\d,]+) model calls, ([\d,]+) prompt tokens, ([\d,]+) generated tokens, ([\d.,]+) s")
STATS = re.compile(r" · (\d+) reply \+ (\d+) ctx · ")


def usage(spmd: str) -> dict:
    """Model calls, prompt / generated tokens and model seconds from the app's notice under the answer
    (or, without that notice, the tokens of Harvey's stats line "N reply + M ctx")."""
    if m := NOTICE.search(spmd):
        n = [float(x.replace(",", "")) for x in m.groups()]
        return {"calls": int(n[0]), "prompt": int(n[1]), "generated": int(n[2]), "model_s": n[3]}
    if m := STATS.search(spmd):
        return {"calls": None, "prompt": int(m[2]), "generated": int(m[1]), "model_s": None}
    return {"calls": None, "prompt": None, "generated": None, "model_s": None}


# -- the oracle: a perfect reader, to check the bench itself (--oracle) -------------------------

LABEL = re.compile(r"^\[?Chunk (\d+)\b[^\n]*$", re.M)      # "[Chunk 3 of 7 (heading)]" in a reduce prompt
FOUND_LINE = re.compile(r"^(?:- )?(?P<key>[^:\n]+): (?P<value>.+?)(?: \[(?P<cites>\d+(?:, \d+)*)\])?$", re.M)


def oracle_map(prompt: str, docs: list[Document]) -> str:
    """Each planted value the chunk holds, as "key: value" lines (what a perfect map call finds)."""
    seen = {(p.key, p.value) for d in docs for p in d.planted if find_value(prompt, p.value)}
    return "\n".join(f"{key}: {value}" for key, value in sorted(seen)) or "Nothing relevant in this chunk."


def oracle_reduce(prompt: str) -> str:
    """The "key: value" lines of the partial answers, each cited with the chunks that reported it
    (from the "[Chunk n of N]" labels, or the citations a combined answer already carries)."""
    cites: dict[tuple[str, str], set[int]] = {}
    pieces = LABEL.split(prompt)      # [before, n, text, n, text, ...]
    for n, text in [(None, pieces[0])] + list(zip(pieces[1::2], pieces[2::2])):
        for m in FOUND_LINE.finditer(text):
            got = cites.setdefault((m["key"].strip(), m["value"].strip()), set())
            got |= {int(n)} if n else {int(c) for c in (m["cites"] or "").split(", ") if c}
    cites = {k: v for k, v in cites.items() if v}           # the instruction's own lines have no chunk
    return "\n".join(f"- {key}: {value} [{', '.join(map(str, sorted(ns)))}]"
                     for (key, value), ns in sorted(cites.items())) or "Nothing was found."


def oracle_script(docs: list[Document]):
    """The scripted server's script: a map request gets oracle_map, a reduce request oracle_reduce."""
    from scripted_ollama import Reply

    def script(body: dict):
        prompt = "\n".join(m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user")
        reduce = "partial answer" in prompt.lower() or len(set(LABEL.findall(prompt))) > 1
        text = oracle_reduce(prompt) if reduce else oracle_map(prompt, docs)
        return Reply(text=text, piece_size=64)
    return script


# -- running an app checkout ------------------------------------------------------------------

CHUNK_RANGES = """
import hashlib, json, sys
from pathlib import Path
from app import chunking
path, size, overlap, bpt = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
settings = chunking.ChunkSettings(size_tokens=size, overlap=overlap, bytes_per_token=bpt)
doc = chunking.read_document(Path(path), settings)
print(json.dumps({"sha": hashlib.sha256(doc.text.encode()).hexdigest(),
                  "chunks": [[c.index + 1, c.start, c.end] for c in chunking.chunk_document(doc)]}))
"""


def _env(app_dir: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(app_dir)}
    env.pop("OLLAMA_HOST", None)
    env.pop("HARVEY_MODEL", None)
    return env


def chunk_ranges(app_dir: Path, path: Path, size: int, overlap: str, bpt: float) -> tuple[str, dict]:
    """(sha256 of the text as chunked, chunk number -> (start, end)) by that checkout's chunker."""
    out = subprocess.run([sys.executable, "-c", CHUNK_RANGES, str(path), str(size), overlap, str(bpt)],
                         env=_env(app_dir), capture_output=True, text=True, timeout=120, check=True)
    data = json.loads(out.stdout)
    return data["sha"], {n: (a, b) for n, a, b in data["chunks"]}


class AppUnderTest:
    """``python -m app.cli serve`` of ``app_dir`` with a harvey.yaml in ``folder``; an httpx client with CSRF."""

    def __init__(self, app_dir: Path, folder: Path, ollama_url: str, model: str):
        import httpx

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.folder = folder
        config = folder / "harvey.yaml"
        config.write_text(
            f"ollama:\n  url: {ollama_url}\n  model: {json.dumps(model)}\n  timeout_s: 900.0\n"
            f"workspace: {folder / 'workspace'}\nsessions_dir: {folder / 'sessions'}\n"
            f"data_dir: {folder / 'data'}\nuser_name: bench\nserver:\n  host: 127.0.0.1\n  port: {port}\n")
        self.log = open(folder / "serve.log", "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--config", str(config)],
                                     cwd=folder, env=_env(app_dir), stdout=self.log, stderr=subprocess.STDOUT)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60.0, follow_redirects=True)
        self.token = ""
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.http.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the app did not start; see {folder / 'serve.log'}")
            time.sleep(0.1)

    def get(self, path: str, **kw):
        response = self.http.get(path, **kw)
        found = re.search(r'"X-CSRF-Token": "([^"]+)"', html.unescape(response.text))
        if found:
            self.token = found.group(1)
        return response

    def post(self, path: str, **kw):
        if not self.token:
            self.get("/")
        return self.http.post(path, headers={"X-CSRF-Token": self.token, "HX-Request": "true"}, **kw)

    def follow(self, path: str, deadline: float) -> list[str]:
        """Read the SSE stream at ``path`` until its ``close`` event (reconnecting with Last-Event-ID
        when a stream's lifetime ends); the ``partial`` events' data (each chunk's partial answer as
        the card shows it). SystemExit past ``deadline``."""
        import httpx

        last_id, partials = None, []
        while time.monotonic() < deadline:
            headers = {"Last-Event-ID": last_id} if last_id else {}
            try:
                with self.http.stream("GET", path, headers=headers, timeout=120.0) as response:
                    event, data = "message", []
                    for line in response.iter_lines():
                        if line == "":
                            if event == "close":
                                return partials
                            if event == "partial":
                                partials.append("\n".join(data))
                            event, data = "message", []
                        elif line.startswith("event:"):
                            event = line[6:].strip()
                        elif line.startswith("data:"):
                            data.append(line[5:].removeprefix(" "))
                        elif line.startswith("id:"):
                            last_id = line[3:].strip()
                        if time.monotonic() > deadline:
                            break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"no answer before the deadline ({path})")

    def close(self) -> None:
        self.http.close()
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def run_document(app_dir: Path, ollama_url: str, model: str, doc: Document, deadline_s: float) -> dict:
    """One document through a fresh app: ask, start, wait, download, score."""
    from app.sessions import fountain

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "workspace").mkdir()
        path = folder / "workspace" / doc.name
        path.write_text(doc.text, encoding="utf-8")
        app = AppUnderTest(app_dir, folder, ollama_url, model)
        try:
            name = app.get("/").url.path.rsplit("/", 1)[-1]
            question = "Find these facts in " + doc.name + ": " + "; ".join(doc.questions) + "."
            card = app.post(f"/s/{name}/messages", data={"message": question}).text
            found = re.search(r'id="job-([0-9a-f]+)"', card)
            if not found:
                raise SystemExit(f"no overflow card for {doc.name} ({len(doc.text):,} bytes): make it larger")
            job_id = found.group(1)
            job = json.loads((folder / "data" / "jobs" / job_id / "job.json").read_text())
            started = time.monotonic()
            app.post(f"/s/{name}/analysis/{job_id}/start", data={"instruction": instruction(doc), "scope": "all"})
            partials = app.follow(f"/s/{name}/analysis/{job_id}/events", started + deadline_s)
            wall = time.monotonic() - started
            spmd = app.get(f"/sessions/{name}/download").text
            left = folder / "data" / "jobs" / job_id / "job.json"
            failed = json.loads(left.read_text()).get("message", "") if left.exists() else ""
        finally:
            app.close()
        sha, chunked = chunk_ranges(app_dir, path, job["size_tokens"], "paragraph", job["bytes_per_token"])
    turns = fountain.turns(fountain.loads(spmd))
    turn = turns[0] if turns else None
    answer = (turn.reply or "") if turn else ""
    analysis = turn.analysis if turn else None
    recorded = {n: (p.start, p.end) for n, p in analysis.passages.items()} if analysis else {}
    passages = {**chunked, **recorded}
    seen = html.unescape(re.sub(r"<[^>]+>", " ", "\n".join(partials)))
    return {"doc": doc, "answer": answer, "score": score(answer, doc, passages), "usage": usage(spmd),
            "in_partials": sum(1 for p in doc.planted if find_value(seen, p.value)),
            # the chunks that ran (a re-plan may change the planned count), else the plan's
            "chunks": analysis.chunks if analysis and analysis.chunks else job["chunks"],
            "relevant": analysis.relevant if analysis else None,
            "recorded_passages": len(recorded), "chunked": chunked, "wall_s": wall, "failed": failed,
            "same_text": sha == hashlib.sha256(doc.text.encode()).hexdigest(), "spmd": spmd}


# -- report ---------------------------------------------------------------------------------

def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f} %)" if b else "0/0"


def row(label: str, tree: str, model: str, r: dict) -> str:
    s, u = r["score"], r["usage"]
    acc = "n/a (no citations)" if s.accuracy is None else _pct(s.correct_claims, s.cited_claims)
    num = lambda v, f="{:,}": "?" if v is None else f.format(v)  # noqa: E731
    return (f"| {label} | {tree} | {model} | {r['doc'].name} | {len(r['doc'].text.encode()):,} | {r['chunks']} | "
            f"{'-' if r['relevant'] is None else r['relevant']} | {_pct(r['in_partials'], s.planted)} | "
            f"{_pct(s.found, s.planted)} | {s.cited_claims} | "
            f"{acc} | {s.contradictions_named}/{s.contradictions} | {num(u['calls'])} | {num(u['prompt'])} | "
            f"{num(u['generated'])} | {num(u['model_s'], '{:.0f}')} | {r['wall_s']:.0f} |")


def total_row(label: str, tree: str, model: str, results: list[dict]) -> str:
    scores = [r["score"] for r in results]
    found, planted = sum(s.found for s in scores), sum(s.planted for s in scores)
    cited, correct = sum(s.cited_claims for s in scores), sum(s.correct_claims for s in scores)
    acc = "n/a (no citations)" if all(s.accuracy is None for s in scores) else _pct(correct, cited)
    named, pairs = sum(s.contradictions_named for s in scores), sum(s.contradictions for s in scores)

    def add(key, form="{:,}"):
        values = [r["usage"][key] for r in results]
        return "?" if None in values else form.format(sum(values))
    return (f"| **{label}, all** | {tree} | {model} | {len(results)} documents | "
            f"{sum(len(r['doc'].text.encode()) for r in results):,} | {sum(r['chunks'] for r in results)} | "
            f"{'-' if any(r['relevant'] is None for r in results) else sum(r['relevant'] for r in results)} | "
            f"{_pct(sum(r['in_partials'] for r in results), planted)} | "
            f"{_pct(found, planted)} | {cited} | {acc} | {named}/{pairs} | {add('calls')} | "
            f"{add('prompt')} | {add('generated')} | {add('model_s', '{:.0f}')} | "
            f"{sum(r['wall_s'] for r in results):.0f} |")


def detail_lines(r: dict) -> list[str]:
    """Per planted statement: where it is, which chunk holds it, whether the answer has its value."""
    out = [f"{r['doc'].name}: " + ", ".join(
        f"{p.where}{'*' if p.contradiction else ''} {p.value!r} in chunk "
        f"{','.join(map(str, chunks_holding(p, r['chunked']))) or '?'} "
        f"{'found' if find_value(r['answer'], p.value) else 'missed'}" for p in r["doc"].planted)]
    for d in r["score"].details:
        out.append(f"  cited {d['value']!r} as {list(d['cites'])}: {'correct' if d['correct'] else 'wrong'}")
    return out


def revision(app_dir: Path) -> str:
    try:
        rev = subprocess.run(["git", "-C", str(app_dir), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(app_dir), "status", "--porcelain", "--", "app", "templates"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (rev or "unknown") + (" (+ changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_rows(rows: list[str], note: str, path: Path = ROOT / "bench" / "RESULTS.md") -> Path:
    """Add ``rows`` under the last table row of SECTION in ``path`` (the section is made if missing)
    and ``note`` (the command and machine of this run) as a line at the section's end."""
    text = path.read_text(encoding="utf-8")
    if SECTION not in text:
        text = text.rstrip() + f"\n\n{SECTION}\n\n{TABLE_HEAD}\n{TABLE_RULE}\n"
    start = text.index(SECTION)
    nxt = text.find("\n## ", start + len(SECTION))
    end = len(text) if nxt < 0 else nxt + 1
    lines = text[start:end].rstrip("\n").split("\n")
    last = max(i for i, line in enumerate(lines) if line.startswith("|"))
    lines[last + 1:last + 1] = rows
    section = "\n".join(lines) + f"\n\n{note}\n"
    path.write_text(text[:start] + section + ("\n" + text[end:] if text[end:] else ""), encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ollama", metavar="URL", help="an Ollama-API server (default: the bundled SmolLM2-135M)")
    parser.add_argument("--model", metavar="NAME", help="the model on that server (required with --ollama)")
    parser.add_argument("--app-dir", type=Path, default=ROOT, help="the checkout whose app runs (default: this one)")
    parser.add_argument("--oracle", action="store_true",
                        help="a perfect reader on the scripted server instead of a model (checks the bench)")
    parser.add_argument("--full", action="store_true", help="4 larger documents with 14 statements each")
    parser.add_argument("--documents", type=int, default=0, help="how many documents (default 2, --full 4)")
    parser.add_argument("--bytes", type=int, default=0, help="filler per document (default 21,000; --full 48,000)")
    parser.add_argument("--deadline", type=float, default=3600.0, help="seconds per document before giving up")
    parser.add_argument("--write", metavar="LABEL", default="", help="add the rows to bench/RESULTS.md")
    parser.add_argument("--show", action="store_true", help="print each final answer")
    parser.add_argument("--save", type=Path, metavar="DIR", help="keep each document and its .spmd in DIR")
    args = parser.parse_args()
    if args.ollama and not args.model:
        parser.error("--model is required with --ollama")
    count = args.documents or (4 if args.full else 2)
    size = args.bytes or (48_000 if args.full else 21_000)
    docs = [make_document(n, size, args.full) for n in range(1, count + 1)]
    app_dir = args.app_dir.resolve()
    sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
    from _harness import machine

    results = []
    if args.oracle:
        from scripted_ollama import ScriptedOllama

        model = "oracle:1b"
        with ScriptedOllama(models={model: 8192}, script=oracle_script(docs)) as served:
            results = [run_document(app_dir, served.url, model, d, args.deadline) for d in docs]
    elif args.ollama:
        model = args.model
        results = [run_document(app_dir, args.ollama, model, d, args.deadline) for d in docs]
    else:
        from harvey_demo import server as demo_server

        if not demo_server.model_available():
            raise SystemExit(demo_server.INSTALL_HINT)
        with demo_server.DemoServer(threads=1) as served:
            model = served.model_name
            results = [run_document(app_dir, served.url, model, d, args.deadline) for d in docs]
    label, tree = args.write or "this run", revision(app_dir)
    rows = [row(label, tree, model, r) for r in results] + [total_row(label, tree, model, results)]
    print(TABLE_HEAD)
    print(TABLE_RULE)
    print("\n".join(rows))
    for r in results:
        print("\n".join(detail_lines(r)))
        if r["failed"]:
            print(f"  the job did not finish: {r['failed']}")
        if not r["same_text"]:
            print("  warning: the chunker's text differs from the file's, so offsets may not match")
        print(f"  passages from the .spmd: {r['recorded_passages']}; from chunking: {len(r['chunked'])}")
        if args.show:
            print("  answer:\n" + ("\n".join("    " + line for line in r["answer"].splitlines())
                                    if r["answer"].strip() else f"    (empty: {r['answer']!r})"))
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / r["doc"].name).write_text(r["doc"].text, encoding="utf-8")
            (args.save / (r["doc"].name + ".spmd")).write_text(r["spmd"], encoding="utf-8")
    if args.write:
        command = shlex.join(["python", "bench/bench_cited_answers.py", *sys.argv[1:]])
        print(f"written to {write_rows(rows, f'{label}: `{command}`; {machine()}.')}")


if __name__ == "__main__":
    main()
