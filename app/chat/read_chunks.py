"""``/read-chunks FILE``: an analysis asked for from the file list, not by a message.

It lives with the chat (issue 34): it is a use case of a session's turns, like a message, and
the analysis package below it knows nothing of the chat.

A use case like the chat's: under the session's lock, a card waiting for its
instruction is answered "no" (as a new message would), the session must be free,
and the new turn and its card are written as one change.
"""

from __future__ import annotations

from ..analysis.job import InvalidTransition, Job
from ..sessions import fountain
from .prepare import now
from .status import session_model, status_for


def read_chunks(svc, name: str, file: str) -> Job:
    """Propose the chunked analysis of ``file`` as a new turn of session ``name``; its card asks next."""
    with svc.store.lock(name):
        pending = svc.jobs.open_for(name)
        if pending is not None and pending.state == "proposed":
            try:
                svc.jobs.decline(pending)
            except InvalidTransition:
                pass                      # another device started it: the check below says busy
        svc.activities.check_free(name)
        session = svc.store.load(name)
        model = session_model(svc.sizing, session)
        turn = fountain.Turn(when=now(), user_text=f"/read-chunks {file}", model=model)
        remaining = status_for(svc.sizing, session, model)["remaining"] or 0
        job = svc.jobs.propose(name, len(session.turns), file, "", model, remaining=remaining,
                               turn_text=turn.user_text)
        turn.harvey = f"Chunk analysis of {job.file}: about {job.file_tokens:,} tokens in {job.chunks} chunks."
        try:
            svc.store.append_turn(name, turn)
        except BaseException:
            svc.jobs.discard(job)
            raise
    return job
