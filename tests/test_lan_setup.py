"""Issue 31's findings on a real install, through the CLI and the app:

- `sudo harvey set-password` (root) wrote a root-owned file the service user could not read: it now
  writes the file for the data folder's owner, and a password file the app cannot read is logged
  with why (permission, owner) and how to fix it;
- the start-up line said `listening on http://127.0.0.1:8080/` while bound to 0.0.0.0: it now names
  this machine's LAN addresses, and loopback only when bound to loopback.

tests/test_systemd.py checks both again inside a real systemd with the installed unit.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from app import auth, netaddr
from balancer import free_port
from waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "a LAN password"
NOBODY = 65534


@pytest.fixture
def open_folder():
    """A folder other users can reach (pytest's tmp_path sits under a 0700 one)."""
    with tempfile.TemporaryDirectory(prefix="harvey-lan-") as folder:
        os.chmod(folder, 0o755)
        yield Path(folder)


def harvey(*args: str, config: Path, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "app.cli", "--config", str(config), *args], input=stdin,
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can run set-password as root and chown")
def test_set_password_as_root_writes_the_file_for_the_data_folders_owner(open_folder):
    tmp_path = open_folder
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, NOBODY, NOBODY)                      # the service's user owns its data folder
    config = tmp_path / "harvey.yaml"
    config.write_text(f"data_dir: {data}\n")
    done = harvey("set-password", config=config, stdin=f"{PASSWORD}\n")
    assert done.returncode == 0 and "password set" in done.stdout, done.stderr
    stat = (data / "password").stat()
    assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o777) == (NOBODY, NOBODY, 0o600)
    # and that user really reads it (not only root)
    setpriv = shutil.which("setpriv")
    if setpriv:
        read = subprocess.run([setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "cat",
                               str(data / "password")], capture_output=True, text=True, timeout=30)
        assert read.returncode == 0 and auth.verify_record(read.stdout, PASSWORD), read.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder root cannot be helped into")
def test_set_password_by_a_user_who_cannot_write_says_which_command_works(open_folder):
    tmp_path = open_folder
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    os.chown(data, NOBODY, NOBODY)
    config = tmp_path / "harvey.yaml"
    config.write_text(f"data_dir: {data}\n")
    config.chmod(0o644)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # a user who is neither root nor the owner (uid 65533)
    done = subprocess.run(["setpriv", "--reuid=65533", "--regid=65533", "--clear-groups", sys.executable, "-m",
                           "app.cli", "--config", str(config), "set-password"], input=f"{PASSWORD}\n",
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    if unreachable(done.stderr):
        pytest.skip("this checkout or its Python is not readable by another user (a 0700 folder)")
    assert done.returncode == 1, done.stderr
    assert "cannot write the password" in done.stderr and "nothing changed" in done.stderr
    assert "sudo -u nobody" in done.stderr and "set-password" in done.stderr and "Traceback" not in done.stderr
    assert not (data / "password").exists()


def unreachable(stderr: str) -> bool:
    """Did another user's Python fail to start because it cannot reach this checkout or this Python?"""
    if stderr.startswith("harvey:"):
        return False                    # the app started and said why it cannot write: the case under test
    return "No module named" in stderr or ("Permission denied" in stderr and "Traceback" not in stderr)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder root cannot be helped into")
def test_the_set_password_tests_pass_or_skip_from_a_checkout_in_a_0700_folder(tmp_path):
    """Issue 43: a fresh clone made with ``mktemp -d`` (mode 0700) ran the test above into "No module named
    'app'": the checkout's tests, copied into such a folder and run there, pass or skip, never fail."""
    import site
    import sysconfig

    hidden = Path(tempfile.mkdtemp(prefix="harvey-0700-"))        # mode 0700, as mktemp -d makes it
    try:
        assert hidden.stat().st_mode & 0o777 == 0o700
        clone = hidden / "harvey-web"
        for part in ("app", "tests", "harvey_demo", "templates", "static", "pyproject.toml"):
            source = ROOT / part
            (shutil.copytree(source, clone / part, ignore=shutil.ignore_patterns("__pycache__", "data", "browser"))
             if source.is_dir() else shutil.copy(source, clone / part))
        # its own virtualenv inside the clone, as scripts/test.sh makes one (this one borrows our packages)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(clone / ".venv")], check=True, timeout=120)
        python = clone / ".venv" / "bin" / "python"
        inner = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip()
        Path(inner, "outer.pth").write_text("\n".join([sysconfig.get_paths()["purelib"], *site.getsitepackages()]) + "\n")
        run = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                              "tests/test_lan_setup.py", "-k", "set_password and not 0700"], cwd=clone,
                             capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(clone)})
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        assert "failed" not in run.stdout and ("passed" in run.stdout or "skipped" in run.stdout)
    finally:
        shutil.rmtree(hidden, ignore_errors=True)


def test_a_password_file_that_cannot_be_read_is_logged_with_owner_and_fix(tmp_path, monkeypatch, caplog):
    path = tmp_path / "password"
    auth.set_password(tmp_path, PASSWORD)
    real_read = Path.read_text

    def refuse(self, *args, **kwargs):                 # what the service user meets (root reads anything)
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refuse)
    with caplog.at_level(logging.ERROR, logger="app.auth"):
        assert auth.PasswordFile(path).record() is None
    owner = auth._user(path.stat().st_uid)
    message = caplog.records[-1].getMessage()
    assert f"cannot read the password file {path}: permission denied (owned by {owner}, mode 0600" in message
    assert f"sudo chown {auth._user(os.geteuid())}: {path}" in message and "set-password" in message


def _listening_line(tmp_path: Path, host: str) -> str:
    port = free_port()
    config = tmp_path / "harvey.yaml"
    config.write_text(f"model_server:\n  url: http://127.0.0.1:{free_port()}\n  model: tiny:1b\n"
                      f"workspace: {tmp_path}/workspace\nsessions_dir: {tmp_path}/sessions\n"
                      f"data_dir: {tmp_path}/data\nserver:\n  host: {host}\n  port: {port}\n")
    log = open(tmp_path / f"serve-{host}.log", "w+")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OLLAMA_HOST", None)
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "--config", str(config), "serve"], cwd=tmp_path,
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        def line():
            text = (tmp_path / f"serve-{host}.log").read_text()
            assert proc.poll() is None, text
            return next((l for l in text.splitlines() if " listening on http" in l), None)
        return wait_until(line, 60, f"harvey serve's start-up line ({host})", interval=0.2)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def _addresses_by_ip() -> set[str]:
    """This machine's non-loopback IPv4 addresses, as iproute2 sees them (independent of app.netaddr)."""
    shown = json.loads(subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True,
                                      check=True).stdout)
    return {a["local"] for link in shown for a in link.get("addr_info", [])
            if not a["local"].startswith("127.")}


@pytest.mark.skipif(not shutil.which("ip"), reason="iproute2 (scripts/test.sh installs it) names the expected addresses")
def test_the_start_up_line_names_the_lan_addresses_when_bound_to_all(tmp_path):
    line = _listening_line(tmp_path, "0.0.0.0")
    expected = _addresses_by_ip()
    named = set(netaddr.lan_addresses())
    assert named == expected                            # the app sees what ip sees
    for address in expected:
        assert f"http://{address}:" in line, line
    assert "127.0.0.1" not in line and "127.0.1.1" not in line, line


def test_the_start_up_line_names_loopback_when_bound_to_loopback(tmp_path):
    line = _listening_line(tmp_path, "127.0.0.1")
    assert "listening on http://127.0.0.1:" in line and "," not in line.split("listening on", 1)[1]


def test_ipv6_addresses_come_from_proc_net_if_inet6_global_only(tmp_path):
    (tmp_path / "if_inet6").write_text(
        "00000000000000000000000000000001 01 80 10 80       lo\n"
        "fe800000000000005cbc7bfffed0265a 02 40 20 80     eth0\n"
        "20010db800000000000000000000002a 02 40 00 00     eth0\n")
    assert netaddr.ipv6_global(tmp_path) == ["2001:db8::2a"]
    assert netaddr._url("2001:db8::2a", 8080) == "http://[2001:db8::2a]:8080/"
    (tmp_path / "dev").write_text("Inter-|   Receive\n face |bytes\n    lo: 0 0\n  eth0: 1 2\n")
    assert netaddr.interface_names(tmp_path) == ["lo", "eth0"]
