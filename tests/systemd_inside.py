"""Run inside the systemd box (tests/systemd_box.py) by tests/test_systemd.py, with the installed
venv's Python (it has httpx): a reply in flight across ``systemctl restart harvey``.

The box has its own network namespace, so the test process cannot reach the service; this script
does, as test_shutdown.py does against a `harvey serve` process: a scripted Ollama on 11434 streams
a slow reply, the script signs in, sends a message, follows the reply until some of it arrived,
restarts the service, and reads the session page after the restart. It prints one JSON object.

    python systemd_inside.py PASSWORD
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scripted_ollama import Reply, ScriptedOllama  # noqa: E402

URL = "http://127.0.0.1:8080"
MODEL = "llama3.2:3b"                      # what install.sh's harvey.yaml names
TEXT = "".join(f"w{n:03d} " for n in range(400))


def wait(predicate, seconds: float, what: str, seen=lambda: ""):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(json.dumps({"error": f"timed out waiting for {what}", "seen": seen()}))


def signed_in(password: str) -> tuple[httpx.Client, str]:
    """A client with the sign-in cookie, and the CSRF token of the page it landed on."""
    client = httpx.Client(base_url=URL, timeout=10.0, follow_redirects=True, headers={"Origin": URL})
    first = _token(client.get("/login").text)
    client.post("/login", data={"password": password, "next": "/", "csrf_token": first})
    return client, _token(client.get("/").text)


def _token(page: str) -> str:
    found = re.search(r'"X-CSRF-Token": "([^"]+)"', html.unescape(page))
    return found.group(1) if found else ""


def main() -> None:
    password = sys.argv[1]
    ollama = ScriptedOllama(models={MODEL: 8192}, script=Reply(text=TEXT, piece_size=5, token_delay=0.02),
                            port=11434).start()
    try:
        wait(lambda: httpx.get(f"{URL}/healthz").json()["ollama"]["up"], 30, "Harvey to see Ollama come up")
        client, token = signed_in(password)
        if not token:
            raise SystemExit(json.dumps({"error": "signing in failed (no page with a CSRF token)"}))
        name = client.get("/").url.path.rsplit("/", 1)[-1]
        headers = {"X-CSRF-Token": token, "HX-Request": "true"}
        sent = client.post(f"/s/{name}/messages", data={"message": "count slowly"}, headers=headers)
        pieces: list[str] = []
        lines: list[str] = []

        def follow():
            try:
                with client.stream("GET", f"/s/{name}/turns/0/stream", timeout=30) as response:
                    for line in response.iter_lines():
                        lines.append(line)
                        if line.startswith("data:") and line[5:].strip().startswith("w"):
                            pieces.append(line[5:].strip())
            except httpx.HTTPError:
                pass

        threading.Thread(target=follow, daemon=True).start()
        wait(lambda: len(" ".join(pieces)) >= 40, 30, "some of the reply to arrive",
             lambda: f"sent {sent.status_code} {sent.text[:300]!r}; stream {lines[:12]!r}")
        pid_before = _show("MainPID")
        t0 = time.monotonic()
        restart = subprocess.run(["systemctl", "restart", "harvey"], capture_output=True, text=True, timeout=120)
        restart_s = time.monotonic() - t0
        wait(lambda: httpx.get(f"{URL}/healthz").status_code == 200, 60, "Harvey back after the restart")
        back_s = time.monotonic() - t0
        again, _ = signed_in(password)
        page = html.unescape(again.get(f"/s/{name}").text)
        print(json.dumps({
            "sent": sent.status_code, "arrived_before": " ".join(pieces)[:200], "restart_rc": restart.returncode,
            "restart_s": round(restart_s, 2), "back_s": round(back_s, 2), "pid_before": pid_before,
            "pid_after": _show("MainPID"), "interrupted": "Interrupted (the server was stopped" in page,
            "resend": "Re-send this message" in page, "kept": "w000 w001 w002" in page,
            "ollama_told": ollama.chats()[0].finished.wait(5) and ollama.chats()[0].disconnected,
        }))
    finally:
        ollama.stop()


def _show(prop: str) -> str:
    return subprocess.run(["systemctl", "show", "-p", prop, "--value", "harvey"], capture_output=True,
                          text=True).stdout.strip()


if __name__ == "__main__":
    main()
