"""One interface for model servers: ``connect(config)`` gives the app its ``ModelServer``.

``base`` is the neutral seam (``ModelServer``, ``ChatStream``, ``Usage``, ``ModelFacts``),
``errors`` the typed errors, ``transport`` the HTTP both kinds share (a connection per chat
that a cancel cuts), and each kind of server has one module (``ollama``, ``openai``). Nothing
outside this package imports httpx for model calls or knows a server's field names; the
layout test (tests/test_layout.py) checks it.
"""

from __future__ import annotations

from .base import ChatStream, ModelFacts, ModelServer, Usage
from .errors import (BadReply, Cancelled, ConnectionDropped, ContextExceeded, FormatRefused, ModelFailed, ModelNotFound,
                     ServerAnswered, ServerError, StreamBroken, Timeout, TransportFailed, Unreachable)
from ..errors import ModelError

__all__ = ["ChatStream", "ModelFacts", "ModelServer", "Usage", "ModelError", "BadReply", "Cancelled", "ConnectionDropped",
           "ContextExceeded", "FormatRefused", "ModelFailed", "ModelNotFound", "ServerAnswered", "ServerError",
           "StreamBroken", "Timeout", "TransportFailed", "Unreachable", "connect"]


def connect(config, *, connect_timeout: float | None = None, read_timeout: float | None = None) -> ModelServer:
    """The model server the config names: the one place that chooses the kind of server.

    ``model_server.api`` says which: "native" (Ollama's own API) or "openai" (an OpenAI-compatible
    server). ``connect_timeout`` and ``read_timeout`` override the config's (``harvey serve``
    probes with a short connect, ``harvey check`` will not wait ten minutes for an answer).
    """
    section = config.model_server
    timeouts = {"connect_timeout": section.connect_timeout_s if connect_timeout is None else connect_timeout,
                "read_timeout": section.timeout_s if read_timeout is None else read_timeout}
    if section.api == "openai":
        from .openai import OpenAIServer

        server = OpenAIServer(section.url, **timeouts)
    else:
        from .memory import machine_for
        from .ollama import OllamaServer

        server = OllamaServer(section.url, keep_alive=section.keep_alive, **timeouts)
        # Ollama takes whatever window the app sends, so the app keeps it to what the machine holds.
        server.machine = machine_for(section.url, section.parallel, section.server_memory, section.kv_cache_type)
    server.token_counters.cache_dir = config.data_path / "tokenizers"   # built vocabularies, by digest
    return server
