"""Which words of a message name a file, and which named files are not there (issue 33).

A message names a file by a word with an extension (``notes.md``), a relative path
(``docs/notes.md``), a name in quotes (``"q3 report.md"``: names with spaces), or the
exact name of an extensionless workspace file (``Makefile``, ``LICENSE``).  A word
that looks like a file name and is not in the workspace is *missing*: the chat says
so and never sends the message as if the file were there (the model would invent it).

Plain functions of the text and the workspace's real names; the ``Workspace`` reads
the folder, this module only reads words.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

# Words that may name a file: something.ext or a/relative/path.
MENTION_RE = re.compile(r"""(?<![\w@])((?:[\w.\-~]+/)*[\w\-~][\w.\-~]*\.[A-Za-z0-9]{1,8})(?![\w/])""")
# A name in quotes or backticks (it may hold spaces): "q3 report.md", `Makefile`, “notes.md”.
QUOTED_RE = re.compile(r"""(?:"([^"\n]{1,255})"|`([^`\n]{1,255})`|“([^”\n]{1,255})”|‘([^’\n]{1,255})’"""
                       r"""|(?<!\w)'([^'\n]{1,255})'(?!\w))""")
# A bare word: compared with the workspace's extensionless names (Makefile, README).
WORD_RE = re.compile(r"(?<![\w@.\-/~])([\w\-]+)(?![\w\-/~]|\.\w)")

# Extensions that make an unmatched word a missing file rather than an abbreviation, a
# version or a domain ("e.g.", "1.2", "example.com"): documents, text and source files.
FILE_EXTENSIONS = frozenset("""
md markdown mdown mkd mkdn mdx html htm xhtml txt text rst tex org adoc pdf docx doc odt rtf
csv tsv json yaml yml toml ini cfg conf xml log ipynb
py pyi go ts tsx js jsx mjs c h cc cpp hpp java kt rs rb php cs swift lua pl sh bash sql vue css scss
""".split())
CLOSE_CUTOFF = 0.75


@dataclass(frozen=True)
class Missing:
    """A name the message gives that no workspace file has; ``suggestion``: the near match."""

    name: str
    suggestion: str = ""


@dataclass(frozen=True)
class Candidate:
    """A word that may name a file; a quoted name keeps the file-like words inside it
    (``parts``), tried when the whole is no file ("see notes.md" names notes.md)."""

    word: str
    parts: tuple[str, ...] = ()


def candidates(text: str) -> list[Candidate]:
    """Words that look like file names or paths, quoted names, and absolute/'..' paths to refuse."""
    found: list[Candidate] = []
    seen: set[str] = set()

    def add(word: str, parts: tuple[str, ...] = ()) -> None:
        if word and word not in seen:
            seen.add(word)
            found.append(Candidate(word, parts))

    quoted_spans = []
    for m in QUOTED_RE.finditer(text):
        inner = next(g for g in m.groups() if g is not None).strip()
        if _plausible_name(inner):
            parts = tuple(p.group(1) for p in MENTION_RE.finditer(inner) if p.group(1) != inner)
            add(inner, parts)
            quoted_spans.append(m.span())
    for m in MENTION_RE.finditer(text):
        if not any(a <= m.start() < b for a, b in quoted_spans):   # "q3 report.md" is one name
            add(m.group(1))
    for raw in text.split():
        word = raw.strip("\"'`()[]{}<>,;:!?“”‘’")
        if word.startswith(("/", "~/", "../")) or "/../" in word:
            word = word.rstrip(".")
            if len(word) > 1:
                add(word)
    return found


def _plausible_name(inner: str) -> bool:
    """Quoted text that may be a file name: short, one line, no sentence in it."""
    return 0 < len(inner) <= 255 and not inner.endswith((" ", "/")) and inner.count(" ") <= 8


def bare_names(text: str, extensionless: set[str]) -> list[str]:
    """Words that are exactly the name of an extensionless workspace file (``Makefile``).

    A name all in lower-case letters (``notes``) is an ordinary word too, so it counts
    only in quotes or backticks (``candidates`` finds it there).
    """
    if not extensionless:
        return []
    found = []
    for m in WORD_RE.finditer(text):
        word = m.group(1)
        if word in extensionless and not re.fullmatch(r"[a-z]+", word) and word not in found:
            found.append(word)
    return found


def looks_like_file(word: str) -> bool:
    """Does an unmatched word name a file (a known extension), not a version or a domain?"""
    suffix = PurePosixPath(word).suffix.lower().lstrip(".")
    return suffix in FILE_EXTENSIONS


def near_match(word: str, names: list[str]) -> str:
    """The workspace name closest to a misspelt one ("" when none is close)."""
    close = difflib.get_close_matches(word, names, n=1, cutoff=CLOSE_CUTOFF)
    if not close:
        lower = {n.lower(): n for n in names}
        close = [lower[c] for c in difflib.get_close_matches(word.lower(), list(lower), n=1, cutoff=CLOSE_CUTOFF)]
    return close[0] if close else ""


def mention(name: str) -> str:
    """How a message names a workspace file so that ``candidates``/``bare_names`` find it: in quotes
    when it has a space, or has no extension and is a lower-case word (``notes``) or a path
    (``docs/Makefile``); else as it is."""
    base = name.rsplit("/", 1)[-1]
    bare = "." not in base and ("/" in name or re.fullmatch(r"[a-z]+", base))
    if re.search(r"\s", name) or bare:
        return f'"{name}"'
    return name


def with_name(text: str, wrong: str, right: str) -> str:
    """The message with a missing name replaced by its near match (the card's one tap)."""
    for form in (f'"{wrong}"', f"`{wrong}`", f"“{wrong}”", f"'{wrong}'"):
        if form in text:
            return text.replace(form, mention(right), 1)
    if wrong in right and re.search(r"\s", right) and right in text:    # q3 report.md, unquoted
        return text.replace(right, mention(right), 1)
    pattern = re.compile(r"(?<![\w@.\-/~])" + re.escape(wrong) + r"(?![\w/]|\.\w)")
    return pattern.sub(lambda _m: mention(right), text, count=1)


MISSING_RE = re.compile(r"There is no file named “(.+?)” in the workspace(?: \([^)]*\))?(?:; did you mean “(.+?)”\?)?")


def missing_text(missing: list[Missing], folder: str) -> str:
    """The refusal's words, one sentence per missing name (read back by ``missing_in``)."""
    parts = []
    for m in missing:
        part = f"There is no file named “{m.name}” in the workspace ({folder})"
        parts.append(part + (f"; did you mean “{m.suggestion}”?" if m.suggestion else "."))
    return " ".join(parts) + " Nothing was sent to the model."


def missing_in(detail: str) -> list[Missing]:
    """The missing names and near matches a recorded refusal (``missing_text``) names."""
    return [Missing(m.group(1), m.group(2) or "") for m in MISSING_RE.finditer(detail or "")]
