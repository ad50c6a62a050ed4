"""Generated haystacks with planted facts, and a bag-of-words embedding for the scripted server
(its default vectors say only how long a text is), shared by the retrieval tests."""

from __future__ import annotations

import hashlib
import re

DIM = 64
_STOP = frozenset("a an and are as at be by for from in is it of on or the to was what who which with "
                  "search_query search_document query passage".split())


def bag_vector(text: str) -> list[float]:
    """Each telling word (lower-cased, its last ``s`` dropped) adds 1 to one of DIM hashed slots:
    texts that share words point the same way, which is all a test needs of an embedder."""
    vec = [0.0] * DIM
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if word in _STOP:
            continue
        word = word[:-1] if len(word) > 3 and word.endswith("s") else word
        vec[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return vec


FILLER = ("Paragraph {p} of section {s} talks about cargo, cranes and the tides of the estuary, which move "
          "ships in and out on a schedule the harbour master keeps. ")


def haystack(sections: int, facts: dict[int, str] | None = None) -> str:
    """A Markdown file of ``sections`` sections of filler; ``facts[s]`` planted at the end of section s."""
    facts = facts or {}
    out = []
    for s in range(sections):
        out.append(f"## Section {s}: harbour logistics\n")
        for p in range(4):
            out.append(FILLER.format(p=p, s=s) * 3 + "\n")
        if s in facts:
            out.append(facts[s] + "\n")
    return "\n".join(out)
