"""The layout: only app/modelserver/ talks to a model server's wire format.

Read from the source text (no import): a second kind of model server (issue 24) must be
addable by writing one module in app/modelserver/, so no other module may import httpx for
model calls or name an Ollama endpoint or answer field, in code, comments or docstrings.
"""

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parent.parent / "app"
MODEL_SERVER = APP / "modelserver"
OLLAMA_WORDS = ("prompt_eval_count", "eval_count", "eval_duration", "total_duration", "done_reason", "model_info",
                "/api/chat", "/api/show", "/api/tags")
# Modules outside app/modelserver/ that may import httpx for a reason other than model calls: none today.
HTTPX_ALLOWED: dict[str, str] = {}


def outside_modules() -> list[Path]:
    return sorted(p for p in APP.rglob("*.py") if MODEL_SERVER not in p.parents)


def imported(path: Path) -> set[str]:
    """The top-level names of every module ``path`` imports (absolute imports only)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_scan_sees_the_app_and_the_package():
    modules = {p.relative_to(APP).as_posix() for p in outside_modules()}
    assert {"budget.py", "chat/replies.py", "analysis/runner.py", "services.py"} <= modules
    assert "httpx" in imported(MODEL_SERVER / "ollama.py")          # the check can find an import
    assert "prompt_eval_count" in (MODEL_SERVER / "ollama.py").read_text()


@pytest.mark.parametrize("path", outside_modules(), ids=lambda p: p.relative_to(APP).as_posix())
def test_no_module_outside_the_model_server_package_imports_httpx(path):
    name = path.relative_to(APP).as_posix()
    if name in HTTPX_ALLOWED:
        return
    assert not {"httpx", "httpcore"} & imported(path), f"app/{name} imports httpx: model calls go through app.modelserver"


@pytest.mark.parametrize("path", outside_modules(), ids=lambda p: p.relative_to(APP).as_posix())
def test_no_module_outside_the_model_server_package_names_an_ollama_field(path):
    text = path.read_text(encoding="utf-8")
    found = [word for word in OLLAMA_WORDS if word in text]
    assert not found, f"app/{path.relative_to(APP).as_posix()} names {found}: that belongs in app/modelserver/ollama.py"


def test_the_old_client_module_is_gone():
    assert not (APP / "ollama.py").exists()
