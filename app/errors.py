"""One exception tree for the whole app (httpx's ``_exceptions.py`` is the model).

Every error the app raises on purpose derives from ``HarveyError``. Each class
says what kind of problem it is (``kind``: the error card's key), which HTTP
status a view answers with (``status``) and whether trying again later can help
(``transient``: Ollama away, a timeout, a dropped connection). Views catch
``HarveyError`` once instead of ad-hoc tuples; the analysis worker pauses a
job on a transient error and fails it on a lasting one.

    HarveyError
    ├── ConfigError            harvey.yaml cannot be used
    ├── NotFound               404: no such session, job or file
    ├── Refused                400: the input cannot be used (message, file, upload, instruction)
    │   └── Busy               409: the session is busy (a reply or an analysis)
    ├── Conflict               409: what the request addressed changed on another device
    ├── DocumentError          400: a file cannot be read as text (binary, undecodable)
    └── ModelError             502: talking to the model failed (app.modelserver's tree)
"""

from __future__ import annotations


class HarveyError(Exception):
    """Base class: the message is for the user; ``kind`` names the error card."""

    kind = "error"
    status = 500
    transient = False

    def __init__(self, message: str = "", *, kind: str | None = None):
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class ConfigError(HarveyError):
    """harvey.yaml cannot be used; the message says where and why."""

    kind = "config"


class NotFound(HarveyError):
    """No such thing (session, analysis, file)."""

    kind = "not_found"
    status = 404


class Refused(HarveyError):
    """The request cannot be done as asked; the message says why and what to do."""

    kind = "refused"
    status = 400


class Busy(Refused):
    """The session is busy with a reply or an analysis; nothing was changed."""

    kind = "busy"
    status = 409


class DocumentError(HarveyError):
    """A file cannot be read as text."""

    kind = "document"
    status = 400


class ModelError(HarveyError):
    """Something went wrong talking to the model server."""

    kind = "error"
    status = 502


class Conflict(HarveyError):
    """The thing changed under the request (another device); nothing was written."""

    kind = "conflict"
    status = 409


def one_line(exc: BaseException) -> str:
    """An error's message on one line (its class's name when it has none): a card and a log
    line show it whole."""
    return " ".join(str(exc).split()) or type(exc).__name__
