"""What every model server spoken to over HTTP shares: two clients, named transport errors,
and a connection per chat call that another thread can cut (the cancel contract of ``base``).

Why a connection per call: no server of ours has a stop endpoint (Ollama, llama-server and
vLLM all stop generating only when the client hangs up), so a chat gets a connection of its
own (no pooling; its cost is nothing next to model time), made through a ``Line``: an httpcore
network backend that keeps the call's socket, so ``cancel()`` from another thread shuts it down
while the reading thread waits for the response headers (a Pi loading a model: minutes), or for
the next line. The plain requests (model lists, facts, embeddings, versions) share one pooled
client. The dialects (endpoints, field names, error texts) stay in ``ollama`` and ``openai``.

Transport exceptions become ours in one place, ``map_transport_errors`` (as httpx's own
``map_exceptions`` turns httpcore's into httpx's): a request, the send of a call, the read of an
embedding and of a reply's lines each name their ``Stage`` (what the user is told), never a ladder
of their own.
"""

from __future__ import annotations

import socket
import threading
from abc import abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import httpcore
import httpx

from ..errors import ModelError
from .base import ChatStream, Embedding, ModelServer
from .errors import BadReply, ConnectionDropped, ServerError, Timeout, TransportFailed, Unreachable

# Transport failures, as httpx (the pooled client) and httpcore (a chat's own connection, whose
# transport is ours and maps nothing) raise them; mapped by ``transport_error`` (and ignored while
# reading a non-200 answer's body: its status says enough).
CONNECT_FAILED = (httpx.ConnectError, httpcore.ConnectError)
TIMED_OUT = (httpx.TimeoutException, httpcore.TimeoutException)
TRANSPORT_FAILED = (httpx.TransportError, httpcore.NetworkError, httpcore.ProtocolError,
                    httpcore.TimeoutException, httpcore.UnsupportedProtocol, httpcore.ProxyError, OSError)
LINE = "harvey.line"        # the request extension that carries a chat call's Line


@dataclass(frozen=True)
class Stage:
    """Where in a call a transport failure came: what the user is told, and what it means.
    ``{server}`` is "Ollama at URL", ``{name}`` the server's name, ``{exc}`` the failure and
    ``{cls}`` its class."""

    timed_out: str                          # a timeout's message
    failed: str                             # any other transport failure's message (not a refused connect)
    lost: type[TransportFailed]             # what that failure is: Unreachable before anything was sent
    forget: bool                            # the server may come back restarted: drop what is cached of it


REQUEST = Stage("{server} did not answer in time.", "Cannot reach {server}: {exc}", Unreachable, True)
SENDING = Stage("{server} did not start answering in time.", "The connection to {server} failed: {exc}",
                ConnectionDropped, True)
EMBEDDING = Stage("{server} did not finish the embedding in time.",
                  "The connection to {server} dropped during the embedding: {exc}", ConnectionDropped, False)
READING = Stage("{name} stopped sending the reply (timed out waiting).",
                "The connection to {name} dropped mid-reply ({cls}).", ConnectionDropped, False)


def transport_error(exc: BaseException, server: "HttpServer", stage: Stage) -> ModelError | None:
    """The one mapping of httpx's and httpcore's exceptions to ours (None: not one to map, such as a
    misuse of the client, which stays the bug it is). The transport failed (``TransportFailed``):
    a refused connect, a timeout, a cut; or the server answered (``ServerAnswered``): a body httpx
    cannot decode, a status httpx raised for."""
    words = {"server": server, "name": server.name, "exc": exc, "cls": exc.__class__.__name__}
    if isinstance(exc, CONNECT_FAILED):
        server.forget()                     # it may come back restarted, with another window
        return server.unreachable()
    if isinstance(exc, TIMED_OUT):
        return Timeout(stage.timed_out.format(**words))
    if isinstance(exc, TRANSPORT_FAILED):
        if stage.forget:
            server.forget()
        return stage.lost(stage.failed.format(**words))
    if isinstance(exc, httpx.DecodingError):
        return BadReply(f"{server.name} sent a body that cannot be decoded: {exc}")
    if isinstance(exc, httpx.HTTPStatusError):
        return ServerError(f"{server.name} answered HTTP {exc.response.status_code}.",
                           http_status=exc.response.status_code)
    if isinstance(exc, httpx.TooManyRedirects):
        return ServerError(f"{server.name} answered with redirects: {exc}")
    return None


@contextmanager
def map_transport_errors(server: "HttpServer", stage: Stage) -> Iterator[None]:
    """``with map_transport_errors(server, READING):`` the transport's exceptions raised inside come
    out as ours (``transport_error``), as httpx's own ``map_exceptions`` does for httpcore's."""
    try:
        yield
    except Exception as exc:
        mapped = transport_error(exc, server, stage)
        if getattr(server, "closed", False) and (isinstance(mapped, TransportFailed)
                                                  or (mapped is None and isinstance(exc, RuntimeError))):
            # a request still under way while the app shuts down (``Services.close`` closed the
            # client under it: a RuntimeError, or a socket gone, EBADF): said as that, not as the
            # server being away or a server error page
            mapped = Unreachable(f"{server.name} is not asked any more: the app is shutting down.")
        if mapped is None:
            raise
        raise mapped from None


class HttpServer(ModelServer):
    """A model server over HTTP: a pooled client for plain requests, a cuttable connection per chat.

    An implementation names its errors in ``_raise_for`` (a non-200 answer into a typed error).
    """

    def __init__(self, url: str, connect_timeout: float, read_timeout: float):
        super().__init__(url)
        self._timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self._http = httpx.Client(base_url=self.url, timeout=self._timeout)
        self._chat_http = httpx.Client(base_url=self.url, timeout=self._timeout, transport=ConnectionPerCall())
        self.closed = False

    def close(self) -> None:
        """Close the pooled connections (a chat's own connection closes with its stream); a request
        made after this is ``Unreachable`` (``map_transport_errors``)."""
        self.closed = True
        self.token_counters.close()
        self._http.close()
        self._chat_http.close()

    @abstractmethod
    def _raise_for(self, response: httpx.Response, model: str | None = None) -> None:
        """Turn a non-200 answer into the matching typed error (the server's own words)."""

    def _request(self, method: str, path: str, *, timeout: float | None = None, **kwargs) -> httpx.Response:
        """One request on the pooled client, with transport errors named."""
        t = httpx.Timeout(timeout, connect=min(timeout, self._timeout.connect)) if timeout else self._timeout
        with map_transport_errors(self, REQUEST):
            return self._http.request(method, path, timeout=t, **kwargs)

    def unreachable(self) -> Unreachable:
        """The message a refused connection gets: what is not running, and where."""
        return Unreachable(f"{self.name} is not running at {self.url} (connection refused).")

    def send_call(self, path: str, body: dict, line: "Line") -> httpx.Response:
        """Send one call (a chat, an embedding) on its own connection through ``line``; return once
        the headers are in (status 200; any other has raised its typed error)."""
        request = self._chat_http.build_request("POST", path, json=body, extensions={LINE: line})
        with map_transport_errors(self, SENDING):
            response = self._chat_http.send(request, stream=True)
        if response.status_code != 200:
            try:
                response.read()
            except TRANSPORT_FAILED:
                pass                # the status alone says enough
            finally:
                response.close()
            self._raise_for(response, model=body.get("model"))
        return response

    def _embedding(self, path: str, body: dict, parse) -> Embedding:
        """An embedding request on a connection of its own, which ``cancel()`` cuts (as a chat's)."""
        return LineEmbedding(self, path, body, parse)


class LineEmbedding(Embedding):
    """An embedding call on its own ``Line``: a cancel shuts its socket, and the waiting read ends."""

    def __init__(self, server: HttpServer, path: str, body: dict, parse) -> None:
        self._line = Line()
        super().__init__(lambda: self._post(server, path, body, parse))

    def _post(self, server: HttpServer, path: str, body: dict, parse) -> list[list[float]]:
        response = server.send_call(path, body, self._line)
        try:
            with map_transport_errors(server, EMBEDDING):
                response.read()
        finally:
            response.close()
            self._line.cut()
        return parse(response)

    def _interrupt(self) -> None:
        self._line.cut()


class CallStream(ChatStream):
    """A chat reply read from its own connection: cancel cuts the line (see ``base.ChatStream``).

    An implementation's ``_read`` calls ``_open(path)`` and decodes ``_lines()``.
    """

    def __init__(self, server: HttpServer, body: dict):
        super().__init__()
        self._server, self._body = server, body
        self._line = Line()
        self._response: httpx.Response | None = None

    def _open(self, path: str) -> None:
        """Send the request; the headers are in when this returns (a non-200 has raised)."""
        self._response = self._server.send_call(path, self._body, self._line)

    def _lines(self) -> Iterator[str]:
        """The body's non-empty lines as they arrive, with transport failures named."""
        with map_transport_errors(self._server, READING):
            for line in self._response.iter_lines():
                if line.strip():
                    yield line

    def _interrupt(self) -> None:
        """Shut the call's socket down: the blocked read wakes, and the server stops generating."""
        self._line.cut()

    def _release(self) -> None:
        """Close the response (and with it the call's own connection)."""
        if self._response is not None:
            self._response.close()
        self._line.cut()            # nothing connects on this line any more


# -- one connection per chat call, which another thread can cut -----------------------------

class Line(httpcore.SyncBackend):
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
        return self.track(stream)

    def track(self, stream: httpcore.NetworkStream) -> "TrackedStream":
        """Keep the stream's socket for ``cut``; a cut that came during the connect closes it."""
        with self._lock:
            if self._cut:
                stream.close()
                raise httpcore.ConnectError("the call was cancelled while it connected")
            self._sock = stream.get_extra_info("socket")
        return TrackedStream(stream, self)

    def cut(self) -> None:
        """Shut the socket down (wakes a blocked read at once; the server sees the client go)."""
        with self._lock:
            self._cut = True
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass            # already closed by the server

    def close_stream(self, stream: httpcore.NetworkStream) -> None:
        """Close under the lock, so a cut never shuts down a descriptor number reused meanwhile."""
        with self._lock:
            self._sock = None
            stream.close()


class TrackedStream(httpcore.NetworkStream):
    """A network stream whose close (and TLS upgrade) the line knows about."""

    def __init__(self, inner: httpcore.NetworkStream, line: Line):
        self._inner, self._line = inner, line

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """As the inner stream (a cut shows up here as an error or an empty read)."""
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """As the inner stream."""
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        """Through the line, so a concurrent cut never touches a closed socket."""
        self._line.close_stream(self._inner)

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> httpcore.NetworkStream:
        """An https URL: the line must cut the TLS socket from now on, not the plain one."""
        return self._line.track(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str):
        """As the inner stream (httpcore asks for the socket, whether it is readable, ...)."""
        return self._inner.get_extra_info(info)


class ConnectionPerCall(httpx.BaseTransport):
    """An httpx transport that sends each request on a new connection through the request's
    ``Line`` (``extensions[LINE]``), closed with the response."""

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
        return httpx.Response(answer.status, headers=answer.headers, stream=Body(answer, pool),
                              extensions=answer.extensions)


class Body(httpx.SyncByteStream):
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
