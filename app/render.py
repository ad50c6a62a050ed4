"""Model replies to safe HTML.

markdown-it-py in CommonMark mode with tables and strikethrough, and with raw
HTML switched off: a ``<script>`` in a reply is shown as text, never run. Its
link validation refuses ``javascript:`` and ``data:`` URLs.

Tables come wrapped in a focusable region that scrolls sideways (a phone is
narrower than most tables), and :class:`MarkdownStream` renders a reply that is still
arriving: each block once, as it finishes; the unfinished rest shows as escaped text.

Code blocks are highlighted here, on the server, by Pygments (through
markdown-it-py's ``highlight`` hook: no JavaScript highlighter is sent to the
phone), only for a language the fence names (no guessing). Pygments escapes the
code it tokenizes. Each block is focusable (it may scroll sideways) and has a
Copy button that static/harvey.js wires up.

A cited analysis answer's citations (``[12]``, ``[12, 40]``: chunk numbers) become links
when :func:`markdown` is given ``cite``, which says where each number's passage opens; the
text around them, and code, stay as they were, so the reply copies as the plain text it is.
Only the synthesis's own markers are citations: a bracketed number that belongs to the
document the answer quotes (:func:`documents_own`: it opens a line or list item, as in a
reference list's ``[1] Smith, J.``, or sits in quotation marks, a block quote or code) stays text.
``analysis.mapreduce`` resolves citations by the same rule.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable

from markupsafe import Markup, escape

TABLE_OPEN = '<div class="table-scroll" tabindex="0" role="region" aria-label="Table">\n<table>\n'
TABLE_CLOSE = "</table>\n</div>\n"


# A citation as the contract of issue #15 writes it: chunk numbers, comma-separated, in brackets.
CITATION = re.compile(r"(?<![\w\]])\[(\d{1,6}(?:\s*,\s*\d{1,6})*)\](?![(:])")
_NUMBER = re.compile(r"\d+")
# What may stand before a bracketed number that labels its line (a reference list's "[1] Smith"):
# nothing, a list marker, or a block quote's marker.
_LABEL_BEFORE = re.compile(r"^\s*(?:>\s*)*(?:[-*+]\s+|\d{1,3}[.)]\s+)?$")
_BLOCKQUOTE = re.compile(r"^\s{0,3}>")


def documents_own(before: str, after: str) -> bool:
    """Whether a bracketed number is the document's rather than a citation the synthesis wrote.

    ``before``: its line up to the bracket (code already masked), ``after``: the line after it.
    The synthesis cites after a claim ("... 417 litres [3]."); a number that opens a line or a
    list item and is followed by text labels it (a reference list, a footnote), and one inside
    quotation marks or a block quote is quoted from the document. (Code is never prose.)
    """
    if _LABEL_BEFORE.match(before) and after.strip():
        return True
    if _BLOCKQUOTE.match(before):
        return True
    return before.count('"') % 2 == 1 or before.rfind("“") > before.rfind("”") or before.rfind("«") > before.rfind("»")

CODE_OPEN = ('<div class="code"><button class="button copy" type="button">Copy<span class="visually-hidden"> code</span></button>'
             '<pre tabindex="0"')


def highlight(code: str, lang: str, _attrs: str) -> str:
    """Pygments' HTML for ``code`` in ``lang`` (spans only), or "" for markdown-it's plain escaping."""
    if not lang:
        return ""
    from pygments import highlight as pygmentize
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        lexer = get_lexer_by_name(lang, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return ""
    return pygmentize(code, lexer, _formatter())


@lru_cache(maxsize=1)
def _formatter():
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(nowrap=True)


def _in_code_box(default):
    """Wrap a code block rule's ``<pre>`` in a box with a Copy button; the ``<pre>`` is focusable."""
    def rule(tokens, idx, options, env):
        html = default(tokens, idx, options, env)
        return CODE_OPEN + html.removeprefix("<pre") + "</div>\n"
    return rule


def _aligned_cell(renderer):
    """A table cell's alignment as a class (``align-right``), not the ``style`` attribute markdown-it
    writes: the page's Content-Security-Policy refuses inline styles (issue 45), which lost the alignment
    and logged a violation on every page that showed an aligned table."""
    def rule(tokens, idx, options, env):
        token = tokens[idx]
        style = token.attrGet("style") or ""
        if style.startswith("text-align:"):
            token.attrs.pop("style", None)
            token.attrSet("class", "align-" + style.split(":", 1)[1].strip())
        return renderer.renderToken(tokens, idx, options, env)
    return rule


@lru_cache(maxsize=1)
def _renderer():
    """Built on first use, not at import time."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False,
                                   "highlight": highlight}).enable(["table", "strikethrough"])
    md.renderer.rules["table_open"] = lambda tokens, idx, options, env: TABLE_OPEN
    md.renderer.rules["table_close"] = lambda tokens, idx, options, env: TABLE_CLOSE
    for name in ("th_open", "td_open"):
        md.renderer.rules[name] = _aligned_cell(md.renderer)
    for name in ("fence", "code_block"):
        md.renderer.rules[name] = _in_code_box(md.renderer.rules[name])
    md.renderer.rules["citation"] = _citation_html
    return md


def markdown(text: str, cite: Callable[[int], str | None] | None = None) -> Markup:
    """Render Markdown; the result is safe to put in a page as it is.

    ``cite``: the URL of a cited chunk's passage (None: that number stays plain text).
    """
    md = _renderer()
    if cite is None:
        return Markup(md.render(text or ""))
    env: dict = {}
    tokens = md.parse(text or "", env)
    quoting = 0
    for token in tokens:
        quoting += (token.type == "blockquote_open") - (token.type == "blockquote_close")
        if token.type == "inline" and token.children and not quoting:      # (a block quote is the document's)
            token.children = _with_citations(token.children, cite)
    return Markup(md.renderer.render(tokens, md.options, env))


_BREAKS = ("softbreak", "hardbreak")


def _with_citations(children: list, cite: Callable[[int], str | None]) -> list:
    """Inline tokens with each citation in plain text (not in code, not in a link, not the document's
    own number by :func:`documents_own`) made a citation token."""
    from markdown_it.token import Token

    out, depth, line = [], 0, ""          # line: the current line's text so far (code masked)
    for k, token in enumerate(children):
        depth += token.type == "link_open"
        depth -= token.type == "link_close"
        if token.type in _BREAKS:
            line = ""
        if token.type != "text" or depth or not CITATION.search(token.content):
            out.append(token)
            line += token.content if token.type == "text" else "x" * len(token.content or "x") \
                if token.type not in _BREAKS else ""
            continue
        more = "x" if k + 1 < len(children) and children[k + 1].type not in _BREAKS else ""
        at = 0
        for found in CITATION.finditer(token.content):
            numbers = [(int(m.group()), cite(int(m.group()))) for m in _NUMBER.finditer(found.group(1))]
            if not any(url for _, url in numbers) or documents_own(line + token.content[:found.start()],
                                                                   token.content[found.end():] + more):
                continue
            out.extend(_text(token.content[at:found.start()]))
            citation = Token("citation", "", 0)
            citation.meta = {"numbers": numbers}
            out.append(citation)
            at = found.end()
        out.extend(_text(token.content[at:]))
        line += token.content
    return out


def _text(content: str) -> list:
    """A plain text token for ``content``, or none when it is empty."""
    from markdown_it.token import Token

    if not content:
        return []
    token = Token("text", "", 0)
    token.content = content
    return [token]


def _citation_html(tokens, idx, options, env) -> str:
    """``[12, 40]`` with each number that has a passage a link to it (htmx opens it in the passage dialog)."""
    parts = []
    for number, url in tokens[idx].meta["numbers"]:
        if url:
            parts.append(Markup('<a class="cite" href="{0}" hx-get="{0}" hx-target="#passage-body" '
                                'hx-swap="innerHTML" aria-label="Passage of chunk {1}">{1}</a>').format(url, number))
        else:
            parts.append(escape(str(number)))
    return str(Markup("[{}]").format(Markup(", ").join(parts)))


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


_LIST_ITEM = re.compile(r"(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")
_HEAD = 12          # enough of a line to tell a list item's marker ("123456789. ") from text


class _Blocks:
    """Where a Markdown text's finished blocks end, found line by line as the text arrives.

    Each piece is looked at once (a reply's cost grows with its length, not its square).
    A block is finished at a closing fence that is not indented, or at a blank line
    outside a fence once the next line shows it starts a new block: not an indented line
    (a list item's second paragraph, an indented code block), nor a list item after a list
    (a loose list is one list). Rendering finished blocks one by one then gives the HTML
    that rendering them together gives.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []       # complete lines not taken yet
        self.partial: list[str] = []     # the line still arriving, in pieces
        self._ready = 0                  # lines[:_ready] are finished blocks
        self._cut: int | None = None     # a blank line's end: a boundary if a new block follows
        self._listy = False              # the last non-blank line may belong to a list
        self._fence: str | None = None   # the open fence's marker
        self._fence_indented = False

    def feed(self, piece: str) -> None:
        """Take one piece; only its own characters (and the line it ends) are scanned."""
        *done, rest = piece.split("\n")
        if done:
            self.partial.append(done[0])
            self._line("".join(self.partial) + "\n")
            for line in done[1:]:
                self._line(line + "\n")
            self.partial = []
        if rest:
            self.partial.append(rest)
        if self._cut is not None and self.partial:
            head = self._head()
            if self._begins(head, complete=len(head) >= _HEAD):
                self._ready, self._cut = self._cut, None

    def _head(self) -> str:
        """The first characters of the line still arriving (never the whole of a long line)."""
        head = ""
        for part in self.partial:
            head += part[:_HEAD]
            if len(head) >= _HEAD:
                break
        return head

    def _begins(self, line: str, complete: bool) -> bool | None:
        """Whether a non-blank line after a blank one starts a new block (None: not known yet)."""
        if line[0].isspace():
            return False if complete else None
        if not self._listy:
            return True
        if not complete and line[0] in "-*+0123456789":
            return None
        return not _LIST_ITEM.match(line)

    def _line(self, line: str) -> None:
        """One complete line: move the boundary or open/close a fence."""
        self.lines.append(line)
        found = _FENCE.match(line)
        if self._fence is not None:
            if found and found.group(1)[0] == self._fence[0] and len(found.group(1)) >= len(self._fence) \
                    and not line.strip()[len(found.group(1)):].strip():
                self._fence = None
                if self._fence_indented:          # it may sit in a list item that goes on
                    self._cut = len(self.lines)
                else:
                    self._ready, self._cut = len(self.lines), None
            return
        if not line.strip():
            self._cut = len(self.lines)
            return
        if self._cut is not None:
            if self._begins(line, complete=True):
                self._ready = self._cut
            self._cut = None
        self._listy = line[0].isspace() or bool(_LIST_ITEM.match(line))
        if found:
            self._fence, self._fence_indented = found.group(1), line[0] == " "

    def take(self) -> str:
        """The finished blocks not taken yet ("" when none), removed from what is kept."""
        if not self._ready:
            return ""
        text = "".join(self.lines[:self._ready])
        del self.lines[:self._ready]
        if self._cut is not None:
            self._cut -= self._ready
        self._ready = 0
        return text

    @property
    def rest(self) -> str:
        """What arrived after the finished blocks: shown as plain text until its block ends."""
        return "".join(self.lines) + "".join(self.partial)


def stable_end(text: str) -> int:
    """Where ``text``'s finished blocks end (see :class:`_Blocks`); what follows may still change."""
    blocks = _Blocks()
    blocks.feed(text)
    return len(blocks.take())


# The element a streaming reply's unfinished rest is shown in; a "block" event replaces it out of band.
_TAIL = '<div class="plain tail" id="{}" hx-swap-oob="true">'


class MarkdownStream:
    """A reply's Markdown rendered as it arrives, each finished block once (issue 23 item 6).

    ``feed`` returns, when a piece finishes blocks, the data of a "block" event: their HTML,
    which the page appends to the reply's Markdown, and the unfinished rest, escaped, which
    replaces the tail out of band (one swap, one paint). Nothing rendered is kept here: only
    the lines of the block still arriving.
    """

    def __init__(self, tail_id: str) -> None:
        self.tail_id = tail_id
        self._blocks = _Blocks()

    def feed(self, piece: str) -> Markup | None:
        """The "block" event for this piece, or None when no block finished with it."""
        self._blocks.feed(piece)
        done = self._blocks.take()
        if not done:
            return None
        return markdown(done) + Markup(_TAIL + "{}</div>").format(self.tail_id, self._blocks.rest)


def stream_snapshot(events, markdown_id: str, tail_id: str) -> Markup:
    """A streaming reply's body rebuilt from its events so far, for a page that has none of them.

    ``events``: (name, data) pairs of "piece" (escaped text) and "block" events, in order. The
    blocks' HTML is joined once per connect; the events keep no copy of the rendered prefix.
    """
    blocks, tail = [], []
    mark = _TAIL.format(tail_id)
    for name, data in events:
        if name == "piece":
            tail.append(data)
        elif name == "block":
            html, _, rest = data.rpartition(mark)
            blocks.append(html)
            tail = [rest.removesuffix("</div>")]
    return Markup('<div class="markdown" id="{}">{}</div><div class="plain tail" id="{}">{}</div>').format(
        markdown_id, Markup("".join(blocks)), tail_id, Markup("".join(tail)))
