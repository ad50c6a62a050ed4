"""The layout of app/ (issue 22): no import cycle, views never imported by domain code, the
chat and analysis views independent of each other, auth and security independent, and the
session's model work owned in one place.  Read from the source with ``ast``: every import
counts, a function-level one too."""

import ast
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"


def module_name(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in APP.rglob("*.py")}


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The app modules ``name`` imports (a name imported from a package counts as its submodule
    when there is one, else as the package)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "app")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "app":
                target = node.module
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_app():
    assert cycles(graph()) == []


VIEWS = {"app.chat.views", "app.analysis.views", "app.sessions.views", "app.chat.fragments", "app.files",
         "app.health", "app.auth"}
# Web modules: they may import views and fragments; everything else is domain code.
WEB = VIEWS | {"app", "app.security", "app.cli"}


def test_domain_code_never_imports_a_view():
    edges = graph()
    offenders = {(m, v) for m, targets in edges.items() if m not in WEB for v in targets & VIEWS}
    assert offenders == set()


def test_the_chat_and_analysis_views_do_not_import_each_other():
    edges = graph()
    assert "app.analysis.views" not in edges["app.chat.views"]
    assert "app.chat.views" not in edges["app.analysis.views"]


def test_auth_and_security_do_not_import_each_other():
    edges = graph()
    assert not ("app.security" in edges["app.auth"] and "app.auth" in edges["app.security"])


def test_routing_is_its_own_module_and_the_job_table_does_not_reach_into_the_chat():
    edges = graph()
    assert "app.routing" in edges["app.analysis.job"]
    assert not any(m.startswith("app.chat") for m in edges["app.analysis.job"])


def test_only_the_activity_owner_decides_whether_a_session_is_busy():
    """No module keeps its own registry of running replies: ``replies.running``/``Replies`` are gone."""
    for name, path in modules().items():
        text = path.read_text(encoding="utf-8")
        assert "replies.running(" not in text and "class Replies" not in text, name


def test_every_package_is_installed():
    """pyproject.toml lists its packages by name: a new one left out works in a checkout's
    editable install and is missing from a real one (the Pi's)."""
    import tomllib

    listed = set(tomllib.loads((APP.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {module_name(p) for p in APP.rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
