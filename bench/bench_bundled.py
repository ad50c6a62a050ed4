"""The bundled demo model's candidates side by side, on the demo's own tasks (issue 31).

Run from the repository root:
    python bench/bench_bundled.py [--models smollm2:135m,gemma3:270m,qwen2.5-coder:0.5b] [--tasks map] [--write]

Each candidate (harvey_demo.models.BUNDLED) runs in its own ``python -m harvey_demo.server``
process (llama.cpp through xllamacpp, the server's default thread count: one fewer than the
cores, so 1 on a 2-core machine) and is asked through that server's HTTP API with the app's
own client (app.modelserver.ollama.OllamaServer) and the app's own prompts:

* chat: plain questions with the app's default system prompt (``Config.system_prompt``), no
  temperature (as the app sends them), the reply capped at CHAT_PREDICT tokens; a reply is
  "right" when it holds the expected word, and an "echo" when it repeats a long span of the
  prompt (ECHO_CHARS characters of the system prompt, or the whole question);
* map: ``mapreduce.map_messages(..., structured=True)`` over real chunks (Python's reference
  topics, chunked by the app's chunker) with ``format=MAP_SCHEMA`` and the app's map reply
  budget: "valid" is strict JSON of the schema's shape, "read" is what ``read_map_reply`` turns
  into points, "grounded" a point whose quote the chunk really holds, and "degenerate" a reply
  with a unit of 1-12 characters (not blanks) four times in a row ("1.1.1.1.1.",
  "Creative Creative ...");
* synthesis: ``mapreduce.reduce_messages`` over fixed partial answers (the same for every
  model); an "echo" repeats ECHO_CHARS characters of the fixed prompt text (system prompt,
  instruction, template) or REPEAT_CHARS of the partial answers; "cites" counts replies with at
  least one valid [n];
* speed: generated tokens per second (eval_count / eval_duration, the median over all calls),
  prompt tokens per second likewise; peak RSS: the server process's VmHWM at the end.

The load average is printed with every row: other processes share the machine.
``--write`` appends the table to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import ROOT, machine, pydoc_markdown  # noqa: E402

from app import chunking  # noqa: E402
from app.analysis import mapreduce  # noqa: E402
from app.budget import map_reply_budget  # noqa: E402
from app.config import ChunkingConfig, Config  # noqa: E402
from app.modelserver.ollama import OllamaServer  # noqa: E402
from harvey_demo import models as bundled  # noqa: E402

SECTION = "## The bundled demo model's candidates (issue 31, `bench/bench_bundled.py`)"
WINDOW = 2048
CHAT_PREDICT = 160
REDUCE_PREDICT = 320
ECHO_CHARS = 40
REPEAT_CHARS = 160
START_DEADLINE_S = 300

QUESTIONS = [
    ("What is the capital of France?", ("paris",)),
    ("How many days are there in a week?", ("7", "seven")),
    ("What colour is a clear sky during the day?", ("blue",)),
    ("Which planet is the largest in our solar system?", ("jupiter",)),
    ("What do bees make?", ("honey",)),
    ("Name the language this sentence is written in.", ("english",)),
]
MAP_TASKS = ["Summarize each section of topics.md.", "What does the text say about exceptions?"]
MAP_CHUNKS = 5

# Fixed partial answers for the synthesis: what a map step over a 3-chunk notes file returns.
PARTIALS = [
    (0, "Garden", [("The tomatoes were planted on 3 May in the south bed.", "planted on 3 May"),
                   ("Slugs ate half of the lettuce; beer traps helped.", "beer traps helped")], 4),
    (1, "Bikes", [("The blue bike needs a new chain before the trip.", "needs a new chain"),
                  ("The tyres were pumped to 4 bar.", "pumped to 4 bar")], 5),
    (2, "Trip", [("The trip to the lake is planned for 14 June.", "planned for 14 June"),
                 ("Anna brings the tent; Tom brings the stove.", "Tom brings the stove")], 4),
]
SYNTHESIS_TASKS = ["Summarize notes.md.", "What must be done before the trip?",
                   "List the dates mentioned in notes.md."]


# -- measures ---------------------------------------------------------------------------

def squash(text: str) -> str:
    return " ".join(text.lower().split())


def longest_shared(reply: str, source: str) -> int:
    """Characters of the longest span the reply shares verbatim with the source (blanks squashed)."""
    a, b = squash(reply), squash(source)
    if not a or not b:
        return 0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b)).size


_RUN = re.compile(r"(.{1,12}?)\1{3,}", re.S)


def degenerate(text: str) -> bool:
    """A unit of 1-12 characters, not only blanks, four or more times in a row."""
    return any(m.group(1).strip() for m in _RUN.finditer(text))


def strict_map_json(reply: str) -> bool:
    """The reply is one JSON object of MAP_SCHEMA's shape (no salvage, no fences)."""
    try:
        data = json.loads(reply)
    except ValueError:
        return False
    if not isinstance(data, dict) or set(data) - {"relevant", "points", "confidence"}:
        return False
    points, confidence = data.get("points"), data.get("confidence")
    return (isinstance(data.get("relevant"), bool) and isinstance(points, list) and len(points) <= mapreduce.MAX_POINTS
            and isinstance(confidence, int) and not isinstance(confidence, bool) and 0 <= confidence <= 5
            and all(isinstance(p, dict) and isinstance(p.get("point"), str) and isinstance(p.get("quote"), str)
                    for p in points))


# -- the candidate's server ---------------------------------------------------------------

def start_server(name: str, threads: int | None) -> tuple[subprocess.Popen, str]:
    """``python -m harvey_demo.server`` on a free port; its URL once it says it serves."""
    command = [sys.executable, "-m", "harvey_demo.server", "--port", "0", "--model-name", name]
    if threads:
        command += ["--threads", str(threads)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        match = re.search(r"serving Ollama's API at (\S+)", line)
        if match:
            return process, match.group(1)
        if "harvey demo:" in line:
            break
    process.kill()
    raise SystemExit(f"{name}: the demo server did not start")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def call(client: OllamaServer, name: str, messages: list[dict], num_predict: int, speeds: list, **kwargs) -> str:
    stream = client.chat(name, messages, num_ctx=WINDOW, num_predict=num_predict, **kwargs)
    text = "".join(stream)
    usage = stream.usage
    if usage and usage.tokens_per_second:
        speeds.append((usage.tokens_per_second,
                       (usage.prompt_tokens or 0) / usage.prompt_seconds if usage.prompt_seconds else 0.0))
    return text


# -- the tasks ------------------------------------------------------------------------------

def chat_task(client, name, speeds, samples) -> dict:
    system = Config.__dataclass_fields__["system_prompt"].default
    right = echoes = 0
    for question, expected in QUESTIONS:
        reply = call(client, name, [{"role": "system", "content": system}, {"role": "user", "content": question}],
                     CHAT_PREDICT, speeds)
        right += any(word in reply.lower() for word in expected)
        echoes += (longest_shared(reply, system) >= ECHO_CHARS
                   or longest_shared(reply, question) >= min(ECHO_CHARS, len(squash(question))))
        samples.setdefault("chat", reply)
    return {"chat_right": right / len(QUESTIONS), "chat_echo": echoes / len(QUESTIONS)}


def map_chunks() -> list:
    settings = chunking.ChunkSettings(size_tokens=400, overlap="paragraph", bytes_per_token=4.0)
    return chunking.chunk_text(pydoc_markdown(40_000), "markdown", settings)


def map_task(client, name, speeds, samples) -> dict:
    chunks = map_chunks()
    picked = chunks[:: max(1, len(chunks) // MAP_CHUNKS)][:MAP_CHUNKS]
    cap = ChunkingConfig().map_reply_tokens
    counts = {"calls": 0, "valid": 0, "read": 0, "grounded": 0, "points": 0, "degenerate": 0}
    for task in MAP_TASKS:
        budget = map_reply_budget(task, cap=cap)
        num_predict = min(cap, 2 * budget.num_predict + 32)      # as execute.py asks a structured map reply
        for chunk in picked:
            messages = mapreduce.map_messages(task, chunk, len(chunks), budget.words, structured=True)
            reply = call(client, name, messages, num_predict, speeds, format=mapreduce.MAP_SCHEMA)
            answer = mapreduce.read_map_reply(reply, chunk.text)
            counts["calls"] += 1
            counts["valid"] += strict_map_json(reply)
            counts["read"] += answer.confidence is not None
            counts["points"] += len(answer.points)
            counts["grounded"] += sum(1 for p in answer.points if p.get("quote"))
            counts["degenerate"] += degenerate(reply)
            samples.setdefault("map", reply)
    calls = counts["calls"]
    return {"map_valid": counts["valid"] / calls, "map_read": counts["read"] / calls,
            "map_degenerate": counts["degenerate"] / calls,
            "map_grounded": counts["grounded"] / counts["points"] if counts["points"] else 0.0,
            "map_points": counts["points"]}


def synthesis_task(client, name, speeds, samples) -> dict:
    parts = [mapreduce.part(index, len(PARTIALS), heading, "", [{"point": p, "quote": q} for p, q in points],
                            confidence) for index, heading, points, confidence in PARTIALS]
    body = "\n\n".join(parts)
    echoes = cites = 0
    for instruction in SYNTHESIS_TASKS:
        messages = mapreduce.reduce_messages(instruction, parts, "")
        fixed = messages[0]["content"] + "\n" + messages[1]["content"].replace(body, "")
        reply = call(client, name, messages, REDUCE_PREDICT, speeds)
        echoes += longest_shared(reply, fixed) >= ECHO_CHARS or longest_shared(reply, body) >= REPEAT_CHARS
        cites += bool(set(mapreduce.citations(reply)) & {1, 2, 3})
        samples.setdefault("synthesis", reply)
    return {"synth_echo": echoes / len(SYNTHESIS_TASKS), "synth_cites": cites / len(SYNTHESIS_TASKS)}


TASKS = {"chat": chat_task, "map": map_task, "synthesis": synthesis_task}


def measure(name: str, threads: int | None, tasks: list[str] = list(TASKS)) -> dict:
    process, url = start_server(name, threads)
    load_before = os.getloadavg()[0]
    speeds, samples = [], {}
    started = time.monotonic()
    try:
        client = OllamaServer(url, read_timeout=600)
        row = {"model": name, "size_mb": os.path.getsize(bundled.locate(bundled.get(name))) / 1e6}
        for task in tasks:                  # --tasks map: the map prompt alone (a change of it, before and after)
            row.update(TASKS[task](client, name, speeds, samples))
        row["gen_tps"] = statistics.median(s[0] for s in speeds) if speeds else 0.0
        row["prompt_tps"] = statistics.median(s[1] for s in speeds if s[1]) if speeds else 0.0
        row["rss_mb"] = peak_rss_mb(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=60)
    row["minutes"] = (time.monotonic() - started) / 60
    row["load"] = f"{load_before:.1f} → {os.getloadavg()[0]:.1f}"
    row["samples"] = samples
    return row


def pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def table(rows: list[dict]) -> str:
    lines = ["| model | GGUF | chat right | chat echo | map JSON valid | map read as points | map degenerate "
             "| quotes found | synthesis echo | synthesis cites | gen tok/s | prompt tok/s | peak RSS | minutes "
             "| load avg (1 min) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        r = {key: None for key in ("chat_right", "chat_echo", "map_valid", "map_read", "map_degenerate",
                                   "map_grounded", "synth_echo", "synth_cites")} | {"map_points": 0} | row
        lines.append(f"| {r['model']} | {r['size_mb']:.0f} MB | {pct(r['chat_right'])} | {pct(r['chat_echo'])} "
                     f"| {pct(r['map_valid'])} | {pct(r['map_read'])} | {pct(r['map_degenerate'])} "
                     f"| {pct(r['map_grounded'])} of {r['map_points']} | {pct(r['synth_echo'])} "
                     f"| {pct(r['synth_cites'])} | {r['gen_tps']:.1f} | {r['prompt_tps']:.0f} "
                     f"| {r['rss_mb']:.0f} MB | {r['minutes']:.1f} | {r['load']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(bundled.BUNDLED))
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: the server's)")
    parser.add_argument("--tasks", default=",".join(TASKS), help="which of chat,map,synthesis to run")
    parser.add_argument("--write", action="store_true", help="append the table to bench/RESULTS.md")
    args = parser.parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    names = [n for n in args.models.split(",") if n]
    for name in names:
        if not bundled.available(bundled.get(name)):
            raise SystemExit(f"{name}: {bundled.get(name).install_hint}")
    header = machine()
    rows = []
    for name in names:
        row = measure(name, args.threads, tasks)
        rows.append(row)
        print(json.dumps(row, ensure_ascii=False), flush=True)
    text = table(rows)
    samples = "\n".join(f"- {r['model']}, first {kind} reply: `{' '.join(reply.split())[:160]}`"
                        for r in rows for kind, reply in r["samples"].items())
    threads = args.threads or "the server's default number of"
    report = (f"\n{SECTION}\n\n`python bench/bench_bundled.py --write` ({header}).\n"
              f"Each model in its own demo server process, {threads} llama.cpp thread(s), "
              f"window {WINDOW}; {len(QUESTIONS)} chat questions, {MAP_CHUNKS * len(MAP_TASKS)} map calls, "
              f"{len(SYNTHESIS_TASKS)} syntheses each.\n\n{text}\n\n{samples}\n")
    print(report)
    if args.write:
        with (ROOT / "bench" / "RESULTS.md").open("a", encoding="utf-8") as results:
            results.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
