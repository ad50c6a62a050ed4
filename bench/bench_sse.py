"""Item 6: SSE latency, from the model server sending a token to the browser reading it.

Run from the repository root:  python bench/bench_sse.py [--runs 3] [--tokens 250] [--delay 0.02]

Path measured: scripted Ollama server -> the app's OllamaServer (NDJSON) -> the reply
thread -> the generation's EventLog -> the SSE view (/s/<name>/turns/<n>/stream) ->
waitress -> the client.

Both timestamps are taken in this process on one monotonic clock:
* sent: the scripted server's handler, right after writing and flushing the NDJSON line
  of the token (its ``_chunk`` wrapped in a subclass of the handler);
* read: the client (httpx, reading the SSE stream line by line), when the blank line that
  ends the token's ``piece`` event arrives.
Every token carries a unique text ("0001|", "0002|", ...) so each ``piece`` event is
matched to its token.  The first token is held back 0.5 s so the client is following
the stream before any token exists (none arrive in the opening ``snapshot``).

Two placements of the app:
* ``harvey serve`` in its own process (as on the Pi; only the scripted server and the
  client share this process);
* in-process (tests/conftest.LiveApp): app, model server and client share one
  interpreter and its GIL, a worse case.
Per run: ``--tokens`` tokens, ``--delay`` s apart.  p50/p95/max per run; the table gives
the median over ``--runs`` runs.
"""
from __future__ import annotations

import argparse
import html
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import httpx

from _harness import (Reply, Served, TimedScripted, close_quietly, header, live_app, median, percentile, table)


class TokenClock(TimedScripted):
    """The scripted server, remembering when each streamed piece was flushed."""

    def __init__(self, tokens: int, delay: float):
        self.sent: dict[str, float] = {}
        self.hold = threading.Event()
        super().__init__(script=self._script)
        base = self._httpd.RequestHandlerClass
        sent = self.sent

        class Handler(base):
            def _chunk(self, obj):
                super()._chunk(obj)
                piece = (obj.get("message") or {}).get("content")
                if piece:
                    sent[piece] = time.monotonic()

        self._httpd.RequestHandlerClass = Handler
        self.text = "".join(f"{i:04d}|" for i in range(1, tokens + 1))
        self.delay = delay

    def _script(self, body):
        self.hold.wait(0.5)     # let the client open the SSE stream first
        return Reply(text=self.text, piece_size=5, token_delay=self.delay)


def follow(http: httpx.Client, path: str) -> dict[str, float]:
    """Read the SSE stream to its end; return piece text -> time its event was complete."""
    seen: dict[str, float] = {}
    event, data = "message", []
    with http.stream("GET", path, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line == "":
                if event == "piece":
                    seen[html.unescape("\n".join(data))] = time.monotonic()
                elif event == "snapshot" and "".join(data):
                    raise RuntimeError("tokens arrived before the stream was followed")
                if event == "close":
                    break
                event, data = "message", []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
    return seen


def latencies(server: TokenClock, seen: dict[str, float]) -> list[float]:
    missing = [p for p in server.sent if p not in seen]
    assert not missing, f"{len(missing)} tokens never reached the client"
    return [(seen[p] - server.sent[p]) * 1000 for p in server.sent]


def run_served(tokens: int, delay: float) -> list[float]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-sse-"))
    server = TokenClock(tokens, delay).start()
    served = None
    try:
        served = Served(tmp, server.url)
        with httpx.Client(base_url=f"http://127.0.0.1:{served.port}", timeout=30, follow_redirects=True) as http:
            page = http.get("/")
            token = re.search(r'"X-CSRF-Token": "([^"]+)"', html.unescape(page.text)).group(1)
            name = page.url.path.rsplit("/", 1)[-1]
            http.post(f"/s/{name}/messages", data={"message": "Count for me."},
                      headers={"X-CSRF-Token": token, "HX-Request": "true"})
            seen = follow(http, f"/s/{name}/turns/0/stream")
        return latencies(server, seen)
    finally:
        if served is not None:
            served.stop()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def run_in_process(tokens: int, delay: float) -> list[float]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-sse-"))
    server = TokenClock(tokens, delay).start()
    live = None
    try:
        live = live_app(tmp, server.url)
        name = live.open_session()
        live.post(f"/s/{name}/messages", data={"message": "Count for me."})
        seen = follow(live.http, f"/s/{name}/turns/0/stream")
        return latencies(server, seen)
    finally:
        if live is not None:
            close_quietly(live)
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=250)
    parser.add_argument("--delay", type=float, default=0.02)
    args = parser.parse_args()
    print(header("SSE latency, token sent -> token read (item 6)",
                 f"python bench/bench_sse.py --runs {args.runs} --tokens {args.tokens} --delay {args.delay}"))
    rows = []
    for label, run in (("harvey serve (own process)", run_served), ("in-process LiveApp (shared GIL)",
                                                                    run_in_process)):
        per_run = [run(args.tokens, args.delay) for _ in range(args.runs)]
        pooled = [x for r in per_run for x in r]
        rows.append([label, f"{len(per_run[0])} × {args.runs}",
                     f"{median([median(r) for r in per_run]):.2f} ms",
                     f"{median([percentile(r, 95) for r in per_run]):.2f} ms",
                     f"{median([max(r) for r in per_run]):.2f} ms",
                     f"{percentile(pooled, 95):.2f} / {max(pooled):.2f} ms"])
    print(f"Tokens {args.delay * 1000:.0f} ms apart; figures are medians over {args.runs} runs of each run's "
          "p50 / p95 / max; the last column pools every token of every run.\n")
    print(table(["app", "tokens × runs", "p50", "p95", "max", "pooled p95 / max"], rows))


if __name__ == "__main__":
    main()
