"""The context budget: how many tokens the next request may still use.

    remaining = window − system − history − memories − retrieved − files − reply − margin

computed in one place, by component, for one model (seeds 000 and 003). The
window is what the app sends as ``options.num_ctx`` on every request for that
model, so Ollama never works in a window we did not budget for.

Token counts are the model's own where the app has its tokenizer (issue 30: ``Budget.counter``,
``ModelServer.counter``; the chat template's cost per message and per request learnt once per
model, ``TemplateCosts``). Otherwise they are estimates: UTF-8 bytes divided by a bytes-per-token
figure that starts at 4 (seed 000) and is calibrated per model and kind of text (chat, prose,
Markdown, HTML, source, non-English) from the server's own prompt token count (``Usage``)
after every call (``Calibration``).

For chunked analysis (issue 14) it also gives the reply budget of the map calls
(``map_reply_budget``) and the cost of a planned analysis in calls, tokens and time from the
measured speeds (``estimate_analysis``).
"""

from __future__ import annotations

import json
import math
import re
import statistics
import threading
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from .config import Config
from .storage import atomic_write_text

if TYPE_CHECKING:
    from .modelserver import ModelServer, Usage

# Chat templates add a few tokens around every message (role markers).
MESSAGE_OVERHEAD_TOKENS = 4
MIN_BPT, MAX_BPT = 1.0, 8.0
# A prompt this long is read, and its reply written, at other speeds than a chat turn's few dozen
# tokens (attention over the whole prompt): SmolLM2-135M here read 460-945 tokens a second in short chat
# turns and 191-283 in 1,500-token chunks, and wrote 85-113 a second after the first and 44-60 after the
# second (bench/bench_time_estimate.py).  Chunks are timed at a long prompt's speeds; until one is seen,
# writing at LONG_PROMPT_FACTORS[1] of the short turns' speed, and reading at the lower of
# LONG_PROMPT_FACTORS[0] of their reading speed (which varies twofold between runs: a few dozen tokens
# say little) and LONG_READ_PER_WRITE times the writing speed (reading ran at 3.7-5.1 times writing in
# long prompts here; a GPU reads far faster, where this errs long).
LONG_PROMPT_TOKENS = 1000
LONG_PROMPT_FACTORS = (0.4, 0.6)
LONG_READ_PER_WRITE = 4.0
MAP_SHARE_SUFFIX = " (map calls)"     # the key a model's map replies' share is kept under
SAMPLES_KEPT = 15
# An exact count of less text than this says too little about a kind (a heading, a title page).
EXACT_SAMPLE_MIN_BYTES = 1000
# A server prompt count this far below the estimate means the server cut the prompt.
TRUNCATION_RATIO = 0.6


def estimate_tokens(text: str, bytes_per_token: float = 4.0) -> int:
    """Tokens in ``text``: UTF-8 bytes / bytes-per-token, rounded up."""
    return math.ceil(len(text.encode("utf-8")) / bytes_per_token) if text else 0


def estimate_messages(messages: list[dict], bytes_per_token: float, recorded: dict[str, int] | None = None) -> int:
    """Tokens of a chat request's messages, template overhead included; a text in ``recorded`` (the
    count its server gave, ``Budget.recorded``) is taken at no less than that count."""
    recorded = recorded or {}
    return sum(max(estimate_tokens(text, bytes_per_token), recorded.get(text, 0)) + MESSAGE_OVERHEAD_TOKENS
               for text in (m.get("content") or "" for m in messages))


def count_messages(messages: list[dict], counter, template: tuple[int, int]) -> int:
    """Tokens of a chat request's messages by the model's own ``counter``, with the template's
    cost per message (``template[0]``; the per-request part is the caller's)."""
    return sum(counter.count(m.get("content") or "") for m in messages) + template[0] * len(messages)


def observed_bpt(messages: list[dict], prompt_tokens: int | None) -> float | None:
    """The bytes per token one call's server count shows (None: too small to say anything)."""
    size = sum(len((m.get("content") or "").encode()) for m in messages)
    content_tokens = (prompt_tokens or 0) - MESSAGE_OVERHEAD_TOKENS * len(messages)
    if size < 200 or content_tokens <= 0:
        return None
    return min(MAX_BPT, max(MIN_BPT, size / content_tokens))


def context_window(config: Config, model: str, trained: int | None, memory: int | None = None) -> int:
    """The window sent as num_ctx: configured, else min(trained, default); never more than
    ``memory``, the largest window the model server's machine holds (``ModelServer.memory_window``)."""
    return window_limit(config, model, trained, memory)[0]


def window_limit(config: Config, model: str, trained: int | None,
                 memory: int | None = None) -> tuple[int, str]:
    """The window and what sets it: "configured", "trained", "default" or "memory" (the status
    line says so when it is the memory, not the model)."""
    configured = config.model(model).context_window
    default = config.model_server.default_context_window
    if configured:
        window, why = configured, "configured"
    elif trained and trained < default:
        window, why = trained, "trained"
    else:
        window, why = default, "default"
    return (memory, "memory") if memory is not None and memory < window else (window, why)


@dataclass
class Budget:
    """The next request's budget for one model, by component (tokens)."""

    model: str
    window: int                      # sent as num_ctx
    effective: int                   # what the budget is computed against
    bytes_per_token: float
    components: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)   # what did not fit, in words
    dropped: list[str] = field(default_factory=list)   # the costly past turns left out, named (``fit_history``)
    limited_by: str = ""             # what sets the window (``window_limit``): "memory" is said on the page
    counter: object | None = None    # the model's exact counter (tokens.Counter); None: bytes per token
    template: tuple[int, int] = (MESSAGE_OVERHEAD_TOKENS, 0)   # tokens per message, per request
    # Texts the server counted (a past reply, by its stats line: ``chat.prepare.recorded_sizes``): where
    # the sizes are estimated, such a text is taken at no less than that count.
    recorded: dict[str, int] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        """The sizes are the model's own counts, not estimates."""
        return self.counter is not None

    @property
    def used(self) -> int:
        return sum(self.components.values())

    @property
    def remaining(self) -> int:
        return self.effective - self.used

    @property
    def low(self) -> bool:
        """Less than 20% of the window left: the status line says so."""
        return self.remaining < 0.2 * self.effective

    def reserve(self, component: str, tokens: int) -> bool:
        """Take ``tokens`` for ``component`` from the shared pool, if they fit.

        Everything that adds context to a turn (memories, retrieved chunks,
        files) reserves here, so nothing is squeezed past the window.
        """
        if tokens > self.remaining:
            return False
        self.components[component] = self.components.get(component, 0) + tokens
        return True

    def estimate(self, text: str) -> int:
        """Tokens of ``text``: counted when the model's counter is known, else estimated."""
        if self.counter is not None:
            return self.counter.count(text)
        return estimate_tokens(text, self.bytes_per_token)

    def messages_cost(self, messages: list[dict]) -> int:
        """Tokens of ``messages`` with the template's per-message cost (counted or estimated)."""
        if self.counter is not None:
            return count_messages(messages, self.counter, self.template)
        return estimate_messages(messages, self.bytes_per_token, self.recorded)


def new_budget(config: Config, model: str, trained: int | None, bytes_per_token: float,
               memory: int | None = None, *, counter=None, template: tuple[int, int] | None = None) -> Budget:
    """A budget with the fixed reservations (reply, safety margin) taken.  ``memory``: the largest
    window the server's machine holds (None: no cap known); ``counter``: the model's exact counter
    (``ModelServer.counter``), ``template``: its learnt template cost."""
    window, why = window_limit(config, model, trained, memory)
    effective = min(config.model(model).effective_context or window, window)
    budget = Budget(model, window, effective, bytes_per_token, limited_by=why, counter=counter,
                    template=template or (MESSAGE_OVERHEAD_TOKENS, 0))
    budget.components["reply"] = min(config.budget.reply_tokens, effective // 4)
    budget.components["margin"] = math.ceil(margin_share(config, counter is not None) * effective)
    return budget


# What an exact count cannot know (issue 30): the template's tokens before a reply has taught them
# (``DEFAULT_TEMPLATE`` over-counts then), a token where separately counted parts meet, a server whose
# own tokenizer differs at the edges.  The configured margin is for the estimate's error.
EXACT_MARGIN = 0.02


def margin_share(config: Config, exact: bool) -> float:
    """The share of the window kept free: the configured safety margin for an estimate, at most
    ``EXACT_MARGIN`` when the sizes are the model's own counts."""
    return min(config.budget.safety_margin, EXACT_MARGIN) if exact else config.budget.safety_margin


def fit_history(budget: Budget, system: str, turns: list[list[dict]],
                expendable: list[str | None] | None = None) -> tuple[list[dict], int]:
    """The past turns that fit after the system prompt, in order; and how many were left out.

    ``turns`` holds each past turn's messages (user, assistant), oldest first.  When they do not all
    fit, the turns that cost most for least go first (issue 44): those ``expendable`` names (a long
    analysis answer, a reply cut at its cap or stopped in a loop: ``expendable[i]`` says what turn ``i``
    is, None for an ordinary turn), the costliest of them first; then the oldest.  What went is said in
    ``budget.dropped``.  Turns leave the request, never the session file.
    """
    budget.components["system"] = budget.messages_cost([{"content": system}]) + budget.template[1]
    costs = [budget.messages_cost(messages) for messages in turns]
    room = budget.remaining
    total = sum(costs)
    dropped: set[int] = set()
    labels = expendable or [None] * len(turns)
    for i in sorted((i for i, label in enumerate(labels) if label), key=lambda i: -costs[i]):
        if total <= room:
            break
        dropped.add(i)
        total -= costs[i]
    for i in range(len(turns)):
        if total <= room:
            break
        if i not in dropped:
            dropped.add(i)
            total -= costs[i]
    budget.components["history"] = total
    budget.dropped = [f"{labels[i]} ({costs[i]:,} tokens)" for i in sorted(dropped) if labels[i]]
    return [m for i, messages in enumerate(turns) if i not in dropped for m in messages], len(dropped)


# -- kinds of text --------------------------------------------------------------------------

# What one bytes-per-token figure is kept for.  "chat" is what chat turns send (and what a
# caller that gives no kind learns); the others are documents read by the chunker, by
# chunking kind, plus "foreign" for words a tokenizer trained mostly on English splits finely
# (another language, or terse lines of few words) and "data" for text where numbers and symbols
# outweigh words (logs, CSV, measurements).
CALIBRATION_KINDS = ("chat", "prose", "markdown", "html", "source", "foreign", "data")
# Until a kind has its own samples, its figure is the model's chat figure (or the default)
# times this factor: SmolLM2's tokenizer on real texts of each kind, median bytes per token
# relative to English prose (bench/bench_token_kinds.py: prose 4.57, Markdown 3.13, HTML
# text 3.08, source 3.81, non-English 2.30; bench/bench_text_kinds.py: logs and CSV 0.24 to
# 0.43 of English), rounded down.  Gemma 3's and Llama 3's larger vocabularies are less
# extreme, so these err on the side of more, smaller chunks.
KIND_FACTORS = {"chat": 1.0, "prose": 1.0, "markdown": 0.68, "html": 0.66, "source": 0.80,
                "foreign": 0.50, "data": 0.30}
# What each kind is called where the card says how a file was sized.
KIND_WORDS = {"chat": "chat", "prose": "English prose", "markdown": "Markdown", "html": "web page text",
              "source": "source code", "foreign": "text in another language or of few words",
              "data": "numbers and symbols (a log, a table)"}
_ENGLISH = frozenset("the of and to a in is that for it as with was on be by are this or "
                     "from at an not which have".split())
# The commonest small words of other languages (those that are also English words left out):
# German, French, Spanish, Italian, Portuguese, Dutch, Polish, Swedish, Danish and Norwegian,
# Finnish, Czech, Turkish, Romanian, Indonesian, Vietnamese, Hungarian and Latin.
_OTHER = frozenset("""
    der die das und ist nicht mit sich auf für ein eine den dem des von zu im auch es sie wir
    le la les et est des une du que qui pour dans sur pas avec ce il elle nous vous au aux
    el los las y es del por para con una se lo su al más como pero
    di che è e della gli sono non nel alla delle anche
    o os da não uma com em dos das é ao uma
    het een en van niet op dat voor zijn ook bij naar wordt
    w nie się na z że jest jak po dla oraz jako
    och att det som är på med av inte till ett har om
    og er til ikke af jeg
    ja ei että kun tai mutta myös
    je že ale jako pro
    ve bir bu için ile olarak
    și în cu nu un este pe mai
    dan yang di ini itu dengan untuk tidak dari ke akan pada dalam
    và của là có không những được cho
    az és hogy nem egy meg vagy csak
    et non ut cum sed quod sunt
""".split())


def calibration_kind(kind: str, text: str) -> str:
    """The calibration kind for a document of chunking ``kind`` ("prose", "markdown", "html",
    "source"; "html" text is the loader's text) whose text starts with ``text``: a guess, the
    only one the token estimate makes, measured on a labelled corpus (tests/test_text_kinds.py).

    Where numbers and symbols outweigh words it is "data".  Prose and Markdown mostly in
    non-ASCII letters, or with more of another language's small words than of English's, are
    "foreign"; so is text of few words and no small words in any language that has a share of
    numbers or symbols (a word list, a configuration).  An English list of plain words (titles,
    keywords) keeps its kind: its words are the tokenizer's own.  Looks at the first 20,000
    characters.
    """
    if kind not in CALIBRATION_KINDS:
        kind = "prose"
    if kind in ("source", "chat"):
        return kind
    sample = text[:20000]
    marks = [ch for ch in sample if not ch.isspace()]
    if not marks:
        return kind
    # a letter with its combining signs (Devanagari's vowel signs are marks, not letters)
    letters = [ch for ch in marks if ch.isalpha() or unicodedata.category(ch).startswith("M")]
    digits = sum(1 for ch in marks if ch.isdigit()) / len(marks)
    symbols = 1 - digits - len(letters) / len(marks)
    if len(marks) >= 200 and (digits >= 0.12 or digits + symbols >= 0.30):
        return "data"
    if not letters:
        return kind
    non_ascii = sum(1 for ch in letters if ord(ch) > 127) / len(letters)
    if len(letters) >= 200 and non_ascii > 0.3:
        return "foreign"          # (Japanese or Chinese has no spaces: judged by its letters, not its words)
    words = [w.strip(".,;:!?()[]*_`'\"«»¿¡") for w in sample.lower().split()]
    if len(words) < 50:
        return kind
    english = sum(1 for w in words if w in _ENGLISH) / len(words)
    other = sum(1 for w in words if w in _OTHER) / len(words)
    if english >= 0.06 and english >= other:
        return kind
    if other >= 0.04 or digits + symbols >= 0.10:
        return "foreign"
    return kind


class Calibration:
    """Bytes per token per model and kind of text, learned from the server's prompt token counts.

    Keeps the last few observations per model and kind and uses their median (robust to an
    outlier such as a cached prompt), bounded to a sane range, and persisted to a small JSON
    file so a restart keeps what was learned.  A kind with no samples yet uses the model's
    chat figure (or the default) times ``KIND_FACTORS[kind]``.  The file keeps the chat
    samples under "bytes_per_token" as before (older files load unchanged) and the others
    under "by_kind".  It also keeps each model's reading and writing speed and how much of
    ``num_predict`` replies use, and each embedding model's seconds per piece, for time estimates.
    """

    def __init__(self, path: Path | None, default_bpt: float = 4.0):
        self.path = path
        self.default = default_bpt
        self._samples: dict[str, list[float]] = {}
        self._kinds: dict[str, dict[str, list[float]]] = {}
        self._speed: dict[str, tuple[float, float]] = {}
        self._long_prompt_speed: dict[str, tuple[float, float]] = {}   # the speeds with prompts of LONG_PROMPT_TOKENS+
        self._reply_share: dict[str, float] = {}
        self._embed_seconds: dict[str, float] = {}   # seconds per embedded piece, per embedding model
        self._lock = threading.Lock()
        # issue 30: each model's chat-template cost, kept beside this file
        self.templates = TemplateCosts(path.with_name("template_cost.json") if path else None)
        if path and path.exists():
            self._load()

    def _list(self, model: str, kind: str | None, create: bool = False) -> list[float] | None:
        if kind is None or kind == "chat":
            return self._samples.setdefault(model, []) if create else self._samples.get(model)
        if create:
            return self._kinds.setdefault(model, {}).setdefault(kind, [])
        return self._kinds.get(model, {}).get(kind)

    def bytes_per_token(self, model: str, kind: str | None = None, conservative: bool = False) -> float:
        """The figure to divide UTF-8 bytes by for ``model`` and ``kind`` (None: chat).

        ``conservative`` gives the smallest recent sample instead of the median (more tokens
        estimated): for sizing requests that must never exceed the window.
        """
        if kind is not None and kind not in CALIBRATION_KINDS:
            raise ValueError(f"kind must be one of {CALIBRATION_KINDS}")
        with self._lock:
            samples = self._list(model, kind)
            if samples:
                return min(samples) if conservative else statistics.median(samples)
            chat = self._samples.get(model)
            base = (min(chat) if conservative else statistics.median(chat)) if chat else self.default
        return max(MIN_BPT, base * KIND_FACTORS.get(kind or "chat", 1.0))

    def samples(self, model: str, kind: str | None = None) -> int:
        with self._lock:
            return len(self._list(model, kind) or [])

    def observe(self, model: str, messages: list[dict], usage: "Usage | None", kind: str | None = None,
                num_predict: int | None = None) -> str | None:
        """Learn from one finished call (bytes per token, speed, reply length) and save once.

        ``kind``: the calibration kind of what the prompt carries (a map call: its document's
        ``calibration_kind``); None is a chat turn.  ``num_predict``: the reply budget sent,
        to learn how much of it replies use.  Returns a warning when the counts show the
        server cut the prompt.
        """
        if usage is None:
            return None
        warning = self._learn_size(model, messages, usage.prompt_tokens, kind)
        self._learn_speed(model, usage)
        if num_predict and usage.generated_tokens:
            share = min(1.0, usage.generated_tokens / num_predict)
            # a chat turn's and a map call's replies fill their budgets differently (issue 45: chat replies
            # of a tenth of their 1,024 made the card expect map replies of a tenth of theirs): kept apart
            key = model if kind is None else f"{model}{MAP_SHARE_SUFFIX}"
            with self._lock:
                old = self._reply_share.get(key)
                self._reply_share[key] = share if old is None else 0.7 * old + 0.3 * share
        self._save()
        return warning

    def observe_count(self, model: str, kind: str, text: str, tokens: int) -> bool:
        """Learn from a server's exact count of ``text`` (llama-server's ``/tokenize``): the text
        alone, no chat template, so it is the kind's figure itself, known before any call on it.
        False (nothing kept) when the text is too small to say anything."""
        size = len(text.encode())
        if kind not in CALIBRATION_KINDS or size < EXACT_SAMPLE_MIN_BYTES or tokens <= 0:
            return False
        with self._lock:
            samples = self._list(model, kind, create=True)
            samples.append(min(MAX_BPT, max(MIN_BPT, size / tokens)))
            del samples[:-SAMPLES_KEPT]
        self._save()
        return True

    def _learn_size(self, model: str, messages: list[dict], prompt_tokens: int | None,
                    kind: str | None = None) -> str | None:
        """One bytes-per-token sample, unless the call was too small or cut."""
        if not prompt_tokens:
            return None
        # the kind's own figure if learned, else the chat one unscaled: a conservative prior
        # must not make a sparse text look cut
        check_bpt = (self.bytes_per_token(model, kind) if self.samples(model, kind)
                     else self.bytes_per_token(model))
        estimate = estimate_messages(messages, check_bpt)
        if estimate >= 256 and prompt_tokens < TRUNCATION_RATIO * estimate:
            return (f"The model server read only {prompt_tokens} prompt tokens where about {estimate} were sent: "
                    "the server may have cut the conversation silently (an old Ollama ignores "
                    "truncate: false). Earlier context may be missing from that reply.")
        observed = observed_bpt(messages, prompt_tokens)
        if observed is None:
            return None
        with self._lock:
            samples = self._list(model, kind, create=True)
            samples.append(observed)
            del samples[:-SAMPLES_KEPT]
        return None

    def speed(self, model: str, long_prompts: bool = False) -> tuple[float, float] | None:
        """(prompt tokens/s, reply tokens/s) measured on this machine, if known.  ``long_prompts``: the
        speeds with prompts of ``LONG_PROMPT_TOKENS`` or more (a chunk's): measured once such a prompt
        was read, else the short prompts' times ``LONG_PROMPT_FACTORS`` (issue 45: a card timed at a
        chat turn's speeds said 0.2 minutes for a run of 1.3)."""
        with self._lock:
            speed = self._speed.get(model)
            if speed is None or not long_prompts:
                return speed
            known = self._long_prompt_speed.get(model)
            if known:
                return known
            write = speed[1] * LONG_PROMPT_FACTORS[1]
            return (min(speed[0] * LONG_PROMPT_FACTORS[0], write * LONG_READ_PER_WRITE), write)

    def reply_share(self, model: str, maps: bool = False) -> float | None:
        """Smoothed share of num_predict that this model's replies used (None: not seen yet); ``maps``: its
        map calls' replies (a chunk's answer), learned apart from chat turns'."""
        with self._lock:
            return self._reply_share.get(f"{model}{MAP_SHARE_SUFFIX}" if maps else model)

    def embed_seconds(self, model: str) -> float | None:
        """Seconds one passage piece takes to embed with ``model`` on this machine (None: no batch
        measured yet), for the card's indexing estimate."""
        with self._lock:
            return self._embed_seconds.get(model)

    def observe_embed(self, model: str, pieces: int, seconds: float) -> None:
        """Learn from one finished embed batch of ``pieces`` pieces that took ``seconds`` (wall time:
        the embed endpoints report no timings), smoothed like the chat speeds, and save."""
        if pieces <= 0 or seconds <= 0:
            return
        now = seconds / pieces
        with self._lock:
            old = self._embed_seconds.get(model)
            self._embed_seconds[model] = now if old is None else 0.7 * old + 0.3 * now
        self._save()

    def _learn_speed(self, model: str, usage: "Usage") -> None:
        """Keep a smoothed reading speed and writing speed from the server's own times."""
        if not (usage.prompt_tokens and usage.prompt_seconds and usage.generated_tokens
                and usage.generate_seconds):
            return
        now = (usage.prompt_tokens / usage.prompt_seconds, usage.generated_tokens / usage.generate_seconds)
        with self._lock:
            old = self._speed.get(model)
            self._speed[model] = now if old is None else tuple(0.7 * o + 0.3 * n for o, n in zip(old, now))
            if usage.prompt_tokens >= LONG_PROMPT_TOKENS:
                before = self._long_prompt_speed.get(model)
                self._long_prompt_speed[model] = now if before is None else tuple(
                    0.7 * o + 0.3 * n for o, n in zip(before, now))

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
            self._samples = {k: [float(x) for x in v][-SAMPLES_KEPT:] for k, v in data["bytes_per_token"].items()}
            self._speed = {k: (float(v[0]), float(v[1])) for k, v in data.get("speed", {}).items()}
            self._kinds = {m: {k: [float(x) for x in v][-SAMPLES_KEPT:] for k, v in kinds.items()
                               if k in CALIBRATION_KINDS}
                           for m, kinds in data.get("by_kind", {}).items()}
            self._reply_share = {k: min(1.0, max(0.0, float(v)))
                                 for k, v in data.get("reply_share", {}).items()}
            self._embed_seconds = {k: float(v) for k, v in data.get("embed_seconds", {}).items() if float(v) > 0}
            self._long_prompt_speed = {k: (float(v[0]), float(v[1])) for k, v in data.get("long_prompt_speed", {}).items()
                                       if float(v[0]) > 0 and float(v[1]) > 0}
        except (OSError, ValueError, TypeError, AttributeError, KeyError, IndexError):
            # a damaged file only costs the learning
            self._samples, self._speed, self._kinds, self._reply_share = {}, {}, {}, {}
            self._embed_seconds, self._long_prompt_speed = {}, {}

    def _save(self) -> None:
        """Write atomically: a crash leaves the old file or the new one."""
        if not self.path:
            return
        with self._lock:
            text = json.dumps({"bytes_per_token": self._samples, "by_kind": self._kinds,
                               "speed": self._speed, "reply_share": self._reply_share,
                               "embed_seconds": self._embed_seconds, "long_prompt_speed": self._long_prompt_speed})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, text)


# -- the chat template's cost, learnt (issue 30) ------------------------------------------------

# Until a model's first reply says otherwise: more than any common template (ChatML: 5 a message
# and 3 for the reply's turn; Gemma's: 5 and 3; Llama 3's: 5 and 4; 25 with a date line).
DEFAULT_TEMPLATE = (8, 24)
TEMPLATE_OBSERVATIONS = 8


@dataclass(frozen=True)
class Sizing:
    """What sizing a turn, a file or an analysis needs, and nothing more (issue 34): the settings,
    the model server (its windows and token counters) and the calibration (bytes per token,
    template costs, speeds). ``chat.prepare``, ``chat.status`` and ``analysis.plan`` take this
    instead of the whole service bag, so a reader sees they never touch a session, a job or a
    worker; ``Services.sizing`` makes one."""

    config: Config
    models: ModelServer
    calibration: Calibration


class TemplateCosts:
    """What a model's chat template adds to a request, in tokens per message and per request,
    learnt from a reply's ``prompt_tokens`` against the exactly counted content (``observe``).

    One observation (n messages, overhead) per message count is kept, the largest seen (a server
    that reused a cached prompt reports fewer); two different counts give the line through them,
    one gives the whole overhead per message (more than true as soon as there are more messages:
    on the safe side).  Kept in a small JSON file so a restart keeps it."""

    def __init__(self, path: Path | None):
        self.path = path
        self._seen: dict[str, dict[int, int]] = {}
        self._lock = threading.Lock()
        if path and path.exists():
            try:
                data = json.loads(path.read_text())
                self._seen = {m: {int(n): int(o) for n, o in obs.items()} for m, obs in data.items()}
            except (OSError, ValueError, TypeError, AttributeError):
                self._seen = {}

    def cost(self, model: str) -> tuple[int, int]:
        """(tokens per message, tokens per request) for ``model``; ``DEFAULT_TEMPLATE`` until learnt."""
        with self._lock:
            seen = dict(self._seen.get(model) or {})
        if not seen:
            return DEFAULT_TEMPLATE
        if len(seen) == 1:
            (n, overhead), = seen.items()
            return math.ceil(overhead / n), 0
        lo, hi = min(seen), max(seen)
        per_message = max(0, math.ceil((seen[hi] - seen[lo]) / (hi - lo)))
        per_request = max(0, max(o - per_message * n for n, o in seen.items()))
        return per_message, per_request

    def observe(self, model: str, messages: list[dict], prompt_tokens: int | None, counter) -> bool:
        """Learn from one reply of ``model`` whose prompt the server counted ``prompt_tokens``;
        False when the count says nothing (no count, a cut or cached prompt)."""
        if not prompt_tokens or not messages or counter is None:
            return False
        content = sum(counter.count(m.get("content") or "") for m in messages)
        overhead = prompt_tokens - content
        n = len(messages)
        if overhead <= 0 or overhead > 64 * n + 512:      # cut, cached, or not this template at all
            return False
        with self._lock:
            seen = self._seen.setdefault(model, {})
            if seen.get(n, -1) >= overhead:
                return False
            seen[n] = overhead
            for middle in sorted(seen)[1:-1][:max(0, len(seen) - TEMPLATE_OBSERVATIONS)]:
                seen.pop(middle)           # the fewest and the most messages span the line
            text = json.dumps(self._seen)
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, text)
        return True


# -- the generated side of an analysis -------------------------------------------------------

PARTIAL_WORDS = 250          # issue 14: a partial answer of at most 250 words
TOKENS_PER_WORD = 1.4        # English words to tokens (with punctuation and Markdown), a bit over
_WORDS_ASKED = re.compile(r"\b(\d{1,4})\s*(?:-\s*)?words?\b", re.I)
_SENTENCES_ASKED = re.compile(r"\b(\d{1,2}|one|two|three|four|five)\s+(?:short\s+)?sentences?\b", re.I)
_SHORT_ASKED = re.compile(r"\b(?:one|single)\s+(?:line|sentence|word)\b|\b(?:yes or no|briefly|tl;?dr)\b", re.I)
# Instructions whose answer grows with the chunk: no length limit is put in the prompt.
_PROPORTIONAL = re.compile(
    r"\b(?:translat\w*|rewrit\w*|rephras\w*|paraphras\w*|proofread\w*|correct(?:s|ing)?\s+(?:the|all|every)|"
    r"fix\s+(?:the\s+)?(?:grammar|spelling|typos)|convert\w*|reformat\w*|transcri\w*|verbatim|quote\s+(?:all|every)|"
    r"(?:list|extract|copy|find)\s+(?:all|every|each))\b", re.I)
_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


@dataclass(frozen=True)
class ReplyBudget:
    """What one map call may generate: ``num_predict`` tokens, and the word limit written into
    the map prompt (None: the instruction's answer grows with the chunk, no limit is asked)."""

    words: int | None
    num_predict: int


def map_reply_budget(instruction: str, cap: int, words: int = PARTIAL_WORDS) -> ReplyBudget:
    """The reply budget of every map call of an analysis with this ``instruction``.

    ``cap`` is the configured ``chunking.map_reply_tokens`` (the most any map reply may use).
    Generation is the slowest part on a CPU, so a partial answer is asked to stay within
    ``words`` words and ``num_predict`` is just above that, unless the instruction asks for a
    length of its own ("in 100 words", "in two sentences", "in one line") or for an answer that
    grows with the text (translate, rewrite, list every ...): then the whole cap.
    """
    if cap < 1:
        raise ValueError("cap must be positive")
    asked = None
    m = _WORDS_ASKED.search(instruction)
    if m is not None:
        asked = int(m.group(1))
    else:
        m = _SENTENCES_ASKED.search(instruction)
        if m is not None:
            n = m.group(1).lower()
            asked = 25 * (_NUMBERS.get(n) or int(n))
        elif _SHORT_ASKED.search(instruction):
            asked = 40
    if asked is None and _PROPORTIONAL.search(instruction):
        return ReplyBudget(None, cap)
    asked = max(10, asked if asked is not None else words)
    tokens = math.ceil(asked * TOKENS_PER_WORD) + 16        # room to finish the sentence
    return ReplyBudget(asked, min(cap, tokens))


def reduce_batches(part_tokens: Sequence[int], room: int) -> list[list[int]]:
    """Consecutive groups of partial answers (by index) whose tokens fit ``room``, the way the
    reduce phase batches them (an oversize part is alone in its batch)."""
    batches: list[list[int]] = [[]]
    used = 0
    for i, cost in enumerate(part_tokens):
        cost = min(cost, room)
        if used + cost > room and batches[-1]:
            batches.append([])
            used = 0
        batches[-1].append(i)
        used += cost
    return [b for b in batches if b]


@dataclass(frozen=True)
class AnalysisEstimate:
    """What a planned analysis will cost: calls, tokens read and written, and time."""

    map_calls: int
    reduce_calls: int
    prompt_tokens: int         # all requests' prompts
    generated_tokens: int      # expected replies (num_predict x the model's reply share)
    document_tokens: int
    seconds: float | None      # None until the model's speeds are measured

    @property
    def calls(self) -> int:
        return self.map_calls + self.reduce_calls

    @property
    def prompt_per_document_token(self) -> float:
        return self.prompt_tokens / self.document_tokens if self.document_tokens else 0.0


def estimate_analysis(chunk_tokens: Sequence[int], *, map_fixed_tokens: int, map_reply_tokens: int,
                      reduce_room_tokens: int, reduce_fixed_tokens: int, final_reply_tokens: int,
                      speed: tuple[float, float] | None, reply_share: float | None = None,
                      part_overhead_tokens: int = 12, document_tokens: int | None = None,
                      ) -> AnalysisEstimate:
    """The cost of a planned map-reduce analysis, before it runs (for the alert card).

    * ``chunk_tokens``: each chunk's estimated tokens (``ChunkPlan.chunk_tokens``);
    * ``map_fixed_tokens``: a map request's tokens apart from the chunk (system prompt, the
      instruction, label, length line: ``estimate_messages`` of ``map_prompt_overhead``);
    * ``map_reply_tokens``: ``map_reply_budget(...).num_predict``, also used for the
      intermediate combine calls, as the reduce phase does;
    * ``reduce_room_tokens`` / ``reduce_fixed_tokens``: the room for partial answers in one
      reduce request, and the rest of that request; ``final_reply_tokens``: the synthesis'
      num_predict;
    * ``speed``: ``Calibration.speed(model)`` (prompt and reply tokens per second);
    * ``reply_share``: ``Calibration.reply_share(model)``, the share of num_predict replies use
      (None: all of it, the upper bound); ``part_overhead_tokens``: each partial's label.

    Time = prompt tokens / prompt speed + generated tokens / reply speed, summed over the calls
    (model load time is not included).
    """
    share = 1.0 if reply_share is None else max(0.0, min(1.0, reply_share))
    map_out = math.ceil(map_reply_tokens * share)
    prompt = sum(map_fixed_tokens + t for t in chunk_tokens)
    generated = map_out * len(chunk_tokens)
    parts = [map_out + part_overhead_tokens] * len(chunk_tokens)
    reduce_calls = 0
    room = max(1, reduce_room_tokens)
    while True:
        batches = reduce_batches(parts, room)
        if len(batches) <= 1:
            reduce_calls += 1
            prompt += reduce_fixed_tokens + sum(parts)
            generated += math.ceil(final_reply_tokens * share)
            break
        next_parts = []
        for batch in batches:
            reduce_calls += 1
            prompt += reduce_fixed_tokens + sum(parts[i] for i in batch)
            generated += map_out
            next_parts.append(map_out + part_overhead_tokens)
        if len(next_parts) >= len(parts):
            # cannot shrink (the room holds one part at a time): the synthesis still runs, on what
            # fits (not counting it made two chunks look cheaper than one: hypothesis found it)
            reduce_calls += 1
            prompt += reduce_fixed_tokens + min(sum(next_parts), room)
            generated += math.ceil(final_reply_tokens * share)
            break
        parts = next_parts
    seconds = None
    if speed and speed[0] > 0 and speed[1] > 0:
        seconds = prompt / speed[0] + generated / speed[1]
    doc = sum(chunk_tokens) if document_tokens is None else document_tokens
    return AnalysisEstimate(len(chunk_tokens), reduce_calls, prompt, generated, doc, seconds)
