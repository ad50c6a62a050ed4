"""Issue 30: the bundled models counted with their own tokenizer, through the demo's /api/show.

The demo server's ``/api/show`` with ``verbose`` gives the GGUF's ``tokenizer.ggml.*`` keys, read
with ``gguf`` (``harvey_demo.server.gguf_tokenizer``), as Ollama does; the app builds its counter
from them (``app.modelserver.tokens.counter_from_info``). Per bundled model whose files are
installed: the time to read the keys, the size of the verbose answer, the time to build the
counter, and its count of every Harvey fixture (``../shared/reference/harvey-fixtures``) against
llama.cpp's own ``/tokenize`` of the same GGUF (``tests/vocab.LlamaCpp``), the reference.

    python bench/bench_demo_counter.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
FIXTURES = ROOT.parent / "shared" / "reference" / "harvey-fixtures"


def main() -> None:
    from app.modelserver.tokens import counter_from_info
    from harvey_demo import models as bundled
    from harvey_demo.server import gguf_tokenizer
    from vocab import LlamaCpp

    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(FIXTURES.glob("*"))[:72]
             if p.is_file()]
    print(f"{len(texts)} fixtures, {sum(len(t.encode()) for t in texts):,} bytes")
    print("| model | vocabulary | read keys (s) | verbose answer (MB) | build counter (s) | fixtures equal to /tokenize | total tokens |")
    print("|---|---|---|---|---|---|---|")
    for model in bundled.BUNDLED.values():
        if not bundled.available(model):
            print(f"| {model.name} | not installed | | | | | |")
            continue
        path = bundled.locate(model)
        started = time.perf_counter()
        info = gguf_tokenizer(path)
        read = time.perf_counter() - started
        size = len(json.dumps(info).encode()) / 2**20
        started = time.perf_counter()
        counter = counter_from_info(info)
        built = time.perf_counter() - started
        reference = LlamaCpp(Path(path))
        try:
            ours = [counter.count(t) for t in texts]
            theirs = [reference.count(t) for t in texts]
        finally:
            reference.close()
        equal = sum(a == b for a, b in zip(ours, theirs))
        print(f"| {model.name} | {len(info.get('tokenizer.ggml.tokens', [])):,} tokens | {read:.2f} | {size:.1f} | "
              f"{built:.2f} | {equal} of {len(texts)} | {sum(ours):,} (llama.cpp {sum(theirs):,}) |")


if __name__ == "__main__":
    main()
