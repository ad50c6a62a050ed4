"""One chat turn, from the user's message to the recorded reply.

``prepare`` decides what a message needs before anything is sent: which model
(an ``@name`` at the start routes it), the context budget (system prompt,
history, files), which named files fit and which would overflow (those go to
the chunked-analysis alert instead of the model). The reply itself, and how it is recorded, is ``replies``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from .. import chunking, documents, filenames, routing
from ..errors import Refused
from ..budget import Budget, Sizing, calibration_kind, estimate_tokens, fit_history, new_budget
from ..errors import ModelError
from ..sessions import fountain, notes
from ..work.calls import Request
from ..workspace import Workspace, WorkspaceFile

log = logging.getLogger(__name__)

FILE_BLOCK_TOKENS = 12   # the <file name="..."> wrapper around an included file
EXACT_SAMPLE_CHARS = 32_000   # of a file's sample, counted exactly by a server that can (llama-server)
class TurnRefused(Refused):
    """The message cannot be sent; ``kind`` names the error card (ERROR_TEXTS)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail, kind=kind)


@dataclass
class FileBlock:
    file: WorkspaceFile
    text: str
    tokens: int
    note: str = ""


@dataclass
class Prepared:
    """Everything known about a turn before it is sent."""

    model: str
    prompt: str                       # the user's words the model sees
    messages: list[dict]
    budget: Budget
    left_out_turns: int = 0
    notices: list[str] = field(default_factory=list)    # shown in the chat and recorded
    overflow: list[WorkspaceFile] = field(default_factory=list)   # one file: the alert card
    skipped: list[str] = field(default_factory=list)              # several: named, offered analysis
    files: list[FileBlock] = field(default_factory=list)
    missing: list[filenames.Missing] = field(default_factory=list)   # asked about, not readable; the model is told
    plan: dict | None = None          # the alert card's plan, made before the session's lock (turns.send)

    @property
    def estimate(self) -> int:
        """The request's tokens: counted with the model's counter when it has one (issue 30), else
        the chat's figure for the words and each file's own for its text."""
        if self.budget.exact:
            return self.budget.messages_cost(self.messages) + self.budget.template[1]
        bpt = self.budget.bytes_per_token
        at_chat = sum(estimate_tokens(f.text, bpt) for f in self.files)
        return self.budget.messages_cost(self.messages) - at_chat + sum(f.tokens for f in self.files)

    cap: int = 0                      # chat.reply_tokens: the most the reply may generate (0: the room)
    watch_loops: bool = True          # stop the reply if it repeats itself (off: the user said it was no loop)

    def request(self) -> Request:
        """The chat request: it may generate its reservation and whatever the budget left free, up to
        its own cap (``chat.reply_tokens``): never every free token of the window, which a looping
        model would fill for half an hour on a Pi."""
        room = self.budget.components.get("reply", 0) + max(0, self.budget.remaining)
        return Request(self.model, self.messages, window=self.budget.window,
                       num_predict=min(room, self.cap) if self.cap else room,
                       bytes_per_token=self.budget.bytes_per_token, tokens=self.estimate,
                       watch_loops=self.watch_loops)


def system_prompt(config, workspace: Path) -> str:
    """The workspace's HARVEY.md when there is one (as the terminal Harvey does)."""
    harvey_md = workspace / "HARVEY.md"
    try:
        text = harvey_md.read_text(encoding="utf-8", errors="replace").strip()
        if text:
            return text
    except OSError:
        pass
    return config.system_prompt


def history_turns(turns: list[fountain.Turn], retrying: bool = False) -> list[list[dict]]:
    """Past turns as chat messages, oldest first (``history_entries`` without what each costly one is)."""
    return [messages for messages, _ in history_entries(turns, retrying)]


def history_entries(turns: list[fountain.Turn], retrying: bool = False) -> list[tuple[list[dict], str | None]]:
    """Past turns as chat messages, oldest first, each with what it is when it is one the budget
    leaves out first (``expendable``; None for an ordinary turn).

    A compact note (a summary the model wrote of the turns before it) replaces
    those turns in the request; the session file keeps them all.  A message two
    models answered (the terminal Harvey's multi-model scene) is one user and
    one assistant message holding both replies, each introduced by its model's
    name, so the roles keep alternating.  The terminal Harvey's ``/read-chunks``
    (a chunk analysis with no message) is sent the way Harvey keeps it in its
    history: ``[/read-chunks FILE — N chunk(s)]`` and the synthesis.  A regenerate or
    edit that failed leaves the exchange it meant to replace in place.  ``retrying``:
    the next request asks the last turn again, so its exchange is left out.
    """
    entries: list[tuple[list[dict], str | None]] = []
    added = False                       # is the last entry the newest answered exchange (a retry replaces it)?
    for turn in turns:
        replaced = compacted_turns(turn)
        if replaced is not None:
            entries = [([{"role": "user", "content": f"{COMPACT_INTRO}\n{turn.harvey}"},
                         {"role": "assistant", "content": "Noted."}], None), *entries[replaced:]]
            added = False
            continue
        retry = added and notes.is_retry(turn.notes)
        prompt = _history_prompt(turn) if turn.reply is not None else None
        if prompt is None:
            added = retry               # a failed regenerate or edit keeps the exchange it meant to replace
            continue
        if retry:
            entries.pop()               # regenerated or edited: the model sees only the new attempt
        entries.append(([{"role": "user", "content": prompt},
                         {"role": "assistant", "content": assistant_text(turn)}], expendable(turn)))
        added = True
    if retrying and added:
        entries.pop()                   # the turn being sent again replaces the last exchange
    return entries


def expendable(turn: fountain.Turn) -> str | None:
    """What a past turn is when it costs much for what it gives the next request (issue 44): an analysis
    answer (its file's content lives in the file, and its answer is long), a reply cut at its cap or
    stopped (unfinished), or stopped in a loop; None for an ordinary turn."""
    read = notes.read(turn.notes)
    if turn.analysis is not None:
        return f"the analysis answer on {turn.analysis.file}"
    if read.looped:
        return "a reply stopped as it repeated itself"
    if read.cut:
        return "a reply cut at its cap"
    if read.stopped:
        return "a reply stopped before its end"
    return None


def _history_prompt(turn: fountain.Turn) -> str | None:
    """What the user's side of an answered turn was, as the model is shown it (None: nothing)."""
    if turn.user_text:
        return routing.without_leading_mentions(turn.user_text)   # "@mistral @claude compare"
    if turn.user_text is None and turn.analysis is not None:
        a = turn.analysis
        return f"[/read-chunks {a.file} — {a.chunks} chunk(s)]" + (f"\n{a.instruction}" if a.instruction else "")
    return None


def recorded_sizes(turns: list[fountain.Turn], model: str) -> dict[str, int]:
    """``model``'s past chat replies at the size its server counted (the stats line's "N reply"), by
    their text: where the budget estimates, a reply is never taken as smaller (``Budget.recorded``).
    A small model's own replies can be denser than the prompts its bytes-per-token figure is learnt
    from.  An analysis's stats count every call of it, not its answer: not used."""
    return {turn.reply: tokens for turn in turns
            if turn.reply and turn.analysis is None and not turn.more and turn.model == model
            and (tokens := fountain.reply_tokens(turn.stats))}


def fit_past(budget: Budget, system: str, past: list[fountain.Turn], retrying: bool = False) -> tuple[list[dict], int]:
    """``fit_history`` over the session's past turns, each reply at no less than its recorded size."""
    budget.recorded.update(recorded_sizes(past, budget.model))
    entries = history_entries(past, retrying)
    return fit_history(budget, system, [m for m, _ in entries], [label for _, label in entries])


def assistant_text(turn: fountain.Turn) -> str:
    """The reply as the model is shown it; with further models' replies, each under its name."""
    if not turn.more:
        return turn.reply or ""
    answers = [(turn.model or "MODEL", turn.reply or ""), *((a.model, a.text) for a in turn.more)]
    return "\n\n".join(f"{fountain.model_cue(model)} answered:\n{text}" for model, text in answers)


COMPACT_INTRO = "A summary of our conversation so far:"
COMPACT_PROMPT = ("Summarize the conversation below in one short note (at most 150 words) for your own later "
                  "use: keep facts, names, numbers, decisions and open questions; drop pleasantries.")


def compacted_turns(turn: fountain.Turn) -> int | None:
    """For a compact note: how many history entries before it the summary replaces."""
    if turn.user_text is not None or not turn.harvey:
        return None
    return notes.compacted(turn.notes)


COMPACT_REPLY_TOKENS = 300


def compact_request(sizing: Sizing, turns: list[fountain.Turn], model: str, keep: int = 2) -> tuple[Request, int, int] | None:
    """The request that summarises all but the last ``keep`` turns, with how many turns it
    summarises and how many of the oldest did not fit (None: nothing to summarise).  A costly turn
    (``expendable``: an analysis answer, a cut or looping reply) among the last ones is summarised too,
    with every turn before it (issue 44: Compact freed next to nothing while it kept a long answer)."""
    entries = history_entries(turns)
    kept = 0
    while kept < keep and kept < len(entries) and entries[len(entries) - 1 - kept][1] is None:
        kept += 1
    older = [messages for messages, _ in entries[:len(entries) - kept]]
    if not older:
        return None
    budget = chat_budget(sizing, model)
    budget.components["reply"] = COMPACT_REPLY_TOKENS
    budget.recorded = recorded_sizes(turns, model)
    kept, left_out = fit_history(budget, COMPACT_PROMPT, older)
    transcript = "\n\n".join(f"{m['role'].upper()}: {m['content']}" for m in kept)
    messages = [{"role": "system", "content": COMPACT_PROMPT}, {"role": "user", "content": transcript}]
    request = Request(model, messages, window=budget.window, num_predict=COMPACT_REPLY_TOKENS,
                      bytes_per_token=budget.bytes_per_token)
    return request, len(older), left_out


CONTINUE_PROMPT = ("Your reply above stopped at its length limit. Continue it exactly where it stopped, without "
                   "repeating anything and without any introduction.")
CONTINUE_STOPPED_PROMPT = ("Your reply above was stopped before its end. Continue it exactly where it stopped, "
                           "without repeating anything and without any introduction.")


def continue_request(sizing: Sizing, past: list[fountain.Turn], index: int, model: str,
                     looped: bool = False) -> Prepared:
    """The request for the rest of turn ``index``'s reply, cut at its cap: the history before it,
    that turn's message and its reply so far, and a plain request to go on from there.  ``looped``:
    the reply was stopped as a loop and the user said it was none (issue 44: the guess is undone in one
    tap), so the rest is not watched for one.  Refused
    (``TurnRefused``) when the conversation and the reply leave no room in the window to continue."""
    config = sizing.config
    budget = chat_budget(sizing, model)
    budget.recorded = recorded_sizes([turn := past[index]], model)   # the reply so far (``fit_past`` adds the rest)
    system = system_prompt(config, config.workspace_path)
    exchange = [{"role": "user", "content": _history_prompt(turn) or ""},
                {"role": "assistant", "content": turn.reply or ""},
                {"role": "user", "content": CONTINUE_STOPPED_PROMPT if looped else CONTINUE_PROMPT}]
    budget.components["system"] = budget.messages_cost([{"content": system}]) + budget.template[1]
    budget.components["message"] = budget.messages_cost(exchange)
    try:
        _refuse_too_long(budget)
    except TurnRefused:
        raise TurnRefused("too_long", "The reply so far fills the model's window: there is no room left to "
                                      "continue it. Ask for the rest in a new message, or start a new session.") from None
    history, left_out = fit_past(budget, system, past[:index])
    messages = [{"role": "system", "content": system}, *history, *exchange]
    return Prepared(model, exchange[0]["content"], messages, budget, left_out_turns=left_out,
                    cap=config.chat.reply_tokens, watch_loops=not looped)


def compact_note(summary: str, model: str, summarised: int, left_out: int) -> fountain.Turn:
    """The compact note turn: the summary later requests send instead of the turns it covers."""
    return fountain.Turn(when=now(), user_text=None, model=model, harvey=summary.strip() or "(empty summary)",
                         notes=[notes.compact(summarised, model, left_out)])


# A message sent while its model's counter is loading (the first after a restart: from disk in
# 0.1-3 s, bench/RESULTS.md) waits this long for it, so counts, not an estimate, decide what
# history fits (estimated, a 135M model's own 417-token reply was budgeted at least 31 tokens short, the
# next reply cut to 33 tokens).  A longer build (a 262k vocabulary fetched from a busy Pi) goes on in
# the background: this message is estimated, with the estimate's margin.
COUNTER_WAIT_S = 5.0


def chat_budget(sizing: Sizing, model: str) -> Budget:
    """A new budget for ``model``, counted with its own tokenizer when the server gave one (a
    counter still loading is waited for ``COUNTER_WAIT_S`` at most, then the estimate)."""
    counter = sizing.models.counter(model, wait=COUNTER_WAIT_S)
    template = sizing.calibration.templates.cost(model) if counter is not None else None
    return new_budget(sizing.config, model, sizing.models.window(model), sizing.calibration.bytes_per_token(model),
                      sizing.models.memory_window(model), counter=counter, template=template)


def prepare_files(sizing: Sizing, text: str, model: str, allow_missing: bool = False,
                  read_files: bool = True) -> Prepared:
    """The part of a turn that reads files: the budget of the system prompt, the message and the
    files it names, each file sized, read if it fits, or routed to the card.  It does not depend
    on the session, so ``turns.send`` runs it before taking the session's lock (issue 23).
    ``allow_missing``: a named file that is not there is sent as missing (the model is told),
    not refused (the card's "Send without it").  ``read_files`` False: no word is taken for a file (the
    one tap that undoes the guess: "Send again without them")."""
    config = sizing.config
    budget = chat_budget(sizing, model)
    system = system_prompt(config, config.workspace_path)
    # Seed 003's priority: system prompt, the message and its files first; old turns get what is left.
    budget.components["system"] = budget.messages_cost([{"content": system}]) + budget.template[1]
    budget.components["message"] = budget.messages_cost([{"content": text}])
    _refuse_too_long(budget)
    prepared = Prepared(model, text, [], budget, cap=config.chat.reply_tokens)
    if read_files:
        _add_files(sizing, prepared, text, allow_missing)
    else:
        prepared.notices.append(WITHOUT_FILES)
    return prepared


WITHOUT_FILES = "Sent without reading the files its words name, as you asked."


def prepare(sizing: Sizing, past: list[fountain.Turn], text: str, model: str, retrying: bool = False,
            files: Prepared | None = None, allow_missing: bool = False, read_files: bool = True) -> Prepared:
    """Budget the turn and build its request, or say why it cannot be sent.

    ``retrying``: the turn asks the last one again (Regenerate, Edit); its exchange is left
    out of the history.  ``files``: ``prepare_files`` ran already for this text and model
    (outside the session's lock); only the history is added here."""
    config = sizing.config
    prepared = files or prepare_files(sizing, text, model, allow_missing, read_files)
    budget = prepared.budget
    system = system_prompt(config, config.workspace_path)
    history, prepared.left_out_turns = fit_past(budget, system, past, retrying)
    if prepared.left_out_turns:
        prepared.notices.append(left_out_notice(prepared.left_out_turns, budget.dropped))
    prompt = _with_files(text, prepared.files, prepared)
    prepared.messages = [{"role": "system", "content": system}, *history, {"role": "user", "content": prompt}]
    _refuse_too_long(budget, prepared.estimate)
    return prepared


def left_out_notice(left_out: int, dropped: list[str]) -> str:
    """What the request left out of the history to fit the window: the costly turns by name (issue 44),
    the rest counted."""
    older = left_out - len(dropped)
    parts = list(dropped) + ([f"{older} older turn{'s' if older > 1 else ''}"] if older else [])
    if not dropped:
        return (f"{older} older turn{'s' if older > 1 else ''} left out of this request "
                "to fit the context window (they stay in the session).")
    what = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"Left out of this request to fit the context window: {what} (they stay in the session)."


def _refuse_too_long(budget: Budget, estimate: int | None = None) -> None:
    """The request must leave the reply its reservation (and the margin), not merely fit the window."""
    fixed = budget.components.get("reply", 0) + budget.components.get("margin", 0)
    room = budget.effective - fixed
    needed = estimate if estimate is not None else budget.used - fixed
    if needed > room:
        held = " (all the model server's memory holds)" if budget.limited_by == "memory" else ""
        raise TurnRefused("too_long", f"This message needs about {needed:,} tokens; with room for the reply, "
                                      f"at most {room:,} fit in this model's window of {budget.window:,}{held}.")


def _add_files(sizing: Sizing, prepared: Prepared, text: str, allow_missing: bool = False) -> None:
    """Read the named files that fit; route or skip the ones that would not.

    One file too large for the context goes to the chunked-analysis alert.
    With several files (seed 003), they are included in the order named while
    they fit the shared budget; the rest are named in a note and offered the
    chunked analysis.  Every file is sized from its metadata and a bounded sample
    first (``chunking.measure``), so a file too large is never extracted here.
    """
    config = sizing.config
    named = Workspace(config.workspace_path).named(text)
    files = named.found
    _not_read(config, prepared, named, allow_missing)
    budget = prepared.budget
    for wf in files:
        _refuse_unreadable(wf)
        try:
            tokens, bpt = _file_tokens(sizing, prepared.model, wf, budget.counter)
            if _routed(config, prepared, wf, tokens, len(files)):
                continue
            doc = chunking.read_document(wf.path)
        except (chunking.BinaryDocumentError, documents.UnreadableDocument) as exc:
            raise TurnRefused(getattr(exc, "kind", "unreadable_file"),
                              f"{exc} Nothing was sent to the model.") from None
        except (chunking.ChunkingError, OSError) as exc:
            prepared.notices.append(f"{wf.name} was not included: it could not be read ({exc.__class__.__name__}).")
            continue
        if budget.exact:
            size = budget.estimate(_file_block(wf.name, doc.text))      # the block as sent, counted
        else:
            size = estimate_tokens(doc.text, bpt) + FILE_BLOCK_TOKENS
        block = FileBlock(wf, doc.text, size, doc.decode_note or "")
        if _routed(config, prepared, wf, block.tokens, len(files)):
            continue                     # the sample said it fits, its text says otherwise
        if block.note:
            prepared.notices.append(f"{wf.name}: {block.note}")
        if budget.reserve("files", block.tokens):
            prepared.files.append(block)
        else:
            prepared.skipped.append(wf.name)
    if prepared.skipped:
        n = len(prepared.skipped)
        prepared.notices.append(f"{n} file{'s' if n > 1 else ''} exceeded the context budget and "
                                f"{'were' if n > 1 else 'was'} not included: {', '.join(prepared.skipped)}")


def _not_read(config, prepared: Prepared, named, allow_missing: bool) -> None:
    """Names the message gives that cannot be read (issue 41).  A name the user asked about that is not
    in the workspace, or lies outside it, stops the turn with its near match (the model would invent
    it), unless ``allow_missing`` (the card's "Send without it"): then the model is told only that the
    file could not be read.  Names given in passing change nothing the model sees.  Either way one
    notice under the turn says what was not read."""
    if named.missing and not allow_missing:
        kind = "outside_file" if all(m.outside for m in named.missing) else "missing_file"
        raise TurnRefused(kind, filenames.missing_text(named.missing, config.workspace))
    prepared.missing.extend(named.missing)
    note = named.notice(sent_without=prepared.missing)
    if note:
        prepared.notices.append(note)
    if prepared.missing:
        prepared.budget.reserve("message", prepared.budget.estimate(_missing_note(prepared.missing)))   # its room


def _missing_note(missing: list[filenames.Missing]) -> str:
    """What the model is told of files the user asked about that could not be read: only that, so it
    neither invents them nor refuses the question."""
    said = ", ".join(f"{m.name} ({'outside the workspace' if m.outside else 'no such file in the workspace'})"
                     for m in missing)
    return f"\n\n[Note: {'this file' if len(missing) == 1 else 'these files'} could not be read: {said}.]"


def _routed(config, prepared: Prepared, wf: WorkspaceFile, tokens: int, named: int) -> bool:
    """A file too large for what is left goes to the alert card (the only file named) or is
    skipped and offered the analysis; True when it was routed so (and is not to be read)."""
    remaining = prepared.budget.remaining
    # The threshold's room is for an estimate's error; a counted file needs only to fit (issue 30).
    threshold = 1.0 if prepared.budget.exact else config.chunking.threshold
    too_big = tokens > threshold * remaining
    if too_big and named == 1 and config.chunking.enabled:
        prepared.overflow.append(wf)
        return True
    if too_big or tokens > remaining:
        prepared.skipped.append(wf.name)
        return True
    return False


def _file_tokens(sizing: Sizing, model: str, wf: WorkspaceFile, counter=None) -> tuple[int, float]:
    """A named file's tokens as the prompt carries it (its text in a file block), estimated before it
    is read, and the figure: ``file_tokens`` with the block's own tokens."""
    tokens, bpt, _ = file_tokens(sizing, model, wf, counter, block=True)
    return tokens, bpt


def file_tokens(sizing: Sizing, model: str, wf: WorkspaceFile, counter=None,
                block: bool = False) -> tuple[int, float, bool]:
    """A file's own tokens, the one figure every page gives for it (issue 45: the Files page said 41,478
    for a PDF the card counted at 9,102); the bytes per token behind it; and whether it is the model's
    exact count (the whole text counted) rather than an estimate.

    A Japanese or Markdown file holds far more tokens per byte than chat prose: sized at
    the chat's figure, a file that needs the alert card looked small and was then refused
    as too long.  Every file is sized from its metadata and a sample (``chunking.measure``:
    a text file's size, a PDF's page count and a few pages, a Word file's zip directory), so
    a large file is neither read nor extracted to be measured (issue 23).  With the model's
    counter (issue 30) the sample is counted: exactly when it is the whole text (a text file up to
    ``chunking.SAMPLE_BYTES``), else its counted density times the text's size.  ``block``: as a
    message carries it, in its ``<file name=...>`` block (counted with it when the text is).
    """
    measured = chunking.measure(wf.path)
    wrapper = FILE_BLOCK_TOKENS if block else 0
    if counter is not None and measured.sample:
        sample_bytes = len(measured.sample.encode("utf-8"))
        if not measured.pages and measured.text_bytes <= sample_bytes:
            tokens = counter.count(_file_block(wf.name, measured.sample) if block else measured.sample)
            return tokens, max(1.0, sample_bytes / max(1, tokens)), True
        bpt = max(1.0, sample_bytes / max(1, counter.count(measured.sample)))
        return math.ceil(measured.text_bytes / bpt) + wrapper, bpt, False
    kind = calibration_kind(measured.kind, measured.sample)
    _count_exactly(sizing, model, kind, measured.sample)
    bpt = sizing.calibration.bytes_per_token(model, kind, conservative=True)
    return math.ceil(measured.text_bytes / bpt) + wrapper, bpt, False


def _file_block(name: str, text: str) -> str:
    """An included file as the prompt carries it (``_with_files``)."""
    return f'\n\n<file name="{name}">\n{text}\n</file>'


def _count_exactly(sizing: Sizing, model: str, kind: str, sample: str) -> None:
    """Give a kind of text that has no figure yet the server's exact count of the file's sample
    (llama-server's ``/tokenize``), so the first estimate of it (the alert card's chunks and time,
    the plan's chunk size) is the model's own instead of a guess from other kinds.

    One call per file estimate at most, and only until the kind has a figure: after that the
    calibration has it, and every call on the file refines it. A server without a tokenizer
    (Ollama) answers None without a request; a failure costs nothing but the exact figure.
    """
    if not sample or sizing.calibration.samples(model, kind):
        return
    if len(sample) > EXACT_SAMPLE_CHARS:                 # enough to know the figure, quick to count
        sample = sample[:EXACT_SAMPLE_CHARS].rsplit("\n", 1)[0] or sample[:EXACT_SAMPLE_CHARS]
    try:
        tokens = sizing.models.count_tokens(model, sample)
    except ModelError as exc:
        log.info("no exact token count for %s text from %s: %s", kind, sizing.models, exc)
        return
    if tokens:
        sizing.calibration.observe_count(model, kind, sample, tokens)


def _refuse_unreadable(wf: WorkspaceFile) -> None:
    """A named file that is not text (an image, an archive, a program) stops the turn, whatever its size."""
    try:
        what = documents.sniff(wf.path)
    except OSError as exc:
        raise TurnRefused("unreadable_file", f"{wf.name} could not be read ({exc.strerror or exc}).") from None
    if what:
        raise TurnRefused("unreadable_file", f"{wf.name} is {what}, not text: Harvey reads text, Markdown, HTML, "
                                             "source code, PDF and Word files. Nothing was sent to the model.")


def _with_files(text: str, blocks: list[FileBlock], prepared: Prepared) -> str:
    """The user's message with each included file as a clearly delimited block."""
    parts = [text]
    for block in blocks:
        parts.append(_file_block(block.file.name, block.text))
    if prepared.missing:
        parts.append(_missing_note(prepared.missing))
    skipped = prepared.skipped
    if skipped:
        parts.append(f"\n\n[Note: {len(skipped)} additional file(s) exceeded the context budget and were "
                     f"not included: {', '.join(skipped)}]")
    return "".join(parts)


def now() -> datetime:
    """A turn's time stamp, to the second (as the .spmd files write it)."""
    return datetime.now().replace(microsecond=0)
