"""``@model`` routing: which installed model a message or a chunk instruction names.

The terminal Harvey's convention: ``@name`` at the start of a message sends it
to that model; in a chunk instruction the mention may stand anywhere.  A bare
name reaches an installed ``name:tag`` when exactly one matches.  Used by the
chat, the analysis card and the prompt library, so it lives on its own.
"""

from __future__ import annotations

import re

from .errors import Refused

MENTION_AT_START = re.compile(r"^\s*@([\w.:/\-]+)\s*")
MENTION_ANYWHERE = re.compile(r"(?<![\w@])@([\w.:/\-]*[\w])")


class UnknownModel(Refused):
    """``@name`` names no installed model; the message lists the installed ones."""

    kind = "unknown_model"

    def __init__(self, name: str, installed: list[str]):
        self.name = name
        choices = ", ".join(installed) or "none"
        super().__init__(f"'@{name}' is not an installed model. Installed models: {choices}.")


def split_mention(text: str, installed: list[str]) -> tuple[str | None, str]:
    """``@name rest`` -> (model, rest); (None, text) without a mention at the start.

    An ``@word`` that names no installed model routes nothing and stops nothing unless it was plainly
    meant as one (``meant_as_model``): a pasted ``@import url(…)``, ``@Override`` or ``@john`` goes to
    the model as written (issue 41); ``@lama3`` or ``@qwen:7b`` gets the card that lists the models."""
    match = MENTION_AT_START.match(text)
    if not match:
        return None, text
    name = match.group(1)
    try:
        return resolve(name, installed), text[match.end():]
    except UnknownModel:
        if meant_as_model(name, installed, text[match.end(1):]):
            raise
        return None, text


def meant_as_model(name: str, installed: list[str], after: str = " ") -> bool:
    """Is an ``@name`` that is not installed meant as a model?  When it is followed by a space (not
    ``(`` or ``{``: code) and has a tag (``qwen:7b``) or is close to an installed model's name (a typo:
    ``@lama3``), or names no installed model while none is installed."""
    if after[:1] and not after[:1].isspace():
        return False
    if ":" in name.strip(":"):
        return True
    from .filenames import near_match

    bases = sorted({m.split(":")[0] for m in installed} | set(installed))
    return bool(bases) and bool(near_match(name, bases))


def unrouted(text: str, installed: list[str]) -> str:
    """The quiet note of an ``@word`` at the start that routes nothing ("" when there is none)."""
    match = MENTION_AT_START.match(text)
    if not match or resolve_or_none(match.group(1), installed) is not None:
        return ""
    return (f"“@{match.group(1)}” is no installed model, so the message went to the session's model as "
            "written.")


def resolve_or_none(name: str, installed: list[str]) -> str | None:
    try:
        return resolve(name, installed)
    except UnknownModel:
        return None


def resolve(name: str, installed: list[str]) -> str:
    """The installed model ``name`` means, or UnknownModel naming the choices."""
    if name in installed:
        return name
    candidates = [m for m in installed if m.split(":")[0] == name or m == f"{name}:latest"]
    if len(candidates) == 1:
        return candidates[0]
    raise UnknownModel(name, installed)


def last_mention(text: str) -> str | None:
    """The last ``@name`` anywhere in a chunk instruction (the one that routes it)."""
    mentions = MENTION_ANYWHERE.findall(text)
    return mentions[-1] if mentions else None


def without_mentions(text: str) -> str:
    """A chunk instruction as the model sees it: every ``@name`` removed."""
    return MENTION_ANYWHERE.sub("", text).strip()


def without_leading_mentions(text: str) -> str:
    """A message as the model saw it: ``@mistral @claude compare`` -> ``compare``."""
    while text.startswith("@") and MENTION_AT_START.match(text):
        text = MENTION_AT_START.sub("", text, count=1)
    return text


def match_recorded(name: str | None, installed: list[str], cue=None) -> str | None:
    """An installed model for a name read from a session file (maybe only a cue, e.g. LLAMA3.1).

    ``cue``: the function that turns a model name into its screenplay cue.
    """
    if not name or name in installed or cue is None:
        return name
    same_cue = [m for m in installed if cue(m) == cue(name)]
    return same_cue[0] if len(same_cue) == 1 else name
