"""The context budget: how many tokens the next request may still use.

    remaining = window − system − history − memories − retrieved − files − reply − margin

computed in one place, by component, for one model (seeds 000 and 003). The
window is what the app sends as ``options.num_ctx`` on every request for that
model, so Ollama never works in a window we did not budget for.

Token counts are estimates: UTF-8 bytes divided by a bytes-per-token figure that
starts at 4 (seed 000) and is calibrated per model from Ollama's own
``prompt_eval_count`` after every call (``Calibration``).
"""

from __future__ import annotations

import json
import math
import statistics
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .config import Config
from .storage import atomic_write_text

# Chat templates add a few tokens around every message (role markers).
MESSAGE_OVERHEAD_TOKENS = 4
MIN_BPT, MAX_BPT = 1.0, 8.0
SAMPLES_KEPT = 15
# prompt_eval_count this far below the estimate means the server cut the prompt.
TRUNCATION_RATIO = 0.6


def estimate_tokens(text: str, bytes_per_token: float = 4.0) -> int:
    """Tokens in ``text``: UTF-8 bytes / bytes-per-token, rounded up."""
    return math.ceil(len(text.encode("utf-8")) / bytes_per_token) if text else 0


def estimate_messages(messages: list[dict], bytes_per_token: float) -> int:
    """Tokens of a chat request's messages, template overhead included."""
    return sum(estimate_tokens(m.get("content") or "", bytes_per_token) + MESSAGE_OVERHEAD_TOKENS
               for m in messages)


def context_window(config: Config, model: str, trained: int | None) -> int:
    """The window sent as num_ctx: configured, else min(trained, default)."""
    configured = config.model(model).context_window
    if configured:
        return configured
    default = config.ollama.default_context_window
    return min(trained, default) if trained else default


@dataclass
class Budget:
    """The next request's budget for one model, by component (tokens)."""

    model: str
    window: int                      # sent as num_ctx
    effective: int                   # what the budget is computed against
    bytes_per_token: float
    components: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)   # what did not fit, in words

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
        return estimate_tokens(text, self.bytes_per_token)

    def estimate_bytes(self, size: int) -> int:
        """Tokens of a file from its size alone (before reading it)."""
        return math.ceil(size / self.bytes_per_token)


def new_budget(config: Config, model: str, trained: int | None, bytes_per_token: float) -> Budget:
    """A budget with the fixed reservations (reply, safety margin) taken."""
    window = context_window(config, model, trained)
    effective = min(config.model(model).effective_context or window, window)
    budget = Budget(model, window, effective, bytes_per_token)
    budget.components["reply"] = min(config.budget.reply_tokens, effective // 4)
    budget.components["margin"] = math.ceil(config.budget.safety_margin * effective)
    return budget


def fit_history(budget: Budget, system: str, turns: list[list[dict]]) -> tuple[list[dict], int]:
    """The newest whole turns that fit after the system prompt; and how many were left out.

    ``turns`` holds each past turn's messages (user, assistant), oldest first.
    The oldest are dropped from the request, never from the session file.
    """
    budget.components["system"] = estimate_messages([{"content": system}], budget.bytes_per_token)
    kept: list[list[dict]] = []
    history_tokens = 0
    room = budget.remaining
    for messages in reversed(turns):
        cost = estimate_messages(messages, budget.bytes_per_token)
        if history_tokens + cost > room:
            break
        kept.append(messages)
        history_tokens += cost
    budget.components["history"] = history_tokens
    left_out = len(turns) - len(kept)
    return [m for messages in reversed(kept) for m in messages], left_out


class Calibration:
    """Per-model bytes-per-token, learned from Ollama's prompt_eval_count.

    Keeps the last few observations per model and uses their median (robust to
    an outlier such as a cached prompt), bounded to a sane range, and persisted
    to a small JSON file so a restart keeps what was learned.
    """

    def __init__(self, path: Path | None, default_bpt: float = 4.0):
        self.path = path
        self.default = default_bpt
        self._samples: dict[str, list[float]] = {}
        self._speed: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        if path and path.exists():
            self._load()

    def bytes_per_token(self, model: str) -> float:
        with self._lock:
            samples = self._samples.get(model)
            return statistics.median(samples) if samples else self.default

    def samples(self, model: str) -> int:
        with self._lock:
            return len(self._samples.get(model, []))

    def observe(self, model: str, messages: list[dict], final) -> str | None:
        """Learn from one finished call (bytes per token and speed) and save once.

        Returns a warning when the counts show the server cut the prompt.
        """
        if final is None:
            return None
        warning = self._learn_size(model, messages, final.prompt_eval_count)
        self._learn_speed(model, final)
        self._save()
        return warning

    def _learn_size(self, model: str, messages: list[dict], prompt_eval_count: int | None) -> str | None:
        """One bytes-per-token sample, unless the call was too small or cut."""
        if not prompt_eval_count:
            return None
        size = sum(len((m.get("content") or "").encode()) for m in messages)
        estimate = estimate_messages(messages, self.bytes_per_token(model))
        if estimate >= 256 and prompt_eval_count < TRUNCATION_RATIO * estimate:
            return (f"Ollama read only {prompt_eval_count} prompt tokens where about {estimate} were sent: "
                    "the server may have cut the conversation silently (an old Ollama ignores "
                    "truncate: false). Earlier context may be missing from that reply.")
        content_tokens = prompt_eval_count - MESSAGE_OVERHEAD_TOKENS * len(messages)
        if size < 200 or content_tokens <= 0:
            return None  # too small to say anything about the bytes per token
        observed = min(MAX_BPT, max(MIN_BPT, size / content_tokens))
        with self._lock:
            samples = self._samples.setdefault(model, [])
            samples.append(observed)
            del samples[:-SAMPLES_KEPT]
        return None

    def speed(self, model: str) -> tuple[float, float] | None:
        """(prompt tokens/s, reply tokens/s) measured on this machine, if known."""
        with self._lock:
            return self._speed.get(model)

    def _learn_speed(self, model: str, final) -> None:
        """Keep a smoothed reading speed and writing speed from Ollama's durations."""
        if not (final and final.prompt_eval_count and final.prompt_eval_duration
                and final.eval_count and final.eval_duration):
            return
        now = (final.prompt_eval_count / (final.prompt_eval_duration / 1e9),
               final.eval_count / (final.eval_duration / 1e9))
        with self._lock:
            old = self._speed.get(model)
            self._speed[model] = now if old is None else tuple(0.7 * o + 0.3 * n for o, n in zip(old, now))

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
            self._samples = {k: [float(x) for x in v][-SAMPLES_KEPT:] for k, v in data["bytes_per_token"].items()}
            self._speed = {k: (float(v[0]), float(v[1])) for k, v in data.get("speed", {}).items()}
        except (OSError, ValueError, TypeError, AttributeError, KeyError, IndexError):
            self._samples, self._speed = {}, {}  # a damaged file only costs the learning

    def _save(self) -> None:
        """Write atomically: a crash leaves the old file or the new one."""
        if not self.path:
            return
        with self._lock:
            text = json.dumps({"bytes_per_token": self._samples, "speed": self._speed})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, text)
