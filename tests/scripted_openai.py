"""A scripted OpenAI-compatible server on loopback, for exact and fast tests of ``openai.OpenAIServer``.

Small sibling of ``scripted_ollama``: real HTTP on a free port, ``/v1/models``,
``/v1/chat/completions`` streamed as server-sent events (``data:`` lines, ``data: [DONE]``),
``/v1/embeddings``, and, as ``kind="llama"`` (llama-server), ``/props`` and ``/tokenize``; as
``kind="vllm"``, ``max_model_len`` in ``/v1/models`` and ``/version`` instead. The window is
enforced as each server does: llama-server refuses a prompt of at least ``n_ctx`` tokens
(``exceed_context_size_error``), vLLM one whose prompt plus ``max_tokens`` exceeds
``max_model_len``. Every request is recorded, with whether the client hung up before the end.
``Reply(send_done=False)`` ends the body cleanly after the finish reason and usage without
``data: [DONE]`` (llama.cpp's server before PR #9459, ik_llama.cpp, llama-box); a llama-server asked for
``return_progress`` sends three ``prompt_progress`` events before the reply; ``kill()`` and
``revive()`` take the server away and bring it back on the same port (a restart with other flags:
change ``models`` in between).
"""

from __future__ import annotations

import json
import math
import select
import socket
import threading
from dataclasses import dataclass, field
from typing import Callable

from scripted_http import ScriptedServer, TrackedHandler


@dataclass
class Reply:
    """What the server answers to one chat request."""

    text: str = "Hello from the scripted OpenAI server."
    piece_size: int = 4
    token_delay: float = 0.0
    first_byte_delay: float = 0.0   # before the headers; a client hanging up meanwhile is recorded
    fault: str | None = None        # None | "context" | "http_503" | "midstream_error" | "drop"
    fault_after: int = 2            # pieces sent before a mid-stream fault
    finish_reason: str = "stop"
    send_done: bool = True          # False: end the body after finish_reason and usage, without [DONE]


@dataclass
class Recorded:
    method: str
    path: str
    body: dict
    disconnected: bool = False
    refused: str | None = None
    finished: threading.Event = field(default_factory=threading.Event)


class ScriptedOpenAI(ScriptedServer):
    """``with ScriptedOpenAI() as server:``; ``server.url`` is the base URL (no ``/v1``)."""

    def __init__(self, models: dict[str, int] | None = None, kind: str = "llama",
                 script: Callable[[dict], Reply] | Reply | None = None):
        self.models = dict(models or {"tiny:1b": 4096})
        self.kind = kind                    # "llama" (llama-server) or "vllm"
        self.types: dict[str, str] = {}     # a model's "type" in /v1/models (LM Studio: "llm", "embeddings")
        self.script = script or (lambda body: Reply(text=f"You said: {body['messages'][-1]['content'][:200]}"))
        self.unavailable = 0                # answer this many next chats with 503 (a server loading a model)
        self.refuse_format = False          # answer a chat with response_format as a server without it
        self.props_unavailable = 0          # answer this many next /props with 503 (llama-server loading)
        self.vllm_tokenize = False          # as kind="vllm": serve vLLM's /tokenize (model + prompt -> count, tokens)
        self.tokenize_fails = 0             # answer this many next /tokenize with 500 (a server failing mid-count)
        self.requests: list[Recorded] = []
        self.in_flight = 0                  # chat requests being answered now
        self.max_in_flight = 0              # the most chat requests ever answered at once
        super().__init__()

    def make_handler(self):
        return _handler_for(self)

    def chats(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path == "/v1/chat/completions"]

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests]

    @staticmethod
    def tokens(text: str) -> int:
        """The server's 'true' count: a token per 4 bytes."""
        return math.ceil(len(text.encode()) / 4)

    def prompt_tokens(self, body: dict) -> int:
        return sum(self.tokens(m.get("content") or "") + 4 for m in body.get("messages", []))

    def _record(self, method: str, path: str, body: dict) -> Recorded:
        rec = Recorded(method, path, body)
        with self._lock:
            self.requests.append(rec)
        return rec


def _handler_for(server: ScriptedOpenAI):
    class Handler(TrackedHandler):
        server_of = server

        def _error(self, status: int, message: str, kind: str, **extra) -> None:
            self._json(status, {"error": {"code": status, "message": message, "type": kind, **extra}})

        def do_GET(self):
            server._record("GET", self.path, {}).finished.set()
            if self.path == "/v1/models":
                data = [{"id": name, "object": "model", "owned_by": server.kind,
                         **({"max_model_len": window} if server.kind == "vllm" else {}),
                         **({"type": server.types[name]} if name in server.types else {})}
                        for name, window in server.models.items()]
                return self._json(200, {"object": "list", "data": data})
            if self.path == "/props" and server.props_unavailable:
                server.props_unavailable -= 1
                return self._error(503, "Loading model", "unavailable_error")
            if self.path == "/props" and server.kind == "llama":
                window = next(iter(server.models.values()))
                return self._json(200, {"default_generation_settings": {"n_ctx": window}, "total_slots": 1,
                                        "build_info": "b9999-scripted"})
            if self.path == "/version" and server.kind == "vllm":
                return self._json(200, {"version": "0.11.0-scripted"})
            self._error(404, "File Not Found", "not_found_error")

        def do_POST(self):
            body = self._body()
            if body is None:
                return
            rec = server._record("POST", self.path, body)
            try:
                if self.path == "/tokenize" and server.tokenize_fails:
                    server.tokenize_fails -= 1
                    return self._error(500, "tokenizer failed", "server_error")
                if self.path == "/tokenize" and server.kind == "llama":
                    return self._json(200, {"tokens": list(range(server.tokens(body.get("content", ""))))})
                if self.path == "/tokenize" and server.kind == "vllm" and server.vllm_tokenize:
                    if "prompt" not in body or body.get("model") not in server.models:
                        return self._error(400, "1 validation error: prompt or messages required", "BadRequestError")
                    n = server.tokens(body["prompt"])
                    return self._json(200, {"count": n, "max_model_len": 4096, "tokens": list(range(n))})
                if self.path == "/v1/embeddings":
                    texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
                    data = [{"index": i, "object": "embedding", "embedding": [len(t) / 100, i / 10, 0.5]}
                            for i, t in reversed(list(enumerate(texts)))]    # out of order: the client sorts
                    return self._json(200, {"object": "list", "data": data})
                if self.path == "/v1/chat/completions":
                    with server._lock:
                        server.in_flight += 1
                        server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    try:
                        return self._chat(body, rec)
                    finally:
                        with server._lock:
                            server.in_flight -= 1
                self._error(404, "File Not Found", "not_found_error")
            finally:
                rec.finished.set()

        def _chat(self, body: dict, rec: Recorded) -> None:
            if body.get("model") not in server.models:
                return self._error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
            if server.unavailable:
                server.unavailable -= 1
                return self._error(503, "Loading model", "unavailable_error")
            if server.refuse_format and "response_format" in body:
                rec.refused = "format"
                return self._error(400, "response_format type json_schema is not supported", "invalid_request_error")
            reply = server.script if isinstance(server.script, Reply) else server.script(body)
            if reply.fault == "http_503":
                return self._error(503, "Service Unavailable", "unavailable_error")
            if self._over_window(body, reply, rec):
                return
            if reply.first_byte_delay and self._client_left(reply.first_byte_delay):
                rec.disconnected = True
                self.close_connection = True
                return
            self._stream(body, reply, rec)

        def _over_window(self, body: dict, reply: Reply, rec: Recorded) -> bool:
            """Refuse as the server kind does; True when refused."""
            window, prompt = server.models[body["model"]], server.prompt_tokens(body)
            if server.kind == "llama" and (prompt >= window or reply.fault == "context"):
                rec.refused = "context"
                self._error(400, f"request ({prompt} tokens) exceeds the available context size ({window} tokens), "
                                 "try increasing it", "exceed_context_size_error", n_prompt_tokens=prompt, n_ctx=window)
                return True
            if server.kind == "vllm" and (prompt + (body.get("max_tokens") or 0) > window or reply.fault == "context"):
                rec.refused = "context"
                self._json(400, {"object": "error", "type": "BadRequestError", "code": 400,
                                 "message": f"This model's maximum context length is {window} tokens. However, you "
                                            f"requested {prompt + (body.get('max_tokens') or 0)} tokens."})
                return True
            return False

        def _client_left(self, seconds: float) -> bool:
            """Wait up to ``seconds``; True as soon as the client hangs up."""
            readable, _, _ = select.select([self.connection], [], [], seconds)
            if not readable:
                return False
            try:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True

        def _stream(self, body: dict, reply: Reply, rec: Recorded) -> None:
            """The reply as SSE events over chunked encoding, usage last when asked for, then [DONE]."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            pieces = [reply.text[i:i + reply.piece_size] for i in range(0, len(reply.text), reply.piece_size)]
            try:
                if body.get("return_progress") and server.kind == "llama":     # llama-server reading the prompt
                    total = server.prompt_tokens(body)
                    for done in (total // 3, 2 * total // 3, total):
                        self._event({"choices": [], "prompt_progress": {"total": total, "cache": 0, "processed": done,
                                                                        "time_ms": 10 * done}})
                self._event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]})
                for n, piece in enumerate(pieces):
                    if reply.fault in ("midstream_error", "drop") and n == reply.fault_after:
                        return self._fault(reply.fault)
                    self._event({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
                    if reply.token_delay and server._stopping.wait(reply.token_delay):
                        return
                self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}]})
                if (body.get("stream_options") or {}).get("include_usage"):
                    self._event({"choices": [], "usage": {"prompt_tokens": server.prompt_tokens(body),
                                                          "completion_tokens": len(pieces),
                                                          "total_tokens": server.prompt_tokens(body) + len(pieces)}})
                if reply.send_done:
                    self._send(b"data: [DONE]\n\n")
                self._send(b"")
            except (BrokenPipeError, ConnectionResetError, OSError):
                rec.disconnected = True
                self.close_connection = True

        def _fault(self, fault: str) -> None:
            if fault == "drop":
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            self._event({"error": {"code": 500, "message": "an error was encountered while running the model",
                                   "type": "server_error"}})
            self._send(b"")

        def _event(self, obj: dict) -> None:
            self._send(b"data: " + json.dumps(obj).encode() + b"\n\n")

        def _send(self, data: bytes) -> None:
            """One HTTP chunk (an empty one ends the body)."""
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler

