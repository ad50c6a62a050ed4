"""The user's prompt library: chunk instructions written before, offered on the next alert card.

Seed 000 (D5) records each chunk instruction in the session's INT. CHUNK ANALYSIS scene so
it can be mined as a reusable pattern; the session index keeps them per file (re-read only
when a file changes). This module ranks them for the file on a card: the same extension
first, then the same kind of document, then the rest, newest first within each; the same
instruction (whitespace, case and ``@model`` directive aside) is offered once.

The ``@model`` directive stays in the text that fills the box: it is the user's routing
choice, the box shows it and can be edited before Start, and a model that is no longer
installed gets the runner's clear message on the card. It is left out of the label and the
comparison, so "Summarize it @llama3" and "summarize it" are one suggestion (the better
ranked one, with its directive, wins) and the label reads as the instruction itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

from ..routing import MENTION_ANYWHERE
from ..chunking import kind_for_path
from ..documents import DOCX_EXTENSIONS, PDF_EXTENSIONS
from ..sessions.index import Instruction
from .job import without_directive

SHOWN = 5            # suggestions on a card: enough to choose from, few enough to read on a phone


@dataclass(frozen=True)
class Suggestion:
    """One earlier instruction as the card offers it."""

    text: str                    # fills the box: the instruction as written, ``@model`` included
    label: str                   # shown: the instruction without its directive, whitespace collapsed
    model: str                   # the ``@model`` it routed to ("" for none)
    file: str                    # the file it was run on
    when: datetime | None


def document_kind(path: str) -> str:
    """The kind of document, for "similar file": paged documents (PDF, Word) go together."""
    ext = os.path.splitext(path)[1].lower()
    if ext in PDF_EXTENSIONS or ext in DOCX_EXTENSIONS:
        return "paged"
    return kind_for_path(path)


def match(file: str, other: str) -> int:
    """2: the same extension; 1: the same kind of document; 0: neither."""
    ext, other_ext = os.path.splitext(file)[1].lower(), os.path.splitext(other)[1].lower()
    if ext and ext == other_ext:
        return 2
    return 1 if document_kind(file) == document_kind(other) else 0


def same_key(text: str) -> str:
    """What two instructions must share to be the same one: words, casefolded, no directive."""
    return " ".join(without_directive(text).split()).casefold()


def suggest(mined: Iterable[Instruction], file: str, current: str = "", limit: int = SHOWN) -> list[Suggestion]:
    """The best ``limit`` earlier instructions for ``file``, best first, none equal to ``current``.

    Ranked by how well their file matches ``file`` (see ``match``), then by recency (the
    scene's time; the session's name, which is its creation time, breaks ties and dates
    scenes that have none).
    """
    def rank(item: Instruction):
        return match(file, item.file), item.when or datetime.min, item.session

    seen = {same_key(current)} if current.strip() else set()
    shown: list[Suggestion] = []
    for item in sorted(mined, key=rank, reverse=True):
        key = same_key(item.text)
        if not key or key in seen:
            continue
        seen.add(key)
        shown.append(_suggestion(item))
        if len(shown) >= limit:
            break
    return shown


def _suggestion(item: Instruction) -> Suggestion:
    models = MENTION_ANYWHERE.findall(item.text)
    label = " ".join(without_directive(item.text).split())
    return Suggestion(item.text.strip(), label, models[-1] if models else "", item.file, item.when)
