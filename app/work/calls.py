"""One model call, made the same way for a reply, a compact and an analysis.

Before anything is sent, the request is checked against the model's window:
the prompt's estimate plus what the call may generate must fit, so no server
ever cuts the start of a prompt to make room for a long answer (Ollama's
context shift does that silently).  The call is attached to its activity, so a
Stop cancels it at any stage; when it ends, the calibration learns from the
server's own counts and the usage is handed back in neutral terms.

``with calls.stream(activity, request) as call:`` is the way to make one, and its
end is the one place that decides what became of it (``Call.outcome``): complete,
cut at its cap (the server said its reply budget ran out: ``Usage.cut_off``),
stopped, the server's own error (an answer: it is there), or the server lost (the
connection refused or cut: worth waiting for).  ``text`` is the same for a whole
reply at once.

Embeddings go the same way: ``with calls.embedding(activity, model, texts) as call:
vectors = call.run()``, attached to the activity for as long as the ``with`` lasts (a Stop
cuts it, however long the embedding model loads on a Pi) and its outcome decided at the
end by the same rule.  ``embed`` is that for one request at once (the question of a
retrieval answer, each batch of an index build).
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from ..budget import Calibration, count_messages, estimate_messages
from ..errors import ModelError
from ..modelserver import Cancelled, ChatStream, ContextExceeded, ModelServer, Usage
from ..modelserver.base import Embedding
from .activity import Activity
from .loops import Loop, LoopWatch

log = logging.getLogger(__name__)

COMPLETE, CUT, STOPPED, FAILED, LOST, LOOPED = "complete", "cut", "stopped", "failed", "lost", "looped"

TEXT_EVERY_S = 0.5         # a reply shown while it is written (``Request.on_text``) is shown this often at most
MIN_REPLY_TOKENS = 16      # a reply that cannot have even this much room is refused, not started


@dataclass
class Request:
    """One chat request as the app budgets it."""

    model: str
    messages: list[dict]
    window: int                 # num_ctx: the same for every request to this model
    num_predict: int            # the most the reply may generate
    bytes_per_token: float      # the figure the prompt is estimated with
    kind: str | None = None     # the calibration kind of the prompt's text (None: chat)
    format: dict | str | None = None
    tokens: int | None = None   # the prompt's estimate when the caller knows better (files of their own kind)
    on_progress: Callable[[int, int], None] | None = None   # prompt tokens read so far, of all (llama-server)
    watch_loops: bool = True    # stop the reply as soon as it repeats itself (issue 44, ``loops``)
    on_text: Callable[[str], None] | None = None   # the reply so far, while it is written (``TEXT_EVERY_S``)

    @property
    def estimate(self) -> int:
        return self.tokens if self.tokens is not None else estimate_messages(self.messages, self.bytes_per_token)


class Call:
    """One call in flight (iterate it for the reply's pieces) and, once its ``with`` ended, its outcome."""

    def __init__(self, request: Request, stream: ChatStream):
        self.request, self._stream = request, stream
        self.outcome = ""               # COMPLETE | CUT | STOPPED | FAILED | LOST | LOOPED, set at the end
        self.error: ModelError | None = None
        self.warning = ""               # what the calibration noticed about the server's counts
        self.loop: Loop | None = None   # the repetition the reply was stopped at (issue 44)

    def __iter__(self) -> Iterator[str]:
        """The reply's pieces; a reply that starts repeating itself is stopped there (the server stops
        writing), and ``text`` keeps it up to the loop's first turn."""
        watch = LoopWatch() if self.request.watch_loops else None
        for piece in self._stream:
            if watch is not None and (found := watch.feed(piece)) is not None:
                self.loop = found
                self._stream.cancel()
                return
            yield piece

    @property
    def looped(self) -> bool:
        return self.loop is not None

    @property
    def text(self) -> str:
        return self._stream.text[:self.loop.keep] if self.loop is not None else self._stream.text

    @property
    def usage(self) -> Usage | None:
        return self._stream.usage

    @property
    def cancelled(self) -> bool:
        return self._stream.cancelled

    @property
    def cut_off(self) -> bool:
        """The reply ended at its cap (``num_predict``), not by itself: it says so, and may be continued."""
        return self.outcome == CUT


class EmbeddingCall:
    """One embedding call in flight (``run()`` makes it, once) and, once its ``with`` ended, its outcome."""

    def __init__(self, model: str, texts: str | list[str], embedding: Embedding):
        self.model, self.texts, self._embedding = model, texts, embedding
        self.vectors: list[list[float]] | None = None     # set when the server answered them all
        self.outcome = ""               # COMPLETE | STOPPED | FAILED | LOST, set at the end
        self.error: ModelError | None = None
        self.ended = False              # run() returned or raised: nothing of it is left to cut

    def run(self) -> list[list[float]]:
        """Send the texts and wait for their vectors; ``Cancelled`` when a Stop cut the call."""
        if self.ended:
            raise RuntimeError("an embedding call is made once")
        try:
            self.vectors = self._embedding.run()
        finally:
            self.ended = True
        return self.vectors

    @property
    def cancelled(self) -> bool:
        return self._embedding.cancelled


def server_error(error: BaseException | None) -> ModelError | None:
    """The model server's own error that ended a call, for its card (a stop is no error)."""
    return error if isinstance(error, ModelError) and not isinstance(error, Cancelled) else None


def outcome_of(stream: ChatStream | EmbeddingCall, error: BaseException | None) -> str:
    """What became of a call that ended (the one rule every kind of model work reads)."""
    if stream.cancelled or isinstance(error, Cancelled):
        return STOPPED
    if error is not None:
        return LOST if getattr(error, "transient", False) else FAILED
    if isinstance(stream, EmbeddingCall):
        return STOPPED if stream.vectors is None else COMPLETE    # left before the answer: cut off by us
    if stream.usage is None:
        return STOPPED                  # the caller left before the end: the call was cut off by us
    return CUT if stream.usage.cut_off else COMPLETE


class ModelCalls:
    """Opens, checks and accounts for model calls; shared by every kind of model work."""

    def __init__(self, server: ModelServer, calibration: Calibration):
        self.server = server
        self.calibration = calibration

    def _open(self, activity: Activity, request: Request, fit_reply: bool = False) -> ChatStream:
        """A stream for ``request``, attached to ``activity`` (nothing is sent until it is read);
        a map call passes its ``activity.Part`` instead, which a Stop of the activity cancels too.

        ``fit_reply``: the reply's cap is lowered to what the window leaves (a chat reply
        may use whatever the budget left); otherwise a request that does not fit with its
        whole cap is refused (a map call's chunk must then be cut smaller instead).
        """
        prompt = self.prompt_tokens(request)
        room = request.window - prompt
        if fit_reply:
            request.num_predict = min(request.num_predict, room)
        if request.num_predict < MIN_REPLY_TOKENS or prompt + request.num_predict > request.window:
            raise ContextExceeded(
                f"A request of about {prompt:,} tokens plus {max(0, request.num_predict):,} for the "
                f"reply would exceed the window of {request.window:,} tokens; nothing was sent.")
        stream = self.server.chat(request.model, request.messages, num_ctx=request.window,
                                  num_predict=request.num_predict, format=request.format)
        stream.on_progress = request.on_progress
        activity.attach(stream)
        return stream

    def prompt_tokens(self, request: Request) -> int:
        """The request's prompt tokens: the caller's figure if it gave one, else the model's own count
        with its learnt template cost when its counter is known (issue 30: map, reduce, compact and
        help calls fit by the true count), else the bytes-per-token estimate."""
        if request.tokens is not None:
            return request.tokens
        counter = self.server.counter(request.model)
        if counter is None:
            return request.estimate
        template = self.calibration.templates.cost(request.model)
        return count_messages(request.messages, counter, template) + template[1]

    def _close(self, activity: Activity, stream: ChatStream, request: Request) -> str:
        """Detach the ended call and learn from its counts; returns a calibration warning or ""."""
        activity.detach(stream)
        if stream.usage is None:
            return ""
        counter = self.server.counter(request.model)
        if counter is not None:
            # issue 30: the template's cost per model, from the replies' counts (the first one teaches it)
            self.calibration.templates.observe(request.model, request.messages, stream.usage.prompt_tokens,
                                               counter)
        return self.calibration.observe(request.model, request.messages, stream.usage, kind=request.kind,
                                        num_predict=request.num_predict) or ""

    @contextmanager
    def stream(self, activity: Activity, request: Request, fit_reply: bool = False) -> Iterator[Call]:
        """``with calls.stream(activity, request) as call:`` one call, checked before sending (``_open``),
        ended here whatever happens: detached from the activity, its connection closed, the
        calibration taught from its counts, and ``call.outcome`` decided (``outcome_of``)."""
        stream = self._open(activity, request, fit_reply=fit_reply)
        call = Call(request, stream)
        error: BaseException | None = None
        try:
            yield call
        except BaseException as exc:
            error = exc
            raise
        finally:
            if stream.usage is None and not stream.cancelled:
                stream.cancel()             # left before the end: free the connection (the server stops)
            call.outcome = LOOPED if call.loop is not None else outcome_of(stream, error)
            call.error = server_error(error)
            call.warning = self._close(activity, stream, request)
            if call.loop is not None:
                log.info("a reply to %s repeated %r %d times: stopped, %d characters kept", request.model,
                         call.loop.span[:60], call.loop.times, call.loop.keep)

    def text(self, activity: Activity, request: Request) -> tuple[str, Usage | None]:
        """A whole reply as one string (map, synthesis and compact calls); Cancelled on a stop.
        ``usage.cut_off`` says the reply ended at its cap.  ``request.on_text`` is given the reply so far
        while it is written, every ``TEXT_EVERY_S`` at most."""
        started, pieces = time.monotonic(), 0
        with self.stream(activity, request) as call:
            shown = 0.0
            for _ in call:
                pieces += 1
                if request.on_text is not None and time.monotonic() - shown >= TEXT_EVERY_S:
                    shown = time.monotonic()
                    request.on_text(call.text)       # (issue 44: every answer a person waits for streams)
            if call.cancelled and not call.looped:
                raise Cancelled("The call was stopped.")
        if call.looped:
            # stopped before the server's counts came: what it cost as the app saw it (Ollama's API and
            # llama.cpp stream one token a piece), so a looping call is not "0 tokens, 0 s" on a Pi
            return call.text.strip(), Usage(generated_tokens=pieces, seconds=time.monotonic() - started,
                                            stopped_by="loop")
        return call.text.strip(), call.usage

    @contextmanager
    def embedding(self, activity, model: str, texts: str | list[str]) -> Iterator[EmbeddingCall]:
        """``with calls.embedding(activity, model, texts) as call: vectors = call.run()``: one embedding
        call, attached to ``activity`` (or an ``activity.Part``) from before it is sent, so a Stop cuts
        it at any stage (``Cancelled``), and ended here whatever happens: cut if the ``with`` is left
        before the answer, detached, and ``call.outcome`` decided (``outcome_of``)."""
        embedding = self.server.embedding(model, texts)
        call = EmbeddingCall(model, texts, embedding)
        activity.attach(embedding)
        error: BaseException | None = None
        try:
            yield call
        except BaseException as exc:
            error = exc
            raise
        finally:
            if not call.ended and not embedding.cancelled:
                embedding.cancel()          # left before it was made (or while it runs): nothing goes on
            call.outcome = outcome_of(call, error)
            call.error = server_error(error)
            activity.detach(embedding)

    def embed(self, activity, model: str, texts: str | list[str]) -> list[list[float]]:
        """Embed ``texts`` as a call of ``activity`` (``embedding``, made at once): a Stop cuts it at any
        stage (``Cancelled``)."""
        with self.embedding(activity, model, texts) as call:
            return call.run()
