"""A scripted Ollama-API server on loopback, for exact and fast tests.

It speaks the parts of Ollama's native API the app uses (``/``, ``/api/version``,
``/api/tags``, ``/api/ps``, ``/api/show``, streaming ``/api/chat``, ``/api/embed``)
over real HTTP on a free port. Each test decides the replies (a fixed text, or a
function of the request), the latency per token, and the faults (404 model, 500,
an ``{"error"}`` line mid-stream, a dropped connection, a hang, a refused context, a first
byte that takes a while).
``kill()`` takes the whole server away (connections refused, streams in flight
dropped) and ``revive()`` brings it back on the same port, as Ollama restarting
for an update. Every request
is recorded so tests can assert on ``num_ctx``, ``truncate``, ``format``, message
order and sizes, and on whether the client closed the stream early.  A script may
answer with JSON text (a structured reply); ``refuse_format`` makes the server
refuse any chat that asks for a ``format``, as an older Ollama does.  ``honor_num_predict`` cuts a
reply at ``options.num_predict`` and says ``done_reason: "length"``, as Ollama does; ``hold_embed``
holds the embedding requests it picks until ``embed_release`` is set or the client hangs up
(recorded as ``disconnected``).
``model_info`` gives a model ``/api/show`` facts of a real one (block count, KV heads, sliding
window), ``sizes`` its weights in ``/api/tags``, and ``/api/ps`` lists the models a chat has
loaded with the window it used and ``loaded_size(model, num_ctx)`` bytes (default: the weights).

Run by hand for a demo without any model::

    python tests/scripted_ollama.py --port 11434
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from scripted_http import ScriptedServer, TrackedHandler


_VOCABULARY = ("harbour tide crane cargo pier quay ship berth lock vessel master pilot rope chart buoy beacon "
               "estuary channel dredger ledger manifest container gantry tug anchor hull keel mast sail deck "
               "hold wharf dock gate bridge river current depth fathom knot mile north south east west "
               "morning evening storm calm wave swell spray salt gull lamp keeper log entry shift crew "
               "weighs carries moves lifts waits turns checks opens closes records signals crosses "
               "slowly quickly early late again often rarely under over beside along through past").split()


def prose(words: int, seed: int = 0) -> str:
    """``words`` words of filler that never repeat a span back to back: a long scripted reply that is not
    a loop (issue 44: a reply of "word word word …" is stopped as one, as a model's would be)."""
    import random
    pick = random.Random(seed)
    return " ".join(pick.choice(_VOCABULARY) for _ in range(words))


@dataclass
class Reply:
    """What the server answers to one chat request."""

    text: str = "Hello from the scripted server."
    token_delay: float = 0.0          # seconds between pieces
    piece_size: int = 4               # characters per streamed piece
    fault: str | None = None          # None | "http_500" | "model_404" | "context" | "midstream_error" | "drop"
    #                                   | "hang" | "reset" (the connection reset before any answer)
    status: int | None = None         # answer this HTTP status with an error (429, 503: a busy server)
    fault_after: int = 2              # pieces sent before a mid-stream fault
    prompt_eval_count: int | None = None   # None: computed from the prompt
    done_reason: str = "stop"
    first_byte_delay: float = 0.0     # seconds before the response headers (a Pi loading the model);
    #                                   a client that hangs up meanwhile is recorded as ``disconnected``


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    body: dict
    at: float
    disconnected: bool = False        # the client closed the stream before the end
    refused: str | None = None        # why the server refused it (e.g. context)
    finished: threading.Event = field(default_factory=threading.Event)
    ended: float = 0.0                # monotonic time the answer ended (which of two calls ended first)
    answered: bool = False            # counted out of ``in_flight`` (before its last line went out)

    @property
    def num_ctx(self) -> int | None:
        return (self.body.get("options") or {}).get("num_ctx")

    @property
    def format(self):
        """The ``format`` the request asked for (a JSON schema dict, "json"), or None."""
        return self.body.get("format")

    @property
    def prompt_bytes(self) -> int:
        return sum(len((m.get("content") or "").encode()) for m in self.body.get("messages", []))


def failing(times: int, then: Callable[[dict], Reply], status: int | None = None, fault: str | None = None,
            which: Callable[[dict], bool] = lambda body: True) -> Callable[[dict], Reply]:
    """A script whose first ``times`` requests that ``which`` picks fail with HTTP ``status`` (or
    ``fault``); every other request, and those after, get ``then``'s reply."""
    left = [times]
    lock = threading.Lock()

    def script(body: dict) -> Reply:
        with lock:
            fail = which(body) and left[0] > 0
            left[0] -= fail
        return Reply(text="failed", status=status, fault=fault) if fail else then(body)
    return script


def _echo(body: dict) -> Reply:
    """Default script: say how big the prompt was and echo the last message."""
    messages = body.get("messages") or [{}]
    last = messages[-1].get("content", "")
    return Reply(text=f"You said: {last[:200]}")


class ScriptedOllama(ScriptedServer):
    """Start with ``with ScriptedOllama() as server:``; ``server.url`` is the base URL."""

    def __init__(self, models: dict[str, int] | None = None, script: Callable[[dict], Reply] | Reply | None = None,
                 token_ratio: float = 1.0, embed_size: int = 8, host: str = "127.0.0.1", port: int = 0):
        self.models = dict(models or {"tiny:1b": 8192, "other:7b": 32768})
        self.script = script or _echo
        self.token_ratio = token_ratio   # prompt_eval_count = ceil(bytes/4 * ratio)
        self.embed_size = embed_size
        self.requests: list[Recorded] = []
        self.down = False                # answer nothing useful: 503 everywhere
        self.honor_num_predict = False   # cut replies at options.num_predict tokens, as Ollama does
        self.refuse_format = False       # answer a chat with ``format`` as an Ollama older than 0.5 does (400)
        self.tags_delays: list[float] = []   # seconds before each next /api/tags answer (popped in order)
        self.in_flight = 0               # chat requests being answered now
        self.max_in_flight = 0           # the most chat requests ever answered at once
        self.embed_fn: Callable[[str], list[float]] | None = None   # one text's vector (default: from its length)
        self.embed_delay = 0.0           # seconds before each /api/embed answer (a slow embedding model)
        self.hold_embed: Callable[[list[str]], bool] | None = None   # which embeds to hold (a model loading)
        self.embed_release = threading.Event()                        # lets every held embed answer
        # Per model, /api/show model_info keys of a real one: its facts (block count, KV heads, sliding
        # window) or its whole GGUF metadata with the vocabulary (issue 30, tests/vocab.py), served as
        # Ollama does (the long arrays empty without ``verbose``); and ``count_fn``, the true count of a
        # text (llama.cpp's /tokenize over that GGUF): prompt_eval_count is then the content's count plus
        # ChatML's ``template_tokens`` (5 a message, 3 for the reply's turn).
        self.model_info: dict[str, dict] = {}
        self.pulls: dict[str, int] = {}     # a model pulled again under its name: a new digest
        self.count_fn: Callable[[str], int] | None = None
        self.template_tokens = (5, 3)
        self.verbose_shows = 0           # /api/show requests with verbose (the app fetched a vocabulary)
        self.verbose_gate: threading.Event | None = None   # when set up, a verbose show waits for it (30 s at most)
        self.sizes: dict[str, int] = {}         # per model: /api/tags size in bytes (default 1)
        self.loaded_size: Callable[[str, int], int] | None = None   # /api/ps size of a model at a num_ctx
        self.loaded: dict[str, int] = {}        # model -> num_ctx of its last chat (what /api/ps lists)
        self.capabilities: dict[str, list[str]] = {}   # /api/show's "capabilities" of a model, where set
        self.show_details: dict = {}     # more keys of /api/show's "details" (e.g. the demo server's mark)
        super().__init__(host, port)

    # -- lifecycle -------------------------------------------------------------

    def make_handler(self):
        return _handler_for(self)

    # -- helpers for tests ---------------------------------------------------

    def embeds(self) -> list[Recorded]:
        """The embedding requests received so far, in order."""
        with self._lock:
            return [r for r in self.requests if r.path == "/api/embed"]

    def embedded_texts(self) -> list[str]:
        """Every text sent to /api/embed so far, in order."""
        out = []
        for rec in self.embeds():
            texts = rec.body.get("input")
            out.extend([texts] if isinstance(texts, str) else texts or [])
        return out

    def chats(self) -> list[Recorded]:
        """The chat requests received so far, in order."""
        with self._lock:
            return [r for r in self.requests if r.path == "/api/chat"]

    def reply_for(self, body: dict) -> Reply:
        script = self.script
        return script if isinstance(script, Reply) else script(body)

    def digest(self, name: str) -> str:
        """A model's digest, as /api/tags gives it: changes with its window and whether it has a vocabulary."""
        return hashlib.sha256(f"{name}|{self.models[name]}|{bool(self.model_info.get(name))}|"
                              f"{self.pulls.get(name, 0)}".encode()).hexdigest()

    def tokens_of(self, text: str) -> int:
        """A text's 'true' token count (bytes/4 x ratio), as for prompts."""
        return math.ceil(len(text.encode()) / 4 * self.token_ratio)

    def cut_to(self, text: str, limit: int) -> str:
        """The part of ``text`` a model that reads ``limit`` tokens sees (Ollama cuts the rest)."""
        keep = int(limit * 4 / self.token_ratio)
        return text.encode()[:keep].decode(errors="ignore")

    def prompt_tokens(self, body: dict) -> int:
        """The server's 'true' token count of a prompt: bytes/4 x ratio, or ``count_fn``'s."""
        if self.count_fn is not None:
            messages = body.get("messages", [])
            per_message, per_request = self.template_tokens
            return (sum(self.count_fn(m.get("content") or "") for m in messages)
                    + per_message * len(messages) + per_request)
        size = sum(len((m.get("content") or "").encode()) for m in body.get("messages", []))
        return math.ceil(size / 4 * self.token_ratio)

    def map_requests(self, since: int = 0) -> list[int]:
        """The 1-based chunk number of every map request (prompts with "Chunk i of n:"), in order."""
        import re

        found = []
        for rec in self.chats()[since:]:
            messages = rec.body.get("messages") or [{}]
            m = re.search(r"\nChunk (\d+) of \d+(?: \([^\n]*\))?:\n", messages[-1].get("content", ""))
            if m:
                found.append(int(m.group(1)))
        return found

    def _enter(self, delta: int, rec: Recorded | None = None) -> None:
        """Count a chat request in (1) or out (-1, once per ``rec``); ``max_in_flight`` keeps the most
        at once.  A streamed reply is counted out just before its last line goes out: once the client
        has that line it may send its next request, before this thread runs again on a busy machine."""
        with self._lock:
            if delta < 0 and rec is not None:
                if rec.answered:
                    return
                rec.answered = True
            self.in_flight += delta
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _record(self, method: str, path: str, body: dict) -> Recorded:
        rec = Recorded(method, path, body, time.monotonic())
        with self._lock:
            self.requests.append(rec)
        return rec


def _handler_for(server: ScriptedOllama):
    class Handler(TrackedHandler):
        server_of = server

        def do_GET(self):
            rec = server._record("GET", self.path, {})
            rec.finished.set()
            if server.down:
                return self._json(503, {"error": "down"})
            if self.path == "/":
                data = b"Ollama is running"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                return self.wfile.write(data)
            if self.path == "/api/version":
                return self._json(200, {"version": "0.33.0-scripted"})
            if self.path == "/api/tags" and server.tags_delays:
                time.sleep(server.tags_delays.pop(0))
            if self.path == "/api/tags":
                models = [{"name": n, "model": n, "size": server.sizes.get(n, 1), "details": {"family": "llama"},
                           "digest": server.digest(n)} for n in server.models]
                return self._json(200, {"models": models})
            if self.path == "/api/ps":
                with server._lock:
                    loaded = dict(server.loaded)
                models = [{"name": n, "model": n, "details": {"family": "llama"}, "size_vram": 0, "context_length": c,
                           "digest": server.digest(n),
                           "size": server.loaded_size(n, c) if server.loaded_size else server.sizes.get(n, 1)}
                          for n, c in loaded.items()]
                return self._json(200, {"models": models})
            self._json(404, {"error": "not found"})

        def do_POST(self):
            body = self._body()
            if body is None:
                return
            rec = server._record("POST", self.path, body)
            try:
                if server.down:
                    return self._json(503, {"error": "down"})
                if self.path == "/api/show":
                    return self._show(body)
                if self.path == "/api/embed":
                    return self._embed(body, rec)
                if self.path == "/api/chat":
                    server._enter(1)
                    try:
                        return self._chat(body, rec)
                    finally:
                        server._enter(-1, rec)
                self._json(404, {"error": "not found"})
            finally:
                rec.ended = time.monotonic()
                rec.finished.set()

        def _show(self, body):
            name = body.get("model")
            if name not in server.models:
                return self._json(404, {"error": f"model '{name}' not found"})
            info = {"general.architecture": "llama", "llama.context_length": server.models[name]}
            verbose = bool(body.get("verbose"))
            server.verbose_shows += verbose
            if verbose and server.verbose_gate is not None:
                server.verbose_gate.wait(30)     # a big vocabulary on its way (a Pi's Ollama reading it)
            # Ollama: without verbose, every long array (the vocabulary) comes back empty
            info.update({key: value if verbose or not isinstance(value, list) else []
                         for key, value in server.model_info.get(name, {}).items()})
            shown = {"details": {"family": info["general.architecture"], "parameter_size": "1B", **server.show_details},
                     "model_info": info}
            if name in server.capabilities:
                shown["capabilities"] = server.capabilities[name]
            self._json(200, shown)

        def _embed(self, body, rec: Recorded):
            if body.get("model") not in server.models:
                return self._json(404, {"error": f"model '{body.get('model')}' not found"})
            texts = body.get("input")
            texts = [texts] if isinstance(texts, str) else texts
            limit = server.models[body.get("model")]        # the embed model's input limit, in tokens
            if body.get("truncate") is False and any(server.tokens_of(t) > limit for t in texts):
                return self._json(400, {"error": "the input length exceeds the context length"})
            texts = [server.cut_to(t, limit) for t in texts]   # like Ollama: silently, unless truncate is false
            if server.hold_embed is not None and server.hold_embed(texts):
                while not server.embed_release.is_set() and not server._stopping.is_set():
                    if self._client_left(0.05):
                        rec.disconnected = True
                        self.close_connection = True
                        return
            if server.embed_delay:
                time.sleep(server.embed_delay)
            vectors = [server.embed_fn(t) if server.embed_fn else [(len(t) + i) / 100.0 for i in range(server.embed_size)]
                       for t in texts]
            self._json(200, {"model": body.get("model"), "embeddings": vectors})

        def _chat(self, body, rec: Recorded):
            name = body.get("model")
            if name not in server.models:
                return self._json(404, {"error": f"model '{name}' not found"})
            if server.refuse_format and "format" in body:
                rec.refused = "format"
                return self._json(400, {"error": "json: cannot unmarshal object into Go struct field "
                                                 "ChatRequest.format of type string"})
            reply = server.reply_for(body)
            if reply.fault == "model_404":
                return self._json(404, {"error": f"model '{name}' not found"})
            if reply.fault == "http_500":
                return self._json(500, {"error": "llama runner process has terminated"})
            if reply.status:
                return self._json(reply.status, {"error": f"scripted status {reply.status}"})
            if reply.fault == "reset":
                import struct
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                rec.refused = "reset"
                return
            if reply.fault == "context":
                rec.refused = "context"
                return self._json(400, {"error": "the input length exceeds the context length"})
            tokens = reply.prompt_eval_count or server.prompt_tokens(body)
            num_ctx = (body.get("options") or {}).get("num_ctx") or 4096
            with server._lock:
                server.loaded[name] = num_ctx          # Ollama (re)loads the model with this window
            if tokens > num_ctx and body.get("truncate") is False:
                rec.refused = "context"
                return self._json(400, {"error": "the input length exceeds the context length"})
            if reply.fault == "hang":
                server._stopping.wait(60)
                return
            if reply.first_byte_delay and self._client_left(reply.first_byte_delay):
                rec.disconnected = True
                self.close_connection = True
                return
            self._stream(body, reply, rec, min(tokens, num_ctx))

        def _client_left(self, seconds: float) -> bool:
            """Wait up to ``seconds`` before answering; True as soon as the client hangs up
            (as Ollama notices a closed connection while it loads a model and stops)."""
            import select
            import socket

            readable, _, _ = select.select([self.connection], [], [], seconds)
            if not readable:
                return False
            try:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True

        def _stream(self, body, reply: Reply, rec: Recorded, prompt_tokens: int):
            """Send the reply piece by piece as NDJSON over chunked encoding."""
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            started = time.monotonic()
            text = reply.text
            limit = (body.get("options") or {}).get("num_predict")
            done_reason = reply.done_reason
            if server.honor_num_predict and limit is not None and limit >= 0 and len(text) > limit * 4:
                text = text[:limit * 4]          # num_predict tokens of 4 bytes: the model stops there
                done_reason = "length"
            pieces = [text[i:i + reply.piece_size] for i in range(0, len(text), reply.piece_size)]
            try:
                for n, piece in enumerate(pieces):
                    if reply.fault in ("midstream_error", "drop") and n == reply.fault_after:
                        if reply.fault == "drop":
                            self.wfile.flush()
                            self.connection.shutdown(2)
                            self.close_connection = True
                            return
                        self._chunk({"error": "an error was encountered while running the model"})
                        return self._end_chunks()
                    self._chunk({"model": body["model"], "message": {"role": "assistant", "content": piece},
                                 "done": False})
                    if reply.token_delay and server._stopping.wait(reply.token_delay):
                        return
                elapsed = int((time.monotonic() - started) * 1e9) or 1
                server._enter(-1, rec)
                self._chunk({"model": body["model"], "message": {"role": "assistant", "content": ""},
                             "done": True, "done_reason": done_reason,
                             "total_duration": elapsed + 1000, "load_duration": 1000,
                             "prompt_eval_count": prompt_tokens, "prompt_eval_duration": 1000,
                             "eval_count": max(1, len(pieces)), "eval_duration": elapsed})
                self._end_chunks()
            except (BrokenPipeError, ConnectionResetError, OSError):
                rec.disconnected = True
                self.close_connection = True

        def _chunk(self, obj) -> None:
            data = (json.dumps(obj) + "\n").encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _end_chunks(self) -> None:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description="A scripted Ollama-API server (echoes, slowly).")
    parser.add_argument("--port", type=int, default=11434)
    parser.add_argument("--delay", type=float, default=0.05)
    args = parser.parse_args()
    server = ScriptedOllama(script=lambda body: Reply(text=_echo(body).text, token_delay=args.delay),
                            port=args.port)
    print(f"scripted Ollama on {server.url}", flush=True)
    server._httpd.serve()   # in this thread, until the process is stopped


if __name__ == "__main__":
    main()
