"""Issue 13, problem 9: `harvey serve` shuts down gracefully, and a crash leaves a Re-send.

`harvey serve` runs as a real subprocess (the entry point systemd starts) against the
scripted Ollama server in this process, with slow tokens so that a reply is in flight:

- SIGTERM (systemctl stop/restart) and SIGINT (Ctrl-C) mid-reply: the `.spmd` keeps the
  text that had arrived plus an "interrupted" note, the page following the reply gets the
  recorded turn, and the process exits 0 well within systemd's TimeoutStopSec;
- a running analysis is left resumable (Resume on its card after the restart);
- `kill -9` mid-reply: on the next start the turn shows that nothing was saved, with an
  "interrupted" notice and a one-tap Re-send, which answers.
"""

from __future__ import annotations

import html
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from app.sessions import fountain, notes
from scripted_ollama import Reply
from test_streams import snapshot_tail
from balancer import free_port
from conftest import require
from waiting import wait_for_exit, wait_until

ROOT = Path(__file__).resolve().parents[1]
TEXT = "".join(f"w{n:03d} " for n in range(400))          # ~20 s at 4 characters per 0.02 s... unless stopped


def stop_timeout_s() -> float:
    """systemd's TimeoutStopSec for the service (what `harvey serve` must exit within)."""
    unit = (ROOT / "deploy" / "harvey.service").read_text()
    return float(re.search(r"^TimeoutStopSec=(\d+)", unit, re.M).group(1))


class Serve:
    """`python -m app.cli serve` in its own process, with an httpx client that holds the CSRF token."""

    def __init__(self, folder: Path, ollama_url: str, *options: str):
        """``options``: more arguments for ``harvey serve`` (``--demo``)."""
        self.folder = folder
        self.token = ""
        for attempt in range(3):       # a free port can be taken by another test worker before the bind
            self._launch(ollama_url, options)
            wait_until(self._up_or_exited, 30, f"harvey serve answering on {self.url}")
            if self.proc.poll() is None:
                return
            self.http.close()
            self.log.close()
            if "Address already in use" not in self.output():
                break
        pytest.fail(f"harvey serve exited with {self.proc.returncode}: {self.output()}")

    def _launch(self, ollama_url: str, options) -> None:
        """Start ``harvey serve`` on a port free a moment ago."""
        folder = self.folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = folder / "harvey.yaml"
        config.write_text(
            f"model_server:\n  url: {ollama_url}\n  model: tiny:1b\n  timeout_s: 30\n"
            f"workspace: {folder / 'workspace'}\nsessions_dir: {folder / 'sessions'}\n"
            f"data_dir: {folder / 'data'}\nuser_name: tester\n"
            f"server:\n  host: 127.0.0.1\n  port: {self.port}\n")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("OLLAMA_HOST", None)
        env.pop("HARVEY_MODEL", None)
        self.log = open(folder / f"serve-{self.port}.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--config", str(config), *options],
                                     cwd=folder, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.http = httpx.Client(base_url=self.url, timeout=10.0, follow_redirects=True)

    def _up_or_exited(self) -> bool:
        if self.proc.poll() is not None:
            return True
        try:
            return self.http.get("/healthz", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return (self.folder / f"serve-{self.port}.log").read_text()

    def get(self, path: str) -> httpx.Response:
        response = self.http.get(path)
        found = re.search(r'"X-CSRF-Token": "([^"]+)"', html.unescape(response.text))
        if found:
            self.token = found.group(1)
        return response

    def post(self, path: str, **kw) -> httpx.Response:
        if not self.token:
            self.get("/")
        return self.http.post(path, headers={"X-CSRF-Token": self.token, "HX-Request": "true"}, **kw)

    def open_session(self) -> str:
        return self.get("/").url.path.rsplit("/", 1)[-1]

    def stop(self) -> None:
        """Never leave a server behind, whatever the test did."""
        self.http.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


@pytest.fixture
def serves(tmp_path):
    started: list[Serve] = []

    def start(ollama_url: str, *options: str) -> Serve:
        serve = Serve(tmp_path, ollama_url, *options)
        started.append(serve)
        return serve

    yield start
    for serve in started:
        serve.stop()


class Follower:
    """Reads a reply's event stream in a thread, as the page does: the pieces, then the final turn."""

    def __init__(self, serve: Serve, path: str):
        self.pieces: list[str] = []
        self.events: list[str] = []
        self.final = ""
        self.error = None
        self.thread = threading.Thread(target=self._read, args=(serve, path), daemon=True)
        self.thread.start()

    def _read(self, serve, path):
        event, data = "", []
        try:
            with serve.http.stream("GET", path, timeout=30) as response:
                for line in response.iter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].removeprefix(" "))
                    elif line == "" and event:
                        self.events.append(event)
                        if event == "piece":
                            self.pieces.append("\n".join(data))
                        elif event == "snapshot":          # (TEXT has no blank line: all of it is the tail)
                            self.pieces.append(snapshot_tail("\n".join(data)))
                        elif event == "final":
                            self.final = "\n".join(data)
                        event, data = "", []
        except httpx.HTTPError as exc:
            self.error = exc


def session_turns(folder: Path, name: str) -> list[fountain.Turn]:
    return fountain.turns(fountain.loads((folder / "sessions" / f"{name}.spmd").read_text()))


def reply_in_flight(scripted, serves, message: str, chars: int):
    """A real ``harvey serve`` streaming a slow reply to ``message``, followed until ``chars`` arrived."""
    scripted.script = Reply(text=TEXT, piece_size=5, token_delay=0.02)
    serve = serves(scripted.url)
    name = serve.open_session()
    assert serve.post(f"/s/{name}/messages", data={"message": message}).status_code == 200
    follower = Follower(serve, f"/s/{name}/turns/0/stream")
    wait_until(lambda: len("".join(follower.pieces)) >= chars, 15, "some of the reply to arrive")
    return serve, name, follower


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_reply_keeps_what_arrived_with_a_note_and_exits_0_in_time(tmp_path, scripted, serves, signum):
    serve, name, follower = reply_in_flight(scripted, serves, "count slowly", 40)

    t0 = time.monotonic()
    serve.proc.send_signal(signum)
    status = wait_for_exit(serve.proc, stop_timeout_s(), "harvey serve to exit after the signal")
    took = time.monotonic() - t0
    assert status == 0, serve.output()
    assert took < stop_timeout_s()                      # well inside systemd's stop timeout (a loose bound)
    print(f"{signal.Signals(signum).name} mid-reply: exited 0 after {took * 1000:.0f} ms")
    # the signal path ends the app with Services.close(), the one shutdown order (issue 34)
    assert "interrupted 1 piece(s) of model work in flight" in serve.output()
    assert "closed: job runner, indexer, worker, event streams, model client" in serve.output()

    seen = "".join(follower.pieces)
    turn = session_turns(tmp_path, name)[0]
    assert turn.user_text == "count slowly"
    assert turn.reply and turn.reply.startswith(seen) and TEXT.startswith(turn.reply) and turn.reply != TEXT
    assert notes.read(turn.notes).interrupted.startswith("the server was stopped"), turn.notes
    assert not notes.read(turn.notes).stopped
    follower.thread.join(10)
    assert not follower.thread.is_alive()
    assert "Interrupted" in follower.final and "Re-send this message" in follower.final   # the page was told
    assert scripted.chats()[0].finished.wait(5) and scripted.chats()[0].disconnected      # Ollama was told

    again = serves(scripted.url)                         # the next start shows it, with Re-send
    page = html.unescape(again.get(f"/s/{name}").text)
    assert "Interrupted (the server was stopped" in page and "the reply above is what arrived" in page
    assert 'value="count slowly"' in page and "Re-send this message" in page
    again.proc.send_signal(signal.SIGTERM)
    assert wait_for_exit(again.proc, stop_timeout_s(), "an idle harvey serve to exit") == 0


def test_kill_9_mid_reply_then_restart_shows_interrupted_and_resend_works(tmp_path, scripted, serves):
    serve, name, follower = reply_in_flight(scripted, serves, "are you there?", 20)
    serve.proc.kill()
    wait_for_exit(serve.proc, 10, "the killed server to go")
    turn = session_turns(tmp_path, name)[0]
    assert turn.user_text == "are you there?" and turn.reply is None and not turn.notes   # what a crash leaves

    scripted.script = Reply(text="Yes, here again.")
    again = serves(scripted.url)
    page = html.unescape(again.get(f"/s/{name}").text)
    assert "Interrupted (the server stopped before the reply was finished): no reply was saved." in page
    form = re.search(r'<div class="card interrupted".*?</form>', page, re.S).group(0)
    assert 'value="are you there?"' in form and "Re-send this message" in form
    assert "/turns/0/stream" not in page                                 # nothing pretends to stream

    # one tap: the form posts the same message again, as a new turn that gets its answer
    message = re.search(r'name="message" value="([^"]*)"', form).group(1)
    model = re.search(r'name="model" value="([^"]*)"', form).group(1)
    assert again.post(f"/s/{name}/messages", data={"message": message, "model": model}).status_code == 200
    wait_until(lambda: len(session_turns(tmp_path, name)) == 2 and session_turns(tmp_path, name)[1].reply,
               15, "the re-sent message answered")
    turns = session_turns(tmp_path, name)
    assert turns[1].user_text == "are you there?" and turns[1].reply == "Yes, here again."
    page = html.unescape(again.get(f"/s/{name}").text)
    assert page.count("Re-send this message") == 1                       # only the crashed turn offers it
    again.proc.send_signal(signal.SIGTERM)
    assert wait_for_exit(again.proc, stop_timeout_s(), "harvey serve to exit") == 0


def test_sigterm_mid_analysis_leaves_it_resumable(tmp_path, scripted, serves):
    from test_analysis import big_markdown, map_or_reduce

    def slow(body):
        reply = map_or_reduce(body)
        reply.token_delay, reply.piece_size = 0.05, 2
        return reply

    scripted.script = slow
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "big.md").write_text(big_markdown())
    serve = serves(scripted.url)
    name = serve.open_session()
    card = serve.post(f"/s/{name}/messages", data={"message": "Summarize big.md"}).text
    job = re.search(r"/analysis/([0-9a-f]+)/start", card).group(1)
    serve.post(f"/s/{name}/analysis/{job}/start", data={"instruction": "Summarize each section."})
    wait_until(lambda: len(scripted.chats()) >= 2, 20, "the analysis to be a chunk or two in")
    serve.proc.send_signal(signal.SIGTERM)
    assert wait_for_exit(serve.proc, stop_timeout_s(), "harvey serve to exit mid-analysis") == 0, serve.output()

    again = serves(scripted.url)
    page = html.unescape(again.get(f"/s/{name}").text)
    assert "was interrupted" in page and "Resume from chunk" in page
    again.proc.send_signal(signal.SIGTERM)
    assert wait_for_exit(again.proc, stop_timeout_s(), "harvey serve to exit") == 0


def test_sigterm_while_ollama_has_not_answered_yet_still_records_and_exits_in_time(tmp_path, scripted, serves):
    scripted.script = Reply(text="never sent", fault="hang")          # Ollama accepts, then says nothing
    serve = serves(scripted.url)
    name = serve.open_session()
    assert serve.post(f"/s/{name}/messages", data={"message": "hello?"}).status_code == 200
    wait_until(lambda: scripted.chats(), 10, "the request to reach the model")
    t0 = time.monotonic()
    serve.proc.send_signal(signal.SIGTERM)
    assert wait_for_exit(serve.proc, stop_timeout_s(), "harvey serve to exit") == 0, serve.output()
    print(f"SIGTERM with the model silent: exited 0 after {(time.monotonic() - t0) * 1000:.0f} ms")
    turn = session_turns(tmp_path, name)[0]
    assert turn.user_text == "hello?" and turn.reply is None
    assert notes.read(turn.notes).interrupted.startswith("the server was stopped"), turn.notes


# -- the bundled model (issue 23 item 10): a quiet, prompt exit --------------------------------

PROMPT_EXIT_S = 10.0     # "within a few seconds", generous for a busy 2-core machine


def nobody_listening() -> str:
    """An Ollama URL where nothing answers, so ``harvey serve --demo`` starts the bundled model."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.mark.realmodel
def test_sigterm_mid_analysis_with_the_bundled_model_exits_promptly_quietly_and_resumably(tmp_path, serves):
    """The model may be deep in a map prompt (no token yet) when SIGTERM comes: it stops within a batch."""
    from harvey_demo import server as demo_server
    from test_analysis import big_markdown

    require(demo_server.model_available(), demo_server.INSTALL_HINT)
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "big.md").write_text(big_markdown())
    serve = serves(nobody_listening(), "--demo")
    name = serve.open_session()
    card = serve.post(f"/s/{name}/messages", data={"message": "Summarize big.md"}).text
    job = re.search(r"/analysis/([0-9a-f]+)/start", card).group(1)
    serve.post(f"/s/{name}/analysis/{job}/start", data={"instruction": "Summarize each section.", "scope": "all"})
    wait_until(lambda: (tmp_path / "data" / "jobs" / job / "job.json").exists()
               and '"state": "running"' in (tmp_path / "data" / "jobs" / job / "job.json").read_text(),
               60, "the analysis to be running (a map call in flight: each takes seconds)")
    t0 = time.monotonic()
    serve.proc.send_signal(signal.SIGTERM)
    status = wait_for_exit(serve.proc, PROMPT_EXIT_S, "harvey serve --demo to exit after SIGTERM")
    took = time.monotonic() - t0
    output = serve.output()
    assert status == 0, output
    assert "Traceback" not in output, output
    print(f"SIGTERM mid map call with the bundled model: exited 0 after {took:.1f} s")
    again = serves(nobody_listening(), "--demo")
    page = html.unescape(again.get(f"/s/{name}").text)
    assert "Analysis of big.md was interrupted" in page                  # resumable: its card offers to go on
    assert "Resume from chunk" in page or ">Retry</button>" in page      # (Retry: no chunk had finished)
    again.proc.send_signal(signal.SIGTERM)
    assert wait_for_exit(again.proc, PROMPT_EXIT_S, "harvey serve --demo to exit") == 0
    assert "Traceback" not in again.output()


@pytest.mark.realmodel
def test_clients_that_go_away_leave_a_log_line_not_a_traceback(tmp_path):
    """Reset connections (mid request line, mid stream) against the demo server as its own process."""
    import struct

    from harvey_demo import server as demo_server

    require(demo_server.model_available(), demo_server.INSTALL_HINT)
    port = free_port()
    log = open(tmp_path / "demo.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "harvey_demo.server", "--port", str(port)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "serving Ollama's API" in (tmp_path / "demo.log").read_text() or proc.poll() is not None,
                   60, "the demo server to start")
        body = b'{"model": "smollm2:135m", "messages": [{"role": "user", "content": "Count to fifty."}]}'
        for sent in (b"POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{",   # body cut off
                     b"GET /api/ta",                                                             # request line cut
                     b"POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(sent)
            if sent.endswith(body):
                assert sock.recv(64).startswith(b"HTTP/1.1 200")      # the stream has started
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()                                                # a reset, not a polite close
        with httpx.Client(timeout=30) as client:                        # still serving
            assert client.get(f"http://127.0.0.1:{port}/api/tags").status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        wait_for_exit(proc, PROMPT_EXIT_S, "the demo server to exit")
        log.close()
    output = (tmp_path / "demo.log").read_text()
    assert "Traceback" not in output and "ConnectionResetError" not in output.replace(
        "went away (ConnectionResetError)", ""), output


def test_a_turn_of_the_very_second_the_server_started_is_interrupted_unless_its_reply_runs(live):
    """Time stamps are whole seconds: a crash and a restart within one second left the turn without
    its "Interrupted" card (the kill -9 test failed so about two runs in three). A turn of the start's
    own second is cut off unless an activity holds that turn (its reply is being answered)."""
    from app.chat.replies import Generation
    from app.sessions import fountain, notes
    from app.web.fragments import _never_finished

    svc = live.services
    turn = fountain.Turn(when=svc.started_at, user_text="are you there?", model="tiny:1b", reply=None)
    with live.app.app_context():
        assert _never_finished(turn, notes.read([]), "s1", 0)             # nothing answers it: cut off
        gen = Generation(svc.activities.new_id(), "s1", 0, "tiny:1b")
        svc.activities.begin("s1", "reply", 0, gen)
        try:
            assert not _never_finished(turn, notes.read([]), "s1", 0)     # its reply is being answered
            assert _never_finished(turn, notes.read([]), "s1", 1)         # the activity holds another turn
        finally:
            svc.activities.end(gen)
        later = fountain.Turn(when=svc.started_at.replace(year=svc.started_at.year + 1), user_text="x",
                              model="tiny:1b", reply=None)
        assert not _never_finished(later, notes.read([]), "s1", 0)       # recorded since: still being prepared
