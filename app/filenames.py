"""Which words of a message name a workspace file (issues 33 and 41): the one place the app guesses it.

People paste links, logs, stack traces, shell sessions and code into a chat, and all of them are full
of words with a dot.  A word names a workspace file only when the user's own words point at it:

1. **The user's prose** (``prose``): the message with every span that is not the user's own words
   blanked out, offsets kept: fenced and indented code blocks, pasted blocks recognised by their
   lines' shape (a stack trace, a log, a shell session, code, a config file), quoted lines and
   quoted remarks, links and anything inside them, e-mail addresses, Windows paths, ``file:line``
   references and inline code that is more than a name.
2. **Candidates in the prose** (``mentions``): a word with an extension or a relative path
   (``notes.md``, ``docs/notes.md``), a name in quotes or backticks (``"q3 report.md"``), an
   extensionless workspace name in any case (``the makefile``) or a conventional one (``Makefile``,
   ``LICENSE``), a misspelling of one the user asks about (``Makefle``), and paths that begin at
   ``/``, ``~`` or ``..`` (outside the workspace).
3. **What the words around it say** (``_role``): *asked*, when the sentence plainly asks about it
   ("summarize plan.md", "what does notes.md say", "compare a.md and b.md", the message that is only
   the name); *other*, when something says it is not a file here ("a robots.txt": a kind of file;
   a command's argument; a site such as ``bun.sh``); else *mentioned*.

The workspace (``workspace.Workspace.named``) then reads what is there; a missing name stops the
message only when it was *asked* about, a *mentioned* one gets a quiet note at most.  Every rule
here is measured on the labelled messages in ``tests/data/mentions/`` (precision and recall are
pinned in ``tests/test_mentions.py``): a wrong guess that someone reports becomes a new message
there.

Plain functions of the text and the workspace's names (``NameIndex``); this module reads no file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

# -- 1. the user's prose ---------------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_BLANK = re.compile(r"^\s*$")

# A line that is output, code or configuration by its shape: one such line is a pasted block.
_PASTED_LINE = re.compile("|".join(r"(?:%s)" % p for p in [
    # stack traces: Python, Java/Node/JS frames, Go, Rust, .NET
    r"^\s*Traceback \(most recent call last\)",
    r"^\s*File \".*\", line \d+",
    r"^\s*at\s+(?:async\s+)?[\w$.<>\[\]/\\-]+(?:\s*\(.*\))?\s*$",
    r"^\s*at\s+[\w$.<>]+\(",
    r"^\s*\.\.\.\s*\d+\s+more\b",
    r"^\s*(?:Caused by|Exception in thread|Suppressed):?\s",
    r"^\s*(?:[a-z_][\w$]*\.)*[A-Z]\w*(?:Error|Exception|Warning|Interrupt|Exit)\b(?::|\s*$)",
    r"^\s*(?:panic|fatal error|error\[E\d+\]|warning\[\w+\]):?\s",
    r"^\s*goroutine \d+ \[",
    r"^\s*-->\s+\S+:\d+",
    r"^\s*thread '.*' panicked",
    r"^\s*note: run with `?RUST_BACKTRACE",
    r"^\s*\d+:\s+(?:0x[0-9a-f]+\s+-\s+)?[\w:<>]+::",
    r"^\s*\^[~^]*\s*$",
    r"^\s*\S+\.(?:go|rs|c|cc|cpp|h|java|kt|py|js|ts|rb|php|cs|swift):\d+(?::\d+)?(?:\s|$|:)",
    # logs: time stamps, levels, access and error logs, journal lines
    r"^\s*\[?\d{4}-\d\d-\d\d[T _]\d\d:\d\d",
    r"^\s*\[?\d{4}/\d\d/\d\d \d\d:\d\d",
    r"^\s*\[?\d\d/\w{3}/\d{4}:\d\d:\d\d",
    r"^\s*\d{1,3}(?:\.\d{1,3}){3}\s+\S+\s+\S+\s+\[",
    r"^\s*\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} +\d+ [\d:.]+ \d{4}\]",
    r"^\s*(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} \d\d:\d\d:\d\d\s",
    r"^\s*\[?(?:INFO|WARN|WARNING|ERROR|ERR|DEBUG|TRACE|FATAL|CRITICAL|NOTICE|SEVERE)\]?(?:[\s:\]|]|$)",
    r"^\s*[IWEF]\d{4} \d\d:\d\d",
    r"^\s*\d\d:\d\d:\d\d(?:[.,]\d+)?\s+\S",
    r"\b(?:ERROR|WARN|WARNING|FATAL|CRITICAL|DEBUG|TRACE|SEVERE)\b[:\]]?\s",
    r"^\s*(?:fatal|error|warning|hint|note|npm ERR!|npm WARN|E:|W:)(?::|!)?\s",
    r"^\s*\d+(?:\.\d+)?\s+(?:ERROR|WARN|INFO|Step|#\d)",
    # program output: ls -l, docker and build tools, progress lines, separators
    r"^\s*[-dlcbps][rwxsStT-]{9}[.@+]?\s+\d+\s",
    r"^\s*total \d+\s*$",
    r"^\s*(?:=>|#\d+ |\[\+\]|\[\d+/\d+\]|Step \d+/\d+)",
    r"^\s*(?:-{3,}|={3,}|\*{3,}|_{3,})\s*$",
    r"^\s*(?:modified|deleted|new file|renamed|both modified):\s",
    r"^[A-Z0-9 ,.'\"()/:;-]{24,}$",
    r"^\s*Copyright\b",
    # test runners: pytest's separators, progress, failures
    r"^\s*[=_-]{5,}\s.*[=_-]{5,}\s*$",
    r"\[\s*\d{1,3}%\]\s*$",
    r"^E\s{3,}\S",
    r"^\s*\S+\.py\s+[.FEsxX]+\s*(?:\[|$)",
    r"^\s*(?:FAILED|PASSED|ERROR|SKIPPED|XFAIL|XPASS)\s+\S+::",
    r"^\s*[\w.-]+:\s+\S*[/.]\S*\s*$",
    # shell sessions: prompts, and lines that begin with a command only a shell runs
    r"^\s*(?:\$|%|>>>|\.\.\.|❯|➜)\s+\S",
    r"^\s*[\w.-]+@[\w.-]+(?::[^\s$#]*)?\s?[$#%]\s",
    r"^\s*[\w.-]+@[\w.-]+\s+\S.*[>$#%❯]\s*(?:\S|$)",
    r"^\s*(?:bash|sh|zsh|fish|sudo|ssh|git|npm|pip3?|python3?|node|go|cargo|make|just|docker|systemctl|"
    r"journalctl|apt|apt-get|dpkg|curl|wget|tar|cp|mv|rm|ls|cat|chmod|chown|ln|mkdir|find|grep|sed|awk|nginx|"
    r"caddy|crontab|ping|ip|mount|dd|kill|restic|rsync|ssh-keygen|docker-compose)(?:\[\d+\])?:\s",
    r"^\s*(?:PS\s+)?[A-Z]:\\[^>]*>",
    r"^\s*\.{1,2}/[\w.\-/]+(?:\s|$)",
    r"^\s*\S+(?:\s+\S+)*\s+(?:\|\s*\S|&&|\|\||2>&1)",
    # code
    r"^\s*#\s*(?:include|define|ifn?def|endif|pragma|import)\b",
    r"^\s*(?:import\s+[\w.]+(?:\s+as\s+\w+)?|from\s+[\w.]+\s+import\s+\S)",
    r"^\s*import\s+.*\bfrom\s+['\"]",
    r"^\s*(?:export\s+)?(?:const|let|var)\s+[\w${},\s\[\]]+=",
    r"^\s*(?:async\s+)?(?:def|class|function|fn|func|pub\s+fn|impl|struct|enum|interface|package|use|using|"
    r"namespace|module)\s+[\w<>:.]+\s*[({:<;=]",
    r"^\s*(?:public|private|protected|static|final|override|virtual)\s+\w",
    r"^\s*(?:return|throw|yield|await)\b.*[;)\]]\s*$",
    r"^\s*(?:if|for|while|switch|catch)\s*\(",
    r"^\s*(?:if|elif|else|for|while|try|except|finally|with)\b[^.?!]*:\s*$",
    r"^\s*(?:FROM|RUN|COPY|ADD|ENV|WORKDIR|ENTRYPOINT|CMD|EXPOSE|ARG|LABEL|USER|VOLUME|HEALTHCHECK)\s+\S",
    r"^.*[;{]\s*$",
    r"^\s*[})\]][;,)]*\s*$",
    r"^\s*\"[^\"]+\"\s*:\s*\S",
    r"^\s*[\[{]\s*\"",
    r"^\s*<(?!\w+://)[/!?]?[A-Za-z][\w:.-]*(?:\s[^>]*)?/?>",
    r"^\s*\w[\w.\[\]\"'-]*\s*(?:=|:=|\+=|->)\s*\S",
    r"^\s*@\w+(?:\(|\s*$)",
    r"^\s*(?://|/\*|\*/|<!--)",
    # configuration: an INI section, an indented key, a list entry that maps one path to another
    r"^\s*\[[\w .:\"-]+\]\s*$",
    r"^\s+-\s+['\"]?[\w.~/${}-]*:[\w./${}-]",
    r"^\s+[\w.-]+:(?:\s|$)",
    r"^\s*[\w.-]+:\s*(?:\||>|&\w|\*\w|\[|\{|\"|'|\d|true|false|null|yes|no|on|off)\s*\S*\s*$",
    r"^\s*[\w.-]+:\s*$",
]))
# Lines that begin with a command only a shell runs, unless the line reads as a sentence ("go build fails
# after I tidied up. Can you look?").
_COMMAND_LINE = re.compile("|".join(r"(?:%s)" % p for p in [
    r"^\s*(?:sudo|pip3?|pipx|python3?(?:\.\d+)?|py|npm|npx|yarn|pnpm|node|deno|git|docker(?:-compose)?|podman|"
    r"kubectl|helm|cd|ls|ll|cat|tar|unzip|curl|wget|cmake|cargo|rustc|rustup|gcc|g\+\+|clang|javac|mvn|gradle|"
    r"apt|apt-get|dnf|yum|pacman|brew|snap|systemctl|journalctl|chmod|chown|mkdir|rm|rmdir|cp|mv|ln|ssh|scp|"
    r"rsync|grep|rg|sed|awk|uv|poetry|pytest|ruff|mypy|flake8|pylint|gunicorn|uvicorn|composer|gem|bundle|"
    r"rails|rake|dotnet|certbot|crontab|ollama|conda|virtualenv|ufw|iptables|chgrp|ssh-keygen|nohup|tmux|"
    r"screen|openssl|nginx|psql|mysql|sqlite3|redis-cli|go\s+(?:run|build|test|mod|get|install))\s+\S",
    r"^\s*(?:find|make|head|tail|less|echo|touch|source|export|kill|ps|df|du|free|top|code|open)\s+"
    r"(?:-\S|\S*[=$|>]|\.\S)",
]))
_SENTENCE_LINE = re.compile(r"^[^|&<>$=`{}]*[A-Za-z][^|&<>$=`{}]*[.?!]\s*$")
_INDENTED = re.compile(r"^(?: {4}|\t)")
_QUOTE_LINE = re.compile(r"^\s*>")


def _pasted_lines(lines: list[str]) -> list[bool]:
    """For each line, whether it is not the user's own prose: inside a fence, an indented block, a
    quoted line, a line with the shape of pasted output or code; a paragraph made mostly of those
    (but for a first or last line that reads as the user's own: "Here is the log:"), a hard-wrapped
    paragraph (a license, an e-mail: nobody wraps what they type into a chat box) and a Markdown
    document's sections."""
    n = len(lines)
    out = [False] * n
    fence = None
    for i, line in enumerate(lines):
        m = _FENCE.match(line)
        if fence is not None:
            out[i] = True
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line[m.end():].strip():
                fence = None
            continue
        if m:
            fence, out[i] = m.group(1), True
            continue
        if _QUOTE_LINE.match(line) or _PASTED_LINE.search(line):
            out[i] = True
        elif _COMMAND_LINE.search(line) and not (_SENTENCE_LINE.match(line) and len(line.split()) >= 6):
            out[i] = True
        elif _INDENTED.match(line) and (i == 0 or out[i - 1] or _BLANK.match(lines[i - 1])):
            out[i] = True
    paragraphs = list(_paragraphs(lines))
    for k, (a, b) in enumerate(paragraphs):
        if k and _HEADING.match(lines[a]):        # a Markdown document pasted after the user's words:
            _document(lines, paragraphs[k:], out)   # to its end, but for the question after it
            break
    for a, b in paragraphs:
        par = range(a, b)
        shaped = sum(1 for i in par if out[i] or lines[i][:1] in (" ", "\t"))
        if shaped and 2 * shaped >= len(par):
            for i in par:
                if not out[i] and not (i in (a, b - 1) and _prose_line(lines[i])):
                    out[i] = True
        elif _wrapped(lines[a:b]) or _HEADING.match(lines[a]):
            for i in par:
                out[i] = True
    # A line between two pasted lines (a trace's source line, a log's message) is pasted too.
    for i in range(1, n - 1):
        if not out[i] and out[i - 1] and out[i + 1] and not _BLANK.match(lines[i]) and not _ends_sentence(lines[i]):
            out[i] = True
    return out


_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+\S")
_ASKS = re.compile(r"^\W*(?:(?:so|and|but|ok|okay|now|then|anyway|please|also)\W+)*(?:can|could|would|will|is|are|"
                   r"does|do|did|should|what|which|who|where|when|why|how|please|summari[sz]e|explain|tell|give|"
                   r"list|compare|check|review|read|fix|help)\b", re.I)


def _document(lines: list[str], paragraphs: list[tuple[int, int]], out: list[bool]) -> None:
    """Mark a pasted Markdown document's paragraphs, up to the paragraphs at its end that ask something
    (the user's question after the paste)."""
    last = len(paragraphs)
    while last > 1 and _asks(lines[paragraphs[last - 1][0]:paragraphs[last - 1][1]]):
        last -= 1
    for a, b in paragraphs[:last]:
        for i in range(a, b):
            out[i] = True


def _asks(par: list[str]) -> bool:
    """A paragraph of the user's own: a question or a request, not a heading or a list."""
    text = " ".join(line.strip() for line in par)
    return not _HEADING.match(par[0]) and not re.match(r"^\s*(?:[-*+]|\d+[.)])\s", par[0]) and (
        text.rstrip().endswith("?") or bool(_ASKS.match(text)))


def _paragraphs(lines: list[str]):
    """(first, end) line indexes of each run of non-blank lines."""
    start = None
    for i, line in enumerate(lines + [""]):
        if _BLANK.match(line):
            if start is not None:
                yield start, i
            start = None
        elif start is None:
            start = i


def _prose_line(line: str) -> bool:
    """A line that reads as somebody's sentence: three words or more, mostly letters, not indented."""
    if line[:2].strip() != line[:2].lstrip() and line[:1] in (" ", "\t"):
        return False
    words = line.split()
    letters = sum(c.isalpha() for c in line)
    return len(words) >= 3 and letters >= 0.6 * len(line.replace(" ", ""))


def _wrapped(par: list[str]) -> bool:
    """A paragraph hard-wrapped at a fixed width: three lines or more, the lines but the last long and
    most of them broken mid-sentence."""
    if len(par) < 3:
        return False
    body = par[:-1]
    long = [line for line in body if len(line.rstrip()) >= 45]
    broken = [line for line in body if not re.search(r"[.?!:;]['\")]?\s*$", line)]
    return len(long) * 3 >= len(body) * 2 and len(broken) * 3 >= len(body) * 2


def _ends_sentence(line: str) -> bool:
    """A line of prose written between pastes ("Then I ran this:", "What does it mean?")."""
    return bool(re.search(r"[?:]\s*$", line)) and len(line.split()) >= 3


# Spans inside a line of prose that are never a file of the workspace.
_URL = re.compile(r"(?:\b[a-zA-Z][a-zA-Z0-9+.-]*://|\bwww\.)[^\s<>\"'`]+")
_MD_TARGET = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_WINDOWS = re.compile(r"(?<![\w/])(?:[A-Za-z]:[\\/]|\\\\)[^\s\"'<>|*?]*|\S*\\\S*")
_FILE_LINE = re.compile(r"[\w.\-~/]+\.\w{1,8}:\d+(?::\d+)?\b|\b(?:line|ln\.?)\s+\d+\s+(?:of|in)\s+\S+", re.I)
_CALL_ARG = re.compile(r"\b(?:require|import|include|open|load|fopen|readFile|readFileSync|source)\s*\(\s*"
                       r"(['\"])[^'\"\n]*\1\s*\)|#\s*include\s*[\"<][^\">\n]*[\">]"
                       r"|\bimport\s[^'\"\n]*\bfrom\s+(['\"])[^'\"\n]*\2|\bimport\s+(['\"])[^'\"\n]*\3")
_INLINE_CODE = re.compile(r"(`+)([^`\n]+?)\1")


def prose(text: str) -> str:
    """``text`` with every character that is not the user's own prose replaced by a space (lines and
    offsets kept): the only text a file name is looked for in."""
    lines = text.split("\n")
    pasted = _pasted_lines(lines)
    kept = [" " * len(line) if p else line for line, p in zip(lines, pasted)]
    out = "\n".join(kept)
    for pattern in (_URL, _MD_TARGET, _EMAIL, _CALL_ARG, _FILE_LINE, _WINDOWS):
        out = pattern.sub(lambda m: " " * len(m.group(0)), out)
    out = _INLINE_CODE.sub(_inline_code, out)
    return QUOTED_RE.sub(_quoted_remark, out)


def _quoted_remark(m: re.Match) -> str:
    """Somebody's words in quotes ("the spec.md is outdated"): a remark, not the user's request."""
    inner = next(g for g in m.groups() if g is not None).strip()
    return " " * len(m.group(0)) if len(inner.split()) >= 3 and not _name_like(inner) else m.group(0)


def _inline_code(m: re.Match) -> str:
    """Inline code that is one name (`notes.md`, `q3 report.md`) stays; a command or code goes."""
    inner = m.group(2).strip()
    return m.group(0) if _name_like(inner) else " " * len(m.group(0))


# -- 2. the workspace's names ----------------------------------------------------------------------

# Extensions that make an unmatched word a missing file rather than an abbreviation, a version or a
# domain ("e.g.", "1.2", "example.com"): documents, text and source files.
FILE_EXTENSIONS = frozenset("""
md markdown mdown mkd mkdn mdx html htm xhtml txt text rst tex org adoc pdf docx doc odt rtf epub
csv tsv json jsonl yaml yml toml ini cfg conf xml log ipynb xlsx xls ods pptx ppt odp
py pyi go ts tsx js jsx mjs cjs c h cc cpp hpp java kt rs rb php cs swift lua pl sh bash zsh sql vue css scss
""".split())
# Extensions that are also top-level domains people write bare (python.org, allegro.pl, bun.sh): such a
# word is a site unless the workspace has it or the user plainly asks for it.
SITE_EXTENSIONS = frozenset({"org", "pl", "sh", "rs"})
# Names a project's files have without an extension: asked about and not there, they are missing.
CONVENTIONAL = ("Makefile", "GNUmakefile", "Dockerfile", "Containerfile", "Vagrantfile", "Jenkinsfile",
                "Procfile", "Gemfile", "Rakefile", "Brewfile", "Justfile", "Caddyfile", "Pipfile", "LICENSE",
                "LICENCE", "COPYING", "README", "CHANGELOG", "CHANGES", "AUTHORS", "CONTRIBUTING", "NOTICE",
                "INSTALL", "TODO", "HARVEY")
# Products whose names end like a file (Node.js, Vue.js): never a file by themselves.
PRODUCTS = frozenset("""node vue next nuxt three express d3 chart ember backbone angular react svelte moment p5
anime alpine nest socket pixi paper day math tensorflow brain ml5 solid preact htmx""".split())
# Conventional names that are no English word: the same file in any case ("the makefile", "readme").
FILE_WORDS = frozenset({"makefile", "gnumakefile", "dockerfile", "containerfile", "vagrantfile", "jenkinsfile",
                        "procfile", "gemfile", "rakefile", "brewfile", "justfile", "caddyfile", "pipfile", "readme",
                        "changelog"})
CLOSE_CUTOFF = 0.75


@dataclass
class NameIndex:
    """The workspace's file names as a message is matched against them: every relative path, each
    base name's paths, and the same in lower case for extensionless names (``makefile``).  Built by
    ``workspace`` from one walk and kept while the folders do not change."""

    paths: tuple[str, ...] = ()
    complete: bool = True                  # False: the walk stopped at its bound; a path is tried on disk too
    by_base: dict[str, list[str]] = field(default_factory=dict)
    by_lower: dict[str, list[str]] = field(default_factory=dict)     # a base name, lower-cased
    by_stem: dict[str, list[str]] = field(default_factory=dict)      # README -> README.md (lower-cased stem)
    spaced: dict[str, list[str]] = field(default_factory=dict)       # "report.md" -> ["q3 report.md"]

    @classmethod
    def of(cls, paths, complete: bool = True) -> "NameIndex":
        index = cls(tuple(paths), complete)
        for path in index.paths:
            base = path.rsplit("/", 1)[-1]
            index.by_base.setdefault(base, []).append(path)
            index.by_lower.setdefault(base.lower(), []).append(path)
            index.by_stem.setdefault(base.split(".", 1)[0].lower(), []).append(path)
            if " " in path:
                index.spaced.setdefault(path.rsplit(" ", 1)[-1], []).append(path)
                if " " in base and base != path:
                    index.spaced.setdefault(base.rsplit(" ", 1)[-1], []).append(base)
        return index

    def near(self, word: str) -> str:
        """The workspace name closest to a misspelt one ("" when none is close): base names for a
        word without a folder (said as the file's path when one file has that name), whole paths for
        a path."""
        if "/" in word:
            return near_match(word, self.paths)
        close = near_match(word, list(self.by_base))
        paths = self.by_base.get(close, [])
        return paths[0] if len(paths) == 1 else close


def near_match(word: str, names) -> str:
    """The name closest to a misspelt one ("" when none is close): as written, then ignoring case.

    RapidFuzz's normalised Indel similarity (the measure difflib's ``ratio`` approximates), in C++:
    a 5,000-name workspace is searched in about 0.4 ms a word, where difflib took 13 ms
    (bench/bench_mentions.py)."""
    if not names:
        return ""
    from rapidfuzz import fuzz, process      # (imported on the first near match, not at start-up)

    for processor in (None, str.lower):
        found = process.extractOne(word, names, scorer=fuzz.ratio, processor=processor,
                                   score_cutoff=CLOSE_CUTOFF * 100)
        if found is not None:
            return found[0]
    return ""


# -- 3. candidates and what the words around them say -----------------------------------------------

@dataclass(frozen=True)
class Mention:
    """A word of the prose that may name a file: as written, where, in what form, and ``role``: "asked"
    (the sentence plainly asks about it), "mentioned" (named in passing) or "other" (not a file here:
    a kind of file, a command's argument, a site)."""

    word: str
    start: int
    end: int
    form: str            # "name" (an extension or a path), "quoted", "bare" (no extension), "outside" (/, ~, ..)
    role: str


# Words that may name a file: something.ext or a/relative/path.ext.
MENTION_RE = re.compile(r"(?<![\w@/~\\.:$%-])((?:[\w.\-~]+/)*[\w\-~][\w.\-~]*\.[A-Za-z0-9]{1,8})(?![\w/\\(]|\.\w|:\d)")
# A path that leaves the workspace: /absolute, ~/home, ../up.
OUTSIDE_RE = re.compile(r"(?<![\w.~/:\\-])((?:/|~/|\.\./)[\w.\-~/@+]*[\w~])(?![\w/\\])")
# A name in quotes or backticks (it may hold spaces): "q3 report.md", `Makefile`, “notes.md”.
QUOTED_RE = re.compile(r"""(?:"([^"\n]{1,255})"|`([^`\n]{1,255})`|[“„]([^“”\n]{1,255})[”“]|[‘‚]([^‘’\n]{1,255})[’‘]"""
                       r"""|«\s?([^»\n]{1,255}?)\s?»"""
                       r"""|(?<!\w)'([^'\n]{1,255})'(?!\w))""")
BARE_PATH_RE = re.compile(r"(?<![\w@/~\\.:$%-])((?:[\w.\-~]+/)+[A-Za-z][\w\-]*)(?![\w/\\(-]|\.\w)")
WORD_RE = re.compile(r"(?<![\w@.\-/~])([A-Za-z][\w\-]{2,})(?![\w\-/~]|\.\w)")

_DETERMINERS = (r"(?:the|this|that|my|our|his|her|their|its|these|those|attached|uploaded|following|whole|entire|"
                r"full|new|old|current|latest|updated|same|above|below|file|files|document|doc|script|text|page|"
                r"contents?\s+of|rest\s+of|parts?\s+of|all\s+of|each\s+of|both|named|called)")
_DET = rf"(?:\s+(?:{_DETERMINERS}))*\s*[\"'“‘`(]?$"
# Verbs and phrases that ask about what a file holds, wherever they stand in the sentence.
_ASK_VERBS = (r"summari[sz]e|summary\s+of|sum\s+up|(?:walk|take|run|talk)\s+(?:me\s+|us\s+)?through|tl;?\s?dr\s+(?:of|for)|read|re-?read|open|show(?:\s+me)?|display|"
              r"print|explain|describe|review|proof-?read|analy[sz]e|analysis\s+of|check|inspect|examine|audit|"
              r"translate|rewrite|edit|fix|improve|refactor|critique|comment\s+on|compare|diff|list|extract|parse|"
              r"load|quote|cite|go\s+(?:through|over)|look\s+(?:at|over|through|into|in)|tell\s+me\s+about|"
              r"what\s+about|how\s+about|scan|skim|study|outline|paraphrase|simplify|shorten|convert|format|"
              r"grade|rate|correct|debug|annotate|tabulate|plot|visuali[sz]e|search|search\s+(?:in|through)|"
              r"according\s+to|based\s+on|what(?:'s|’s|\s+is|\s+are|s)?\s+(?:in|inside)|anything\s+in|"
              r"(?:what|which|how|why|when|where|who)(?:\s+[\w-]+){0,3}?\s+(?:does|do|did|can|could|should|would|will|has|have)|"
              r"(?:how|why|where|when)\s+(?:is|are|was|were)")
# ...or two words before it in a request ("summarize q3 report.md": a name with a space, unquoted).
_ASKED_NEAR = re.compile(rf"(?:^|[^\w'’])(?:{_ASK_VERBS})(?:\s+[\w-]{{1,12}}){{1,2}}{_DET}", re.I)
_AUX = r"does|do|did|is|are|was|were|has|have|can|could|should|would|will"
_ASKED_BEFORE = re.compile(rf"(?:^|[^\w'’])(?:{_ASK_VERBS}){_DET}", re.I)
_AUX_START = re.compile(rf"^\W*(?:(?:please|so|and|also|now|ok|okay|then)\W+)*(?:{_AUX}){_DET}", re.I)
_WHAT_IS = re.compile(rf"(?:^|\W)(?:what|which)(?:'s|’s|\s+is|\s+are|\s+was){_DET}", re.I)
_WEAK = r"in|inside|within|from|of|on|about|across|against|with|into|to"
_WEAK_BEFORE = re.compile(rf"(?:^|\W)(?:{_WEAK}){_DET}", re.I)
_REQUEST = re.compile(r"^\W*(?:(?:please|pls|hey|hi|ok|okay|so|now|then|also|and|harvey|can|could|would|will)\b"
                      rf"[\s,]*)*(?:you\s+)?(?:{_ASK_VERBS}|{_AUX}|what|which|who|where|when|why|how|give|tell|make|write|"
                      r"help|find|get|pull|take|create|generate|draft|answer|add|append|insert|update|change|modify|"
                      r"walk|run|talk|translate|"
                      r"i\s+(?:need|want)|let'?s)\b", re.I)
_KIND_BEFORE = re.compile(r"(?:^|\W)(?:a|an|any|every|each|some|your|one|another|typical|usual|proper|good|"
                          r"example|sample|such|no|empty|minimal|basic|simple|standard|default|per)"
                          r"(?:\s+(?:new|own|single|separate|basic|simple|minimal|empty|typical|proper|valid|"
                          r"sample|example|default|standard|good|python|node|project|repo))*\s*[\"'“‘`]?$", re.I)
# A command's argument, or code: never a request to read a workspace file.
_COMMAND_BEFORE = re.compile(r"(?:^|\s)(?:-{1,2}[\w-]+=?|install|uninstall|run|ran|running|exec|execute|executing|"
                             r"invoke|chmod\s+\+?\w+|bash|sh|zsh|source|python3?|node|deno|bun|ruby|perl|php|"
                             r"go\s+run|cargo\s+run|npm\s+run|yarn|import(?:ing|ed)?|require[sd]?|includes?|"
                             r"sudo|git\s+add|gitignore)\s*$", re.I)
_AFTER_FILE = re.compile(r"^\s*(?:file|document|doc|script|attachment|spreadsheet|page)\b", re.I)
_AFTER_ASKED = re.compile(r"^\s*(?:says?|said|states?|contains?|mentions?|lists?|defines?|describes?|covers?|"
                          r"holds?)\b", re.I)
_AFTER_WHAT_IS = re.compile(r"^\s*(?:about|for|saying|doing|used\s+for)\b", re.I)
_SITE_BEFORE = re.compile(r"(?:^|\W)(?:at|on|visit|visiting|via|site|website|homepage|domain|host|hosted|go\s+to|"
                          r"over\s+at|check\s+out|docs\s+at|see|from|url|link|install\s+from|served\s+from|"
                          r"curl|ping|dig|nslookup)\s*$", re.I)
_FOREIGN_BEFORE = re.compile(r"(?:^|\W)(?:his|her|their|someone'?s|somebody'?s|a\s+friend'?s|[A-Z]\w+'s)"
                             rf"(?:\s+(?:{_DETERMINERS}))*\s*[\"'“‘`]?$", re.I)
_FOREIGN_AFTER = re.compile(r"^\s+(?:of|from|in)\s+(?:his|her|their|someone|somebody|a\s+friend|another|that|this)\b",
                            re.I)
_OPENS = re.compile(r"^\s*(?::|—|–|-)\s*\S.*(?:\?\s*$)", re.S)
_SENTENCE_END = re.compile(r"[.!?;](?=\s)|[\n]|[.!?]\"?$")
_EDGE = " \t\"'`“”‘’.?!:()[]"


def _clause(text: str, start: int, end: int) -> tuple[str, str, str]:
    """The words before a candidate in its sentence, the words after it, and the whole sentence."""
    head = text[:start]
    cut = max((m.end() for m in _SENTENCE_END.finditer(head)), default=0)
    tail = text[end:]
    stop = _SENTENCE_END.search(tail)
    after = tail[:stop.start() + 1] if stop else tail
    return head[cut:], after, head[cut:] + text[start:end] + after


def _role(text: str, start: int, end: int, word: str, form: str) -> str:
    """What the words around a candidate say: "asked", "mentioned" or "other" (the module's docstring)."""
    before, after, sentence = _clause(text, start, end)
    lead = before.rstrip()
    if _KIND_BEFORE.search(lead) and not _named_as_file(lead):
        return "other"                                     # "what goes in a robots.txt?"
    if re.match(r"^\s*files\b", after, re.I):
        return "other"                                     # "do people commit go.sum files?": a kind
    if _COMMAND_BEFORE.search(lead) and form != "quoted":
        return "other"                                     # "pip install -r requirements.txt"
    if re.match(r"^\s*:\s*$", after):
        return "other"                                     # "Here is my Dockerfile:" and the paste
    if re.sub(r"^(?:and|also|or|plus|then|what about|how about|same for)\s+", "", sentence.strip(_EDGE),
              flags=re.I) in ("", word):
        return "asked"                                     # the message (or its line) is the name: "And nots.md?"
    strong = bool(_ASKED_BEFORE.search(lead)) or bool(_AFTER_ASKED.match(after) and re.search(r"\bwhat\b", lead, re.I))
    if form == "outside" and not strong and not _file_path(word):
        return "other"                                     # "the permissions on /home/pi": a folder
    if form == "name" and _site_like(word):
        return "asked" if strong else "mentioned"          # bun.sh: a site unless asked (or in the workspace)
    if _FOREIGN_BEFORE.search(lead) or _FOREIGN_AFTER.match(after):
        return "mentioned"                                 # "proofread the README of her project": not ours
    if not lead.strip(_EDGE) and _OPENS.match(after):
        return "asked"                                     # "budget.csv — biggest expense this year?"
    if strong or _AUX_START.search(lead):
        return "asked"                                     # "summarize notes.md", "does worker.py retry?"
    if _WHAT_IS.search(lead) and _AFTER_WHAT_IS.match(after):
        return "asked"                                     # "what is notes.md about?" (not "what is bun.sh?")
    request = bool(_REQUEST.search(sentence))
    if _AFTER_FILE.match(after) and (request or sentence.rstrip().endswith("?")):
        return "asked"                                     # "open the notes.md file"
    if request and (_ASKED_NEAR.search(lead) or _WEAK_BEFORE.search(lead)):
        return "asked"                                     # "what are the action items in notes.md?"
    if _WEAK_BEFORE.search(lead) and sentence.rstrip().endswith("?") and len(sentence.split()) <= 8:
        return "asked"                                     # "any bugs in worker.py?"
    if _AFTER_ASKED.match(after) and sentence.rstrip().endswith("?"):
        return "asked"                                     # "notes.md says what about May?"
    return "mentioned"


def _file_path(path: str) -> bool:
    """A path whose last part is a file's name: an extension, or a dotfile (``~/.bashrc``)."""
    last = path.rstrip("/").rsplit("/", 1)[-1]
    return looks_like_file(last) or (last.startswith(".") and len(last) > 1 and last[1:].replace(".", "").isalnum())


def _named_as_file(lead: str) -> bool:
    """"a file called notes.md", "the one named notes.md": the article is not about a kind of file."""
    return bool(re.search(r"\b(?:called|named)\s*[\"'“‘`]?$", lead, re.I))


def _site_like(word: str) -> bool:
    """A bare word whose extension is also a domain people write bare (python.org, bun.sh, allegro.pl)."""
    return "/" not in word and PurePosixPath(word).suffix.lower().lstrip(".") in SITE_EXTENSIONS


def mentions(text: str, names: NameIndex | None = None) -> list[Mention]:
    """The words of ``text``'s prose that may name a file, in order, each with its role."""
    names = names or NameIndex()
    body = prose(text)
    found: list[Mention] = []

    def add(word: str, start: int, end: int, form: str, role: str | None = None) -> None:
        if any(m.start < end and start < m.end for m in found):
            return
        role = role or _role(body, start, end, word, form)
        if role == "mentioned" and form == "name" and _site_like(word) and word not in names.by_base:
            role = "other"                                 # python.org in passing: a site, not a file
        found.append(Mention(word, start, end, form, role))

    # Each pass takes the words no earlier pass took: a name the workspace has first (in quotes or not:
    # "see licenses.txt" names licenses.txt; "the q3 report.md" names "q3 report.md"), then quoted
    # names, paths that leave it, other names, extensionless names.
    quoted = []
    for m in QUOTED_RE.finditer(body):
        group = next(i for i, g in enumerate(m.groups(), 1) if g is not None)
        word = m.group(group).strip()
        if word and (word in names.by_base or word in names.paths or _name_like(word)):
            quoted.append((word, m.start(group), m.start(group) + len(m.group(group).rstrip())))
    named = [(m.group(1).rstrip("."), m.start(1)) for m in MENTION_RE.finditer(body)]
    for word, start, end in quoted:
        if word in names.by_base or word in names.paths:
            add(word, start, end, "quoted")
    for word, start in named:
        for path in names.spaced.get(word, []):
            first = start + len(word) - len(path)
            if first >= 0 and body[first:start + len(word)] == path and (first == 0 or not body[first - 1].isalnum()):
                add(path, first, start + len(word), "name")
        if word in names.by_base or word in names.paths:
            add(word, start, start + len(word), "name")
    for word, start, end in quoted:
        add(word, start, end, "outside" if word.startswith(("/", "~", "../")) else "quoted")
    for m in OUTSIDE_RE.finditer(body):
        add(m.group(1), m.start(1), m.end(1), "outside")
    for word, start in named:
        if _file_like(word, names):
            add(word, start, start + len(word), "name")
    for m in BARE_PATH_RE.finditer(body):               # homelab/Caddyfile, docs/Makefile
        last = m.group(1).rsplit("/", 1)[-1]
        if m.group(1) in names.paths or last in CONVENTIONAL or last.lower() in FILE_WORDS:
            add(m.group(1), m.start(1), m.end(1), "name")
    for m in WORD_RE.finditer(body):
        word = m.group(1)
        if _bare_name(word, names) or (word.upper() in CONVENTIONAL and re.match(r"\s+file\b", body[m.end(1):], re.I)):
            add(word, m.start(1), m.end(1), "bare")
        elif word[0].isupper() and len(word) >= 5 and _bare_typo(word, names):
            if _role(body, m.start(1), m.end(1), word, "bare") == "asked":     # "the Makefle": asked only
                add(word, m.start(1), m.end(1), "bare", "asked")
    found.sort(key=lambda c: c.start)
    return [_in_context(text, body, found, i) for i in range(len(found))]


_JOINED = re.compile(r"^\s*(?:,|and|or|&|\+|,\s*and|,\s*or)\s*[\"'“‘`(]?$", re.I)


def _in_context(text: str, body: str, found: list[Mention], i: int) -> Mention:
    """A mention's role as its neighbours decide it: a name joined to the one before it ("compare a.md
    and b.md") shares that one's role; a name in passing on a line that introduces a paste ("someone
    posted this Dockerfile snippet:") is the paste's title, not a request."""
    m = found[i]
    if i and m.role != "other" and found[i - 1].role != "other" and _JOINED.match(body[found[i - 1].end:m.start]):
        prev = _in_context(text, body, found, i - 1)
        if prev.role != m.role:
            m = Mention(m.word, m.start, m.end, m.form, prev.role)
    if m.role == "mentioned" and _introduces_paste(text, body, m.end):
        m = Mention(m.word, m.start, m.end, m.form, "other")
    return m


def _introduces_paste(text: str, body: str, end: int) -> bool:
    """Does the line from ``end`` on end with a colon, and the next line that is not blank lie in a paste?"""
    line_end = text.find("\n", end)
    if line_end < 0 or not text[end:line_end].rstrip().endswith(":"):
        return False
    nxt = re.compile(r"[^\s]").search(text, line_end)
    return nxt is not None and body[nxt.start()] == " "


def _name_like(inner: str) -> bool:
    """Quoted text that is one file name: one word with an extension or a path, or a few plain words
    ending in a file's extension ("q3 report.md"); never a command or code (flags, operators)."""
    if not inner or len(inner) > 255 or inner.endswith(("/", " ")):
        return False
    words = inner.split()
    if any(w.startswith("-") or any(c in w for c in "=|<>(){};$*\\") for w in words):
        return False
    suffix = PurePosixPath(words[-1]).suffix.lower().lstrip(".")
    if len(words) == 1:
        return bool(suffix) or "/" in inner or inner in CONVENTIONAL
    return len(words) <= 5 and suffix in FILE_EXTENSIONS and not any(w.lower() in _FUNCTION_WORDS for w in words)


# Words a sentence has and a file's name rarely does: quoted words with one of them are a remark.
_FUNCTION_WORDS = frozenset("""a an the it its is are was be in on at to of for from with and or but not no
all just my your our his her their this that these those i you we he she they me him them do does did
should would could can will shall may might must have has had please see read open use put shove keep""".split())


def _file_like(word: str, names: NameIndex) -> bool:
    """A word with an extension that may name a file: a workspace name, or a known extension that is
    not a product's name (Node.js) nor a version (v1.2)."""
    if word in names.by_base or word in names.paths:
        return True
    base = word.rsplit("/", 1)[-1]
    stem, _, ext = base.rpartition(".")
    if ext.lower() not in FILE_EXTENSIONS or not stem:
        return False
    if ext.lower() == "js" and stem.lower() in PRODUCTS and "/" not in word:
        return False
    return True


def _bare_name(word: str, names: NameIndex) -> bool:
    """An extensionless word that names a file: a workspace file of that very name (``Makefile``; a name
    that is an ordinary lower-case word, ``notes``, in quotes only), a conventional name as it is
    written (``LICENSE``, not "license"), or one that is no English word in any case (``makefile``,
    ``readme``)."""
    if word.lower() in FILE_WORDS:
        return True
    real = names.by_base.get(word)
    if real and "." not in word and not re.fullmatch(r"[a-z]+", word):
        return True
    return word in CONVENTIONAL


def _bare_typo(word: str, names: NameIndex) -> bool:
    """A capitalised word one or two letters away from an extensionless name the workspace has, or a
    conventional one (Makefle: Makefile); never a shorter word that a name begins with (Docker)."""
    if _bare_name(word, names) or word.lower() in names.by_lower:
        return False
    from rapidfuzz.distance import Levenshtein

    allowed = 1 if len(word) <= 8 else 2
    bare = [b for b in names.by_base if "." not in b] + list(CONVENTIONAL)
    return any(abs(len(b) - len(word)) <= allowed and Levenshtein.distance(word.lower(), b.lower()) <= allowed
               for b in bare)


def looks_like_file(word: str) -> bool:
    """Does an unmatched word name a file (a known extension), not a version or a domain?"""
    suffix = PurePosixPath(word).suffix.lower().lstrip(".")
    return suffix in FILE_EXTENSIONS


def resolve_bare(word: str, names: NameIndex) -> list[str]:
    """The workspace paths an extensionless word names: that name; else the same name in another case
    (``makefile`` -> ``Makefile``, "the license file" -> ``LICENSE``); else, for a conventional name,
    the one top-level file whose stem it is (``README`` -> ``README.md``)."""
    exact = names.by_base.get(word)
    if exact:
        return exact
    same = [p for p in names.by_lower.get(word.lower(), []) if "." not in p.rsplit("/", 1)[-1]]
    if same:
        return same
    if word.lower() in FILE_WORDS or word.upper() in CONVENTIONAL:
        stems = [p for p in names.by_stem.get(word.lower(), []) if "/" not in p]
        return stems if len(stems) == 1 else []
    return []


# -- what the chat says of names it could not read --------------------------------------------------

@dataclass(frozen=True)
class Missing:
    """A name the message asks about that no workspace file has; ``suggestion``: the near match;
    ``outside``: the name leads outside the workspace (an absolute path, ``~``, ``..``)."""

    name: str
    suggestion: str = ""
    outside: bool = False


def mention(name: str) -> str:
    """How a message names a workspace file so that ``mentions`` finds it: in quotes when it has a
    space, or has no extension and is a lower-case word (``notes``) or a path (``docs/Makefile``);
    else as it is."""
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
    lead = right.rsplit(" ", 1)[0] + " " if " " in right else ""        # "q3 reprt.md": its "q3 " goes too
    pattern = re.compile(r"(?<![\w@.\-/~])" + (f"(?:{re.escape(lead)})?" if lead else "") + re.escape(wrong)
                         + r"(?![\w/]|\.\w)", re.I if lead else 0)
    return pattern.sub(lambda _m: mention(right), text, count=1)


MISSING_RE = re.compile(r"There is no file named “(.+?)” in the workspace(?: \([^)]*\))?(?:; did you mean “(.+?)”\?)?"
                        r"|“(.+?)” is outside the workspace")


def missing_text(missing: list[Missing], folder: str) -> str:
    """The refusal's words, one sentence per name (read back by ``missing_in``)."""
    parts = []
    for m in missing:
        if m.outside:
            parts.append(f"“{m.name}” is outside the workspace ({folder}): Harvey reads only the files in it.")
            continue
        part = f"There is no file named “{m.name}” in the workspace ({folder})"
        parts.append(part + (f"; did you mean “{m.suggestion}”?" if m.suggestion else "."))
    return " ".join(parts) + " Nothing was sent to the model."


def missing_in(detail: str) -> list[Missing]:
    """The names and near matches a recorded refusal (``missing_text``) names."""
    return [Missing(m.group(3), outside=True) if m.group(3) else Missing(m.group(1), m.group(2) or "")
            for m in MISSING_RE.finditer(detail or "")]
