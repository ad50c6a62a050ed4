"""The chat's use cases: send, re-send, regenerate, compact and stop.

Each takes explicit arguments (no request object) and returns what happened
(an ``Outcome``); the views render it.  Each is one change of the session: the
session's lock is held from the busy check to the turn's write and the start of
its model work, which takes the session's activity (``work.Activities``) until
the result is recorded.  So two devices sending at once get one turn each, in
order, or a clear "busy": never a lost, doubled or unanswered message.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from markupsafe import escape

from ..analysis import answers, plan
from ..analysis.job import InvalidTransition
from ..errors import Conflict, HarveyError, ModelError
from ..modelserver import Cancelled
from ..render import MarkdownStream
from ..routing import split_mention, unrouted
from ..sessions import fountain, names, notes
from ..sessions.store import Session
from ..storage import why_unwritten
from . import prepare, replies
from .replies import Generation
from .status import session_model

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What a use case did to the session, for the view to show."""

    session: Session
    index: int = -1                  # the turn written (or answered)
    turn: fountain.Turn | None = None
    model: str = ""
    reply: Generation | None = None  # the reply now streaming
    job: object = None               # the analysis card the turn shows
    error: tuple[str, str] | None = None    # (kind, detail) of the error card
    declined: bool = False           # the message was "no" to the card on turn ``index``
    renamed: bool = False            # the session was named after this first message


# -- sending ---------------------------------------------------------------------------

def send(svc, name: str, text: str, model: str | None = None, edit_of: int | None = None,
         allow_missing: bool = False) -> Outcome:
    """Record a message and start its reply (or answer with a card).

    A card waiting for its instruction is answered "no" by a new message (and a
    message that is just "no" ends there).  ``edit_of``: the message edits turn
    ``edit_of`` (the last one): it replaces that turn in the model's history.

    The named files are sized, read and planned first, without the session's lock
    (``_files_first``): a large file never holds the session while it is read.  Under
    the lock the turn is routed again; the files are used only if they were prepared
    for the same words and model (else they are prepared again there).  ``allow_missing``: a named
    file that is not in the workspace is sent as missing, the model told so (else the turn is refused).
    """
    ready = _files_first(svc, name, text, model, allow_missing)
    with svc.store.lock(name):
        pending = svc.jobs.open_for(name)
        if pending is not None and pending.state == "proposed" and _declined(svc, pending):
            if text.strip().lower() == "no":       # a new message answers the card: "no" and carry on
                return Outcome(svc.store.load(name), pending.turn, declined=True)
        svc.activities.check_free(name)
        untitled = svc.store.load(name)
        session = _title_from_first(svc, untitled, text, edit_of)
        retry = notes.retry(edited=True) if _edits_last(session, edit_of) else None
        outcome = _send_locked(svc, session, text, model, retry, ready, allow_missing)
    outcome.renamed = session.title != untitled.title
    return outcome


def resend(svc, name: str, turn: int, model: str | None = None, text: str | None = None,
           allow_missing: bool = False) -> Outcome | None:
    """Send a failed or interrupted last message again, replacing that turn; None when that turn
    is not such a message (the caller sends the form's message as a new turn instead).
    ``text``: the message as corrected (a missing file's near match, issue 33)."""
    with svc.store.lock(name):
        svc.activities.check_free(name)
        session = svc.store.load(name)
        failed = session.turns[turn] if 0 <= turn < len(session.turns) else None
        read = notes.read(failed.notes) if failed is not None else None
        unanswered = failed is not None and (read.error or read.interrupted or failed.reply is None)
        if failed is None or turn != len(session.turns) - 1 or not unanswered or failed.harvey:
            return None
        svc.store.drop_last_turn(name, turn, expect=failed.user_text)
        return _send_locked(svc, svc.store.load(name), text or failed.user_text, model,
                            allow_missing=allow_missing)


def regenerate(svc, name: str, turn: int, model: str | None = None, read_files: bool = True,
               as_list: bool = True) -> Outcome:
    """Ask the last message again (with ``model``): a new turn that replaces it in the history.
    ``read_files`` False: without the files its words name (the file chips' one tap, issue 41);
    ``as_list`` False: a plain chat answer where the app took the message for a list question (issue 45)."""
    with svc.store.lock(name):
        svc.activities.check_free(name)
        session = svc.store.load(name)
        if turn != len(session.turns) - 1 or not session.turns[turn].user_text:
            raise Conflict("Only the last reply can be regenerated; this one is no longer the last.")
        return _send_locked(svc, session, session.turns[turn].user_text, model, notes.retry(edited=False),
                            read_files=read_files, as_list=as_list)


def _declined(svc, job) -> bool:
    """Answer a waiting card "no"; False when another device started it in the meantime."""
    try:
        svc.jobs.decline(job)
        return True
    except InvalidTransition:
        return False


def _edits_last(session: Session, index: int | None) -> bool:
    return index is not None and index == len(session.turns) - 1 and bool(session.turns[index].user_text)


def _title_from_first(svc, session: Session, text: str, edit_of: int | None = None) -> Session:
    """A new session is named after its first message (no model call), unless renamed already; an edit
    of that first message (while it is the only one) names it again, if the name was still the message's
    own (issue 45: the title kept the words the edit replaced)."""
    if edit_of == 0 and len(session.turns) == 1 and session.turns[0].user_text:
        if session.title != names.title_from_message(session.turns[0].user_text):
            return session                       # renamed by the user: theirs stays
    elif session.turns or session.title != names.DEFAULT_TITLE:
        return session
    title = names.title_from_message(text)
    return svc.store.rename(session.name, title) if title and title != session.title else session


@dataclass
class _Ready:
    """A message's files, prepared before the session's lock: for these words and this model."""

    text: str
    model: str
    files: prepare.Prepared | None = None
    error: HarveyError | None = None      # the files refused the turn (recorded under the lock)
    allow_missing: bool = False


def _files_first(svc, name: str, text: str, model: str | None, allow_missing: bool = False) -> _Ready | None:
    """Size, read and plan the files ``text`` names, outside the session's lock (issue 23): the
    expensive part of a send.  The model is read from the session as it is now; if it differs
    under the lock, the files are prepared again there.  None: nothing could be prepared
    (an unknown session or model), or the session is working (a reply, a compact, a running
    analysis): the locked path says why.  Busy is looked at first so a message that will get
    the busy card sizes and reads nothing; the check under the lock stays the one that decides
    (the session may become busy, or free, in between: then the files are prepared there)."""
    if svc.activities.working(name):
        return None
    try:
        model = model or session_model(svc.sizing, svc.store.load(name))
        mentioned, rest = split_mention(text, svc.models.models())
    except (ModelError, HarveyError):
        return None
    model = mentioned or model
    try:
        files = prepare.prepare_files(svc.sizing, rest, model, allow_missing)
        if files.overflow:
            files.plan = plan.plan(svc.sizing, files.overflow[0].name, model, text)
    except (ModelError, HarveyError) as exc:
        return _Ready(rest, model, error=exc, allow_missing=allow_missing)
    return _Ready(rest, model, files, allow_missing=allow_missing)


def _prepared(svc, session: Session, rest: str, model: str, retrying: bool, ready: _Ready | None,
              allow_missing: bool = False, read_files: bool = True):
    """The turn's request: the files from ``ready`` when they were made for these words and model."""
    if ready is None or (ready.text, ready.model, ready.allow_missing) != (rest, model, allow_missing):
        return prepare.prepare(svc.sizing, session.turns, rest, model, retrying=retrying, allow_missing=allow_missing,
                               read_files=read_files)
    if ready.error is not None:
        raise ready.error
    return prepare.prepare(svc.sizing, session.turns, rest, model, retrying=retrying, files=ready.files)


def _send_locked(svc, session: Session, text: str, model: str | None, retry_note: str | None = None,
                 ready: _Ready | None = None, allow_missing: bool = False, read_files: bool = True,
                 as_list: bool = True) -> Outcome:
    """Under the session's lock: route, budget, then record the turn once and start its work.
    ``as_list`` False: a list question on a file that fits is answered in the chat (the list path's undo)."""
    name = session.name
    model = model or session_model(svc.sizing, session)
    turn = fountain.Turn(when=prepare.now(), user_text=text, model=model, reply=None)
    if retry_note:
        turn.notes.append(retry_note)
    index = len(session.turns)
    try:
        installed = svc.models.models()
        mentioned, rest = split_mention(text, installed)
        if mentioned is None and (stray := unrouted(text, installed)):
            turn.notes.append(notes.notice(stray))
        if mentioned and mentioned != model:
            turn.notes.append(notes.model_switch_note(mentioned, svc.store.backend, turn.when))
        turn.model = model = mentioned or model
        prepared = _prepared(svc, session, rest, model, retry_note is not None, ready, allow_missing, read_files)
    except (ModelError, HarveyError) as exc:
        return _refused(svc, name, turn, exc)
    turn.notes.extend(notes.notice(n) for n in prepared.notices)
    if prepared.files:
        turn.notes.append(notes.included([(f.file.name, f.tokens) for f in prepared.files]))
    if prepared.skipped:
        turn.notes.append(notes.offer_chunks(prepared.skipped))
    listing = _list_question(prepared) if as_list else None
    if prepared.overflow or listing is not None:
        job = (svc.jobs.overflow(name, index, turn, prepared) if prepared.overflow    # takes the session for the card
               else svc.jobs.list_in_chat(name, index, turn, prepared, listing))
        try:
            session, index = svc.store.append_turn(name, turn)
        except BaseException:
            svc.jobs.discard(job)         # no turn behind it: the card goes, the session is free
            raise
        if listing is not None:
            svc.jobs.submit(job)          # its turn is written: the list is read now, no card
        return Outcome(session, index, turn, model, job=job)
    gen = Generation(svc.activities.new_id(), name, index, model)
    svc.activities.begin(name, "reply", index, gen)
    try:
        session, index = svc.store.append_turn(name, turn)
    except BaseException:
        svc.activities.end(gen)
        raise
    _start_reply(svc, gen, turn, prepared)
    return Outcome(session, index, turn, model, reply=gen)


def _list_question(prepared: prepare.Prepared):
    """The list the message asks of the one file it reads whole (issue 45: a list, count or total
    question gets the list path whatever the file's size), or None: no such question, several files
    or none, or a file not read (missing, left out).  ``answers.chat_list`` is the guess."""
    if len(prepared.files) != 1 or prepared.skipped or prepared.missing:
        return None
    ask = answers.chat_list(prepared.prompt)
    return ask if ask.op != "none" and ask.target else None


def _refused(svc, name: str, turn: fountain.Turn, exc: HarveyError) -> Outcome:
    """Record the message with an error note: the card says why, and the message is kept."""
    turn.notes.append(notes.error(exc.kind, str(exc)))
    session, index = svc.store.append_turn(name, turn)
    log.info("message in %s not sent: %s", name, exc.kind)
    return Outcome(session, index, turn, turn.model, error=(exc.kind, str(exc)))


def continue_reply(svc, name: str, turn: int) -> Outcome:
    """Ask for the rest of the last reply, cut at its cap: the model sees the reply so far and is
    asked to go on; what it writes is appended to the same reply (the turn is rewritten once, when
    the continuation ends, without its "cut" note, or with a new one if it is cut again).  A reply the
    app stopped as a loop is continued the same way when the user says it was none ("Not a loop?
    Continue", issue 44), and the rest is not watched for a loop."""
    with svc.store.lock(name):
        svc.activities.check_free(name)
        session = svc.store.load(name)
        if turn != len(session.turns) - 1:
            raise Conflict("Only the last reply can be continued; this one is no longer the last.")
        cut = session.turns[turn]
        read = notes.read(cut.notes)
        if cut.reply is None or not (read.cut or read.looped):
            raise Conflict("This reply was not cut at its cap: there is nothing to continue.")
        model = session_model(svc.sizing, session)
        prepared = prepare.continue_request(svc.sizing, session.turns, turn, model, looped=read.looped)
        base = fountain.Turn(when=cut.when, user_text=cut.user_text, model=cut.model,
                             notes=[n for n in cut.notes if not (notes.is_cut(n) or notes.is_looped(n))])
        gen = Generation(svc.activities.new_id(), name, turn, model)
        svc.activities.begin(name, "reply", turn, gen)
    _start_reply(svc, gen, base, prepared, prefix=cut.reply, before=cut)
    return Outcome(session, turn, cut, model, reply=gen)


def _start_reply(svc, gen: Generation, turn: fountain.Turn, prepared: prepare.Prepared, prefix: str = "",
                 before: fountain.Turn | None = None) -> None:
    """Generate in the background; write the reply into the turn when it ends.  ``prefix``: the
    reply so far that this one continues (shown first, recorded with what follows); ``before``: the turn
    it continues (``replies.continued_turn``)."""
    rendering, last_block = MarkdownStream(f"reply-text-{gen.turn}"), [0]

    def on_piece(gen: Generation, piece: str) -> None:
        gen.events.append("piece", str(escape(piece)))
        if (block := rendering.feed(piece)) is not None:     # Markdown as it streams: each block once
            block_id = gen.events.append("block", str(block)).id
            # its tail replaces the pieces before it: a reconnect needs them no more
            gen.events.clear("piece", after=last_block[0])
            last_block[0] = block_id

    def record(gen: Generation) -> None:
        done = replies.recorded_turn(gen, turn, svc.store.backend)
        if before is not None:
            done = replies.continued_turn(done, gen, before, svc.store.backend)
        try:
            svc.store.replace_turn(gen.session, gen.turn, done, expect=turn.user_text)
        except HarveyError:
            log.exception("the reply of turn %d in %s could not be recorded", gen.turn + 1, gen.session)
        except OSError as exc:          # a full or read-only disk (issue 43): what arrived stays on the page
            why = why_unwritten(exc)
            log.error("the reply of turn %d in %s could not be saved: %s", gen.turn + 1, gen.session, why)
            svc.store.hold_unsaved(gen.session, gen.turn, fountain.Turn(
                when=done.when, user_text=done.user_text, model=done.model, reply=done.reply, stats=done.stats,
                notes=[*done.notes, notes.error("unsaved", f"The reply could not be saved: {why}. It is kept on "
                                                           "this page until the app restarts.")]))

    request = prepared.request()
    if prefix:
        gen.pieces.append(prefix)
        on_piece(gen, prefix)
    svc.worker.run(gen, lambda: replies.run(svc.calls, gen, request, on_piece, record), name=f"reply-{gen.session}")


# -- compact -------------------------------------------------------------------------------

def compact(svc, name: str, model: str | None = None) -> Generation | None:
    """Summarise the older turns into one note, in the background like a reply (None: nothing to do).

    The session is busy meanwhile (a second Compact, or a message, is refused) and
    Stop ends it; the note is written only if the summary was made: a stopped or
    failed compact changes nothing.
    """
    with svc.store.lock(name):
        svc.activities.check_free(name)
        session = svc.store.load(name)
        model = model or session_model(svc.sizing, session)
        planned = prepare.compact_request(svc.sizing, session.turns, model)
        if planned is None:
            return None
        gen = Generation(svc.activities.new_id(), name, len(session.turns), model, kind="compact")
        svc.activities.begin(name, "compact", gen.turn, gen)
    request, summarised, left_out = planned
    svc.worker.run(gen, lambda: _run_compact(svc, gen, request, summarised, left_out), name=f"compact-{name}")
    return gen


def _run_compact(svc, gen: Generation, request, summarised: int, left_out: int) -> None:
    """Make the summary and append the note; a stop or an error leaves the session as it was."""
    try:
        summary, gen.usage = svc.calls.text(gen, request)
    except Cancelled:
        gen.status = "interrupted" if gen.interrupted else "stopped"
        return
    except ModelError as exc:
        gen.status, gen.error = ("stopped", None) if gen.stopped else ("error", exc)
        log.warning("compact of %s failed: %s", gen.session, exc)
        return
    except Exception as exc:              # never "stopped" for what was a crash
        gen.status, gen.error = "error", ModelError(f"Unexpected failure: {exc}")
        log.exception("compact of %s crashed", gen.session)
        return
    note = prepare.compact_note(summary, gen.model, summarised, left_out)
    try:
        svc.store.append_turn(gen.session, note)
        gen.status = "done"
    except HarveyError as exc:
        gen.status, gen.error = "error", exc
        log.exception("the compact note of %s could not be recorded", gen.session)


# -- stop ---------------------------------------------------------------------------------------

def stop(svc, name: str, activity_id: str) -> bool:
    """Stop the reply or compact named ``activity_id``; False (nothing done) when it is not the one
    running now: a stale page's Stop never stops another device's newer reply."""
    holder = svc.activities.holder(name)
    if holder is None or holder.kind == "analysis":
        return False              # an analysis is stopped with its card's Cancel
    return svc.activities.stop(name, activity_id)
