"""Model replies to safe HTML.

markdown-it-py in CommonMark mode with tables and strikethrough, and with raw
HTML switched off: a ``<script>`` in a reply is shown as text, never run. Its
link validation refuses ``javascript:`` and ``data:`` URLs.
"""

from __future__ import annotations

from functools import lru_cache

from markupsafe import Markup


@lru_cache(maxsize=1)
def _renderer():
    """Built on first use, not at import time."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
        ["table", "strikethrough"])


def markdown(text: str) -> Markup:
    """Render Markdown; the result is safe to put in a page as it is."""
    return Markup(_renderer().render(text or ""))
