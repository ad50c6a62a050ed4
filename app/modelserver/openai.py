"""The OpenAI-compatible HTTP API as a ``ModelServer``: the only module that knows that dialect.

For servers that refuse a prompt longer than their window instead of cutting it: llama.cpp's
``llama-server`` (and llamafile, built on it) and vLLM; LM Studio only with its per-model
"stop at limit" policy. Ollama's own ``/v1`` cannot carry ``truncate: false``, so Ollama stays
on ``ollama.OllamaServer``.

These servers take no window with the request (no ``num_ctx``): the window is theirs. It is
read from llama-server's ``/props`` (``default_generation_settings.n_ctx``: the context of one
slot, the total divided by ``-np``), else vLLM's ``max_model_len`` in ``/v1/models``, else the
server does not say and the configured window applies. The app checks every call's prompt
plus its reply cap (``max_tokens``) against that window before sending (``work.calls``), so a
refusal by the server is the exception, and it becomes the same ``ContextExceeded``.

Everything OpenAI-specific lives here: the endpoints (``/v1/chat/completions`` streamed as
server-sent events ending in ``data: [DONE]``, ``/v1/models``, ``/v1/embeddings``,
llama-server's ``/props`` and ``/tokenize``), the fields (``stream_options.include_usage``,
``max_tokens``, ``response_format``, ``finish_reason``, ``usage``, llama-server's ``timings``)
and the words of the error answers. Cancel is the shared ``transport``'s: a connection per
call, cut from any thread (these servers too stop generating when the client hangs up).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Iterator

import httpx

from .base import ChatStream, ModelFacts, Usage
from .errors import (ContextExceeded, FormatRefused, ModelFailed, ModelNotFound, ServerError, BadReply, Timeout,
                     Unreachable)
from .transport import CallStream, HttpServer

CHAT = "/v1/chat/completions"
# Words of a context refusal: llama-server ("exceed_context_size_error", "exceeds the available
# context size"), vLLM ("maximum context length is N tokens"), LM Studio ("context length").
CONTEXT_WORDS = ("exceed_context_size", "n_ctx", "exceeds the context", "exceeds the available context",
                 "context length", "context size", "context window")
FORMAT_WORDS = ("response_format", "json_schema", "schema", "grammar")
# The window is a start-up flag of these servers (llama-server's -c and -np, vLLM's --max-model-len):
# a restart with other flags changes it. What /props and /v1/models said is kept this long, and
# dropped at once when the server is lost (``ModelServer.forget``) or refuses a prompt for its window.
PROPS_MAX_AGE_S = 300.0


class OpenAIServer(HttpServer):
    """Talks to one OpenAI-compatible server. Thread-safe; share one per app."""

    name = "OpenAI-compatible server"
    facts_max_age = PROPS_MAX_AGE_S

    def __init__(self, url: str, connect_timeout: float = 3.0, read_timeout: float = 600.0):
        super().__init__(url, connect_timeout, read_timeout)
        self._props: tuple[float, dict] | None = None   # llama-server's /props and when ({}: it has none)
        self._tokenize: bool | None = None      # whether /tokenize exists (None: not asked yet)
        self._probe_lock = threading.Lock()

    def _raise_for(self, response: httpx.Response, model: str | None = None) -> None:
        """A non-200 answer into the matching typed error."""
        _raise_for(response, model=model, server=self)

    # -- plain requests -----------------------------------------------------------

    def is_up(self, timeout: float = 2.0) -> bool:
        """Whether ``/v1/models`` answers right now (every such server has it)."""
        try:
            return self._request("GET", "/v1/models", timeout=timeout).status_code == 200
        except (Unreachable, Timeout):
            return False

    def version(self) -> str:
        """vLLM's ``/version``, else llama-server's ``build_info`` in ``/props``, else ""."""
        response = self._request("GET", "/version", timeout=5.0)
        if response.status_code == 200:
            return str(_json(response).get("version", ""))
        return str(self._server_props().get("build_info", ""))

    def _listing(self) -> list[dict]:
        """``/v1/models``: one entry per model the server serves."""
        response = self._request("GET", "/v1/models", timeout=10.0)
        self._raise_for(response)
        return [m for m in _json(response).get("data", []) if isinstance(m, dict)]

    def _fetch_models(self) -> list[str]:
        """The ids of ``/v1/models`` (what ``@name`` routes to and ``model_server.model`` names)."""
        return [m["id"] for m in self._listing() if m.get("id")]

    def _fetch_facts(self, model: str) -> ModelFacts:
        """The served window for ``model``: llama-server's slot context, else vLLM's ``max_model_len``.

        A model the server does not list is ``ModelNotFound``, naming the ones it serves.
        """
        listing = self._listing()
        entry = next((m for m in listing if m.get("id") == model), None)
        if entry is None:
            served = ", ".join(m.get("id", "?") for m in listing) or "none"
            raise ModelNotFound(model, f"start the server with it, or set model_server.model to one it serves ({served})")
        window = self._server_props().get("n_ctx") or _positive(entry.get("max_model_len"))
        kind = str(entry.get("type") or "").lower()        # LM Studio: "llm", "vlm", "embeddings"
        capabilities = ("embedding",) if kind.startswith("embedding") else ("completion",) if kind else ()
        return ModelFacts(name=model, context_length=window, capabilities=capabilities)

    def _server_props(self) -> dict:
        """What the app uses of llama-server's ``/props``: ``n_ctx`` (per slot) and ``build_info``;
        ``{}`` where the server has no such endpoint (vLLM). Kept for ``PROPS_MAX_AGE_S`` and until
        the server is lost (``forget``). A server still loading (503) raises, so nothing is kept
        and the next call asks again."""
        with self._probe_lock:
            kept = self._props
        if kept is not None and time.monotonic() - kept[0] < PROPS_MAX_AGE_S:
            return kept[1]
        response = self._request("GET", "/props", timeout=10.0)
        if response.status_code in (404, 405, 501):
            props = {}
        else:
            self._raise_for(response)
            data = _json(response)
            props = {"n_ctx": _slot_context(data), "build_info": data.get("build_info", "")}
        with self._probe_lock:
            self._props = (time.monotonic(), props)
        return props

    def forget(self) -> None:
        """Drop ``/props`` with the other answers: a server that comes back may serve another window."""
        with self._probe_lock:
            self._props = None
        super().forget()

    def embed(self, model: str, texts: str | list[str]) -> list[list[float]]:
        """``/v1/embeddings``, one vector per text, in the order given."""
        response = self._request("POST", "/v1/embeddings", json={"model": model, "input": texts})
        self._raise_for(response, model=model)
        return _vectors(response)

    def embedding(self, model: str, texts: str | list[str]):
        """The same request as ``embed``, on a connection a cancel cuts (the question of a Stop-able job)."""
        return self._embedding("/v1/embeddings", {"model": model, "input": texts}, _vectors)

    def count_tokens(self, model: str, text: str) -> int | None:
        """llama-server's exact count (``/tokenize``); None where the server has no such endpoint."""
        if self._tokenize is False:
            return None
        response = self._request("POST", "/tokenize", json={"content": text}, timeout=30.0)
        if response.status_code in (404, 405, 501):
            self._tokenize = False
            return None
        self._raise_for(response, model=model)
        self._tokenize = True
        return len(_json(response).get("tokens", []))

    def _build_counter(self, model: str):
        """The server's own ``/tokenize`` as the model's counter (llama-server, llamafile, vLLM;
        ``remote_counter``); ``Unbuildable`` where it has none, and the estimate stays."""
        from .remote_counter import detect
        from .tokens import Unbuildable

        if self._tokenize is False:                 # count_tokens found none: not asked again
            raise Unbuildable(f"{self} has no /tokenize: token counts are estimated")

        def post(path: str, body: dict):
            response = self._request("POST", path, json=body, timeout=60.0)
            if response.status_code in (404, 405, 501):
                self._tokenize = False              # and count_tokens does not ask either
            return response.status_code, _json(response)

        return detect(post, model, str(self))

    # -- chat -------------------------------------------------------------------------

    def chat(self, model: str, messages: list[dict], *, num_ctx: int, num_predict: int | None = None,
             format: dict | str | None = None, temperature: float | None = None) -> ChatStream:
        """A lazy stream of ``/v1/chat/completions`` with usage asked for in the stream.

        ``num_ctx`` is not sent (these servers fix the window at start); the caller has
        budgeted the request against it, prompt plus ``max_tokens`` (see the module docstring).
        """
        body: dict = {"model": model, "messages": messages, "stream": True,
                      "stream_options": {"include_usage": True}}
        if num_predict is not None:
            body["max_tokens"] = int(num_predict)
        if temperature is not None:
            body["temperature"] = temperature
        if format is not None:
            body["response_format"] = _response_format(format)
        if self.is_llama_server():
            body["return_progress"] = True      # prompt_progress events while it reads the prompt (issue 42)
        return OpenAIChatStream(self, body, int(num_ctx))

    def is_llama_server(self) -> bool:
        """Whether ``/props`` answered (llama-server, llamafile), as last asked: no request of its own."""
        with self._probe_lock:
            return bool(self._props and self._props[1])

    def check_window(self, model: str, num_ctx: int) -> None:
        """Refuse a request budgeted for more than the server serves (a configured
        ``context_window`` too large): the server would take the prompt, then run out of room
        while answering, or, with context shift on, drop the prompt's start silently."""
        served = self.window(model)
        if served and num_ctx > served:
            raise ContextExceeded(
                f"The request was budgeted for a window of {num_ctx:,} tokens, but {self} serves {served:,} "
                f"for {model}: set models.{model}.context_window to at most {served} in harvey.yaml (or remove "
                f"it); nothing was sent.")


class OpenAIChatStream(CallStream):
    """One streamed ``/v1/chat/completions`` reply (see ``base.ChatStream`` for the contract)."""

    def __init__(self, server: OpenAIServer, body: dict, num_ctx: int):
        super().__init__(server, body)
        self._num_ctx = num_ctx

    def _read(self) -> Iterator[str]:
        """Check the window, send, then yield each event's text; ``[DONE]`` ends it and sets ``usage``.

        Some servers end the body without ``[DONE]`` (llama.cpp's server before PR #9459,
        ik_llama.cpp, llama-box: all run on a Pi): a body that ends cleanly after a
        ``finish_reason`` or a ``usage`` is a whole reply too. Only a body that ends before
        either is ``BadReply``, a connection cut ``ConnectionDropped`` (both ``StreamBroken``)."""
        self._server.check_window(self._body["model"], self._num_ctx)
        started = time.monotonic()
        first: float | None = None
        try:
            self._open(CHAT)
        except ContextExceeded:
            self._server.forget()       # refused for its window: ask the window again next time
            raise
        tally = _Tally()
        for event in self._events():
            if event is None:                           # data: [DONE]
                self.usage = tally.usage(started, first, time.monotonic())
                return
            progress = event.get("prompt_progress")
            if isinstance(progress, dict) and self.on_progress is not None:
                total, done = _positive(progress.get("total")), progress.get("processed")
                if total and isinstance(done, int):
                    self.on_progress(min(done, total), total)
            piece = tally.add(event)
            if piece:
                first = first or time.monotonic()
                yield piece
        if tally.ended:         # a clean end of the body after finish_reason or usage: the reply's end
            self.usage = tally.usage(started, first, time.monotonic())   # (servers without [DONE])
            return
        raise BadReply(f"The model's reply broke off: {self._server} closed the connection before the end.")

    def _events(self) -> Iterator[dict | None]:
        """The decoded ``data:`` lines (None for ``[DONE]``); an ``error`` event raises."""
        for line in self._lines():
            if not line.startswith("data:"):
                continue                                # comments, event names, ids
            data = line[5:].strip()
            if data == "[DONE]":
                yield None
                return
            try:
                event = json.loads(data)
            except json.JSONDecodeError:
                raise BadReply(f"{self._server.name} sent an event that is not JSON: {data[:80]!r}") from None
            if isinstance(event, dict) and event.get("error"):
                raise _error_from(_detail(event), ModelFailed, server=self._server)   # its answer, not a lost line
            if isinstance(event, dict):
                yield event


class _Tally:
    """What the events of one reply said about its end: the finish reason, usage, timings."""

    def __init__(self) -> None:
        self.finish = ""
        self.counts: dict = {}
        self.timings: dict = {}

    @property
    def ended(self) -> bool:
        """The server said the reply is over (a finish reason, or the usage sent after it)."""
        return bool(self.finish or self.counts)

    def add(self, event: dict) -> str:
        """Take one event's facts in; return its text piece ("" if none)."""
        if isinstance(event.get("usage"), dict):
            self.counts = event["usage"]
        if isinstance(event.get("timings"), dict):
            self.timings = event["timings"]
        piece = ""
        for choice in event.get("choices") or []:
            self.finish = choice.get("finish_reason") or self.finish
            piece += (choice.get("delta") or {}).get("content") or ""
        return piece

    def usage(self, started: float, first: float | None, ended: float) -> Usage:
        """Neutral usage: the server's timings (llama-server) when given, else the client's clock."""
        timings = self.timings
        if timings.get("predicted_ms") is not None:
            prompt_s = (timings.get("prompt_ms") or 0) / 1000
            generate_s = (timings.get("predicted_ms") or 0) / 1000
        else:
            prompt_s = (first or ended) - started
            generate_s = ended - (first or ended)
        return Usage(prompt_tokens=self.counts.get("prompt_tokens", timings.get("prompt_n")),
                     generated_tokens=self.counts.get("completion_tokens", timings.get("predicted_n")),
                     seconds=prompt_s + generate_s, prompt_seconds=prompt_s, generate_seconds=generate_s,
                     stopped_by=self.finish if self.finish in ("stop", "length") else "")


# -- the dialect's answers into neutral words --------------------------------------------------

def _vectors(response: httpx.Response) -> list[list[float]]:
    """``/v1/embeddings``'s vectors in the order of the texts sent."""
    rows = sorted(_json(response).get("data", []), key=lambda row: row.get("index", 0))
    return [row["embedding"] for row in rows]


def _response_format(format: dict | str) -> dict:
    """``format`` (a JSON schema, or "json") as ``response_format``."""
    if isinstance(format, dict):
        return {"type": "json_schema", "json_schema": {"name": "answer", "schema": format, "strict": True}}
    return {"type": "json_object"}


def _slot_context(props: dict) -> int | None:
    """llama-server's window per slot: ``default_generation_settings.n_ctx``, else ``n_ctx``."""
    settings = props.get("default_generation_settings") or {}
    return _positive(settings.get("n_ctx")) or _positive(props.get("n_ctx"))


def _positive(value) -> int | None:
    """A positive whole number, or None (a field missing, zero, or not a number)."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _json(response: httpx.Response) -> dict:
    """The answer's JSON object ({} when it is not one)."""
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _detail(body: dict) -> str:
    """The error's words: ``{"error": {"message", "type"}}`` (OpenAI, llama-server), a plain
    ``{"error": "..."}``, or vLLM's ``{"object": "error", "message", "type"}``."""
    error = body.get("error")
    if isinstance(error, dict):
        return " ".join(str(error.get(k) or "") for k in ("type", "message")).strip()
    if error:
        return str(error)
    return " ".join(str(body.get(k) or "") for k in ("type", "message")).strip()


def _raise_for(response: httpx.Response, model: str | None, server: OpenAIServer) -> None:
    """Turn a non-200 answer into the matching typed error."""
    status = response.status_code
    if status == 200:
        return
    try:
        detail = _detail(_json(response))
    except httpx.ResponseNotRead:
        detail = ""
    if status == 404 and model and "model" in detail.lower():
        raise ModelNotFound(model, f"start {server} with it, or set model_server.model to one it serves")
    raise _error_from(detail or f"HTTP {status}", ServerError, server=server, status=status)


def _error_from(detail: str, default: type, server: OpenAIServer, status: int | None = None):
    """Recognise a refusal by its words: a prompt over the window, a ``response_format`` it cannot do."""
    lowered = detail.lower()
    if status in (400, 413, None) and any(word in lowered for word in CONTEXT_WORDS):
        return ContextExceeded(f"The prompt is longer than the model's window: {detail}")
    if status == 400 and any(word in lowered for word in FORMAT_WORDS):
        return FormatRefused(f"{server} cannot answer in the requested JSON format: {detail}")
    message = (f"{server} answered HTTP {status}: " if status else "The model failed mid-reply: ") + detail
    return ServerError(message, http_status=status) if default is ServerError else default(message)
