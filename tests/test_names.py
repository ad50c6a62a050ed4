"""Issue 34, "names that mislead": no two classes in app/ share a name.

Two unrelated ``Passage`` classes (the retrieval index's chunk and the session record's cited
passage) and two unrelated ``Line`` classes (a model call's socket line and a page's screenplay
element) made a reader take one for the other. Parsed from the source, nothing imported.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"


def test_no_two_classes_in_app_share_a_name():
    defined = defaultdict(list)
    for path in sorted(APP.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                defined[node.name].append(str(path.relative_to(APP.parent)))
    assert len(defined) > 50                       # the walk found the app's classes
    shared = {name: paths for name, paths in defined.items() if len(paths) > 1}
    assert shared == {}
