"""Issue 34: no reach into another object's private parts in the model-call layer.

Read from the source (no import): an attribute whose name starts with one underscore may be read
only on ``self``, ``cls`` or ``super()``; anything else (``self._server._send_chat``,
``server._reply_done``) is a collaborator's insides, which gets a public, named method instead.
Scoped to the packages made so (the model server, the call helper, retrieval); widen ``CHECKED``
as others are.
"""

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parent.parent / "app"
CHECKED = sorted([*(APP / "modelserver").glob("*.py"), APP / "work" / "calls.py", *(APP / "retrieval").glob("*.py")])


def private_reaches(source: str) -> list[str]:
    """Each ``x._name`` where ``x`` is not ``self``, ``cls`` or ``super()``, as "line: code"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_finds_a_reach():
    assert sorted(private_reaches("class A:\n    def f(self, s):\n        return self._line._close(s), s._x, self._ok\n")) \
        == ["3: s._x", "3: self._line._close"]
    assert private_reaches("class B(A):\n    def f(self):\n        return super()._g(), cls._h\n") == []
    assert {"modelserver/transport.py", "work/calls.py", "retrieval/indexer.py"} <= {
        p.relative_to(APP).as_posix() for p in CHECKED}


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: p.relative_to(APP).as_posix())
def test_no_module_reaches_into_another_objects_private_parts(path):
    assert private_reaches(path.read_text(encoding="utf-8")) == []
