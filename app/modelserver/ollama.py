"""Ollama's native HTTP API as a ``ModelServer``: the only module that knows Ollama's dialect.

Why native and not the OpenAI-compatible endpoint: only ``/api/chat`` takes
``options.num_ctx`` (the window we budget against) and ``truncate: false`` (so an
over-long prompt fails instead of being silently cut).

Everything Ollama-specific lives here and nowhere else: the endpoints (``/api/chat``,
``/api/show``, ``/api/tags``, ``/api/embed``, ``/api/version``), the field names of its
answers (``prompt_eval_count``, ``eval_count``, the ``*_duration`` nanoseconds,
``done_reason``, ``model_info``) and the words of its error texts, each turned into a
typed error of ``errors.py``.

Cancel before the first byte and mid-reply: each chat has a connection of its own that
``cancel()`` cuts (``transport``, shared with the OpenAI-compatible server).
"""

from __future__ import annotations

import json
import logging
from typing import Iterator

import httpx

from .base import ChatStream, ModelFacts, Usage
from .errors import (BadReply, ContextExceeded, FormatRefused, ModelError, ModelFailed, ModelNotFound, ServerError,
                     Timeout, Unreachable)
from .memory import INTERVAL_HYBRIDS, MAX_HEAD_LENGTH, MAX_HEADS, MAX_LAYERS, SWA_PATTERNS, KvShape, Measured
from .transport import CallStream, HttpServer

log = logging.getLogger(__name__)
NS = 1e9
# The key of /api/show's "details" that Harvey's bundled demo server (harvey_demo.server) sets to true:
# the page then says the model is a stand-in. A real Ollama never sends it.
DEMO_MARK = "harvey_demo"


class OllamaServer(HttpServer):
    """Talks to one Ollama server. Thread-safe; share one per app."""

    name = "Ollama"

    def __init__(self, url: str, connect_timeout: float = 3.0, read_timeout: float = 600.0,
                 keep_alive: str | None = "30m"):
        super().__init__(url, connect_timeout, read_timeout)
        self.keep_alive = keep_alive

    def _raise_for(self, response: httpx.Response, model: str | None = None) -> None:
        """Ollama's non-200 answers into typed errors."""
        _raise_for(response, model=model)

    # -- plain requests -----------------------------------------------------------

    def is_up(self, timeout: float = 2.0) -> bool:
        """Whether something Ollama-like answers at ``/`` right now."""
        try:
            return self._request("GET", "/", timeout=timeout).status_code == 200
        except (Unreachable, Timeout):
            return False

    def version(self) -> str:
        """``/api/version``: for ``harvey check`` and bug reports."""
        response = self._request("GET", "/api/version", timeout=5.0)
        _raise_for(response)
        return response.json().get("version", "")

    def _fetch_models(self) -> list[str]:
        """``/api/tags``: the names as ``ollama list`` shows them (what ``@name`` routes to)."""
        response = self._request("GET", "/api/tags", timeout=10.0)
        _raise_for(response)
        listed = response.json().get("models", [])
        self._digests = {(m.get("name") or m.get("model")): m.get("digest") or "" for m in listed}
        return [m.get("name") or m.get("model") for m in listed]

    def digest(self, model: str) -> str | None:
        """The model's digest from ``/api/tags``: a model pulled again is a new vocabulary (and its
        stored vectors are not the old one's)."""
        self.models()                                  # the list of a few seconds ago will do
        digests = getattr(self, "_digests", {})
        if model not in digests:
            self.models(max_age=0.0)
            digests = getattr(self, "_digests", {})
        return digests.get(model) or None

    def known_digest(self, model: str) -> str | None:
        return getattr(self, "_digests", {}).get(model) or None

    def _build_counter(self, model: str):
        """The vocabulary from ``/api/show`` with ``verbose`` (without it the long arrays are empty),
        built into an exact counter (``tokens``); raises ``Unbuildable`` with the reason."""
        from .tokens import counter_from_info

        response = self._request("POST", "/api/show", json={"model": model, "verbose": True}, timeout=120.0)
        _raise_for(response, model=model)
        return counter_from_info(response.json().get("model_info") or {})

    def _fetch_facts(self, model: str) -> ModelFacts:
        """``/api/show``: a 404 is a model that is not installed (the message says how to get it)."""
        response = self._request("POST", "/api/show", json={"model": model}, timeout=30.0)
        _raise_for(response, model=model)
        data = response.json()
        info = data.get("model_info") or {}
        if _per_layer_emptied(info):
            # a hybrid's KV heads per layer: asked once with verbose, the model's own keys kept (not its vocabulary)
            try:
                full = self._request("POST", "/api/show", json={"model": model, "verbose": True}, timeout=120.0)
                _raise_for(full, model=model)
                arch = info["general.architecture"]
                info.update({k: v for k, v in (full.json().get("model_info") or {}).items()
                             if k.startswith(f"{arch}.")})
                data["model_info"] = info
            except (ModelError, ValueError) as exc:
                log.info("the layers of %s are not known in full (%s): sized at the largest", model, exc)
        return _facts_from_show(model, data)

    def _fetch_sizes(self) -> dict[str, int]:
        """``/api/tags``' ``size`` of each model: its weights file, in bytes."""
        response = self._request("GET", "/api/tags", timeout=10.0)
        _raise_for(response)
        return {m.get("name") or m.get("model"): int(m.get("size") or 0) for m in response.json().get("models", [])}

    def _fetch_loaded(self, model: str) -> Measured | None:
        """``/api/ps``: the loaded model's ``size`` (weights, KV cache for every slot, compute buffers)
        and ``context_length`` (the window per slot)."""
        response = self._request("GET", "/api/ps", timeout=5.0)
        _raise_for(response)
        for entry in response.json().get("models", []):
            if (entry.get("name") or entry.get("model")) in (model, f"{model}:latest"):
                size, context = int(entry.get("size") or 0), int(entry.get("context_length") or 0)
                return Measured(size, context) if size and context else None
        return None

    def embed(self, model: str, texts: str | list[str]) -> list[list[float]]:
        """``/api/embed``, one vector per text, with ``truncate: false``: Ollama otherwise cuts a text
        longer than the model reads without a word, so a fact past the cut could never be found; an
        over-long text is ``ContextExceeded`` instead (the indexer sends it again as halves)."""
        response = self._request("POST", "/api/embed", json=_embed_body(model, texts))
        _raise_for(response, model=model)
        return response.json()["embeddings"]

    def embedding(self, model: str, texts: str | list[str]):
        """The same request as ``embed``, on a connection a cancel cuts (the question of a Stop-able job)."""
        return self._embedding("/api/embed", _embed_body(model, texts), lambda response: response.json()["embeddings"])

    # -- chat -------------------------------------------------------------------------

    def chat(self, model: str, messages: list[dict], *, num_ctx: int, num_predict: int | None = None,
             format: dict | str | None = None, temperature: float | None = None) -> ChatStream:
        """A lazy stream of ``/api/chat`` with ``truncate: false`` and ``options.num_ctx``.

        ``num_ctx`` is required: without it Ollama silently works in its own default
        window (4096 on a CPU), whatever the app budgets against.
        """
        options: dict = {"num_ctx": int(num_ctx)}
        if num_predict is not None:
            options["num_predict"] = int(num_predict)
        if temperature is not None:
            options["temperature"] = temperature
        body = {"model": model, "messages": messages, "stream": True, "truncate": False, "options": options}
        if format is not None:
            body["format"] = format
        if self.keep_alive:
            body["keep_alive"] = self.keep_alive
        return OllamaChatStream(self, body)


class OllamaChatStream(CallStream):
    """One ``/api/chat`` reply, read as NDJSON lines (see ``base.ChatStream`` for the contract)."""

    def _read(self) -> Iterator[str]:
        """Send, then yield each line's text; the ``done`` line's counts become ``usage``."""
        self._open("/api/chat")
        for obj in self._objects():
            if "error" in obj:          # the server's own answer (its runner failed), not a lost line
                raise _error_from_text(str(obj["error"]), ModelFailed)
            piece = (obj.get("message") or {}).get("content") or ""
            if piece:
                yield piece
            if obj.get("done"):
                self.usage = _usage(obj)
                self._server.reply_done(self._body["model"])
                return
        raise BadReply(f"The model's reply broke off: {self._server} closed the connection before the end.")

    def _objects(self) -> Iterator[dict]:
        """The decoded lines."""
        for line in self._lines():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                raise BadReply(f"{self._server.name} sent a line that is not JSON: {line[:80]!r}") from None


# -- Ollama's answers into neutral words --------------------------------------------------

def _embed_body(model: str, texts: str | list[str]) -> dict:
    return {"model": model, "input": texts, "truncate": False}


def _usage(done: dict) -> Usage:
    """The final ``done: true`` object's counts (durations in nanoseconds)."""
    reason = done.get("done_reason") or ""
    return Usage(prompt_tokens=done.get("prompt_eval_count"), generated_tokens=done.get("eval_count"),
                 seconds=(done.get("total_duration") or 0) / NS,
                 prompt_seconds=(done.get("prompt_eval_duration") or 0) / NS,
                 generate_seconds=(done.get("eval_duration") or 0) / NS,
                 stopped_by=reason if reason in ("stop", "length") else "")


def _facts_from_show(model: str, data: dict) -> ModelFacts:
    """Pull family, size and the trained context length out of ``/api/show``."""
    info = data.get("model_info") or {}
    details = data.get("details") or {}
    arch = info.get("general.architecture", "")
    length = info.get(f"{arch}.context_length") if arch else None
    if length is None:  # some servers only fill one "*.context_length" key
        length = next((v for k, v in info.items() if k.endswith(".context_length")), None)
    return ModelFacts(name=model, family=details.get("family", ""), parameter_size=details.get("parameter_size", ""),
                      architecture=arch, context_length=int(length) if length else None, kv=_kv_shape(arch, info),
                      capabilities=tuple(c for c in data.get("capabilities") or () if isinstance(c, str)),
                      demo=details.get(DEMO_MARK) is True)


def _kv_shape(arch: str, info: dict) -> KvShape | None:
    """The KV cache's shape from ``model_info``'s GGUF keys (None: not enough of them, or figures past
    any real model's: ``memory.MAX_LAYERS`` and the like).

    ``{arch}.block_count`` layers; ``attention.head_count_kv`` KV heads (a number, or one per layer,
    0 for a recurrent layer; absent: as many as ``head_count``, no grouping); ``attention.key_length``
    / ``value_length``, else ``embedding_length / head_count``; ``attention.sliding_window`` and the
    architecture's pattern of sliding layers (``memory.SWA_PATTERNS``); the recurrent layers of a
    hybrid (``memory.INTERVAL_HYBRIDS``, or a KV head count of 0) and their fixed state. Ollama empties
    arrays longer than 5 in ``/api/show``: the facts ask again with ``verbose`` for those (``_per_layer_
    emptied``); a per-layer list that is still empty counts every layer at the largest figure known.
    """
    def number(key: str) -> int | None:
        value = info.get(f"{arch}.{key}")
        if isinstance(value, list):
            value = max((v for v in value if isinstance(v, (int, float))), default=None)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None

    layers = number("block_count")
    heads = number("attention.head_count")
    if not arch or not layers:
        return None
    if layers > MAX_LAYERS or (heads or 0) > MAX_HEADS:
        log.warning("%s: the server describes %s layers and %s heads, past any model: no memory cap from them",
                    arch, layers, heads)
        return None
    raw_kv = info.get(f"{arch}.attention.head_count_kv")
    if isinstance(raw_kv, list) and len(raw_kv) == layers and all(isinstance(v, int) and v >= 0 for v in raw_kv):
        kv_heads = tuple(int(v) for v in raw_kv)
    else:
        per_layer = number("attention.head_count_kv") or heads
        if not per_layer:
            return None
        kv_heads = (per_layer,) * layers
    if arch in INTERVAL_HYBRIDS:
        interval = number("full_attention_interval") or 4
        kv_heads = tuple(h if (i + 1) % interval == 0 else 0 for i, h in enumerate(kv_heads))
    embedding = number("embedding_length")
    key = number("attention.key_length") or (embedding // heads if embedding and heads else None)
    value = number("attention.value_length") or key
    if not key or not value:
        return None
    if max(kv_heads) > MAX_HEADS or max(key, value) > MAX_HEAD_LENGTH:
        log.warning("%s: the server describes %s KV heads of %s values, past any model: no memory cap from them",
                    arch, max(kv_heads), max(key, value))
        return None
    window = number("attention.sliding_window") or 0
    pattern = SWA_PATTERNS.get(arch)
    sliding = tuple(i % pattern < pattern - 1 for i in range(layers)) if window and pattern else ()
    recurrent = sum(1 for h in kv_heads if h == 0)
    state = recurrent * _recurrent_values(number, embedding or 0) if recurrent else 0
    return KvShape(kv_heads, key, value, window if sliding else 0, sliding, state)


def _recurrent_values(number, embedding: int) -> int:
    """The f32 values one recurrent layer keeps a slot, as llama.cpp's ``n_embd_r() + n_embd_s()``: a
    short convolution's last ``l_cache - 1`` inputs (LFM2), or a state-space layer's convolution
    state and state (Mamba 2, the gated delta net of Qwen3-Next)."""
    l_cache = number("shortconv.l_cache")
    if l_cache:
        return embedding * (l_cache - 1)
    conv, inner = number("ssm.conv_kernel") or 0, number("ssm.inner_size") or 0
    state, groups = number("ssm.state_size") or 0, number("ssm.group_count") or 0
    if max(conv, inner, state, groups) > 1 << 20:
        return 0
    return max(0, conv - 1) * (inner + 2 * groups * state) + state * inner


def _per_layer_emptied(info: dict) -> bool:
    """Whether Ollama emptied a per-layer list that sizes the cache (its arrays longer than 5 come
    empty without ``verbose``): a hybrid's KV heads, one per layer."""
    arch = info.get("general.architecture", "")
    return bool(arch) and info.get(f"{arch}.attention.head_count_kv") == []


def _raise_for(response: httpx.Response, model: str | None = None) -> None:
    """Turn a non-200 answer into the matching typed error."""
    status = response.status_code
    if status == 200:
        return
    try:
        detail = str(response.json().get("error", ""))
    except (ValueError, AttributeError, httpx.ResponseNotRead):
        detail = ""
    if status == 404 and model:
        raise ModelNotFound(model)
    raise _error_from_text(detail or f"HTTP {status}", ServerError, status=status)


def _error_from_text(detail: str, default: type, status: int | None = None):
    """Recognise Ollama's refusals by their words: a context too long, a ``format`` it cannot do."""
    lowered = detail.lower()
    if "context" in lowered and ("exceed" in lowered or "too long" in lowered or "length" in lowered):
        return ContextExceeded(f"The prompt is longer than the model's window: {detail}")
    if status == 400 and ("format" in lowered or "schema" in lowered):
        return FormatRefused(f"Ollama cannot answer in the requested JSON format (older than 0.5?): {detail}")
    if "not found" in lowered and "model" in lowered:
        message = f"Ollama says: {detail}"
    else:
        message = (f"Ollama answered HTTP {status}: " if status else "The model failed mid-reply: ") + detail
    return ServerError(message, http_status=status) if default is ServerError else default(message)
