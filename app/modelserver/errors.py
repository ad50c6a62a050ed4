"""What can go wrong talking to a model server, as typed errors (app.errors.ModelError, 502).

Every implementation of ``ModelServer`` raises these and nothing else, so the views, the
reply thread and the analysis worker decide by type (and by ``kind``, the error card's key,
and ``transient``, "trying again later can help") and never by a server's error text::

    ModelError (app.errors)
    ├── Unreachable        nothing answers at the URL                         transient
    ├── Timeout            connected, but no byte arrived in time             transient
    ├── ModelNotFound      404 for the model; the message says how to install it
    ├── ContextExceeded    the server refused the prompt as longer than the window
    ├── FormatRefused      the server refused the JSON schema (``format``) of the request
    ├── StreamBroken       the connection dropped mid-reply (the server is lost) transient
    ├── ServerError        any other non-200 answer (``.http_status``)        transient for 429/502/503/504
    │   └── ModelFailed    the server's own error inside a reply stream (its runner failed on this input)
    └── Cancelled          the call was stopped by ``ChatStream.cancel()``
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


class Unreachable(ModelError):
    """Nothing answers at the configured URL (the server is not running, or the URL is wrong)."""

    kind = "unreachable"
    transient = True


class Timeout(ModelError):
    """The server accepted the request but did not answer in time."""

    kind = "timeout"
    transient = True


class ModelNotFound(ModelError):
    """The model is not installed on that server; the message says how to install it."""

    kind = "model_not_found"
    status = 404

    def __init__(self, model: str, install_hint: str = ""):
        self.model = model
        hint = install_hint or f"ollama pull {model}"
        super().__init__(f"The model '{model}' is not installed. Install it with: {hint}")


class ContextExceeded(ModelError):
    """The prompt is longer than the window sent with it; nothing was cut, nothing answered."""

    kind = "context_exceeded"


class FormatRefused(ModelError):
    """The server cannot do structured output (an Ollama older than 0.5): ask for free text instead."""

    kind = "format_refused"


class StreamBroken(ModelError):
    """The reply broke off: the connection dropped mid-reply, or the body ended without the reply's end."""

    kind = "stream_error"
    transient = True


class ServerError(ModelError):
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
    answer, not a lost server (``StreamBroken``): the connection was fine and the server is there."""

    kind = "model_failed"

    def __init__(self, message: str):
        super().__init__(message, http_status=None)


class Cancelled(ModelError):
    """The call was stopped (Stop, Cancel, shutdown): what arrived before is kept by the caller."""

    kind = "cancelled"
