"""Issue 45: a README a newcomer reads in three minutes, and the docs/ pages it links.

The README stays short (under 6 KB) and opens with what Harvey Web is and the two set-up commands;
everything that left it is a page in docs/ linked from it. Every relative link and image of the README
and of docs/*.md resolves to a file of this checkout, and a link to a heading of a Markdown page names a
heading that page has (GitHub's anchors). docs/configuration.md names every key of harvey.yaml.example.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
DOC_PAGES = sorted(DOCS.glob("*.md"))
PAGES = [README, *DOC_PAGES]

FENCE = re.compile(r"^ *(```|~~~).*?^ *\1 *$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target); the text may hold one level of brackets; an optional "title".
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without code blocks and code spans, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def links(path: Path) -> list[str]:
    return LINK.findall(_prose(path.read_text(encoding="utf-8")))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link text kept, lower case, punctuation but - and _ dropped,
    spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a Markdown file, a repeated one numbered as GitHub does (-1, -2...)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def local(target: str) -> bool:
    return not re.match(r"(?i)(https?:|mailto:)", target)


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def broken(path: Path) -> list[str]:
    """The links of one page that do not resolve: a missing file, or a heading its page lacks."""
    out = []
    for target in filter(local, links(path)):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            out.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{target}: no heading #{anchor} in {_shown(dest)}")
    return out


def test_the_readme_is_under_six_kilobytes():
    assert README.stat().st_size < 6000, f"README.md is {README.stat().st_size} bytes"


def test_the_readme_opens_with_the_two_commands():
    """Both set-up commands, as lines of a shell block, within the first 40 lines: the first screen."""
    first = README.read_text(encoding="utf-8").splitlines()[:40]
    for command in ("./scripts/run.sh ", "./scripts/test.sh "):
        assert any(line.startswith(command) for line in first), command
    assert "```sh" in first


def test_the_readme_keeps_the_section_scripts_and_pages_point_to():
    """scripts/run.sh and the app's demo-model page send a reader to the README's "The bundled demo model"."""
    assert "the-bundled-demo-model" in anchors(README)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    assert links(path), f"{path.name} links nothing"
    assert broken(path) == []


def test_a_broken_link_or_anchor_is_caught(tmp_path):
    """The check itself: a missing file, a missing heading, a missing image, and good links passing."""
    (tmp_path / "other.md").write_text("# Other page\n\n## The context window: `num_ctx`\n\n## Twice\n\n## Twice\n")
    (tmp_path / "shot.png").write_bytes(b"\x89PNG")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n"
                    "[ok](other.md) [ok](other.md#the-context-window-num_ctx) [ok](other.md#twice-1) "
                    "[ok](#page) ![ok](shot.png) [web](https://example.org/x.md) `[code](nowhere.md)`\n\n"
                    "[gone](missing.md) [no heading](other.md#no-such-heading) ![gone](missing.png) "
                    "[here](#nothing-here)\n\n```\n[fenced](nowhere.md)\n```\n")
    assert broken(page) == ["missing.md: no such file",
                            f"other.md#no-such-heading: no heading #no-such-heading in {_shown(tmp_path / 'other.md')}",
                            "missing.png: no such file",
                            f"#nothing-here: no heading #nothing-here in {_shown(page)}"]


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in filter(local, links(README))}
    assert DOC_PAGES, "no docs pages"
    assert [p.name for p in DOC_PAGES if p.resolve() not in linked] == []


def test_the_configuration_page_names_every_key_of_the_example():
    example = yaml.safe_load((ROOT / "harvey.yaml.example").read_text(encoding="utf-8"))
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert [key for key in example if f"`{key}`" not in page] == []
    missing = []
    for section, value in example.items():
        if not isinstance(value, dict):
            continue
        if section == "models":                          # keyed by model name: the keys are a model's
            keys = {f"models.NAME.{k}" for model in value.values() for k in model}
            missing += [k for k in keys if f"`{k}`" not in page]
            continue
        body = page.split(f"## `{section}`", 1)[1].split("\n## ", 1)[0] if f"## `{section}`" in page else ""
        missing += [f"{section}.{k}" for k in value if f"| `{k}` |" not in body]
    assert missing == []
