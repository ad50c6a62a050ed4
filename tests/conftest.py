"""Shared fixtures: real servers on free loopback ports, fresh data folders.

The app runs under waitress (as `harvey serve` runs it) in a thread of the test
process, and talks real HTTP to a scripted Ollama-API server; tests talk real
HTTP to the app with httpx.
"""

import dataclasses
import html
import os
import re
import sys
import threading
from pathlib import Path

import httpx
import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

from scripted_ollama import ScriptedOllama  # noqa: E402
from waiting import wait_for_exit, wait_until  # noqa: E402,F401 (the shared deadline-bounded waits)

from app.config import ChunkingConfig, Config, ModelServerConfig, ServerConfig  # noqa: E402

# Property tests draw new cases on every local run (and keep what fails in .hypothesis/), which is how
# the chunker's edge cases are found; in CI (CI=true) they draw the same cases every run, so a red CI is
# a change's doing and can be run again to the same result, never a draw that went badly that day.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


# pytest-timeout's per-test bound (pyproject: timeout) is too short for these: the real model
# answers at a few tokens a second on a busy 2-core machine, a browser starts Chromium.
LONG_TIMEOUTS = {"realmodel": 900, "browser": 600, "slow": 600}


def pytest_collection_modifyitems(config, items):
    """Give the real-model, browser and slow tests their longer timeout (an explicit one stays)."""
    for item in items:
        if item.get_closest_marker("timeout"):
            continue
        bounds = [seconds for marker, seconds in LONG_TIMEOUTS.items() if item.get_closest_marker(marker)]
        if bounds:
            item.add_marker(pytest.mark.timeout(max(bounds)))


@pytest.fixture
def scripted():
    with ScriptedOllama() as server:
        yield server


def make_config(tmp_path: Path, ollama_url: str, model: str = "tiny:1b", **overrides) -> Config:
    """A config whose folders all live under tmp_path."""
    config = Config(
        model_server=ModelServerConfig(url=ollama_url, model=model, connect_timeout_s=1.0, timeout_s=5.0),
        workspace=str(tmp_path / "workspace"), sessions_dir=str(tmp_path / "sessions"),
        data_dir=str(tmp_path / "data"), user_name="tester",
        server=ServerConfig(host="127.0.0.1", port=0, threads=8), chunking=ChunkingConfig())
    return dataclasses.replace(config, **overrides)


class LiveApp:
    """The app under waitress on a free port, with an httpx client that holds the CSRF token."""

    def __init__(self, config: Config, wrap=None, as_configured: bool = False):
        """``wrap``: middleware around the app's WSGI callable; ``as_configured``: listen on the
        config's own host and port (else 127.0.0.1 on a free port)."""
        from app import create_app
        from app.cli import make_server

        self.config = config
        self.app = create_app(config)
        if wrap:
            self.app.wsgi_app = wrap(self.app.wsgi_app)
        # The same waitress settings as `harvey serve` (body limit, forwarding headers).
        listen = config.server if as_configured else dataclasses.replace(config.server, host="127.0.0.1", port=0)
        self.server = make_server(self.app, listen)
        self.url = f"http://127.0.0.1:{self.server.effective_port}"
        self.closing = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        self.http = httpx.Client(base_url=self.url, timeout=10.0, follow_redirects=True)
        self.token = ""

    @property
    def services(self):
        return self.app.extensions["harvey"]

    def get(self, path, **kw):
        response = self.http.get(path, **kw)
        found = re.search(r'"X-CSRF-Token": "([^"]+)"', html.unescape(response.text))
        if found:
            self.token = found.group(1)
        return response

    def post(self, path, **kw):
        if not self.token:
            self.get("/")
        headers = {"X-CSRF-Token": self.token, "HX-Request": "true", **kw.pop("headers", {})}
        return self.http.post(path, headers=headers, **kw)

    def open_session(self) -> str:
        """Load the chat page (creates a session) and return the session name."""
        response = self.get("/")
        return response.url.path.rsplit("/", 1)[-1]

    def sse(self, path, timeout=10.0, headers=None, total=60.0, reconnect=True):
        """Yield (event, data, id) from an SSE stream until a ``close`` event, as EventSource reads it.

        A stream that ends without ``close`` (its lifetime is up, or the server was busy) is
        opened again with the last id as Last-Event-ID, after the ``retry:`` it gave (capped at
        0.5 s here); ``reconnect=False`` stops at the first end instead. ``timeout`` bounds each
        read, ``total`` the whole: past it the test fails instead of following for ever.
        """
        import time

        deadline = time.monotonic() + total
        last_id = None
        while True:
            sent = {**(headers or {}), **({"Last-Event-ID": last_id} if last_id else {})}
            retry_ms = 0
            with self.http.stream("GET", path, timeout=timeout, headers=sent) as response:
                assert response.status_code == 200
                event, data, eid = "message", [], None
                for line in response.iter_lines():
                    if time.monotonic() > deadline:
                        pytest.fail(f"the event stream {path} was still open after {total:g} s")
                    if line == "":
                        if data or event != "message":
                            yield event, "\n".join(data), eid
                            if event == "close":
                                return
                        event, data, eid = "message", [], None
                    elif line.startswith(":"):
                        continue
                    elif line.startswith("retry:"):
                        retry_ms = int(line[6:].strip() or 0)
                    elif line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].removeprefix(" "))
                    elif line.startswith("id:"):
                        eid = last_id = line[3:].strip()
            if not reconnect:
                return
            if time.monotonic() > deadline:
                pytest.fail(f"the event stream {path} did not close within {total:g} s")
            time.sleep(min(retry_ms, 500) / 1000)

    def _serve(self):
        try:
            self.server.run()
        except (OSError, ValueError):
            if not self.closing:
                raise

    def close(self):
        """Stop like a process that exits: close every channel, then the workers.

        The channels and the listening socket are closed by waitress's own loop (a
        trigger thunk), which then finds its map empty and returns at once: closing
        them from here left the loop asleep in its 1 s select() (1 s of every test).
        """
        if self.closing:
            return
        self.closing = True
        self.http.close()
        self.services.close("the test app was closed", timeout=5)    # as `harvey serve` does at SIGTERM
        trigger = self.server.trigger
        if self.thread.is_alive():
            trigger.pull_trigger(self._close_channels)
            self.thread.join(5)
        if self.thread.is_alive() or self.server._map:        # the loop is gone (or stuck): close from here
            self._close_channels()
        self.server.task_dispatcher.shutdown(cancel_pending=True, timeout=1)
        trigger.close()

    def _close_channels(self):
        """Close every connection and the listening socket, and leave waitress's map empty (its loop ends)."""
        from waitress import wasyncore
        from waitress.channel import HTTPChannel

        for channel in list(self.server._map.values()):
            if isinstance(channel, HTTPChannel):
                channel.handle_close()
            elif channel is self.server:
                wasyncore.dispatcher.close(channel)    # not server.close(): that closes the trigger (its lock)
        self.server.trigger.del_channel()


@pytest.fixture
def live(tmp_path, scripted):
    app = LiveApp(make_config(tmp_path, scripted.url))
    yield app
    app.close()


@pytest.fixture
def make_live(tmp_path):
    """Start apps with custom configs; all are closed at the end of the test."""
    apps = []

    def start(config):
        app = LiveApp(config)
        apps.append(app)
        return app

    yield start
    for app in apps:
        app.close()


def record_requests(live) -> list:
    """The requests the app sends from now on, as it budgeted them (``work.calls.Request``): its
    real calls go on, each request kept."""
    sent = []
    stream = live.services.calls.stream

    def recording(activity, request, *args, **kwargs):
        sent.append(request)
        return stream(activity, request, *args, **kwargs)

    live.services.calls.stream = recording
    return sent


def send_and_finish(live, name, message, **form):
    """Send a chat message and read its reply stream to the end."""
    response = live.post(f"/s/{name}/messages", data={"message": message, **form})
    assert response.status_code == 200, response.text
    turn = len(live.services.store.load(name).turns) - 1
    events = list(live.sse(f"/s/{name}/turns/{turn}/stream"))
    assert events[-1][0] == "close"
    return response


def require(available: bool, why: str):
    """Skip when a real part is missing, except in CI, where a missing part is a failure."""
    if available:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI must install it: scripts/test.sh)")
    pytest.skip(why)


@pytest.fixture(scope="session")
def demo_model():
    """The real SmolLM2-135M behind the Ollama API, shared by the real-model tests."""
    from harvey_demo import server as demo_server

    require(demo_server.model_available(), demo_server.INSTALL_HINT)
    with demo_server.DemoServer(threads=1) as server:
        yield server
