"""Ollama's native HTTP API as a ``ModelServer``: the only module that knows Ollama's dialect.

Why native and not the OpenAI-compatible endpoint: only ``/api/chat`` takes
``options.num_ctx`` (the window we budget against) and ``truncate: false`` (so an
over-long prompt fails instead of being silently cut).

Everything Ollama-specific lives here and nowhere else: the endpoints (``/api/chat``,
``/api/show``, ``/api/tags``, ``/api/embed``, ``/api/version``), the field names of its
answers (``prompt_eval_count``, ``eval_count``, the ``*_duration`` nanoseconds,
``done_reason``, ``model_info``) and the words of its error texts, each turned into a
typed error of ``errors.py``.

Cancel before the first byte: Ollama has no stop endpoint; it stops generating only when
the client hangs up. A chat therefore gets a connection of its own (no pooling; its cost is
nothing next to model time), made through a ``_Line``: an httpcore network backend that
keeps the call's socket, so ``cancel()`` from another thread shuts it down while the
reading thread waits for the response headers (a Pi loading a model: minutes), or for the
next line. The plain requests (show, tags, embed, version) share one pooled client.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Iterator

import httpcore
import httpx

from .base import ChatStream, ModelFacts, ModelServer, Usage
from .errors import (ContextExceeded, FormatRefused, ModelNotFound, ServerError, StreamBroken, Timeout,
                     Unreachable)

# Transport failures, as httpx (the pooled client) and httpcore (a chat's own connection) raise them.
CONNECT_FAILED = (httpx.ConnectError, httpcore.ConnectError)
TIMED_OUT = (httpx.TimeoutException, httpcore.TimeoutException)
TRANSPORT_FAILED = (httpx.TransportError, httpcore.NetworkError, httpcore.ProtocolError,
                    httpcore.TimeoutException, httpcore.UnsupportedProtocol, OSError)
LINE = "harvey.line"        # the request extension that carries a chat call's _Line
NS = 1e9


class OllamaServer(ModelServer):
    """Talks to one Ollama server. Thread-safe; share one per app."""

    name = "Ollama"

    def __init__(self, url: str, connect_timeout: float = 3.0, read_timeout: float = 600.0,
                 keep_alive: str | None = "30m"):
        super().__init__(url)
        self.keep_alive = keep_alive
        self._timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self._http = httpx.Client(base_url=self.url, timeout=self._timeout)
        self._chat_http = httpx.Client(base_url=self.url, timeout=self._timeout,
                                       transport=_ConnectionPerCall())

    def close(self) -> None:
        """Close the pooled connections (a chat's own connection closes with its stream)."""
        self._http.close()
        self._chat_http.close()

    # -- plain requests -----------------------------------------------------------

    def _request(self, method: str, path: str, *, timeout: float | None = None, **kwargs) -> httpx.Response:
        """One request on the pooled client, with transport errors named."""
        t = httpx.Timeout(timeout, connect=min(timeout, self._timeout.connect)) if timeout else self._timeout
        try:
            return self._http.request(method, path, timeout=t, **kwargs)
        except CONNECT_FAILED:
            raise self._unreachable() from None
        except TIMED_OUT:
            raise Timeout(f"{self} did not answer in time.") from None
        except TRANSPORT_FAILED as exc:
            raise Unreachable(f"Cannot reach {self}: {exc}") from None

    def _unreachable(self) -> Unreachable:
        return Unreachable(f"{self.name} is not running at {self.url} (connection refused).")

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
        return [m.get("name") or m.get("model") for m in response.json().get("models", [])]

    def _fetch_facts(self, model: str) -> ModelFacts:
        """``/api/show``: a 404 is a model that is not installed (the message says how to get it)."""
        response = self._request("POST", "/api/show", json={"model": model}, timeout=30.0)
        _raise_for(response, model=model)
        return _facts_from_show(model, response.json())

    def embed(self, model: str, texts: str | list[str]) -> list[list[float]]:
        """``/api/embed``, one vector per text (for the embedding indexer to come)."""
        response = self._request("POST", "/api/embed", json={"model": model, "input": texts})
        _raise_for(response, model=model)
        return response.json()["embeddings"]

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
        return OllamaChatStream(self, model, body)

    def _send_chat(self, body: dict, line: "_Line") -> httpx.Response:
        """Send one chat on its own connection; return once the headers are in (status 200)."""
        request = self._chat_http.build_request("POST", "/api/chat", json=body, extensions={LINE: line})
        try:
            response = self._chat_http.send(request, stream=True)
        except CONNECT_FAILED:
            raise self._unreachable() from None
        except TIMED_OUT:
            raise Timeout(f"{self} did not start answering in time.") from None
        except TRANSPORT_FAILED as exc:
            raise StreamBroken(f"The connection to {self} failed: {exc}") from None
        if response.status_code != 200:
            try:
                response.read()
            except TRANSPORT_FAILED:
                pass                # the status alone says enough
            finally:
                response.close()
            _raise_for(response, model=body["model"])
        return response


class OllamaChatStream(ChatStream):
    """One ``/api/chat`` reply, read as NDJSON lines (see ``base.ChatStream`` for the contract)."""

    def __init__(self, server: OllamaServer, model: str, body: dict):
        super().__init__()
        self._server, self._model, self._body = server, model, body
        self._line = _Line()
        self._response: httpx.Response | None = None

    def _read(self) -> Iterator[str]:
        """Send, then yield each line's text; the ``done`` line's counts become ``usage``."""
        self._response = self._server._send_chat(self._body, self._line)
        for obj in self._objects():
            if "error" in obj:
                raise _error_from_text(str(obj["error"]), StreamBroken)
            piece = (obj.get("message") or {}).get("content") or ""
            if piece:
                yield piece
            if obj.get("done"):
                self.usage = _usage(obj)
                return
        raise StreamBroken(f"The model's reply broke off: {self._server} closed the connection before the end.")

    def _objects(self) -> Iterator[dict]:
        """The decoded lines, with transport failures named."""
        try:
            for line in self._response.iter_lines():
                if not line.strip():
                    continue
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    raise StreamBroken(f"{self._server.name} sent a line that is not JSON: {line[:80]!r}") from None
        except TIMED_OUT:
            raise Timeout(f"{self._server.name} stopped sending the reply (timed out waiting).") from None
        except TRANSPORT_FAILED as exc:
            raise StreamBroken(f"The connection to {self._server.name} dropped mid-reply "
                               f"({exc.__class__.__name__}).") from None

    def _interrupt(self) -> None:
        """Shut the call's socket down: the blocked read wakes, and Ollama stops generating."""
        self._line.cut()

    def _release(self) -> None:
        """Close the response (and with it the call's own connection)."""
        if self._response is not None:
            self._response.close()
        self._line.cut()            # nothing connects on this line any more


# -- one connection per chat call, which another thread can cut -----------------------------

class _Line(httpcore.SyncBackend):
    """The network backend of one chat call: it keeps the call's socket so ``cut()`` can shut it
    down from another thread, and refuses to connect once cut (a cancel before the connect)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._cut = False

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        """Connect as httpcore does, then keep the socket; a cancel before this sends nothing."""
        if self._cut:
            raise httpcore.ConnectError("the call was cancelled before it connected")
        stream = super().connect_tcp(host, port, timeout=timeout, local_address=local_address,
                                     socket_options=socket_options)
        return self._track(stream)

    def _track(self, stream: httpcore.NetworkStream) -> "_TrackedStream":
        """Keep the stream's socket for ``cut``; a cut that came during the connect closes it."""
        with self._lock:
            if self._cut:
                stream.close()
                raise httpcore.ConnectError("the call was cancelled while it connected")
            self._sock = stream.get_extra_info("socket")
        return _TrackedStream(stream, self)

    def cut(self) -> None:
        """Shut the socket down (wakes a blocked read at once; the server sees the client go)."""
        with self._lock:
            self._cut = True
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass            # already closed by the server

    def _close(self, stream: httpcore.NetworkStream) -> None:
        """Close under the lock, so a cut never shuts down a descriptor number reused meanwhile."""
        with self._lock:
            self._sock = None
            stream.close()


class _TrackedStream(httpcore.NetworkStream):
    """A network stream whose close (and TLS upgrade) the line knows about."""

    def __init__(self, inner: httpcore.NetworkStream, line: _Line):
        self._inner, self._line = inner, line

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """As the inner stream (a cut shows up here as an error or an empty read)."""
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """As the inner stream."""
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        """Through the line, so a concurrent cut never touches a closed socket."""
        self._line._close(self._inner)

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> httpcore.NetworkStream:
        """An https URL: the line must cut the TLS socket from now on, not the plain one."""
        return self._line._track(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str):
        """As the inner stream (httpcore asks for the socket, whether it is readable, ...)."""
        return self._inner.get_extra_info(info)


class _ConnectionPerCall(httpx.BaseTransport):
    """An httpx transport that sends each request on a new connection through the request's
    ``_Line`` (``extensions[LINE]``), closed with the response."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send on a fresh connection (a pool of one, never reused) through the request's line."""
        pool = httpcore.ConnectionPool(network_backend=request.extensions[LINE], max_keepalive_connections=0)
        url = request.url
        core = httpcore.Request(request.method,
                                httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port,
                                             target=url.raw_path),
                                headers=request.headers.raw, content=request.stream,
                                extensions=request.extensions)
        try:
            answer = pool.handle_request(core)
        except BaseException:
            pool.close()
            raise
        return httpx.Response(answer.status, headers=answer.headers, stream=_Body(answer, pool),
                              extensions=answer.extensions)


class _Body(httpx.SyncByteStream):
    """The response body; closing it closes the call's connection."""

    def __init__(self, answer: httpcore.Response, pool: httpcore.ConnectionPool):
        self._answer, self._pool = answer, pool

    def __iter__(self) -> Iterator[bytes]:
        """The body's bytes as they arrive."""
        yield from self._answer.stream

    def close(self) -> None:
        """Close the answer, then the connection: one connection per call, never pooled."""
        try:
            self._answer.close()
        finally:
            self._pool.close()


# -- Ollama's answers into neutral words --------------------------------------------------

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
                      architecture=arch, context_length=int(length) if length else None)


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
