"""The window a Pi holds under the model servers' own cache settings (issue 42, deploy/README.md).

Run from the repository root:  python bench/bench_pi_window.py [--write]

The app sizes the window (``num_ctx``) to what the server's machine holds (``app/modelserver/memory.py``:
weights + KV cache x slots, against the memory less a reserve; its arithmetic is checked against llama.cpp's
own allocation in tests/test_window_memory.py). Two server settings move that figure on a Pi:

* Ollama's ``OLLAMA_KV_CACHE_TYPE`` (f16, q8_0, q4_0): the bytes each token of window costs;
* llama-server's ``--cache-ram`` (a host-memory prompt cache, 8192 MiB by default since 2026): memory the
  server may take beside the model, which the app only knows of through ``model_server.server_memory``
  (the machine's RAM less that cache).

Prints the largest window for two models people run on a Pi, at 4 and 8 GiB, one slot and four.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import header, table, write_section  # noqa: E402

SECTION = "## The window a Pi holds, by cache settings (issue 42, `bench/bench_pi_window.py`)"
GIB, MIB = 1024 ** 3, 1024 ** 2
# (name, layers, KV heads, key/value length, weights in bytes: the Q4_K_M GGUFs Ollama pulls)
MODELS = (("llama3.2:3b", 28, 8, 128, 2_019_377_696), ("qwen2.5:1.5b", 28, 2, 128, 986_046_272))


def window(model, memory: int, slots: int, cache: str) -> int:
    from app.modelserver.memory import KvShape, Machine, largest_window

    _, layers, heads, length, weights = model
    shape = KvShape(kv_heads=(heads,) * layers, key_length=length, value_length=length)
    machine = Machine(memory, "bench", slots, "bench", cache, "bench")
    return largest_window(shape, weights, machine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    rows = []
    for model in MODELS:
        for ram in (4, 8):
            for slots in (1, 4):
                cells = [window(model, ram * GIB, slots, cache) for cache in ("f16", "q8_0", "q4_0")]
                cache_ram = [window(model, ram * GIB - mib * MIB, slots, "f16") if ram * GIB > mib * MIB else 0
                             for mib in (512, 2048)]
                rows.append([model[0], f"{ram} GiB", slots, *[f"{c:,}" for c in cells],
                             *[f"{c:,}" for c in cache_ram]])
    text = (f"{SECTION}\n\n" + header("Largest window (tokens) the app sends", "python bench/bench_pi_window.py")
            + "\nKV cache type as `OLLAMA_KV_CACHE_TYPE` sets it; the last two columns: llama-server with "
              "`--cache-ram 512` or `2048` (MiB), the app told with `model_server.server_memory` = RAM less that "
              "(an f16 cache). With the default `--cache-ram` of 8192 MiB on an 8 GiB Pi, the prompt cache alone "
              "may take the memory the window needs: set it.\n\n"
            + table(["model", "RAM", "slots", "f16", "q8_0", "q4_0", "cache-ram 512", "cache-ram 2048"], rows) + "\n")
    print(text)
    if args.write:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
