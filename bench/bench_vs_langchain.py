"""Issue 30: prompt tokens the app's map-reduce sends against LangChain's map_reduce, same documents and counts.

For the six real documents of ``bench_plan.py``: the app runs "Summarize each part." over each
through waitress with the scripted Ollama serving SmolLM2-135M's real vocabulary (every prompt
counted by the app's counter, identical to llama.cpp's; ChatML's 5 tokens a message and 3 a
request, as the scripted server counts). The app's figure is the prompt tokens of its map
requests as the server counted them (``ScriptedOllama.prompt_tokens``).

LangChain's side is computed, not run (no model calls, nothing installed but
``langchain-text-splitters``, the bench extra): the same text split by its
``RecursiveCharacterTextSplitter`` with the *same counter* as length function, chunks of the room
the app's chunks had (``job.size_tokens``) and no overlap, each sent as one user message with
LangChain's default map prompt (``langchain.chains.summarize.map_reduce_prompt``:
'Write a concise summary of the following:\\n\\n\\n"{text}"\\n\\n\\nCONCISE SUMMARY:'), counted as the
scripted server counts a request. The reduce phase is left out on both sides (its size is the
partial answers', which a scripted model does not write like a real one).

    python bench/bench_vs_langchain.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from bench_plan import CHUNK, DOCS, analysed  # noqa: E402

LANGCHAIN_MAP = 'Write a concise summary of the following:\n\n\n"{text}"\n\n\nCONCISE SUMMARY:'


def run_app(path: Path, info: dict, counter) -> dict:
    from app import chunking
    from app.analysis.mapreduce import without_closing

    with analysed(path, info, counter, timeout_s=900) as (server, job, _card, workspace):
        maps = [rec for rec in server.chats() if CHUNK.search(rec.body["messages"][-1]["content"])]
        text = chunking.read_document(workspace / path.name).text
        chunk_text = 0
        for rec in maps:
            content = rec.body["messages"][-1]["content"]
            chunk_text += counter.count(without_closing(content[CHUNK.search(content).end():]))
        return dict(file=path.name, state=job.state, text=text, room=job.size_tokens, calls=len(maps),
                    prompt=sum(server.prompt_tokens(rec.body) for rec in maps), chunk_text=chunk_text,
                    true=counter.count(text), per_message=server.template_tokens)


def langchain_map(text: str, room: int, counter, per_message: tuple[int, int]) -> tuple[int, int]:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(chunk_size=room, chunk_overlap=0, length_function=counter.count)
    chunks = splitter.split_text(text)
    prompt = sum(counter.count(LANGCHAIN_MAP.format(text=c)) + per_message[0] + per_message[1] for c in chunks)
    return len(chunks), prompt


def main() -> None:
    from app.modelserver.tokens import counter_from_info
    from vocab import model_info, smollm_gguf

    info = model_info(smollm_gguf())
    counter = counter_from_info(info)
    load = os.getloadavg()
    rows = []
    for path in DOCS:
        if not path.exists():
            continue
        app = run_app(path, info, counter)
        lc_calls, lc_prompt = langchain_map(app["text"], app["room"], counter, app["per_message"])
        rows.append(dict(app, lc_calls=lc_calls, lc_prompt=lc_prompt))
    print(f"load average {load[0]:.2f} {load[1]:.2f} (before), {os.getloadavg()[0]:.2f} (after); nproc {os.cpu_count()}")
    print("| document | true tokens | chunk room | app: map calls | app: map prompt tokens | of which chunk text "
          "(overlap) | around the chunks, a call | LangChain: map calls | LangChain: map prompt tokens | "
          "around, a call | app / LangChain |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        lc_around = (r["lc_prompt"] - r["true"]) / r["lc_calls"]
        print(f"| {r['file']} ({r['state']}) | {r['true']:,} | {r['room']:,} | {r['calls']} | {r['prompt']:,} | "
              f"{r['chunk_text']:,} (+{r['chunk_text'] - r['true']:,}) | {(r['prompt'] - r['chunk_text']) / r['calls']:.0f} | "
              f"{r['lc_calls']} | {r['lc_prompt']:,} | {lc_around:.0f} | {r['prompt'] / r['lc_prompt']:.2f} |")
    app_total, lc_total = sum(r["prompt"] for r in rows), sum(r["lc_prompt"] for r in rows)
    calls, lc_calls = sum(r["calls"] for r in rows), sum(r["lc_calls"] for r in rows)
    true, chunk_text = sum(r["true"] for r in rows), sum(r["chunk_text"] for r in rows)
    print(f"| **all** | {true:,} | | {calls} | {app_total:,} | {chunk_text:,} (+{chunk_text - true:,}) | "
          f"{(app_total - chunk_text) / calls:.0f} | {lc_calls} | {lc_total:,} | {(lc_total - true) / lc_calls:.0f} | "
          f"{app_total / lc_total:.2f} |")


if __name__ == "__main__":
    main()
