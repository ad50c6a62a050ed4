"""Model replies to safe HTML.

markdown-it-py in CommonMark mode with tables and strikethrough, and with raw
HTML switched off: a ``<script>`` in a reply is shown as text, never run. Its
link validation refuses ``javascript:`` and ``data:`` URLs.

Tables come wrapped in a focusable region that scrolls sideways (a phone is
narrower than most tables), and :func:`streaming` renders a reply that is still
arriving: its complete blocks as Markdown, the unfinished rest as escaped text.

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


@lru_cache(maxsize=1)
def _renderer():
    """Built on first use, not at import time."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False,
                                   "highlight": highlight}).enable(["table", "strikethrough"])
    md.renderer.rules["table_open"] = lambda tokens, idx, options, env: TABLE_OPEN
    md.renderer.rules["table_close"] = lambda tokens, idx, options, env: TABLE_CLOSE
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


def stable_end(text: str) -> int:
    """Where the reply's complete blocks end: after the last blank line outside a code
    fence, or after a closing fence. What follows may still change as pieces arrive."""
    end, pos, fence = 0, 0, None
    for line in text.splitlines(keepends=True):
        pos += len(line)
        if not line.endswith("\n"):
            break                               # the line is still arriving
        found = _FENCE.match(line)
        if fence is None:
            if found:
                fence = found.group(1)
            elif not line.strip():
                end = pos
        elif found and found.group(1)[0] == fence[0] and len(found.group(1)) >= len(fence) \
                and not line.strip()[len(found.group(1)):].strip():
            fence, end = None, pos
    return end


def streaming(text: str, tail_id: str) -> Markup:
    """A reply still arriving: Markdown up to :func:`stable_end`, then the raw rest, escaped,
    in the element (id ``tail_id``) that later pieces are appended to."""
    end = stable_end(text)
    return Markup('<div class="markdown">{}</div><div class="plain tail" id="{}">{}</div>').format(
        markdown(text[:end]), tail_id, escape(text[end:]))
