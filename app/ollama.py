"""A small client for Ollama's native HTTP API, on httpx.

Why native and not the OpenAI-compatible endpoint: only ``/api/chat`` takes
``options.num_ctx`` (the window we budget against) and ``truncate: false``
(so an over-long prompt fails instead of being silently cut).

Errors are named types, each with a message a person understands::

    OllamaError
    ├── OllamaUnreachable    nothing answers at the URL
    ├── OllamaTimeout        connected, but no byte arrived in time
    ├── ModelNotFound        404 for the model (message says `ollama pull NAME`)
    ├── ContextExceeded      the server refused the prompt as too long
    ├── StreamError          an {"error"} line or a dropped connection mid-reply
    └── OllamaHTTPError      any other non-200 answer
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

import httpx

from .errors import ModelError


MODELS_MAX_AGE_S = 5.0


class OllamaError(ModelError):
    """Base class: something went wrong talking to Ollama."""

    kind = "error"


class OllamaUnreachable(OllamaError):
    """Nothing answers at the configured URL (Ollama not running?)."""

    kind = "unreachable"
    transient = True


class OllamaTimeout(OllamaError):
    """Ollama accepted the request but did not answer in time."""

    kind = "timeout"
    transient = True


class ModelNotFound(OllamaError):
    """The model is not installed on that Ollama."""

    kind = "model_not_found"
    status = 404

    def __init__(self, model: str, detail: str = ""):
        self.model = model
        super().__init__(f"The model '{model}' is not installed. Install it with: ollama pull {model}")


class ContextExceeded(OllamaError):
    """The server refused a prompt longer than num_ctx (truncate: false)."""

    kind = "context_exceeded"


class StreamError(OllamaError):
    """The reply broke off: an error line or a dropped connection mid-stream."""

    kind = "stream_error"
    transient = True


class OllamaHTTPError(OllamaError):
    """Any other non-200 answer."""

    kind = "http_error"


@dataclass(frozen=True)
class ModelFacts:
    """What /api/show tells about a model, reduced to what the app uses."""

    name: str
    family: str = ""
    parameter_size: str = ""
    architecture: str = ""
    context_length: int | None = None


@dataclass
class ChatFinal:
    """The counts of the final ``done: true`` object (durations in ns)."""

    prompt_eval_count: int | None = None
    eval_count: int | None = None
    total_duration: int | None = None
    prompt_eval_duration: int | None = None
    eval_duration: int | None = None
    done_reason: str | None = None

    @classmethod
    def from_json(cls, obj: dict) -> "ChatFinal":
        return cls(**{k: obj.get(k) for k in cls.__dataclass_fields__})

    @property
    def seconds(self) -> float:
        return (self.total_duration or 0) / 1e9

    @property
    def tokens_per_second(self) -> float:
        if not self.eval_count or not self.eval_duration:
            return 0.0
        return self.eval_count / (self.eval_duration / 1e9)


@dataclass
class ChatStream:
    """One streaming chat reply: iterate for text pieces; ``final`` at the end.

    ``cancel()`` may be called from any thread: it shuts the socket down, which
    wakes the reading thread at once and tells Ollama to stop generating.
    """

    _response: httpx.Response
    final: ChatFinal | None = None
    cancelled: bool = False
    text: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __iter__(self) -> Iterator[str]:
        try:
            for line in self._lines():
                piece = self._handle(line)
                if piece:
                    self.text.append(piece)
                    yield piece
                if self.final is not None:
                    return
            if not self.cancelled:
                raise StreamError("The model's reply broke off: the connection closed before the end.")
        finally:
            self._response.close()

    def _lines(self) -> Iterator[str]:
        """NDJSON lines, with transport errors named (or silenced after cancel)."""
        try:
            for line in self._response.iter_lines():
                if self.cancelled:
                    return
                if line.strip():
                    yield line
        except httpx.ReadTimeout:
            if not self.cancelled:
                raise OllamaTimeout("Ollama stopped sending the reply (timed out waiting).") from None
        except (httpx.TransportError, OSError) as exc:
            if not self.cancelled:
                raise StreamError(f"The connection to Ollama dropped mid-reply ({exc.__class__.__name__}).") from None

    def _handle(self, line: str) -> str:
        """Decode one line; raise on an error line; keep the final counts."""
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise StreamError(f"Ollama sent a line that is not JSON: {line[:80]!r}") from None
        if "error" in obj:
            raise _error_from_text(str(obj["error"]), StreamError)
        piece = (obj.get("message") or {}).get("content") or ""
        if obj.get("done"):
            self.final = ChatFinal.from_json(obj)
        return piece

    def cancel(self) -> None:
        """Stop the reply now: close the connection (Ollama has no stop endpoint)."""
        with self._lock:
            if self.cancelled:
                return
            self.cancelled = True
        stream = self._response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class OllamaClient:
    """Talks to one Ollama server. Thread-safe; share one per app."""

    def __init__(self, url: str, connect_timeout: float = 3.0, read_timeout: float = 600.0,
                 keep_alive: str | None = "30m"):
        self.url = url.rstrip("/")
        self.keep_alive = keep_alive
        self._timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self._http = httpx.Client(base_url=self.url, timeout=self._timeout)
        self._facts: dict[str, ModelFacts] = {}
        self._models: tuple[float, list[str]] | None = None
        self._facts_lock = threading.Lock()

    def close(self) -> None:
        self._http.close()

    # -- plain requests ---------------------------------------------------

    def _request(self, method: str, path: str, *, timeout: float | None = None, **kwargs) -> httpx.Response:
        """One request with transport errors turned into named ones."""
        t = httpx.Timeout(timeout, connect=min(timeout, self._timeout.connect)) if timeout else self._timeout
        try:
            response = self._http.request(method, path, timeout=t, **kwargs)
        except httpx.ConnectError:
            raise OllamaUnreachable(f"Ollama is not running at {self.url} (connection refused).") from None
        except httpx.TimeoutException:
            raise OllamaTimeout(f"Ollama at {self.url} did not answer in time.") from None
        except httpx.TransportError as exc:
            raise OllamaUnreachable(f"Cannot reach Ollama at {self.url}: {exc}") from None
        return response

    def is_up(self, timeout: float = 2.0) -> bool:
        """Whether something Ollama-like answers at ``/`` right now."""
        try:
            return self._request("GET", "/", timeout=timeout).status_code == 200
        except OllamaError:
            return False

    def version(self) -> str:
        response = self._request("GET", "/api/version", timeout=5.0)
        _raise_for(response)
        return response.json().get("version", "")

    def list_models(self, max_age: float = MODELS_MAX_AGE_S) -> list[str]:
        """Names of the installed models, as `/api/tags` gives them.

        A page asks two or three times; one answer serves for a few seconds.
        Failures are never kept, so a server coming up is seen at once.
        """
        cached = self._models
        if cached and time.monotonic() - cached[0] < max_age:
            return list(cached[1])
        response = self._request("GET", "/api/tags", timeout=10.0)
        _raise_for(response)
        names = [m.get("name") or m.get("model") for m in response.json().get("models", [])]
        self._models = (time.monotonic(), names)
        return list(names)

    def show(self, model: str) -> ModelFacts:
        """Facts about a model from `/api/show`, cached per model name."""
        with self._facts_lock:
            if model in self._facts:
                return self._facts[model]
        response = self._request("POST", "/api/show", json={"model": model}, timeout=30.0)
        _raise_for(response, model=model)
        facts = _facts_from_show(model, response.json())
        with self._facts_lock:
            self._facts[model] = facts
        return facts

    def embed(self, model: str, texts: str | list[str]) -> list[list[float]]:
        """Embeddings of one text or several (`/api/embed`)."""
        response = self._request("POST", "/api/embed", json={"model": model, "input": texts})
        _raise_for(response, model=model)
        return response.json()["embeddings"]

    # -- chat ---------------------------------------------------------------

    def chat(self, model: str, messages: list[dict], *, num_ctx: int,
             options: dict | None = None, format: dict | str | None = None) -> ChatStream:
        """Start a streaming chat; returns once Ollama has accepted it.

        ``num_ctx`` is required: without it Ollama silently works in its own
        default window (4096 on a CPU), whatever the app budgets against.
        ``format`` (a JSON schema, or "json") asks Ollama for structured output;
        an older server refuses it with an error that names the format.
        """
        body = {
            "model": model,
            "messages": messages,
            "stream": True,
            "truncate": False,
            "options": {**(options or {}), "num_ctx": int(num_ctx)},
        }
        if format is not None:
            body["format"] = format
        if self.keep_alive:
            body["keep_alive"] = self.keep_alive
        request = self._http.build_request("POST", "/api/chat", json=body)
        try:
            response = self._http.send(request, stream=True)
        except httpx.ConnectError:
            raise OllamaUnreachable(f"Ollama is not running at {self.url} (connection refused).") from None
        except httpx.TimeoutException:
            raise OllamaTimeout(f"Ollama at {self.url} did not start answering in time.") from None
        except httpx.TransportError as exc:
            raise StreamError(f"The connection to Ollama failed: {exc}") from None
        if response.status_code != 200:
            try:
                response.read()
            finally:
                response.close()
            _raise_for(response, model=model)
        return ChatStream(response)

    def chat_text(self, model: str, messages: list[dict], *, num_ctx: int,
                  options: dict | None = None, format: dict | str | None = None) -> tuple[str, ChatFinal | None]:
        """A whole chat reply as one string (for map and synthesis calls)."""
        stream = self.chat(model, messages, num_ctx=num_ctx, options=options, format=format)
        text = "".join(stream)
        return text, stream.final


def _facts_from_show(model: str, data: dict) -> ModelFacts:
    """Pull family, size and the trained context length out of `/api/show`."""
    info = data.get("model_info") or {}
    details = data.get("details") or {}
    arch = info.get("general.architecture", "")
    length = info.get(f"{arch}.context_length") if arch else None
    if length is None:  # some servers only fill one "*.context_length" key
        length = next((v for k, v in info.items() if k.endswith(".context_length")), None)
    return ModelFacts(
        name=model,
        family=details.get("family", ""),
        parameter_size=details.get("parameter_size", ""),
        architecture=arch,
        context_length=int(length) if length else None,
    )


def _raise_for(response: httpx.Response, model: str | None = None) -> None:
    """Turn a non-200 answer into the matching named error."""
    if response.status_code == 200:
        return
    try:
        detail = str(response.json().get("error", ""))
    except (ValueError, AttributeError):
        detail = response.text[:200]
    if response.status_code == 404 and model:
        raise ModelNotFound(model, detail)
    raise _error_from_text(detail or f"HTTP {response.status_code}", OllamaHTTPError,
                           status=response.status_code)


def _error_from_text(detail: str, default: type[OllamaError], status: int | None = None) -> OllamaError:
    """Recognise a context-length refusal by its words; otherwise ``default``."""
    lowered = detail.lower()
    if "context" in lowered and ("exceed" in lowered or "too long" in lowered or "length" in lowered):
        return ContextExceeded(f"The prompt is longer than the model's window: {detail}")
    if "not found" in lowered and "model" in lowered:
        return default(f"Ollama says: {detail}")
    prefix = f"Ollama answered HTTP {status}: " if status else "The model failed mid-reply: "
    return default(prefix + detail)


def wait_until_up(client: OllamaClient, timeout: float = 30.0) -> bool:
    """Wait for a server that is starting (used by `harvey serve --demo`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.is_up(timeout=1.0):
            return True
        time.sleep(0.2)
    return False
