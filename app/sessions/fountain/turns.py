"""Chat turns <-> scenes: the TALKING scenes Harvey writes for a turn, and the turns a screenplay holds."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime
from functools import lru_cache

from .chunks import _read_chunk, chunk_scene
from .codec import _user_cue, model_cue
from .data import HARVEY, TS_FORMAT, Answer, ChunkAnalysis, Element, Scene, Screenplay, Turn
from .parser import _TALKING, _timestamp, collector_paused

# ------------------------------------------------------------ chat helpers

_FORWARD = re.compile(r"Forwarding to (?P<model>.+?)\.?")
_STATS = re.compile(
    r"(?:(?P<models>.+?) · )?(?:\d+ reply \+ \d+ ctx|\d+ prompt \+ \d+ reply tokens) · \S+ · [\d.]+ tok/s"
)
_STATS_SHORT = re.compile(r"(?P<models>.+) · \d[\dhmsµun.]*s")
_ROUTING = re.compile(r"Routing to \S")
_STATE_ACTION = re.compile(r"Harvey and .+ are in chat mode\..*|Model: .*")
_DESCRIBED = re.compile(r"Model: (.+?)(?:\.(?:\s|$)|$)")


def _stats_model(stats: str) -> str | None:
    """The model a stats line names: the last hop, inside "backend (model)" when present."""
    m = _STATS.fullmatch(stats) or _STATS_SHORT.fullmatch(stats)
    if not m or not m["models"]:
        return None
    last = m["models"].split(" → ")[-1].strip()
    inner = re.fullmatch(r".*? \((.+)\)", last)
    return inner[1] if inner else last


_REPLY_TOKENS = re.compile(r"(?P<a>\d+) reply \+ \d+ ctx|\d+ prompt \+ (?P<b>\d+) reply tokens")


def reply_tokens(stats: str | None) -> int | None:
    """The reply's tokens as its server counted them, from a stats line (None: not said)."""
    m = _REPLY_TOKENS.search(stats or "")
    return int(m["a"] or m["b"]) if m else None


_FIGURES = re.compile(r"(?P<reply>\d+) reply \+ (?P<ctx>\d+) ctx · \S+ · (?P<rate>[\d.]+) tok/s")


def stats_figures(stats: str | None) -> tuple[int, int, float] | None:
    """A stats line's reply tokens, context tokens and seconds (from its rate), or None when it says none."""
    m = _FIGURES.search(stats or "")
    if m is None:
        return None
    reply, rate = int(m["reply"]), float(m["rate"])
    return reply, int(m["ctx"]), reply / rate if rate > 0 else 0.0


def _is_stats(text: str) -> bool:
    return bool(_STATS.fullmatch(text) or _STATS_SHORT.fullmatch(text))


def stats_line(model: str, backend: str, reply_tokens: int, context_tokens: int, seconds: float) -> str:
    """Harvey's stats action line, e.g. "ollama (llama3.1:8b) · 312 reply + 1840 ctx · 18.437s · 16.9 tok/s".

    It is the only place the exact model name (with its tag) is written, so
    :func:`turns` reads the model from it.
    """
    head = f"{backend} ({model})"
    elapsed = _go_duration(seconds)
    if not reply_tokens:
        return f"{head} · {elapsed}"
    rate = reply_tokens / seconds if seconds > 0 else 0.0
    return f"{head} · {reply_tokens} reply + {context_tokens} ctx · {elapsed} · {rate:.1f} tok/s"


def _go_duration(seconds: float) -> str:
    """Go's time.Duration String() after Round(ms), as Harvey prints it ("18.437s", "1m2.5s")."""
    ms = max(0, round(seconds * 1000))
    if ms < 1000:
        return f"{ms}ms" if ms else "0s"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, frac = divmod(rest, 1000)
    text = f"{secs}" + (f".{frac:03d}".rstrip("0") if frac else "") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


def new_title_page(user_name: str, model: str, backend: str, when: datetime) -> dict[str, str]:
    """The title page Harvey writes, keys in Harvey's order."""
    return {
        "Title": "Harvey Session",
        "Credit": "Recorded by Harvey",
        "Author": _user_cue(user_name),
        "Date": when.strftime(TS_FORMAT),
        "Draft date": when.strftime("%Y-%m-%d"),
        "Model": f"{model_cue(model)} ({backend})",
        "Backend": backend,
    }


def model_switch_note(model: str, backend: str, when: datetime) -> str:
    """Harvey's note text for a model change: "model switch: NAME (BACKEND) at TS"."""
    return f"model switch: {model} ({backend}) at {when.strftime(TS_FORMAT)}"


def _is_switch(note: str) -> bool:
    return note.startswith("model switch:")


def chat_scene(turn: Turn, user_name: str, workspace: str) -> Scene:
    """The TALKING scene Harvey writes for one turn.

    Model-switch notes go before the user's line, other notes after the reply,
    the stats line last (where Harvey puts it).  "Forwarding to X." is written
    whenever the message went to a model, so a pending turn still names it.
    Further models' replies follow the first, each after its own "Forwarding
    to" line (FOUNTAIN_FORMAT.md's multi-model scene).  The user's cue is the
    turn's own (a turn read from another user's file keeps it).
    """
    user = _user_cue(turn.user or user_name)
    cue = model_cue(turn.model) if turn.model else None
    when = turn.when.strftime(TS_FORMAT) if turn.when else ""
    mode = f" Model: {cue}." if cue else ""
    els = [Element("action", f"Harvey and {user} are in chat mode.{mode} Workspace: {workspace}.")]
    els += [Element("note", n) for n in turn.notes if _is_switch(n)]
    if turn.user_text is not None:
        mention, message = split_mention(turn.user_text)
        if mention:
            els.append(Element("note", mention_note(mention)))
        els.append(Element("dialogue", message, user))
        if cue:
            els.append(Element("dialogue", f"Forwarding to {cue}.", HARVEY))
    if turn.harvey is not None:
        els.append(Element("dialogue", turn.harvey, HARVEY))
    if turn.reply is not None:
        els.append(Element("dialogue", turn.reply, cue or "MODEL"))
    for answer in turn.more:
        other = model_cue(answer.model)
        els.append(Element("dialogue", f"Forwarding to {other}.", HARVEY))
        els.append(Element("dialogue", answer.text, other))
    els += [Element("note", n) for n in turn.notes if not _is_switch(n)]
    if turn.stats:
        els.append(Element("action", turn.stats))
    aside = f", {_SUPERSEDED}" if turn.superseded else f", {_UNANSWERED}" if _unanswered(turn) else ""
    return Scene(f"INT. HARVEY AND {user} TALKING{aside} {when}".rstrip(), els)


# A turn the app leaves out of the model's history keeps a TALKING heading that the terminal Harvey's
# replay skips (it looks for " TALKING "), so its --continue leaves it out too; our reader reads it.
_SUPERSEDED = "REPLACED"
_UNANSWERED = "UNANSWERED"
_ASIDE = re.compile(rf"\s*,\s*(?P<aside>{_SUPERSEDED}|{_UNANSWERED})\b", re.IGNORECASE)


def _unanswered(turn: Turn) -> bool:
    """A message without a reply (pending, failed, declined): Harvey would send it alone."""
    return turn.user_text is not None and turn.reply is None and not turn.more


# The terminal Harvey's @mention, as the app strips it from the history (chat/prepare.py MENTION_AT_START).
_MENTION = re.compile(r"^\s*@([\w.:/\-]+)\s*")
_MENTION_NOTE = "mention:"


def split_mention(text: str) -> tuple[str, str]:
    """(leading ``@model`` mentions as typed, the message Harvey records): the prefix the app's history drops."""
    rest = text
    while rest.startswith("@") and (m := _MENTION.match(rest)):
        rest = rest[m.end():]
    return text[:len(text) - len(rest)], rest


def mention_note(prefix: str) -> str:
    """``mention: @a @b`` for the usual "@a @b " prefix; its exact characters as JSON otherwise."""
    words = prefix.split()
    if prefix == " ".join(words) + " ":
        return f"{_MENTION_NOTE} {' '.join(words)}"
    return f"{_MENTION_NOTE} " + json.dumps(prefix).replace(" ", "\\u0020")


def _read_mention(note: str) -> str | None:
    """The typed prefix a mention note records, or None for any other note."""
    if not note.startswith(_MENTION_NOTE):
        return None
    value = note[len(_MENTION_NOTE):].strip()
    if value.startswith('"'):
        try:
            return str(json.loads(value))
        except ValueError:
            return None
    return value + " "


def turn_scenes(turn: Turn, user_name: str, workspace: str) -> list[Scene]:
    """All scenes for a turn; with an analysis, seed 000's overflow / chunk / answer trio.

    ``turns(Screenplay(scenes=<these>))`` gives the turn back (model as the
    cue unless stats carry the exact name, model-switch notes first).
    """
    user_name = turn.user or user_name
    if turn.analysis is None:
        return [chat_scene(turn, user_name, workspace)]
    if turn.reply is None:
        ask = replace(turn, model=None, analysis=None)
        return [chat_scene(ask, user_name, workspace), chunk_scene(turn.analysis, user_name)]
    # Answered: the terminal Harvey's order, the analysis first, then the turn with its answer as the
    # reply, so its --continue gets the answer (it drops a scene without a user line).
    return [chunk_scene(turn.analysis, user_name, before=True),
            chat_scene(replace(turn, analysis=None), user_name, workspace)]


def turns(play: Screenplay) -> list[Turn]:
    """The chat turns, in order, from TALKING scenes (other scenes are skipped).

    A TALKING scene whose reply comes with no user line answers the turn before
    when that turn has no reply yet (seed 000: the synthesized answer after a
    chunk analysis).  A chunk analysis scene holding the user's instruction
    (seed 000, this app) is attached to the turn before it.  One without it is
    the terminal Harvey's recorder: written while a message's named file was
    analysed, before that message's TALKING scene, so it goes with the turn
    right after it when that turn's message names the file; otherwise (its
    ``/read-chunks``) it is a turn of its own, without a user line, whose reply
    is the synthesis.  A model-switch note written after a reply (where Harvey
    writes it) belongs to the next turn.  HARVEY answering a message itself
    (no "Forwarding to", no model reply, a model named in the scene's state
    line: FOUNTAIN_FORMAT.md's local model) is that model's reply.
    """
    with collector_paused():
        return _read_turns(play)


def _read_turns(play: Screenplay) -> list[Turn]:
    """The work of :func:`turns`, scene by scene."""
    reader = _TurnReader()
    title_model = (play.title_page or {}).get("Model", "").split(" (", 1)[0].strip()
    if title_model:
        reader.known.add(_speaker(model_cue(title_model)))
    pending: tuple[ChunkAnalysis, int] | None = None
    for i, scene in enumerate(play.scenes):
        m = _TALKING.fullmatch(scene.heading)
        reader.index = i
        if m:
            before, rest = len(reader.out), m["rest"]
            reader.scene(scene, m["user"].strip(), _timestamp(rest))
            if "," in rest and (aside := _ASIDE.match(rest)) and aside["aside"].upper() == _SUPERSEDED:
                for turn in reader.out[before:]:
                    turn.superseded = True
            if pending:
                reader.place(*pending, at=before, next_scene=i)
                pending = None
        elif read := _read_chunk(scene):
            analysis, asked, first = read
            if pending:
                reader.place(*pending, at=len(reader.out), next_scene=None)
                pending = None
            if first or not asked:
                pending = (analysis, i, asked)
            elif reader.out:
                reader.out[-1].analysis = analysis
                reader.out[-1].scenes = (reader.out[-1].scenes[0], i)
    if pending:
        reader.place(*pending, at=len(reader.out), next_scene=None)
    if reader.carry and reader.out:
        reader.out[-1].notes += reader.carry
    for turn in reader.out:
        local = reader.local.get(id(turn))
        if local and turn.analysis is None and turn.reply is None and turn.harvey is not None:
            turn.reply, turn.harvey, turn.model = turn.harvey, None, turn.model or local
    return reader.out


class _TurnReader:
    """Walks TALKING scenes in order, the way Harvey's replay does, but keeping everything."""

    def __init__(self) -> None:
        self.out: list[Turn] = []
        self.carry: list[str] = []  # notes seen before the turn they belong to
        self.cur: Turn | None = None
        self.cue: str | None = None  # the reply's cue
        self.forwarded: str | None = None  # the model named by "Forwarding to X."
        self.any_forward = False  # the current turn went through "Forwarding to"
        self.target: str | Answer | None = None  # what a cut-off paragraph continues
        self.described: str | None = None  # the model the scene's state line names
        self.local: dict[int, str] = {}  # turns HARVEY answered itself -> the scene's model
        self.user = ""
        self.when: datetime | None = None
        self.index = 0               # the scene being read
        self.mention = ""            # a mention note's prefix, waiting for the user's line
        # The participants the file introduced (HARVEY, each scene's user, the title page's model,
        # every "Forwarding to" and state line's model): only their cues start a new reply.
        self.known: set[str] = {HARVEY}

    def scene(self, scene: Scene, user: str, when: datetime | None) -> None:
        self.user, self.when, self.target, self.described = user.upper(), when, None, None
        self.mention = ""
        self.known.add(self.user)
        for el in scene.elements:
            if el.kind == "dialogue":
                self.dialogue(el)
            elif el.kind == "note":
                self.note(el.text)
            else:
                self.action(el.text)
        self.finish()

    def start(self, user_text: str | None) -> None:
        self.finish()
        self.cur = Turn(self.when, user_text, notes=self.carry, scenes=(self.index, self.index), user=self.user)
        self.carry, self.any_forward = [], False
        prev = self.out[-1] if self.out else None
        if prev is not None and prev.scenes and prev.scenes[1] == self.index:
            prev.shared = self.cur.shared = True

    def dialogue(self, el: Element) -> None:
        speaker = _speaker(el.character)
        text = f"({el.paren})\n{el.text}" if el.paren else el.text
        if speaker == self.user:
            self.start(self.mention + text)
            self.target, self.mention = "user", ""
        elif speaker == HARVEY:
            if self.cur is None:
                self.start(None)
            fw = _FORWARD.fullmatch(text)
            if fw:
                self.forwarded, self.any_forward, self.target = fw["model"], True, None
                self.known.add(_speaker(model_cue(fw["model"])))
            else:
                self.cur.harvey, self.target = _join(self.cur.harvey, text), "harvey"
        else:
            if self.cur is None:
                self.start(None)
            if (self.cur.reply is not None and speaker not in self.known and self.target is not None
                    and not speaker.startswith("{")):      # (Harvey's templates name everyone "{...}")
                # A capitals line (and a parenthetical line) inside a reply that the terminal Harvey
                # wrote raw after a blank line: the reply's text, not another model's reply.
                self._extend(self.target, f"{el.character}\n({el.paren})\n{el.text}" if el.paren
                             else f"{el.character}\n{el.text}")
                return
            if self.cur.reply is None:
                self.cur.reply, self.cue, self.target = text, el.character, "reply"
            else:  # a further model answers the same message
                self.target = Answer(el.character, text)
                self.cur.more.append(self.target)

    def action(self, text: str) -> None:
        """A stats line, the scene's state line, or a paragraph Harvey's writer cut off at a blank line."""
        if _STATE_ACTION.fullmatch(text) and (m := _DESCRIBED.search(text)):
            self.described = m[1].strip()
            self.known.add(_speaker(model_cue(self.described)))
        elif _ROUTING.match(text):
            self.known.add(_speaker(model_cue(text[len("Routing to "):].strip())))
        cur, target, self.target = self.cur, self.target, None
        if cur is None:
            return
        if _is_stats(text):
            cur.stats = text
            return
        if target is None or _ROUTING.match(text) or _STATE_ACTION.fullmatch(text):
            return
        self._extend(target, text)

    def _extend(self, target: str | Answer, text: str) -> None:
        """``text`` is the next paragraph of what ``target`` names (cut off at a blank line)."""
        cur, self.target = self.cur, target
        if isinstance(target, Answer):
            target.text += "\n\n" + text
        elif target == "reply":
            cur.reply += "\n\n" + text
        elif target == "harvey":
            cur.harvey += "\n\n" + text
        elif target == "user":
            cur.user_text += "\n\n" + text

    def note(self, text: str) -> None:
        self.target = None
        if (prefix := _read_mention(text)) is not None:
            self.mention = prefix          # the message's @model, typed before the words Harvey keeps
            return
        cur = self.cur
        answered = cur is not None and (cur.reply is not None or cur.harvey is not None)
        if cur is None or (_is_switch(text) and answered):
            self.carry.append(text)
        else:
            cur.notes.append(text)

    def finish(self) -> None:
        """Settle the turn's model, then append it or merge a continuation into the turn before."""
        cur, self.cur = self.cur, None
        if cur is None:
            return
        cue, self.cue, forwarded, self.forwarded = self.cue, None, self.forwarded, None
        named = cue or forwarded
        exact = _stats_model(cur.stats) if cur.stats else None
        cur.model = exact if exact and (named is None or model_cue(exact) == model_cue(named)) else named
        for answer in cur.more:  # the stats line may name a further model exactly (its last hop)
            if exact and cur.model != exact and model_cue(answer.model) == model_cue(exact):
                answer.model = exact
        if cur.user_text is not None and cur.reply is None and cur.harvey is not None and not self.any_forward \
                and self.described:
            self.local[id(cur)] = self.described
        prev = self.out[-1] if self.out else None
        # A scene with no user line is the reply the turn before was waiting for (seed 000's
        # answer after a chunk analysis). One without a reply (a compact note) is its own turn.
        if cur.user_text is None and cur.reply is not None and prev is not None and prev.reply is None:
            prev.scenes = (prev.scenes[0], self.index)
            prev.reply = cur.reply
            prev.model = cur.model or prev.model
            prev.stats = cur.stats or prev.stats
            prev.notes += cur.notes
            prev.more += cur.more
            if cur.harvey is not None:
                prev.harvey = _join(prev.harvey, cur.harvey)
        else:
            self.out.append(cur)

    def place(self, analysis: ChunkAnalysis, index: int, asked: bool, at: int, next_scene: int | None) -> None:
        """Put a chunk analysis in the terminal Harvey's layout with its turn (see ``turns``).

        Ours (it holds the instruction) always belongs to the turn right after it; Harvey's
        only when that turn's message names the file (else it is a ``/read-chunks``)."""
        first = self.out[at] if at < len(self.out) else None
        if (first is not None and next_scene == index + 1 and first.analysis is None and first.user_text is not None
                and (asked or (analysis.file and analysis.file in first.user_text))):
            first.analysis = analysis
            first.scenes = (index, first.scenes[1])
            return
        self.out.insert(at, Turn(analysis.when, None, analysis.model or None, analysis.answer,
                                 analysis=analysis, scenes=(index, index)))


@lru_cache(maxsize=256)
def _speaker(character: str) -> str:
    """Who a cue names, to compare with the user and HARVEY ("LLAMA3.2 (chunk 1/3)" -> "LLAMA3.2").

    Cached (bounded): a session has a few characters and asks this for every dialogue."""
    return character.split("(", 1)[0].strip().upper()


def _join(old: str | None, new: str) -> str:
    return new if old is None else old + "\n\n" + new
