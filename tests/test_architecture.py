"""The layout of app/ (issues 22 and 34): no import cycle, Flask and the views only in app/web/, the
chat and analysis views independent of each other, auth and security independent, the
session's model work owned in one place, and no object reaching into another's private attributes.  Read from the source with ``ast``: every import
counts, a function-level one too."""

import ast
import sys
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


def package_of(name: str) -> str:
    """The floor a module belongs to: ``app.analysis.plan`` -> ``app.analysis``; a top-level module
    (``app.budget``) is a floor of its own; the factory ``app`` is left out (it wires every floor)."""
    parts = name.split(".")
    return ".".join(parts[:2])


def package_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for name, targets in edges.items():
        if name == "app":
            continue
        mine = package_of(name)
        out.setdefault(mine, set()).update(package_of(t) for t in targets if t != "app" and package_of(t) != mine)
    return out


def test_the_package_graph_sees_a_cycle_between_two_packages():
    edges = {"app.chat.turns": {"app.analysis.job"}, "app.analysis.direct": {"app.chat.status"},
             "app.chat.status": set(), "app.analysis.job": set(), "app": {"app.chat.turns"}}
    assert cycles(package_graph(edges)) == [["app.analysis", "app.chat"]]


def test_no_import_cycle_between_packages_of_app():
    """Issue 34: no two packages of app/ import each other, even through different modules (the
    analysis and chat packages did: /read-chunks now lives with the chat, above the analysis)."""
    assert cycles(package_graph(graph())) == []


# The web layer: every blueprint, view and fragment lives in app.web (issue 34).
WEB_PACKAGE = "app.web"
# Besides the web layer, only the app factory (``app``) may import a view: it registers them.
WEB = {"app"}


def is_web(name: str) -> bool:
    return name == WEB_PACKAGE or name.startswith(WEB_PACKAGE + ".")


def test_domain_code_never_imports_a_view():
    edges = graph()
    offenders = {(m, v) for m, targets in edges.items() if not is_web(m) and m not in WEB
                 for v in targets if is_web(v)}
    assert offenders == set()


def outside_imports(path: Path) -> set[str]:
    """Every absolute import in ``path`` (``import x.y`` and ``from x.y import z``: the module names)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


def web_offenders() -> set[tuple[str, str]]:
    """(module, what it imports) for every module outside app.web and the factory that imports
    Flask, Werkzeug or a module of app.web (a function-level import too)."""
    known = modules()
    out = set()
    for name, path in known.items():
        if is_web(name) or name in WEB:
            continue
        for target in outside_imports(path):
            if target.split(".")[0] in ("flask", "werkzeug"):
                out.add((name, target))
        out.update((name, v) for v in imports_of(name, path, known) if is_web(v))
    return out


def test_only_the_web_layer_imports_flask_or_a_view():
    """Domain code (everything but app/web/ and the factory in app/__init__.py) runs without
    Flask: no ``flask``/``werkzeug`` import, and no import of an ``app.web`` module."""
    assert web_offenders() == set()


def test_the_web_check_sees_an_offender(tmp_path, monkeypatch):
    """The check is not vacuous: the web layer exists and holds Flask, and a domain module
    that imported Flask or a view would be named."""
    known = modules()
    assert {"app.web.chat", "app.web.analysis", "app.web.sessions", "app.web.fragments"} <= set(known)
    assert any(t.split(".")[0] == "flask" for t in outside_imports(known["app.web.chat"]))
    fake = tmp_path / "app"
    (fake / "web").mkdir(parents=True)
    (fake / "__init__.py").write_text("from flask import Flask\n")
    (fake / "web" / "__init__.py").write_text("")
    (fake / "web" / "chat.py").write_text("import flask\n")
    (fake / "domain.py").write_text("from werkzeug.exceptions import NotFound\nfrom .web import chat\n")
    monkeypatch.setattr(sys.modules[__name__], "APP", fake)
    assert web_offenders() == {("app.domain", "werkzeug.exceptions"), ("app.domain", "app.web.chat")}


def test_the_chat_and_analysis_views_do_not_import_each_other():
    edges = graph()
    assert "app.web.analysis" not in edges["app.web.chat"]
    assert "app.web.chat" not in edges["app.web.analysis"]


def test_auth_and_security_do_not_import_each_other():
    edges = graph()
    assert not ("app.security" in edges["app.auth"] and "app.auth" in edges["app.security"])
    assert not ("app.web.security" in edges["app.web.auth"] and "app.web.auth" in edges["app.web.security"])


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


# -- no reach into another object's insides (issue 34) ---------------------------------------------

# What may follow a dot although it starts with "_": namedtuple's public methods, and dunders.
PUBLIC_UNDERSCORED = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}


def reaches_in(source: str) -> set[str]:
    """Every ``x._name`` in ``source`` where ``x`` is not ``self``, ``cls`` or ``super()``: an object
    reaching into another's private attributes (a dunder, or a namedtuple's ``_replace``, is no reach)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if (node.attr.startswith("__") and node.attr.endswith("__")) or node.attr in PUBLIC_UNDERSCORED:
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        found.add(ast.unparse(node))
    return found


def private_reaches() -> set[tuple[str, str]]:
    return {(name, reach) for name, path in modules().items()
            for reach in reaches_in(path.read_text(encoding="utf-8"))}


def test_no_module_reaches_into_another_objects_private_attributes():
    """A step of a run sees the runner through ``analysis.steps.RunSteps``, a session's turns
    through ``Session.parsed_turns``: what one object needs of another is a public, named part of it."""
    assert private_reaches() == set()


def test_the_reach_check_sees_an_offender(tmp_path, monkeypatch):
    """The check is not vacuous: a reach into another object is named, and what is allowed is not."""
    fake = tmp_path / "app"
    (fake / "analysis").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "analysis" / "__init__.py").write_text("")
    (fake / "analysis" / "step.py").write_text(
        "class Step:\n"
        "    def run(self, job):\n"
        "        self._count += 1\n"                       # its own: allowed
        "        super()._run(job)\n"                      # its base class's: allowed
        "        job = job._replace(state='done').__class__\n"   # namedtuple's public method, a dunder
        "        if self.runner._stopped(job):\n"           # the runner's insides: named
        "            return self.ex._read_chunk(job)\n"     # another object's: named
        "        return cls._cache, session._turns\n")      # cls allowed; session._turns named
    monkeypatch.setattr(sys.modules[__name__], "APP", fake)
    assert private_reaches() == {("app.analysis.step", "self.runner._stopped"),
                                 ("app.analysis.step", "self.ex._read_chunk"),
                                 ("app.analysis.step", "session._turns")}


# The modules that take small objects made for them (issue 34): the sizing of a turn, a file or an
# analysis takes a ``budget.Sizing``; a run's steps take a ``RunSteps``; the runner the parts it
# uses, each named. None sees ``Services``.
EXPLICIT = ("app.chat.prepare", "app.chat.status", "app.analysis.plan", "app.analysis.steps",
            "app.analysis.execute", "app.analysis.inflight", "app.analysis.retrieve", "app.analysis.runner")


def service_bag_uses(source: str) -> set[str]:
    """Every name or attribute ``svc`` / ``services`` in ``source``: the whole service bag."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in ("svc", "services"):
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and node.attr in ("svc", "services"):
            found.add(ast.unparse(node))
        elif isinstance(node, ast.arg) and node.arg in ("svc", "services"):
            found.add(f"argument {node.arg}")
    return found


def test_sizing_and_the_runs_steps_take_what_they_use_not_the_service_bag():
    """A reader sees at the signature what these need: the settings, the model server and the
    calibration (``Sizing``), the model calls and the indexer (``RunSteps``); never a session
    store, a job table or a worker through ``svc``."""
    found = {name: service_bag_uses(path.read_text(encoding="utf-8"))
             for name, path in modules().items() if name in EXPLICIT}
    assert set(found) == set(EXPLICIT)
    assert {name: uses for name, uses in found.items() if uses} == {}


def test_the_service_bag_check_sees_an_offender():
    planted = ("def plan(svc, file):\n    return svc.config\n\n"
               "class Step:\n    def run(self):\n        return self.steps.svc.indexer\n")
    assert service_bag_uses(planted) == {"argument svc", "svc", "self.steps.svc"}


def floors_in_architecture_md() -> dict[str, int]:
    """The floor of each package, from the table in ARCHITECTURE.md ("| 3 | `budget` | ...")."""
    import re

    floors = {}
    for line in (APP.parent / "ARCHITECTURE.md").read_text(encoding="utf-8").splitlines():
        row = re.match(r"\| (\d+) \| ([^|]+) \|", line)
        if row:
            for name in re.findall(r"`([a-z_]+)`", row.group(2)):
                floors[f"app.{name}"] = int(row.group(1))
    return floors


def test_the_floors_in_architecture_md_are_the_imports():
    """The map a newcomer reads is the code: every package of app/ has a floor in ARCHITECTURE.md,
    and imports only packages on lower floors."""
    floors = floors_in_architecture_md()
    packages = package_graph(graph())
    assert set(packages) <= set(floors), sorted(set(packages) - set(floors))
    upward = sorted((p, q) for p, targets in packages.items() for q in targets if floors[q] >= floors[p])
    assert upward == []
