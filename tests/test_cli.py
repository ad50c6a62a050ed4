"""`harvey serve` and `harvey check` as processes, as a user runs them."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.cli import DEMO_MODEL
from app.sessions import fountain
from conftest import require
from waiting import wait_until
from scripted_ollama import Reply, ScriptedOllama

ROOT = Path(__file__).resolve().parent.parent


def harvey(*args, cwd, env=None):
    """Start `harvey ...` (via python -m app.cli) in ``cwd``."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    if "OLLAMA_HOST" not in (env or {}):
        full_env.pop("OLLAMA_HOST", None)
    return subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=cwd, env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_url(proc, timeout=60) -> str:
    """Read the log until the server says where it listens (a reader thread, so a silent,
    hung server fails at the deadline instead of blocking ``readline`` for ever)."""
    import queue
    import threading

    lines: "queue.Queue[str | None]" = queue.Queue()

    def read():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout
    seen = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+)/", line)
        if found:
            return found.group(1)
    proc.kill()
    raise AssertionError(f"server did not start within {timeout} s:\n" + "".join(seen))


def write_config(folder: Path, ollama_url: str, model: str = "tiny:1b"):
    (folder / "harvey.yaml").write_text(
        f"model_server:\n  url: {ollama_url}\n  model: {model}\n  timeout_s: 5\n"
        f"server:\n  port: 0\nworkspace: ./ws\nsessions_dir: ./sessions\ndata_dir: ./data\nuser_name: tester\n")


def stop(proc):
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        raise AssertionError("harvey serve did not stop within 20 s of SIGINT") from None


def test_broken_config_stops_start_up_with_one_message(tmp_path):
    (tmp_path / "harvey.yaml").write_text("chunking:\n  threshold: 2\n")
    result = subprocess.run([sys.executable, "-m", "app.cli", "serve"], cwd=tmp_path, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=30)
    assert result.returncode == 2
    assert "harvey.yaml: key 'chunking.threshold': expected a number in (0, 1], got 2.0" in result.stderr


def test_check_says_what_is_wrong(tmp_path):
    with ScriptedOllama() as server:
        write_config(tmp_path, server.url, model="missing:7b")
        result = subprocess.run([sys.executable, "-m", "app.cli", "check"], cwd=tmp_path, capture_output=True,
                                text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=30)
    assert result.returncode == 1
    assert "tiny:1b: trained context 8192, window used (num_ctx) 8192" in result.stdout
    assert "problem: the configured model 'missing:7b' is not installed: ollama pull missing:7b" in result.stdout
    dead = subprocess.run([sys.executable, "-m", "app.cli", "check"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OLLAMA_HOST": "127.0.0.1:9"}, timeout=30)
    assert dead.returncode == 1 and "Ollama is not running at http://127.0.0.1:9" in dead.stdout


@pytest.mark.realmodel
def test_serve_demo_falls_back_to_the_bundled_model(tmp_path):
    from harvey_demo import server as demo_server

    require(demo_server.model_available(DEMO_MODEL), demo_server.bundled.get(DEMO_MODEL).install_hint)
    write_config(tmp_path, "http://127.0.0.1:9", model="llama3.2:3b")
    proc = harvey("serve", "--demo", cwd=tmp_path)
    try:
        url = wait_for_url(proc)
        page = httpx.get(url + "/", follow_redirects=True, timeout=30)
        assert page.status_code == 200 and DEMO_MODEL in page.text
        assert "demo model: a stand-in for trying Harvey" in re.sub(r"<[^>]+>", "", page.text)   # what it is (issue 31)
        health = httpx.get(url + "/healthz", timeout=30).json()
        assert health["ollama"]["up"] and health["model"] == DEMO_MODEL and health["model_installed"]
    finally:
        stop(proc)


def test_server_killed_mid_reply_loses_nothing(tmp_path):
    with ScriptedOllama() as server:
        write_config(tmp_path, server.url)
        proc = harvey("serve", cwd=tmp_path)
        url = wait_for_url(proc)
        http = httpx.Client(base_url=url, timeout=10, follow_redirects=True)
        page = http.get("/")
        name = page.url.path.rsplit("/", 1)[-1]
        token = re.search(r'X-CSRF-Token&#34;: &#34;([^&]+)&#34;|"X-CSRF-Token": "([^"]+)"', page.text)
        token = token.group(1) or token.group(2)
        headers = {"X-CSRF-Token": token}
        http.post(f"/s/{name}/messages", data={"message": "first question"}, headers=headers)
        with http.stream("GET", f"/s/{name}/turns/0/stream") as events:
            assert any(line == "event: close" for line in events.iter_lines())
        server.script = Reply(text="slow " * 500, token_delay=0.05)
        http.post(f"/s/{name}/messages", data={"message": "second question, interrupted"}, headers=headers)
        wait_until(lambda: len(server.chats()) == 2, 10, "the second question to reach the model")
        proc.kill()                                   # a crash, not a shutdown (mid-reply: ~25 s to go)
        proc.wait(10)
        restarted = harvey("serve", cwd=tmp_path)
        try:
            url2 = wait_for_url(restarted)
            text = httpx.get(f"{url2}/s/{name}", timeout=10).text
            assert "first question" in text and "You said: first question" in text
            assert "second question, interrupted" in text
        finally:
            stop(restarted)
    path = tmp_path / "sessions" / f"{name}.spmd"
    turns = fountain.turns(fountain.loads(path.read_text()))
    assert [t.user_text for t in turns] == ["first question", "second question, interrupted"]
    assert turns[0].reply == "You said: first question" and turns[1].reply is None
    assert not list((tmp_path / "sessions").glob(".*.tmp"))
