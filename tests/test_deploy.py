"""Deployment: the systemd unit, the installer (into a temporary root, twice), `harvey serve`'s log.

``systemd-analyze verify`` fails on a unit whose ExecStart binary is missing, and
/opt/harvey/venv/bin/harvey does not exist on a test machine, so the unit is
verified as a copy whose ExecStart runs this interpreter's ``-m app.cli`` with
the same arguments; everything else is the file as shipped.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app import auth
from app.config import load_config
from conftest import require

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "deploy" / "harvey.service"
INSTALL = REPO / "deploy" / "install.sh"
SYSTEM_COMMANDS = ("useradd", "userdel", "chown", "systemctl", "apt-get", "pip", "python3")


# -- the unit -------------------------------------------------------------------------------

def unit_entries(text: str) -> dict[str, list[tuple[str, str]]]:
    """Sections of a unit file as lists of (key, value); keys may repeat."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
        else:
            key, _, value = line.partition("=")
            current.append((key.strip(), value.strip()))
    return sections


def values(sections, section: str, key: str) -> list[str]:
    return [v for k, v in sections.get(section, []) if k == key]


def runnable_copy(tmp_path: Path, text: str) -> Path:
    """The unit with ExecStart pointed at an interpreter that exists here."""
    exec_start = values(unit_entries(text), "Service", "ExecStart")[0]
    assert exec_start.startswith("/opt/harvey/venv/bin/harvey ")
    arguments = exec_start.removeprefix("/opt/harvey/venv/bin/harvey ")
    copy = tmp_path / "harvey.service"
    copy.write_text(text.replace(f"ExecStart={exec_start}", f"ExecStart={sys.executable} -m app.cli {arguments}"))
    return copy


def verify_problems(path: Path) -> list[str]:
    """What `systemd-analyze verify` says about the unit: an error exit or any line naming it."""
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)],
                            capture_output=True, text=True, timeout=60)
    problems = [line for line in (result.stdout + result.stderr).splitlines() if path.name in line]
    if result.returncode != 0:
        problems.append(f"exit status {result.returncode}: {result.stderr.strip()}")
    return problems


def test_unit_passes_systemd_analyze_verify(tmp_path):
    require(shutil.which("systemd-analyze") is not None, "systemd-analyze is not installed (apt-get install systemd)")
    assert verify_problems(runnable_copy(tmp_path, UNIT.read_text())) == []
    # The check can fail: a misspelt key is only a warning for systemd, and a problem here.
    broken = tmp_path / "broken"
    broken.mkdir()
    assert verify_problems(runnable_copy(broken, UNIT.read_text().replace("PrivateTmp=", "PrivatTmp=")))


def test_unit_runs_harvey_as_its_user_hardened_after_the_network_and_ollama():
    unit = unit_entries(UNIT.read_text())
    one = {(section, key): value for section, entries in unit.items() for key, value in entries}
    assert one["Service", "User"] == "harvey" and one["Service", "Group"] == "harvey"
    assert one["Service", "ExecStart"] == "/opt/harvey/venv/bin/harvey --config /etc/harvey/harvey.yaml serve"
    assert one["Service", "Restart"] == "on-failure"
    after = one["Unit", "After"].split()
    assert "network-online.target" in after and "ollama.service" in after
    assert not [k for k, v in unit["Unit"] if k in ("Requires", "BindsTo", "Wants") and "ollama" in v]
    for key, value in [("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("PrivateTmp", "yes"),
                       ("ReadWritePaths", "/var/lib/harvey"), ("ProtectHome", "yes"),
                       ("StandardOutput", "journal"), ("StandardError", "journal")]:
        assert one["Service", key] == value, key
    assert one["Install", "WantedBy"] == "multi-user.target"


def test_unit_exposure_is_low(tmp_path):
    require(shutil.which("systemd-analyze") is not None, "systemd-analyze is not installed (apt-get install systemd)")
    result = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager",
                             str(runnable_copy(tmp_path, UNIT.read_text()))],
                            capture_output=True, text=True, timeout=60)
    if "--offline" in result.stderr:
        pytest.skip("this systemd-analyze has no --offline")
    level = re.search(r"Overall exposure level for harvey\.service: ([\d.]+)", result.stdout)
    assert level, result.stdout + result.stderr
    assert float(level.group(1)) <= 2.0


# -- the installer --------------------------------------------------------------------------

@pytest.fixture
def stubs(tmp_path):
    """System commands that only record that they were called: --root must call none of them."""
    folder = tmp_path / "stubs"
    folder.mkdir()
    calls = tmp_path / "calls.log"
    for name in SYSTEM_COMMANDS:
        stub = folder / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\n')
        stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}
    return env, calls


def install(env, *args) -> subprocess.CompletedProcess:
    result = subprocess.run(["bash", str(INSTALL), *args], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def tree(root: Path) -> dict[str, tuple]:
    """Every path under root: kind, mode and (for files) the content's hash."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        mode = path.lstat().st_mode & 0o7777
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            found[rel] = ("dir", oct(mode))
        else:
            found[rel] = ("file", oct(mode), hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def test_install_into_a_temporary_root_twice(tmp_path, stubs):
    env, calls = stubs
    root = tmp_path / "root"
    first = install(env, "--root", str(root))
    created = tree(root)
    for path in ("etc/harvey/harvey.yaml", "etc/systemd/system/harvey.service", "opt/harvey/src/app/__init__.py",
                 "opt/harvey/src/templates/base.html", "opt/harvey/src/static/harvey.css",
                 "opt/harvey/src/pyproject.toml", "var/lib/harvey/sessions", "var/lib/harvey/workspace"):
        assert path in created, path
    assert (root / "etc/systemd/system/harvey.service").read_bytes() == UNIT.read_bytes()
    assert (root / "opt/harvey/src/app/auth.py").read_bytes() == (REPO / "app/auth.py").read_bytes()
    unwanted = ("opt/harvey/src/tests", "opt/harvey/src/.git", "opt/harvey/src/bench")
    assert not [p for p in created if "__pycache__" in p or p.startswith(unwanted)]
    assert created["etc/harvey/harvey.yaml"][1] == "0o640" and created["etc/harvey"][1] == "0o750"
    assert created["var/lib/harvey"][1] == "0o750"
    for line in ("would run: useradd --system", "would run: python3 -m venv /opt/harvey/venv",
                 "would run: /opt/harvey/venv/bin/pip install --quiet -e /opt/harvey/src",
                 "would run: systemctl enable harvey.service", "set-password", ":8080/"):
        assert line in first.stdout, line
    assert "Files: 0 changed" not in first.stdout

    config = load_config(root / "etc/harvey/harvey.yaml", env={})
    assert (config.workspace, config.sessions_dir, config.data_dir) == (
        "/var/lib/harvey/workspace", "/var/lib/harvey/sessions", "/var/lib/harvey")
    assert config.server.host == "0.0.0.0" and config.auth == "auto"
    assert auth.password_required(config.auth, config.server.host)

    second = install(env, "--root", str(root))
    assert tree(root) == created
    assert "Files: 0 changed." in second.stdout
    assert "unchanged /opt/harvey/src" in second.stdout and "kept your /etc/harvey/harvey.yaml" in second.stdout
    assert "restart" not in second.stdout and "daemon-reload" not in second.stdout
    assert not calls.exists(), calls.read_text()


def test_the_copied_source_builds_as_a_package(tmp_path, stubs):
    """Every package pyproject.toml names is in /opt/harvey/src: a real pip builds it (a missing
    harvey_demo stopped every real install with 'package directory ... does not exist')."""
    env, _ = stubs
    root = tmp_path / "root"
    install(env, "--root", str(root))
    src = root / "opt/harvey/src"
    assert (src / "harvey_demo/__init__.py").is_file()
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                             "--quiet", "-w", str(tmp_path / "wheel"), str(src)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert list((tmp_path / "wheel").glob("harvey_web-*.whl"))


def test_install_keeps_an_edited_config_and_follows_source_changes(tmp_path, stubs):
    env, _ = stubs
    root, source = tmp_path / "root", tmp_path / "checkout"
    for part in ("app", "harvey_demo", "templates", "static", "deploy"):
        shutil.copytree(REPO / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "harvey.yaml.example"):
        shutil.copy(REPO / part, source / part)
    install(env, "--root", str(root), "--source", str(source))
    config = root / "etc/harvey/harvey.yaml"
    config.write_text(config.read_text().replace("port: 8080", "port: 9090"))
    (source / "app" / "chat.py").write_text("# changed\n")
    (source / "templates" / "files" / "index.html").unlink()
    again = install(env, "--root", str(root), "--source", str(source))
    assert "port: 9090" in config.read_text() and ":9090/" in again.stdout
    assert (root / "opt/harvey/src/app/chat.py").read_text() == "# changed\n"
    assert not (root / "opt/harvey/src/templates/files/index.html").exists()
    assert "would run: systemctl restart harvey.service" in again.stdout
    assert "would run: /opt/harvey/venv/bin/pip install --quiet -e /opt/harvey/src" in again.stdout


def test_uninstall_keeps_sessions_workspace_and_config(tmp_path, stubs):
    env, calls = stubs
    root = tmp_path / "root"
    install(env, "--root", str(root))
    session = root / "var/lib/harvey/sessions/harvey-session-20250101-120000.spmd"
    session.write_text("Title: kept\n")
    (root / "var/lib/harvey/workspace/notes.txt").write_text("kept too\n")
    gone = install(env, "--root", str(root), "--uninstall")
    assert "would run: systemctl disable --now harvey.service" in gone.stdout
    assert not (root / "opt/harvey").exists() and not (root / "etc/systemd/system/harvey.service").exists()
    assert session.read_text() == "Title: kept\n" and (root / "var/lib/harvey/workspace/notes.txt").exists()
    assert (root / "etc/harvey/harvey.yaml").exists()
    kept = tree(root)
    twice = install(env, "--root", str(root), "--uninstall")
    assert "nothing to remove" in twice.stdout and tree(root) == kept
    assert not calls.exists()


def test_dry_run_writes_nothing(tmp_path, stubs):
    env, calls = stubs
    root = tmp_path / "root"
    result = install(env, "--root", str(root), "--dry-run")
    assert "would copy the checkout to /opt/harvey/src" in result.stdout
    assert "would install /etc/systemd/system/harvey.service" in result.stdout
    assert not root.exists() and not calls.exists()


def test_real_install_needs_root(stubs):
    env, calls = stubs
    command = ["bash", str(INSTALL)]
    if os.geteuid() != 0:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, cwd="/")
        assert result.returncode != 0 and "run as root" in result.stderr
        assert not calls.exists()
        return
    # As root: drop to nobody to see the refusal. nobody may not read the checkout or pytest's
    # tmp_path (0700), so what the run needs goes to a folder of its own that nobody can read:
    # the installer with the checkout markers it checks, the command stubs, and a log the stubs
    # can write (so a call would show).
    require(shutil.which("setpriv") is not None, "setpriv (util-linux) is needed to test as non-root")
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="harvey-setpriv-"))
    try:
        shared.chmod(0o755)
        (shared / "deploy").mkdir(mode=0o755)
        script = shared / "deploy" / "install.sh"
        shutil.copyfile(INSTALL, script)
        script.chmod(0o644)
        for folder in ("app", "templates", "static"):       # what its "is this a checkout?" check looks at
            (shared / folder).mkdir(mode=0o755)
        shutil.copyfile(REPO / "app" / "__init__.py", shared / "app" / "__init__.py")
        (shared / "app" / "__init__.py").chmod(0o644)
        log_dir = shared / "log"
        log_dir.mkdir()
        log_dir.chmod(0o777)
        shared_calls = log_dir / "calls.log"
        stubs_dir = shared / "stubs"
        stubs_dir.mkdir(mode=0o755)
        for name in SYSTEM_COMMANDS:
            stub = stubs_dir / name
            stub.write_text(f'#!/bin/sh\necho "{name} $*" >> "{shared_calls}"\n')
            stub.chmod(0o755)
        env = {**env, "PATH": f"{stubs_dir}:{os.environ['PATH']}"}
        probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", str(script)],
                               capture_output=True, timeout=30, cwd="/")
        assert probe.returncode == 0, "nobody can read the copied installer"      # the copy is what runs
        result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", str(script)],
                                env=env, capture_output=True, text=True, timeout=60, cwd="/")
        assert result.returncode != 0 and "run as root" in result.stderr, result.stderr
        assert not shared_calls.exists() and not calls.exists()
    finally:
        shutil.rmtree(shared, ignore_errors=True)


# -- harvey serve's start-up log ---------------------------------------------------------------

@pytest.mark.parametrize("auth_mode, host, words", [
    ("auto", "127.0.0.1", "No password (auth: auto): listening on loopback"),
    ("password", "127.0.0.1", "Password required (auth: password"),
])
def test_serve_logs_its_url_and_whether_a_password_is_asked(tmp_path, auth_mode, host, words):
    config = tmp_path / "harvey.yaml"
    config.write_text(f"auth: {auth_mode}\ndata_dir: {tmp_path}/data\nsessions_dir: {tmp_path}/s\n"
                      f"workspace: {tmp_path}/w\nmodel_server:\n  url: http://127.0.0.1:9\n")
    auth.set_password(tmp_path / "data", "a good password")
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "--config", str(config), "serve",
                                "--host", host, "--port", "0"], cwd=REPO, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = []
    try:
        for line in process.stderr:
            lines.append(line)
            if "Harvey Web" in line and "listening on" in line or len(lines) > 40:
                break
    finally:
        process.terminate()
        process.wait(10)
        process.stderr.close()
    log = "".join(lines)
    assert words in log, log
    assert re.search(r"listening on http://127\.0\.0\.1:\d+/", log), log
    assert "a good password" not in log
