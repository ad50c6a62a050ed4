"""The loopback HTTP server both scripted model servers stand on (``scripted_ollama``,
``scripted_openai``): a real port, a thread per request, and the faults every model server can
have in common: ``kill()`` (stop listening and drop every connection in flight, kept-alive ones
too) and ``revive()`` (back on the same port, as a server restarting).  The servers differ only
in their handler (``make_handler``), which subclasses ``TrackedHandler``."""

from __future__ import annotations

import json
import selectors
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietServer(ThreadingHTTPServer):
    """A client hanging up (a cancel, a closed keep-alive) is normal here, not an error.

    ``serve`` / ``stop_serving`` replace ``serve_forever`` / ``shutdown``: those wake
    every 0.5 s to look for the stop flag (half a second of every test's teardown);
    here a byte on a socket pair wakes the loop at once.
    """

    def server_activate(self):
        super().server_activate()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop = False
        self._stopped = threading.Event()

    def serve(self) -> None:
        """Accept requests until ``stop_serving``; each is handled in a thread of its own."""
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self, selectors.EVENT_READ)
                selector.register(self._wake_r, selectors.EVENT_READ)
                while not self._stop:
                    for key, _ in selector.select():
                        if key.fileobj is self and not self._stop:
                            self._handle_request_noblock()
        finally:
            self._stopped.set()

    def stop_serving(self, running: bool = True) -> None:
        """Stop the loop now (``running``: wait for it to return) and close the sockets; twice is once."""
        if self._stop:
            return
        self._stop = True
        self._wake_w.send(b"x")
        if running and not self._stopped.wait(5):
            raise RuntimeError("the scripted server's loop did not stop")
        self.server_close()
        self._wake_r.close()
        self._wake_w.close()

    def handle_error(self, request, client_address):
        import sys
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class TrackedHandler(BaseHTTPRequestHandler):
    """Keeps its connection in its server's open set while it is handled (``kill()`` drops them)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True   # as the real servers: small answers go out at once, not after 40 ms
    server_of: "ScriptedServer"      # set by ``ScriptedServer.make_handler``'s subclass

    def log_message(self, *args):  # keep test output quiet
        pass

    def setup(self):
        super().setup()
        self.server_of.track(self.connection)

    def finish(self):
        self.server_of.untrack(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def _body(self) -> dict | None:
        """The request's JSON; None when it did not arrive whole (the server was killed while the
        app sent it): a request the server never received is not recorded as one it answered."""
        size = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(size) if size else b""
        if len(raw) < size:
            self.close_connection = True
            return None
        return json.loads(raw or b"{}")

    def _json(self, status: int, obj) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ScriptedServer:
    """A scripted server's life: ``with Server() as s:`` (or ``start``/``stop``), ``url``, ``kill``,
    ``revive``; ``_stopping`` is set when it stops for good (handlers waiting on it end)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self._lock = threading.Lock()
        self._open: set = set()          # sockets of requests being handled (kill() drops them)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._address = (host, port)
        self._httpd = self._bind(self._address)

    def make_handler(self) -> type[TrackedHandler]:
        raise NotImplementedError

    def _bind(self, address) -> QuietServer:
        httpd = QuietServer(address, self.make_handler())
        httpd.daemon_threads = True
        return httpd

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def track(self, conn) -> None:
        with self._lock:
            self._open.add(conn)

    def untrack(self, conn) -> None:
        with self._lock:
            self._open.discard(conn)

    def start(self):
        self._thread = threading.Thread(target=self._httpd.serve, daemon=True)
        self._thread.start()
        return self

    def kill(self) -> None:
        """Go away like a killed server: stop listening and drop every connection in flight, and
        refuse new ones until ``revive``."""
        self._address = self._httpd.server_address[:2]
        self._httpd.stop_serving(self._thread is not None)
        with self._lock:
            conns = list(self._open)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def revive(self) -> None:
        """Come back on the same port after ``kill()`` (with the settings as they are now: a restart)."""
        self._httpd = self._bind(self._address)
        self.start()

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.stop_serving(self._thread is not None)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
