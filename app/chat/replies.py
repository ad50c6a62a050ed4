"""A reply being generated: read the model's stream in the background, record it at the end.

The request that sends a message takes the session (``work.Activities.begin``
with a ``Generation``) and hands ``run`` to the worker; the page then follows the
generation's event log over SSE.  A second tab or a reload follows the same
generation instead of sending the message again.  Stop (addressed by the
generation's id) cancels the call at any stage, before its first byte included,
and keeps what arrived; the turn then says "stopped".  At shutdown every reply in
flight is recorded with what arrived and an "interrupted" note.
"""

from __future__ import annotations

import logging
from typing import Callable

from ..errors import ModelError
from ..modelserver import Cancelled, Usage
from ..sessions import fountain, notes
from ..work.activity import Activity
from ..work.calls import ModelCalls, Request

log = logging.getLogger(__name__)


class Generation(Activity):
    """One reply in progress (or just finished) for one turn of one session."""

    def __init__(self, id: str, session: str, turn: int, model: str, kind: str = "reply"):
        super().__init__(id, session, kind, turn)
        self.model = model
        self.pieces: list[str] = []
        self.status = "starting"      # starting | running | done | stopped | looped | interrupted | error
        self.error: ModelError | None = None
        self.usage: Usage | None = None
        self.warning = ""             # what the calibration noticed about the server's counts
        self.cut_at = 0               # the reply ended at its cap of this many tokens (0: it was not cut)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def key(self) -> str:
        """The prefix of this generation's event ids (unique across restarts)."""
        return self.id

    @property
    def finished(self) -> bool:
        """Ended *and recorded*: until the reply is in the session file the session stays busy."""
        return self.ended


def run(calls: ModelCalls, gen: Generation, request: Request, on_piece: Callable[[Generation, str], None],
        record: Callable[[Generation], None]) -> None:
    """Read the reply to its end (or a stop, or an error), then ``record`` it exactly once.

    The worker gives the session back after this returns, so the reply is in the
    session file before a message sent next can be budgeted without it.
    """
    try:
        _read(calls, gen, request, on_piece)
    finally:
        gen.pieces = [gen.text]              # one string, not one object per token
        try:
            record(gen)
        except Exception:
            log.exception("recording the reply for %s failed", gen.session)


def _read(calls: ModelCalls, gen: Generation, request: Request, on_piece) -> None:
    """Fill ``gen`` from the stream and set its status; errors become its ``error``.  The call's end
    (``calls.stream``) says whether the reply was cut at its cap: ``gen.cut_at`` then holds the cap."""
    call = None
    try:
        with calls.stream(gen, request, fit_reply=True) as call:
            gen.status = "running"
            for piece in call:
                gen.pieces.append(piece)
                on_piece(gen, piece)
            if call.looped:                  # stopped at the loop's first turn (issue 44): that much is kept
                gen.pieces, gen.status = [call.text], "looped"
                return
            if call.cancelled:
                raise Cancelled("stopped")
        gen.status = "done"
        if call.cut_off:
            gen.cut_at = request.num_predict
    except Cancelled:
        gen.status = "interrupted" if gen.interrupted else "stopped"
    except ModelError as exc:
        if gen.interrupted or gen.stopped:
            gen.status = "interrupted" if gen.interrupted else "stopped"
        else:
            gen.error, gen.status = exc, "error"
            log.warning("reply for %s failed: %s", gen.session, exc)
    except Exception as exc:                 # never leave a page waiting for ever
        gen.error, gen.status = ModelError(f"Unexpected failure: {exc}"), "error"
        log.exception("reply for %s crashed", gen.session)
    finally:
        if call is not None:
            gen.usage, gen.warning = call.usage, call.warning


def continued_turn(done: fountain.Turn, gen: Generation, before: fountain.Turn, backend: str) -> fountain.Turn:
    """A continuation's turn (``done``, from ``recorded_turn``) as the session keeps it (issue 43): its stats
    count the whole reply (the part before and the rest); one that did not end by itself (failed,
    stopped, interrupted) keeps all it added and the mark of ``before`` (cut at its cap, or stopped as a
    loop), so Continue works again, and says what happened in a notice, not as the reply's error."""
    figures = fountain.stats_figures(before.stats)
    usage = gen.usage
    if figures is not None and usage is not None:
        reply, _, seconds = figures
        done.stats = fountain.stats_line(gen.model, backend, reply + (usage.generated_tokens or 0),
                                         usage.prompt_tokens or 0, seconds + usage.seconds)
    elif done.stats is None:
        done.stats = before.stats
    if gen.status == "done":
        return done
    mark = [n for n in before.notes if notes.is_cut(n) or notes.is_looped(n)]
    kept = [n for n in done.notes if not notes.says_how_it_ended(n)]
    what = ("was stopped" if gen.status in ("stopped", "looped") else "was interrupted" if gen.status == "interrupted"
            else f"failed ({gen.error})")
    done.notes = [*kept, *mark, notes.notice(f"The continuation {what}: what it added is kept, and Continue "
                                             "asks for the rest again.")]
    return done


def recorded_turn(gen: Generation, base: fountain.Turn, backend: str) -> fountain.Turn:
    """The turn as the session file keeps it once ``gen`` ended: the reply, its stats line, and the
    notes that say how it ended (stopped, interrupted by a shutdown, the server's error, cut at its
    cap, what the calibration noticed)."""
    ended = []
    if gen.status == "interrupted":       # shutdown: what arrived, and a note that offers Re-send
        ended.append(notes.interrupted(gen.interrupted or "the server stopped"))
    elif gen.status == "stopped":
        ended.append(notes.stopped())
    elif gen.status == "looped":
        ended.append(notes.looped())
    elif gen.status == "error" and gen.error is not None:
        ended.append(notes.error(getattr(gen.error, "kind", "error"), str(gen.error)))
    if gen.cut_at and gen.status == "done":
        ended.append(notes.cut(gen.cut_at))
    if gen.warning:
        ended.append(notes.notice(gen.warning))
    usage = gen.usage
    stats = None
    if usage is not None:
        stats = fountain.stats_line(gen.model, backend, usage.generated_tokens or 0, usage.prompt_tokens or 0,
                                    usage.seconds)
    reply = gen.text if (gen.text or usage is not None) else None
    return fountain.Turn(when=base.when, user_text=base.user_text, model=gen.model, reply=reply, stats=stats,
                         notes=[*base.notes, *ended])
