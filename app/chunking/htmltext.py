"""HTML reduced to the text every chunk offset refers to (headings as ``#`` lines, ``<pre>`` as
fenced blocks, tables as pipe tables)."""
from __future__ import annotations

import re
import warnings


# ---------------------------------------------------------------- HTML

_BLOCK_TAGS = frozenset({
    "p", "div", "section", "article", "main", "header", "footer", "nav", "aside",
    "blockquote", "address", "figure", "figcaption", "form", "fieldset",
    "details", "summary", "dl", "dt", "dd", "hr", "ul", "ol", "li", "body",
    "center", "caption", "legend", "menu", "html",
})
_DROP_TAGS = ("script", "style", "noscript", "template", "head", "svg", "iframe")
_WS = re.compile(r"\s+")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _cell_text(tag) -> str:
    """Text of a table cell on one line, with pipes escaped for a pipe table."""
    return _WS.sub(" ", tag.get_text(" ")).strip().replace("|", "\\|")


def _table_to_pipe(table) -> str:
    """Render an HTML table as a pipe table so it is scanned as a table unit."""
    rows = []
    for tr in table.find_all("tr"):
        if tr.find_parent("table") is not table:
            continue
        cells = [_cell_text(c) for c in tr.find_all(["td", "th"], recursive=False)]
        if cells:
            rows.append(cells)
    cap = table.find("caption")
    caption = _WS.sub(" ", cap.get_text(" ")).strip() if cap else ""
    if not rows:
        return caption
    width = max(len(r) for r in rows)
    lines = [caption] if caption else []
    for i, row in enumerate(rows):
        row = row + [""] * (width - len(row))
        lines.append("| " + " | ".join(row) + " |")
        if i == 0:
            lines.append("|" + "|".join(["---"] * width) + "|")
    return "\n".join(lines)


def _pre_block(tag) -> str:
    """A <pre> as a fenced block, fence longer than any backtick run inside."""
    body = tag.get_text().strip("\n")
    runs = [len(m) for m in re.findall(r"`+", body)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return f"{fence}\n{body}\n{fence}"


class _HtmlBlocks:
    """Block texts of a parsed HTML tree, walked with an explicit stack so deep
    nesting cannot hit the recursion limit."""

    def __init__(self) -> None:
        self.blocks: list[tuple[str, str]] = []
        self.buf: list[str] = []
        self.item: str | None = None

    def flush(self) -> None:
        """End the current paragraph (or list item) at a block boundary."""
        text = re.sub(r" *\n *", "\n", "".join(self.buf)).strip()
        self.buf.clear()
        if text:
            kind = "p" if self.item is None else "li"
            self.blocks.append((kind, (self.item or "") + text))
            self.item = None

    def leaf(self, node, name: str) -> bool:
        """Render headings, <pre>, tables and <br>; True if children are done."""
        if name == "br":
            self.buf.append("\n")
        elif len(name) == 2 and name[0] == "h" and name[1] in "123456":
            self.flush()
            title = _WS.sub(" ", node.get_text(" ")).strip()
            if title:
                self.blocks.append(("h", "#" * int(name[1]) + " " + title))
        elif name in ("pre", "table"):
            self.flush()
            rendered = _pre_block(node) if name == "pre" else _table_to_pipe(node)
            if rendered:
                self.blocks.append(("p", rendered))
        else:
            return False
        return True

    def walk(self, soup, string_types, skip_types, tag_type) -> None:
        """Visit nodes in document order, flushing text at block boundaries."""
        stack: list[tuple[object, bool]] = [(soup, False)]
        while stack:
            node, leaving = stack.pop()
            if leaving:
                self.flush()
            elif isinstance(node, string_types):
                if not isinstance(node, skip_types):
                    self.buf.append(_WS.sub(" ", str(node)))
            elif isinstance(node, tag_type):
                name = (node.name or "").lower()
                if self.leaf(node, name):
                    continue
                if name in _BLOCK_TAGS or node is soup:
                    self.flush()
                    if name == "li":
                        depth = sum(1 for p in node.parents if p.name in ("ul", "ol")) - 1
                        self.item = "  " * max(depth, 0) + "- "
                    stack.append((node, True))
                stack.extend((child, False) for child in reversed(node.contents))
        self.flush()

    def text(self) -> str:
        """Blocks joined by blank lines; list items of one list by newlines."""
        out: list[str] = []
        for i, (kind, text) in enumerate(self.blocks):
            if i:
                same_list = kind == "li" and self.blocks[i - 1][0] == "li"
                out.append("\n" if same_list else "\n\n")
            out.append(text)
        return "".join(out) + ("\n" if out else "")


def html_to_text(markup: str) -> str:
    """Reduce HTML to Markdown-like text that keeps headings, lists and tables.

    Chunks must refer to readable text; keeping ``#`` headings and pipe tables
    lets the one scanner find sections and table units in HTML too.  bs4 is
    imported here so importing this module stays cheap.
    """
    from bs4 import BeautifulSoup, NavigableString, Tag  # noqa: PLC0415
    from bs4.element import PreformattedString  # noqa: PLC0415

    markup = _SURROGATE.sub("\ufffd", markup)   # the HTML parser cannot take lone surrogates
    with warnings.catch_warnings():       # "looks like a URL/filename" and XML warnings
        warnings.simplefilter("ignore")
        soup = BeautifulSoup(markup, "html.parser")
    for tag in soup.find_all(list(_DROP_TAGS)):
        tag.decompose()
    blocks = _HtmlBlocks()
    blocks.walk(soup, NavigableString, PreformattedString, Tag)
    return blocks.text()
