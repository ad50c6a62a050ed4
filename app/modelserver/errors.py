"""What can go wrong talking to a model server, as typed errors (app.errors.ModelError, 502).

Every implementation of ``ModelServer`` raises these and nothing else, so the views, the
reply thread and the analysis worker decide by type (and by ``kind``, the error card's key,
and ``transient``, "trying again later can help") and never by a server's error text.

Two sides, as httpx keeps ``TransportError`` apart from ``HTTPStatusError`` and ``DecodingError``:
the transport failed (nothing, or nothing more, came over the wire: the server may be away), or
the server answered (it is there, and its answer decides). ``transport.map_transport_errors`` is the
one place where a transport exception becomes one of ours::

    ModelError (app.errors)
    ├── TransportFailed        no answer came over the wire                     transient
    │   ├── Unreachable        nothing answers at the URL                         transient
    │   ├── Timeout            connected, but no byte arrived in time             transient
    │   └── ConnectionDropped  the connection dropped mid-reply (StreamBroken)    transient
    ├── ServerAnswered         the server is there and said no
    │   ├── ModelNotFound      404 for the model; the message says how to install it
    │   ├── ContextExceeded    the server refused the prompt as longer than the window
    │   ├── FormatRefused      the server refused the JSON schema (``format``) of the request
    │   ├── BadReply           a body that is not the reply's format, or ended before its end
    │   │                      (StreamBroken)                                     transient
    │   └── ServerError        any other non-200 answer (``.http_status``)        transient for 429/502/503/504
    │       └── ModelFailed    the server's own error inside a reply stream (its runner failed on this input)
    └── Cancelled              the call was stopped by ``ChatStream.cancel()``

``StreamBroken`` ("the reply broke off", kind ``stream_error``) is the common base of the two ways a
reply ends early, ``ConnectionDropped`` and ``BadReply``: a server that closes a close-delimited body
looks like either, so a caller that only cares that the reply broke off catches ``StreamBroken``.
"""

from __future__ import annotations

from ..errors import ModelError

# Answers that say "busy, away or restarting, ask again": worth a pause and a retry. Not 500, nor
# an error inside the stream (``ModelFailed``): Ollama answers so when the model runner crashed on
# this request (out of memory on a Pi, say), which the same request tends to repeat. They are the
# server's own answer: the analysis worker sends the chunk once more (one pause, then one retry),
# then records the chunk as failed (its lines named unread) and goes on, instead of pausing the
# whole job as if the server were away (``app.analysis.execute.answered``).
TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})


class TransportFailed(ModelError):
    """The transport failed: no answer (or no more of it) came over the wire, so the server may be
    away; worth waiting for and asking again."""

    transient = True


class ServerAnswered(ModelError):
    """The server is there and answered: its answer (a refusal, an error, a malformed body) decides."""


class Unreachable(TransportFailed):
    """Nothing answers at the configured URL (the server is not running, or the URL is wrong)."""

    kind = "unreachable"
    transient = True


class Timeout(TransportFailed):
    """The server accepted the request but did not answer in time."""

    kind = "timeout"
    transient = True


class ModelNotFound(ServerAnswered):
    """The model is not installed on that server; the message says how to install it."""

    kind = "model_not_found"
    status = 404

    def __init__(self, model: str, install_hint: str = ""):
        self.model = model
        hint = install_hint or f"ollama pull {model}"
        super().__init__(f"The model '{model}' is not installed. Install it with: {hint}")


class ContextExceeded(ServerAnswered):
    """The prompt is longer than the window sent with it; nothing was cut, nothing answered."""

    kind = "context_exceeded"


class FormatRefused(ServerAnswered):
    """The server cannot do structured output (an Ollama older than 0.5): ask for free text instead."""

    kind = "format_refused"


class StreamBroken(ModelError):
    """The reply broke off: the connection dropped mid-reply (``ConnectionDropped``), or the body was
    not the reply's format or ended without the reply's end (``BadReply``). Raise one of those two."""

    kind = "stream_error"
    transient = True


class ConnectionDropped(StreamBroken, TransportFailed):
    """The connection dropped (reset, cut, a broken chunked body) once the request was sent: the
    server is lost, maybe restarting."""


class BadReply(StreamBroken, ServerAnswered):
    """The server answered 200, but the body is not what a reply is (a line that is not JSON) or
    ended cleanly before the reply's end (no ``done``, no ``[DONE]`` nor finish reason)."""


class ServerError(ServerAnswered):
    """Any other non-200 answer (transient for 429, 502, 503 and 504).

    The server's status is ``http_status``: ``status`` is what a view answers with (502, as for
    every ModelError), and a 400 from the model server is no 400 of ours.
    """

    kind = "http_error"

    def __init__(self, message: str, http_status: int | None = None):
        super().__init__(message)
        self.http_status = http_status
        self.transient = http_status in TRANSIENT_STATUSES


class ModelFailed(ServerError):
    """The server answered, inside the reply's stream, with its own error (Ollama's ``{"error": ...}``
    line, an OpenAI-compatible server's ``error`` event): the runner failed on this input. It is an
    answer, not a lost server (``ConnectionDropped``): the connection was fine and the server is there."""

    kind = "model_failed"

    def __init__(self, message: str):
        super().__init__(message, http_status=None)


class Cancelled(ModelError):
    """The call was stopped (Stop, Cancel, shutdown): what arrived before is kept by the caller."""

    kind = "cancelled"
