"""Issue 34: the model server's errors say whose fault it was, through one mapping.

Every exception httpx and httpcore export is classified here, so a new one in a later release
fails this test until someone says which side it is on: the transport failed (``TransportFailed``:
nothing, or nothing more, came over the wire) or the server answered (``ServerAnswered``). Then two
real replies over loopback: a cut chunked body is the transport's, a 200 body that is not JSON the
server's; and ``kind``, ``transient`` and ``status`` are what they were before the split.
"""

from __future__ import annotations

import inspect
import socket
import threading

import httpcore
import httpx
import pytest

from app.errors import ModelError
from app.modelserver import errors
from app.modelserver.ollama import OllamaServer
from app.modelserver.transport import READING, REQUEST, SENDING, map_transport_errors, transport_error

# The server answered, in a way httpx raises for (we never ask httpx to raise for a status, nor follow
# redirects, but a mapping that meets them must not call the server lost).
ANSWERED = {httpx.DecodingError, httpx.HTTPStatusError, httpx.TooManyRedirects}
# A misuse of the client or a bad URL in the config: a bug or a setup error, never mapped (re-raised as is).
NOT_MAPPED = {httpx.HTTPError, httpx.RequestError, httpx.CookieConflict, httpx.InvalidURL, httpx.StreamError,
              httpx.StreamConsumed, httpx.StreamClosed, httpx.ResponseNotRead, httpx.RequestNotRead,
              httpcore.ConnectionNotAvailable}


def exported(module) -> set[type]:
    return {c for c in vars(module).values() if inspect.isclass(c) and issubclass(c, BaseException)}


def transport_classes() -> list[type]:
    return sorted((exported(httpx) | exported(httpcore)) - ANSWERED - NOT_MAPPED,
                  key=lambda c: f"{c.__module__}.{c.__name__}")


def instance(cls: type) -> BaseException:
    request = httpx.Request("POST", "http://127.0.0.1:9/api/chat")
    if cls is httpx.HTTPStatusError:
        return cls("503", request=request, response=httpx.Response(503, request=request))
    if cls in (httpx.StreamConsumed, httpx.StreamClosed, httpx.ResponseNotRead, httpx.RequestNotRead):
        return cls()
    return cls("boom")


@pytest.fixture
def server():
    s = OllamaServer("http://127.0.0.1:9", connect_timeout=0.5)
    yield s
    s.close()


def test_every_exported_exception_is_classified():
    """The three sets together are every exception httpx and httpcore export (the scan sees them)."""
    every = exported(httpx) | exported(httpcore)
    assert httpx.ReadError in every and httpcore.RemoteProtocolError in every
    assert set(transport_classes()) | ANSWERED | NOT_MAPPED == every
    assert httpx.TransportError in transport_classes() and httpcore.ConnectError in transport_classes()


@pytest.mark.parametrize("cls", transport_classes(), ids=lambda c: f"{c.__module__.split('.')[0]}.{c.__name__}")
@pytest.mark.parametrize("stage", [REQUEST, SENDING, READING], ids=["request", "sending", "reading"])
def test_a_transport_failure_maps_to_the_transport_side(server, cls, stage):
    mapped = transport_error(instance(cls), server, stage)
    assert isinstance(mapped, errors.TransportFailed) and not isinstance(mapped, errors.ServerAnswered)
    assert mapped.transient and mapped.status == 502 and str(mapped)
    if issubclass(cls, (httpx.ConnectError, httpcore.ConnectError)):
        assert type(mapped) is errors.Unreachable and "not running at http://127.0.0.1:9" in str(mapped)
    elif issubclass(cls, (httpx.TimeoutException, httpcore.TimeoutException)):
        assert type(mapped) is errors.Timeout and mapped.kind == "timeout"
    else:           # before anything was sent: nothing there; after: the connection dropped mid-call
        assert type(mapped) is (errors.Unreachable if stage is REQUEST else errors.ConnectionDropped)


@pytest.mark.parametrize("cls", sorted(ANSWERED, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_an_answer_httpx_raises_for_maps_to_the_server_side(server, cls):
    mapped = transport_error(instance(cls), server, READING)
    assert isinstance(mapped, errors.ServerAnswered) and not isinstance(mapped, errors.TransportFailed)
    if cls is httpx.HTTPStatusError:
        assert isinstance(mapped, errors.ServerError) and mapped.http_status == 503 and mapped.transient


@pytest.mark.parametrize("cls", sorted(NOT_MAPPED, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_a_misuse_is_not_mapped_but_raised_as_it_is(server, cls):
    exc = instance(cls)
    assert transport_error(exc, server, READING) is None
    with pytest.raises(cls):
        with map_transport_errors(server, READING):
            raise exc


def test_the_context_manager_raises_ours_without_the_chain(server):
    with pytest.raises(errors.ConnectionDropped) as info:
        with map_transport_errors(server, READING):
            raise httpcore.RemoteProtocolError("peer closed connection without sending complete message body")
    assert info.value.__suppress_context__ and "dropped mid-reply (RemoteProtocolError)" in str(info.value)


@pytest.mark.parametrize("cls, kind, transient", [
    (errors.Unreachable, "unreachable", True), (errors.Timeout, "timeout", True),
    (errors.ConnectionDropped, "stream_error", True), (errors.BadReply, "stream_error", True),
    (errors.ContextExceeded, "context_exceeded", False), (errors.FormatRefused, "format_refused", False),
    (errors.ModelFailed, "model_failed", False), (errors.Cancelled, "cancelled", False),
])
def test_kind_transient_and_status_are_as_before_the_split(cls, kind, transient):
    exc = cls("why")
    assert exc.kind == kind and exc.transient is transient and exc.status == 502 and isinstance(exc, ModelError)
    assert isinstance(exc, errors.StreamBroken) is (kind == "stream_error")     # the old name catches both
    assert not isinstance(errors.Cancelled("x"), (errors.TransportFailed, errors.ServerAnswered))


def one_answer(body: bytes) -> tuple[int, threading.Thread]:
    """A loopback server that answers one request with ``body`` (raw HTTP), then hangs up."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        with listener:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                conn.sendall(body)
                conn.shutdown(socket.SHUT_RDWR)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def test_a_chunked_body_cut_mid_reply_is_the_transports_fault():
    line = b'{"message": {"content": "half"}, "done": false}\n'
    port, thread = one_answer(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked"
                              b"\r\n\r\n" + f"{len(line):x}\r\n".encode() + line + b"\r\n")
    server = OllamaServer(f"http://127.0.0.1:{port}", connect_timeout=2, read_timeout=5)
    got = []
    with pytest.raises(errors.ConnectionDropped) as info:
        for piece in server.chat("m", [{"role": "user", "content": "hi"}], num_ctx=512):
            got.append(piece)
    thread.join(5)
    server.close()
    assert got == ["half"] and isinstance(info.value, errors.TransportFailed) and info.value.transient


def test_a_body_that_is_not_json_is_the_servers_answer():
    body = b"this is not json\n"
    port, thread = one_answer(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nContent-Length: "
                              + str(len(body)).encode() + b"\r\n\r\n" + body)
    server = OllamaServer(f"http://127.0.0.1:{port}", connect_timeout=2, read_timeout=5)
    with pytest.raises(errors.BadReply) as info:
        list(server.chat("m", [{"role": "user", "content": "hi"}], num_ctx=512))
    thread.join(5)
    server.close()
    assert isinstance(info.value, errors.ServerAnswered) and isinstance(info.value, errors.StreamBroken)
    assert "not JSON" in str(info.value)


def test_a_request_after_the_client_closed_is_unreachable_not_a_crash(scripted):
    """Services.close() closes the model client while waitress may still serve a request (a page
    being drawn at SIGTERM): that request gets the server "out of reach", which pages show as such,
    not httpx's RuntimeError (a 500)."""
    from app.modelserver import Unreachable

    server = OllamaServer(scripted.url)
    assert server.models()
    server.close()
    with pytest.raises(Unreachable, match="shutting down"):
        server._request("GET", "/api/tags")
