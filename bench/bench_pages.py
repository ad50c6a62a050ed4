"""Item 5: page weight of the chat page's first load, and time to first byte of pages.

Run from the repository root:  python bench/bench_pages.py [--runs 31]

The app runs as ``python -m app.cli serve`` (waitress, its own process, like on the Pi), against
the scripted Ollama server (tests/scripted_ollama.py) in this process with TCP_NODELAY (as
Ollama; see _harness.TimedScripted).  The chat page asks Ollama for /api/tags and /api/show
while rendering, so the scripted server's answer time is part of the TTFB (~1 ms here).

Page weight: the chat page of a new, empty session (GET / -> 302 -> /s/<newest>), then every
stylesheet and script it references, as a browser's first visit loads them.  Bytes on the
wire are the body sizes waitress sends; "gzip -6" is what the same bodies would weigh if
compressed (waitress does not compress: no Content-Encoding whatever Accept-Encoding says).

TTFB: http.client on one keep-alive connection; time from sending the request to having
read the status line and headers (waitress sends them with the first body bytes, after
Flask has built the whole page), and to the last body byte.  Pages:
* the chat page of the new session (no turns);
* the chat page (/s/<name>) of a 1,000-turn session: every turn rendered (user message,
  Markdown reply of ~1 KB: a list, a table, a code block and 600 characters of real prose
  from Python's reference topics, different in every turn; stats line), written to the
  sessions folder with the app's own store before the server starts;
* the reading page (/sessions/<name>) of the same 1,000-turn session (screenplay view).
Also counted: the requests the app sends to Ollama while answering each kind of request.
Each figure is the median (and 90th percentile) of ``--runs`` requests after 2 warm-ups.
``--nagle`` repeats the new-session TTFB with Nagle's algorithm left on in the scripted
server, to show what that test-server artefact adds.
"""
from __future__ import annotations

import argparse
import gzip
import re
import shutil
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from _harness import Served, TimedScripted, header, median, percentile, table

USER_TEXTS = [
    "How do I make the Pi's fan quieter without letting it overheat?",
    "Summarize what we decided about the backup schedule, in three bullet points.",
    "Why does `systemctl status ollama` say the service is activating?",
    "Rewrite this paragraph so it is friendlier: the server will be down on Sunday from 2 to 4.",
]
REPLY = """Here is what I would do, step by step:

1. **Check the temperature** with `vcgencmd measure_temp`; anything under 70 °C is fine.
2. Set a *fan curve* in `/boot/firmware/config.txt`:
   `dtparam=fan_temp0=60000` and `dtparam=fan_temp0_hyst=5000`.
3. Reboot and watch it for a day.

| setting | quiet | default |
|---|---|---|
| fan_temp0 | 65 °C | 50 °C |
| hysteresis | 5 °C | 5 °C |

```sh
watch -n 5 vcgencmd measure_temp
```

{prose}"""


def write_long_session(sessions: Path, turns: int) -> str:
    """A 1,000-turn session file written with the app's own store and Fountain writer."""
    from app.sessions import fountain
    from app.sessions.store import SessionStore

    store = SessionStore(sessions, user_name="bench", workspace="/srv/harvey/workspace")
    from pydoc_data.topics import topics

    prose = " ".join(" ".join(topics[k].split()) for k in sorted(topics))   # real text, different per turn
    when = datetime(2026, 1, 5, 9, 0, 0)
    session = store.create("tiny:1b", title="A long session", now=when)
    play = session.play
    for n in range(turns):
        when += timedelta(minutes=3)
        reply = REPLY.format(prose=prose[n * 600:(n + 1) * 600])
        turn = fountain.Turn(when=when, user_text=USER_TEXTS[n % len(USER_TEXTS)], model="tiny:1b",
                             reply=reply, stats=fountain.stats_line("tiny:1b", "ollama", 180, 900 + n, 21.4))
        play.scenes.extend(fountain.turn_scenes(turn, store.user_name, store.workspace))
    store._write(session.name, play)
    store.create("tiny:1b", now=datetime.now())   # the newest session: where GET / leads, as on a first visit
    return session.name


def ttfb(served: Served, path: str, runs: int) -> tuple[list[float], list[float], int]:
    conn = served.connection()
    first, total, size = [], [], 0
    try:
        for i in range(runs + 2):
            t0 = time.perf_counter()
            conn.request("GET", path)
            response = conn.getresponse()
            t1 = time.perf_counter()
            body = response.read()
            t2 = time.perf_counter()
            assert response.status == 200, (path, response.status)
            size = len(body)
            if i >= 2:
                first.append((t1 - t0) * 1000)
                total.append((t2 - t0) * 1000)
    finally:
        conn.close()
    return first, total, size


def page_weight(served: Served) -> tuple[list[list], str, dict]:
    status, headers, _ = served.get("/")
    assert status in (302, 303), status
    path = headers["Location"].replace(f"http://127.0.0.1:{served.port}", "")
    status, headers, body = served.get(path, {"Accept-Encoding": "gzip, deflate, br"})
    assert status == 200
    rows = [["chat page HTML", path, len(body), len(gzip.compress(body, 6)), headers.get("Content-Encoding", "none"),
             headers.get("Cache-Control", "—")]]
    html = body.decode()
    for asset in re.findall(r'<(?:link[^>]+href|script[^>]+src)="(/static/[^"]+)"', html):
        status, asset_headers, data = served.get(asset, {"Accept-Encoding": "gzip, deflate, br"})
        assert status == 200, asset
        kind = {"css": "CSS", "js": "JS", "json": "manifest", "svg": "icon", "png": "icon"}.get(
            asset.rsplit(".", 1)[-1], "other")
        validators = {k: v for k, v in (("If-None-Match", asset_headers.get("ETag")),
                                        ("If-Modified-Since", asset_headers.get("Last-Modified"))) if v}
        again, _, again_body = served.get(asset, validators)
        rows.append([kind, asset, len(data), len(gzip.compress(data, 6)),
                     asset_headers.get("Content-Encoding", "none"), asset_headers.get("Cache-Control", "—"),
                     f"{again} ({len(again_body)} B)"])
    rows[0].append("200 (full page)")
    return rows, path, headers


def ollama_calls(served: Served, ollama: TimedScripted, chat_path: str, long_name: str) -> list[list]:
    """What each kind of request costs in round trips to Ollama (the model list is not cached)."""
    import html as html_lib

    import httpx

    def counted(label, action):
        before = {p: sum(1 for r in ollama.requests if r.path == p) for p in ("/api/tags", "/api/show", "/api/chat")}
        action()
        time.sleep(0.2)
        return [label] + [sum(1 for r in ollama.requests if r.path == p) - n for p, n in before.items()]

    rows = [counted("GET chat page, new session", lambda: served.get(chat_path)),
            counted("GET chat page (1,000 turns)", lambda: served.get(f"/s/{long_name}")),
            counted("GET reading page (1,000 turns)", lambda: served.get(f"/sessions/{long_name}"))]
    with httpx.Client(base_url=f"http://127.0.0.1:{served.port}", timeout=30) as http:
        page = http.get(chat_path)
        token = re.search(r'"X-CSRF-Token": "([^"]+)"', html_lib.unescape(page.text)).group(1)
        headers = {"X-CSRF-Token": token, "HX-Request": "true"}
        rows.append(counted("POST a message (new turn fragment)", lambda: http.post(
            f"{chat_path}/messages", data={"message": "Hello"}, headers=headers)))
        time.sleep(0.3)   # the reply (scripted, instant) has finished: the stream sends the finished turn
        rows.append(counted("GET the turn's SSE stream after the reply (final fragment)",
                            lambda: http.get(f"{chat_path}/turns/0/stream")))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--nagle", action="store_true")
    parser.add_argument("--weight-only", action="store_true",
                        help="only the chat page's first-load weight (no 1,000-turn session, no TTFB)")
    args = parser.parse_args()
    print(header("Page weight and time to first byte (item 5)",
                 f"python bench/bench_pages.py --runs {args.runs}" + (" --nagle" if args.nagle else "")))
    tmp = Path(tempfile.mkdtemp(prefix="bench-pages-"))
    ollama = TimedScripted().start()
    served = None
    try:
        (tmp / "sessions").mkdir()
        long_name = write_long_session(tmp / "sessions", 1 if args.weight_only else args.turns)
        long_size = (tmp / "sessions" / f"{long_name}.spmd").stat().st_size
        served = Served(tmp, model_server.url)
        rows, chat_path, _ = page_weight(served)
        total = sum(r[2] for r in rows)
        total_gz = sum(r[3] for r in rows)
        print("Chat page first load (new empty session), waitress 3 (no compression):\n")
        print(table(["resource", "path", "bytes", "gzip -6 bytes", "Content-Encoding sent", "Cache-Control sent",
                     "revisit (conditional GET)"],
                    [r[:2] + [f"{r[2]:,}", f"{r[3]:,}"] + r[4:] for r in rows]
                    + [["total", f"{len(rows)} requests", f"{total:,}", f"{total_gz:,}", "", "", ""]]))
        print(f"\nGoal: under 150 KB (153,600 bytes) on the wire: {total:,} bytes, "
              f"{'met' if total < 150 * 1024 else 'NOT met'}.")
        if args.weight_only:
            return
        pages = [("chat page, new session (0 turns)", chat_path),
                 (f"chat page /s/NAME, {args.turns:,} turns", f"/s/{long_name}"),
                 (f"reading page /sessions/NAME, {args.turns:,} turns", f"/sessions/{long_name}")]
        results = []
        for label, path in pages:
            runs = args.runs if "new session" in label else max(11, args.runs // 2)
            first, whole, size = ttfb(served, path, runs)
            _, _, body = served.get(path, {})
            results.append([label, f"{size:,} B ({len(gzip.compress(body, 6)):,} gzip)",
                            f"{median(first):.1f} ms", f"{percentile(first, 90):.1f} ms",
                            f"{median(whole):.1f} ms", runs])
        if args.nagle:
            served.stop()
            ollama.stop()
            ollama = TimedScripted(nodelay=False).start()
            served = Served(tmp, model_server.url)
            first, whole, size = ttfb(served, chat_path, args.runs)
            results.append(["chat page, new session — scripted server with Nagle on", f"{size:,} B",
                            f"{median(first):.1f} ms", f"{percentile(first, 90):.1f} ms",
                            f"{median(whole):.1f} ms", args.runs])
        calls = ollama_calls(served, ollama, chat_path, long_name)   # last: it adds a turn to the new session
        print(f"\nThe {args.turns:,}-turn session file: {long_size:,} bytes.\n")
        print(table(["page", "HTML size", "TTFB median", "TTFB p90", "last byte median", "requests"], results))
        print("\nRequests the app makes to Ollama while answering one request (counted on the scripted server):\n")
        print(table(["request", "GET /api/tags", "POST /api/show", "POST /api/chat"], calls))
    finally:
        if served is not None:
            served.stop()
        ollama.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
