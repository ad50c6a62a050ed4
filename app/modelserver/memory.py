"""How large a window the model server's machine can hold (issue 31): the arithmetic, no HTTP.

A window (``num_ctx``) costs memory on the server's machine: the weights once, plus a KV cache
that grows with the window, for every slot the server keeps (``OLLAMA_NUM_PARALLEL``: Ollama
allocates ``num_ctx`` x slots cells). Llama 3 8B keeps 32 layers x 8 KV heads x 128 values x 2
(K and V) x 2 bytes (f16) = 128 KiB per token of window: 1 GiB at 8192, 4 GiB with four slots,
which with its 4.9 GB of weights is more than an 8 GB Pi has. So the window the app sends is
never larger than what fits (``largest_window``).

Sizes follow llama.cpp (src/llama-kv-cache.cpp, llama-kv-cache-iswa.cpp), which Ollama runs:

- a layer keeps ``kv_heads x (key_length + value_length)`` values per cell, at the cache type's
  bytes per value (f16 2, q8_0 34/32 = 1.0625, q4_0 18/32 = 0.5625: a block of 32 values and its
  scale);
- a *sliding-window* layer (Gemma 2/3, Cohere 2) keeps only the last ``sliding_window`` tokens plus
  one micro-batch (512), padded to 256 cells, per slot; only the global layers grow with the
  window. Which layers slide is llama.cpp's ``set_swa_pattern(n)``: layer ``i`` slides unless
  ``i % n == n - 1`` (Gemma 3: n = 6, so 5 local layers to 1 global; gpt-oss: n = 2, every other
  layer keeps a 128-token window);
- a *recurrent* layer of a hybrid model (LFM2, Granite 4 H, Jamba, PLaMo 2: a layer whose KV head
  count is 0; Qwen3-Next and Qwen3.5: every layer but each ``full_attention_interval``-th) keeps no
  KV cache at all, only a fixed state per slot (llama-memory-recurrent.cpp: ``n_embd_r + n_embd_s``
  f32 values a layer), whatever the window.

A server that describes more layers, heads or values per head than any model has
(``MAX_LAYERS``, ``MAX_HEADS``, ``MAX_HEAD_LENGTH``) is not believed: no cap from it.

The margin: ``reserve`` bytes of the machine are never counted as room for the model: the
larger of 1 GiB (the OS, Harvey itself, Ollama's own process, page cache for the SD card) and
15% of the memory (llama.cpp's compute buffers, which grow with the window and are not in the
KV figure). What a loaded model really takes (the server's own report, after a reply) corrects
the estimate (``Measured``): only ever downwards for the window.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

GiB = 1024 ** 3
# Bytes per cached value, by llama.cpp cache type (a quantized block: 32 values and a 2-byte scale).
CACHE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
               "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}
# llama.cpp's set_swa_pattern(n) per architecture that has sliding-window layers (llama-model.cpp).
# Another architecture with a sliding window counts every layer as global: more memory, never less.
SWA_PATTERNS = {"gemma2": 2, "gemma3": 6, "cohere2": 4,
                "gpt-oss": 2, "gptoss": 2}      # (llama.cpp names gpt-oss "gpt-oss"; Ollama's own files "gptoss")
# Hybrid models whose attention layers are every ``full_attention_interval``-th (default 4), the
# rest recurrent (llama.cpp's Qwen3-Next and Qwen3.5 loaders).
INTERVAL_HYBRIDS = frozenset({"qwen3next", "qwen35", "qwen35moe"})
RECURRENT_VALUE_BYTES = 4   # a recurrent state is kept in f32 (llama.cpp's default for r and s)
# Past any model published (the deepest have about 160 layers, 128 KV heads, 576 values a head):
# larger figures are a broken or hostile server, and would make the arithmetic itself unbounded.
MAX_LAYERS = 1024
MAX_HEADS = 4096
MAX_HEAD_LENGTH = 8192
UBATCH = 512            # llama.cpp's n_ubatch: a sliding layer keeps its window plus one micro-batch
SWA_PAD = 256           # ... padded to 256 cells (llama-kv-cache-iswa.cpp)
WINDOW_STEP = 256       # a cap is a whole multiple: Ollama reloads the model whenever num_ctx changes
MIN_WINDOW = 256        # the smallest window the app sends (the config's lower bound too)
MAX_WINDOW = 1 << 21
MIN_RESERVE = 1 * GiB
RESERVE_SHARE = 0.15
MEASURED_KEPT = 8       # loaded sizes remembered per model


@dataclass(frozen=True)
class KvShape:
    """The KV cache's shape: per layer, the KV heads and whether it slides."""

    kv_heads: tuple[int, ...]            # one per layer
    key_length: int
    value_length: int
    sliding_window: int = 0              # tokens a sliding layer keeps (0: no sliding layers)
    sliding: tuple[bool, ...] = ()       # one per layer: True = sliding (empty: none slide)
    recurrent_values: int = 0            # f32 values one slot's recurrent layers keep, whatever the window

    @property
    def layers(self) -> int:
        return len(self.kv_heads)

    def _slides(self, layer: int) -> bool:
        return bool(self.sliding_window) and layer < len(self.sliding) and self.sliding[layer]

    def global_bytes_per_token(self, cache_type: str = "f16") -> float:
        """Bytes one token of window costs in the layers that keep the whole window, one slot."""
        per_value = cache_bytes(cache_type)
        return sum(h * (self.key_length + self.value_length) * per_value
                   for i, h in enumerate(self.kv_heads) if not self._slides(i))

    def sliding_bytes_per_token(self, cache_type: str = "f16") -> float:
        """Bytes one cell costs in the sliding layers (their cells stop at the window + a micro-batch)."""
        per_value = cache_bytes(cache_type)
        return sum(h * (self.key_length + self.value_length) * per_value
                   for i, h in enumerate(self.kv_heads) if self._slides(i))

    def sliding_cells(self, window: int) -> int:
        """Cells one slot's sliding layers keep for a window of ``window`` tokens."""
        if not self.sliding_window:
            return 0
        return min(_pad(window, SWA_PAD), _pad(self.sliding_window + UBATCH, SWA_PAD))

    def cache_bytes(self, window: int, slots: int = 1, cache_type: str = "f16") -> int:
        """The KV cache of a ``window``-token window for ``slots`` slots, in bytes."""
        total = self.global_bytes_per_token(cache_type) * window
        total += self.sliding_bytes_per_token(cache_type) * self.sliding_cells(window)
        total += self.recurrent_bytes()
        return math.ceil(total * slots)

    def recurrent_bytes(self) -> int:
        """Bytes one slot's recurrent layers keep (0: no recurrent layers)."""
        return self.recurrent_values * RECURRENT_VALUE_BYTES


@dataclass(frozen=True)
class Machine:
    """The model server's machine as far as the window is concerned (each figure says where it came from)."""

    memory: int | None                   # bytes it has (None: not known)
    memory_source: str
    slots: int
    slots_source: str
    cache_type: str
    cache_source: str

    @property
    def reserve(self) -> int:
        """Bytes never counted as room for the model (see the module docstring)."""
        return reserve_for(self.memory or 0)

    @property
    def usable(self) -> int | None:
        return None if self.memory is None else max(0, self.memory - self.reserve)


@dataclass(frozen=True)
class Measured:
    """One look at a loaded model: it took ``size`` bytes with a ``context``-token window."""

    size: int
    context: int


@dataclass(frozen=True)
class MemoryFit:
    """The largest window that fits, and the figures it comes from (for ``harvey check``)."""

    cap: int
    weights: int
    shape: KvShape
    machine: Machine
    measured: tuple[tuple[int, int], ...] = ()   # (bytes a loaded model took beyond the estimate, at window)

    def cost(self, window: int) -> int:
        return model_bytes(self.shape, self.weights, self.machine, window, self.measured)

    def lines(self) -> list[str]:
        """The figures, one per line: weights, KV bytes per token, slots, memory, reserve, cap."""
        m, shape = self.machine, self.shape
        glob = shape.global_bytes_per_token(m.cache_type)
        out = [f"weights {_size(self.weights)}",
               f"KV cache {_bytes(glob)}/token ({m.cache_type}, {m.cache_source}; {shape.layers} layers"
               + (f", {sum(shape.sliding)} sliding with a {shape.sliding_window}-token window: "
                  f"{_bytes(shape.sliding_bytes_per_token(m.cache_type))}/cell up to "
                  f"{shape.sliding_cells(MAX_WINDOW)} cells" if any(shape.sliding) and shape.sliding_window else "")
               + (f", {sum(1 for h in shape.kv_heads if h == 0)} recurrent keeping "
                  f"{_size(shape.recurrent_bytes())} a slot" if shape.recurrent_values else "")
               + ")",
               f"slots {m.slots} ({m.slots_source})",
               f"memory {_size(m.memory or 0)} ({m.memory_source}), reserve {_size(m.reserve)}, "
               f"usable {_size(m.usable or 0)}"]
        for extra, at in self.measured:
            out.append(f"measured: the loaded model took {_size(extra)} more than estimated at a {at:,}-token window")
        out.append(f"largest window that fits: {self.cap:,} tokens ({_size(self.cost(self.cap))})")
        if self.cap <= MIN_WINDOW and self.cost(MIN_WINDOW) > (m.usable or 0):
            out.append("the weights alone do not fit in the usable memory: use a smaller model")
        return out


def cache_bytes(cache_type: str) -> float:
    """Bytes per cached value of a cache type (an unknown one counts as f16, what Ollama falls back to)."""
    return CACHE_BYTES.get((cache_type or "f16").lower(), 2.0)


def reserve_for(memory: int) -> int:
    return max(MIN_RESERVE, int(RESERVE_SHARE * memory))


def model_bytes(shape: KvShape, weights: int, machine: Machine, window: int,
                measured: tuple[tuple[int, int], ...] = ()) -> int:
    """What the model takes with a ``window``-token window: weights, KV cache for every slot, and the
    largest excess a loaded model showed (``(bytes, at_window)``): kept whole below the window it was
    seen at (whatever it is, it does not grow as the window shrinks), scaled up above it."""
    total = weights + shape.cache_bytes(window, machine.slots, machine.cache_type)
    extra = max((math.ceil(excess * max(1.0, window / at)) for excess, at in measured if at > 0), default=0)
    return total + extra


def largest_window(shape: KvShape, weights: int, machine: Machine,
                   measured: tuple[tuple[int, int], ...] = ()) -> int | None:
    """The largest multiple of 256 tokens whose model fits in the usable memory (at least 256;
    None when the memory is not known)."""
    usable = machine.usable
    if usable is None:
        return None
    lo, hi = 0, MAX_WINDOW // WINDOW_STEP
    while lo < hi:                       # the cost only grows with the window: bisect on steps
        mid = (lo + hi + 1) // 2
        if model_bytes(shape, weights, machine, mid * WINDOW_STEP, measured) <= usable:
            lo = mid
        else:
            hi = mid - 1
    return max(MIN_WINDOW, lo * WINDOW_STEP)


def excess(shape: KvShape, weights: int, machine: Machine, seen: Measured) -> int:
    """Bytes a loaded model took beyond the estimate for its window (0: the estimate held)."""
    if seen.context <= 0 or seen.size <= 0:
        return 0
    return max(0, seen.size - model_bytes(shape, weights, machine, seen.context))


# -- the machine ------------------------------------------------------------------------------

def machine_for(url: str, parallel: int, server_memory: str = "", kv_cache_type: str = "",
                env=None, meminfo: Path = Path("/proc/meminfo")) -> Machine:
    """The figures for the server at ``url``: what the settings say, else (a server on this machine)
    what this machine's ``/proc/meminfo`` and Ollama's environment variables say."""
    env = os.environ if env is None else env
    local = is_loopback(url)
    if server_memory:
        memory, memory_source = parse_size(server_memory), "model_server.server_memory"
    elif local:
        total = read_meminfo(meminfo).get("MemTotal")
        memory, memory_source = total, "MemTotal of this machine" if total else "unknown: /proc/meminfo unreadable"
    else:
        memory, memory_source = None, "unknown for a server on another machine: set model_server.server_memory"
    slots, slots_source = parallel, "model_server.parallel"
    env_slots = env.get("OLLAMA_NUM_PARALLEL", "").strip() if local else ""
    if env_slots.isdigit() and int(env_slots) > 0:
        slots, slots_source = int(env_slots), "OLLAMA_NUM_PARALLEL"
    env_cache = env.get("OLLAMA_KV_CACHE_TYPE", "").strip().lower() if local else ""
    if kv_cache_type:
        cache_type, cache_source = kv_cache_type.lower(), "model_server.kv_cache_type"
    elif env_cache in CACHE_BYTES:
        cache_type, cache_source = env_cache, "OLLAMA_KV_CACHE_TYPE"
    else:
        cache_type, cache_source = "f16", "Ollama's default"
    return Machine(memory, memory_source, slots, slots_source, cache_type, cache_source)


def read_meminfo(path: Path = Path("/proc/meminfo")) -> dict[str, int]:
    """``/proc/meminfo`` in bytes ({} where there is none: not Linux)."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        m = re.match(r"(\w+):\s+(\d+)\s*(kB)?", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * (1024 if m.group(3) else 1)
    return out


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine (127.0.0.0/8, ::1, localhost)."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024 ** 2, "mb": 1000 ** 2, "mib": 1024 ** 2,
          "g": GiB, "gb": 1000 ** 3, "gib": GiB, "t": 1024 ** 4, "tb": 1000 ** 4, "tib": 1024 ** 4}


def parse_size(text: str | int) -> int:
    """"8G", "8GiB" (binary), "8GB" (decimal), "7.5G" or a number of bytes; ValueError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (say 8G, 8GiB, 8000MB or a number of bytes)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def _pad(n: int, step: int) -> int:
    return -(-n // step) * step


def _size(n: float) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / 1024 ** 2:.0f} MiB"


def _bytes(n: float) -> str:
    return f"{n / 1024:g} KiB" if n >= 1024 else f"{n:g} B"


__all__ = ["KvShape", "Machine", "Measured", "MemoryFit", "machine_for", "largest_window", "excess",
           "model_bytes", "parse_size", "is_loopback", "read_meminfo"]
