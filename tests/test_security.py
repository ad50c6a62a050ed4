"""LAN safety through waitress: the password, cross-site requests, hostile inputs.

The hostile-input list runs against an app that requires a password and is
signed in, with a session that has a turn and a workspace that has files. Each
input must get a clear 4xx (status and words checked) and leave every byte of
every file under the sessions and workspace folders as it was.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Callable

import httpx
import pytest

from app import auth, create_app
from conftest import make_config

PASSWORD = "correct horse battery"


# -- helpers ----------------------------------------------------------------------------------

def snapshot(config) -> dict[str, object]:
    """Every file and link under the sessions and workspace folders: bytes, or the link target."""
    found: dict[str, object] = {}
    for root in (config.sessions_path, config.workspace_path):
        for folder, dirs, names in os.walk(root):
            for name in sorted(dirs + names):
                path = Path(folder) / name
                if path.is_symlink():
                    found[str(path)] = ("link", os.readlink(path))
                elif path.is_file():
                    found[str(path)] = path.read_bytes()
    return found


def sign_in(live, password: str = PASSWORD) -> httpx.Response:
    """Sign in through the login form, then pick up the new CSRF token."""
    live.get("/login")
    response = live.http.post("/login", data={"password": password, "csrf_token": live.token},
                              follow_redirects=False)
    live.get("/")
    return response


def stranger(live) -> httpx.Client:
    """A client with no cookies: someone else on the LAN."""
    return httpx.Client(base_url=live.url, timeout=10.0, follow_redirects=False)


def multipart(fields: dict[str, bytes], files: dict[str, tuple[bytes, bytes]]) -> tuple[bytes, str]:
    """A multipart body built by hand, so field bytes and file names go out exactly as given."""
    boundary = "harveytestboundary"
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + value)
    for name, (filename, data) in files.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="'.encode()
                     + filename + b'"\r\nContent-Type: application/octet-stream\r\n\r\n' + data)
    body = b"\r\n".join(parts) + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def post_multipart(live, path, fields=None, files=None, **kw):
    body, ctype = multipart(fields or {}, files or {})
    return live.post(path, content=body, headers={"Content-Type": ctype}, **kw)


@pytest.fixture
def guarded(tmp_path, scripted, make_live, monkeypatch):
    """A signed-in app that requires a password; a session with one turn; workspace files and a link out.

    Its password is hashed at scrypt n=2**10, not 2**15 (0.15 s of CPU per check, two or more per test):
    these tests are about who gets in; the real cost is checked by the password-file test."""
    monkeypatch.setattr(auth, "SCRYPT_N", 2 ** 10)
    base = make_config(tmp_path, scripted.url)
    config = dataclasses.replace(base, auth="password",
                                 server=dataclasses.replace(base.server, max_upload_mb=1, max_message_kb=8))
    auth.set_password(config.data_path, PASSWORD)
    config.workspace_path.mkdir(parents=True, exist_ok=True)
    (config.workspace_path / "notes.txt").write_text("The workspace's own notes.\n")
    (config.workspace_path / "sub").mkdir()
    (config.workspace_path / "sub" / "deep.md").write_text("# Deep\n")
    (tmp_path / "secret.txt").write_text("outside the workspace\n")
    (config.workspace_path / "escape.txt").symlink_to(tmp_path / "secret.txt")
    live = make_live(config)
    assert sign_in(live).status_code == 303
    name = live.open_session()
    assert live.post(f"/s/{name}/messages", data={"message": "hello there"}).status_code == 200
    list(live.sse(f"/s/{name}/turns/0/stream"))
    assert live.services.store.load(name).turns[0].reply
    return live, name


# -- the hostile inputs ----------------------------------------------------------------------

@dataclass
class Hostile:
    id: str
    send: Callable  # (live, session name) -> response
    status: int
    words: str


def _no_cookie_htmx_post(live, name):
    with stranger(live) as client:
        response = client.post(f"/s/{name}/messages", data={"message": "let me in"},
                               headers={"HX-Request": "true", "HX-Current-URL": f"{live.url}/s/{name}"})
    assert response.headers["HX-Redirect"] == f"/login?next=/s/{name}"
    return response


def _wrong_password(live, name):
    with stranger(live) as client:
        page = client.get("/login")
        token = page.text.split('name="csrf_token" value="')[1].split('"')[0]
        return client.post("/login", data={"password": "guess", "csrf_token": token})


def _old_cookie_after_password_change(live, name):
    auth.set_password(live.config.data_path, "a brand new password")
    return live.post(f"/s/{name}/messages", data={"message": "still me?"})


def _stale_generation_cookie(live, name):
    """A validly signed cookie that names a password generation that is not the current one."""
    return _with_cookie(live, name, live.app, {"auth": "0" * 16, "csrf": live.token})


def _forged_cookie(live, name):
    """The current generation, but signed with a guessed key."""
    from flask import Flask

    other = Flask("forger")
    other.secret_key = b"guessed key"
    generation = live.app.extensions["harvey_auth"].password.generation()
    return _with_cookie(live, name, other, {"auth": generation, "csrf": live.token})


def _with_cookie(live, name, signing_app, payload):
    from flask.sessions import SecureCookieSessionInterface

    value = SecureCookieSessionInterface().get_signing_serializer(signing_app).dumps(payload)
    with stranger(live) as client:
        client.cookies.set("harvey_session", value)
        return client.post(f"/s/{name}/messages", data={"message": "let me in"},
                           headers={"HX-Request": "true", "X-CSRF-Token": live.token})


def _cross_site_post(live, name):
    return live.post(f"/s/{name}/messages", data={"message": "from evil"},
                     headers={"Origin": "http://evil.example"})


def _cross_site_fetch_metadata(live, name):
    return live.post(f"/s/{name}/title", data={"title": "pwned"}, headers={"Sec-Fetch-Site": "cross-site"})


def _missing_token(live, name):
    return live.http.post(f"/s/{name}/title", data={"title": "no token"}, headers={"HX-Request": "true"})


def _upload_over_flask_limit(live, name):
    return post_multipart(live, "/files/upload", {"session": name.encode()},
                          {"file": (b"big.txt", b"x" * (2 * 1024 * 1024))})


def _upload_over_config_limit(live, name):
    return post_multipart(live, "/files/upload", {"session": name.encode()},
                          {"file": (b"big.txt", b"x" * (1024 * 1024 + 10))})


def _upload_named(filename: bytes):
    def send(live, name):
        return post_multipart(live, "/files/upload", {"session": name.encode()}, {"file": (filename, b"data\n")})
    return send


def _upload_session_field(live, name):
    return post_multipart(live, "/files/upload", {"session": b"../sessions"}, {"file": (b"ok.txt", b"data\n")})


def _post(path: str, **data):
    def send(live, name):
        return live.post(path.format(name=name), data=data)
    return send


def _get(path: str):
    def send(live, name):
        return live.get(path.format(name=name))
    return send


def _direct(file: str):
    def send(live, name):
        return live.post(f"/s/{name}/analysis/direct", data={"file": file.format(name=name)})
    return send


def _raw(path: str, body: bytes):
    def send(live, name):
        return live.post(path.format(name=name), content=body,
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
    return send


def _multipart_bad_utf8(live, name):
    return post_multipart(live, "/files/upload", {"session": name.encode() + b"\xff"},
                          {"file": (b"ok.txt", b"data\n")})


def _import(filename: bytes, data: bytes):
    def send(live, name):
        assert "sessions.import_session" in live.app.view_functions    # (the import route this probes)
        return post_multipart(live, "/sessions/import", {}, {"file": (filename, data)})
    return send


HOSTILE = [
    Hostile("no-password-htmx-post", _no_cookie_htmx_post, 401, "Sign in first"),
    Hostile("wrong-password", _wrong_password, 401, "Wrong password"),
    Hostile("cookie-from-before-password-change", _old_cookie_after_password_change, 401, "Sign in first"),
    Hostile("cookie-stale-generation", _stale_generation_cookie, 401, "Sign in first"),
    Hostile("cookie-forged-signature", _forged_cookie, 401, "Sign in first"),
    Hostile("cross-site-origin", _cross_site_post, 403, "came from another site"),
    Hostile("cross-site-fetch-metadata", _cross_site_fetch_metadata, 403, "came from another site"),
    Hostile("missing-csrf-token", _missing_token, 403, "security token is missing"),
    Hostile("upload-over-request-limit", _upload_over_flask_limit, 413, "too large: files up to 1 MB"),
    Hostile("upload-over-file-limit", _upload_over_config_limit, 413, "larger than 1 MB"),
    Hostile("upload-name-dotdot", _upload_named(b"../../sessions/evil.spmd"), 400, "not a plain file name"),
    Hostile("upload-name-backslash", _upload_named(b"..\\\\..\\\\evil.txt"), 400, "not a plain file name"),
    Hostile("upload-name-absolute", _upload_named(b"/etc/passwd"), 400, "not a plain file name"),
    Hostile("upload-name-dotdot-only", _upload_named(b".."), 400, "not a plain file name"),
    Hostile("upload-session-field", _upload_session_field, 404, "no such session"),
    Hostile("files-session-param", _get("/files/?session=../../etc"), 404, "no such session"),
    Hostile("message-path-encoded-slash", _post("/s/..%2F..%2Fetc%2Fpasswd/messages", message="x"), 404,
            "no such page"),
    Hostile("title-path-dotdot", _post("/s/%2e%2e/title", title="x"), 404, "no such session"),
    Hostile("direct-file-dotdot", _direct("../sessions/{name}.spmd"), 400, "outside the workspace"),
    Hostile("direct-file-absolute", _direct("/etc/passwd"), 400, "outside the workspace"),
    Hostile("direct-file-home", _direct("~/.ssh/id_rsa"), 400, "outside the workspace"),
    Hostile("direct-file-inner-dotdot", _direct("sub/../../secret.txt"), 400, "outside the workspace"),
    Hostile("direct-file-symlink-out", _direct("escape.txt"), 400, "outside the workspace"),
    Hostile("direct-file-nul", _direct("notes.txt\x00.md"), 400, "No file name"),
    Hostile("session-read-dotdot", _get("/sessions/%2e%2e"), 404, "no such session"),
    Hostile("session-download-dotdot", _get("/sessions/..%2Fsecret/download"), 404, "no such"),
    Hostile("session-delete-dotdot", _post("/sessions/%2e%2e/delete"), 404, "no such session"),
    Hostile("trash-restore-dotdot", _post("/sessions/trash/%2e%2e/restore"), 404, "no such deleted session"),
    Hostile("message-over-limit", _post("/s/{name}/messages", message="x" * (8 * 1024 + 1)), 413,
            "larger than 8 KB"),
    Hostile("message-huge", _post("/s/{name}/messages", message="x" * (3 * 1024 * 1024)), 413, "too large"),
    Hostile("message-bad-utf8-escaped", _raw("/s/{name}/messages", b"message=caf%C3%28%FF"), 400, "not valid UTF-8"),
    Hostile("message-bad-utf8-raw", _raw("/s/{name}/messages", b"message=\xff\xfe hi"), 400, "not valid UTF-8"),
    Hostile("title-bad-utf8", _raw("/s/{name}/title", b"title=%ED%A0%80"), 400, "not valid UTF-8"),
    Hostile("query-bad-utf8", _get("/files/?session=%FF"), 400, "not valid UTF-8"),
    Hostile("path-bad-utf8", _post("/s/%FF%FE/messages", message="x"), 400, "not valid UTF-8"),
    Hostile("multipart-field-bad-utf8", _multipart_bad_utf8, 400, "not valid UTF-8"),
    Hostile("import-name-dotdot", _import(b"../../evil.spmd", b"Title: x\n\nINT. ROOM\n"), 400,
            "not a plain file name"),
    Hostile("import-not-fountain", _import(b"notes.spmd", b"just a shopping list\nmilk\n"), 400,
            "not a Fountain screenplay"),
    Hostile("import-binary", _import(b"photo.spmd", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), 400, "not"),
    Hostile("import-wrong-suffix", _import(b"evil.sh", b"Title: x\n\nINT. ROOM\n"), 400, "Only .spmd"),
    Hostile("import-over-limit", _import(b"big.spmd", b"Title: x\n\n" + b"a" * (2 * 1024 * 1024)), 413,
            "too large"),
]


@pytest.mark.parametrize("case", HOSTILE, ids=[c.id for c in HOSTILE])
def test_hostile_input_gets_a_clear_4xx_and_changes_no_file(guarded, case):
    live, name = guarded
    before = snapshot(live.config)
    response = case.send(live, name)
    assert response.status_code == case.status, response.text[:500]
    assert case.words.lower() in response.text.lower(), response.text[:500]
    assert "<title>413 Request Entity Too Large</title>" not in response.text   # not Werkzeug's bare page
    assert snapshot(live.config) == before


def test_the_snapshot_sees_a_change(guarded):
    """The check above can fail: a real upload does change the workspace."""
    live, name = guarded
    before = snapshot(live.config)
    response = post_multipart(live, "/files/upload", {"session": name.encode()}, {"file": (b"new.txt", b"hi\n")})
    assert response.status_code == 200
    assert snapshot(live.config) != before


# -- the password ----------------------------------------------------------------------------

@pytest.mark.parametrize("mode, host, required", [
    ("auto", "127.0.0.1", False), ("auto", "127.0.0.2", False), ("auto", "::1", False),
    ("auto", "localhost", False), ("auto", "0.0.0.0", True), ("auto", "::", True), ("auto", "", True),
    ("auto", "192.168.1.20", True), ("auto", "pi.local", True),
    ("none", "0.0.0.0", False), ("password", "127.0.0.1", True),
])
def test_when_a_password_is_required(mode, host, required):
    assert auth.password_required(mode, host) is required


def test_password_file_is_a_salted_scrypt_hash_readable_only_by_its_owner(tmp_path):
    path = auth.set_password(tmp_path, PASSWORD)
    record = path.read_text()
    assert record.startswith("scrypt$32768$8$1$") and PASSWORD not in record
    assert path.stat().st_mode & 0o777 == 0o600
    assert auth.verify_record(record, PASSWORD) and not auth.verify_record(record, PASSWORD + "!")
    auth.set_password(tmp_path, PASSWORD)
    assert path.read_text() != record                     # a new salt each time
    assert list(tmp_path.iterdir()) == [path]             # no temporary file left behind


def test_signed_out_page_load_goes_to_login_and_comes_back(guarded):
    live, name = guarded
    with stranger(live) as client:
        response = client.get(f"/s/{name}?draft=hi")
        assert response.status_code == 303
        assert response.headers["Location"] == f"/login?next=/s/{name}?draft%3Dhi"
        login = client.get(response.headers["Location"])
        assert login.status_code == 200 and 'type="password"' in login.text
        token = login.text.split('name="csrf_token" value="')[1].split('"')[0]
        done = client.post("/login", data={"password": PASSWORD, "csrf_token": token, "next": f"/s/{name}?draft=hi"})
        assert done.status_code == 303 and done.headers["Location"] == f"/s/{name}?draft=hi"
        assert client.get(f"/s/{name}").status_code == 200


def test_login_does_not_redirect_off_site(guarded):
    live, _ = guarded
    with stranger(live) as client:
        token = client.get("/login").text.split('name="csrf_token" value="')[1].split('"')[0]
        for target in ("https://evil.example/", "//evil.example/", "/\\evil.example", "javascript:alert(1)"):
            done = client.post("/login", data={"password": PASSWORD, "csrf_token": token, "next": target})
            assert done.status_code == 303 and done.headers["Location"] == "/"
            token = client.get("/login").text.split('name="csrf_token" value="')[1].split('"')[0]


def test_login_remembers_the_device_with_a_long_lived_httponly_cookie(tmp_path, scripted, make_live):
    config = make_config(tmp_path, scripted.url, auth="password")
    auth.set_password(config.data_path, PASSWORD)
    live = make_live(config)
    response = sign_in(live)
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith("harvey_session=") and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    expires = parsedate_to_datetime(cookie.split("Expires=")[1].split(";")[0])
    assert expires.timestamp() - time.time() > 170 * 86400
    assert live.get("/").status_code == 200
    assert live.post("/logout").status_code == 200      # followed to the login page
    assert live.get("/").url.path == "/login"


def test_login_page_without_a_token_is_refused(guarded):
    live, _ = guarded
    with stranger(live) as client:
        client.get("/login")
        response = client.post("/login", data={"password": PASSWORD})
    assert response.status_code == 403


def test_repeated_wrong_passwords_are_slowed_with_429_not_sleep(guarded, monkeypatch):
    live, _ = guarded
    now = [1000.0]
    state = live.app.extensions["harvey_auth"]
    state.per_client.clock = state.everyone.clock = lambda: now[0]
    slept = []
    real_sleep = time.sleep

    def watched_sleep(seconds):
        """Record a sleep called from the app's own code (a waitress thread held), then sleep."""
        if f"{os.sep}app{os.sep}" in sys._getframe(1).f_code.co_filename:
            slept.append((sys._getframe(1).f_code.co_name, seconds))
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", watched_sleep)
    statuses = [_wrong_password(live, "").status_code for _ in range(4)]
    assert statuses == [401, 401, 401, 401]
    blocked = _login_with(live, PASSWORD)
    assert blocked.status_code == 429 and "try again in" in blocked.text
    assert int(blocked.headers["Retry-After"]) >= 2
    now[0] += 3
    assert _login_with(live, "still wrong").status_code == 401
    again = _login_with(live, PASSWORD)
    assert again.status_code == 429 and int(again.headers["Retry-After"]) >= 4   # doubled
    now[0] += 5
    assert _login_with(live, PASSWORD).status_code == 303
    assert slept == []                                            # no sleep on a waitress thread


def _login_with(live, password):
    with stranger(live) as client:
        token = client.get("/login").text.split('name="csrf_token" value="')[1].split('"')[0]
        return client.post("/login", data={"password": password, "csrf_token": token})


def test_throttle_doubles_and_caps():
    now = [0.0]
    throttle = auth.Throttle(free=2, cap=10.0, clock=lambda: now[0])
    assert [throttle.failed("a") for _ in range(6)] == [0, 0, 2, 4, 8, 10]
    assert throttle.wait("a") == 10 and throttle.wait("b") == 0
    throttle.succeeded("a")
    assert throttle.wait("a") == 0


def test_required_password_not_set_closes_everything_but_health_and_static(tmp_path, scripted, make_live):
    live = make_live(make_config(tmp_path, scripted.url, auth="password"))
    with stranger(live) as client:
        page = client.get("/")
        assert page.status_code == 503 and "harvey set-password" in page.text
        assert client.get("/login").status_code == 503
        htmx = client.post("/new", headers={"HX-Request": "true"})
        assert htmx.status_code == 503 and htmx.headers["HX-Redirect"] == "/login"
        assert client.get("/healthz").status_code == 200
        assert client.get("/static/harvey.css").status_code == 200
    assert live.services.store.names() == []                       # nothing was created
    auth.set_password(live.config.data_path, PASSWORD)              # while it runs
    with stranger(live) as client:
        assert client.get("/login").status_code == 200
        assert client.get("/").status_code == 303


def test_auto_asks_for_a_password_when_listening_on_the_lan(tmp_path, scripted, make_live):
    base = make_config(tmp_path, scripted.url)
    live = make_live(dataclasses.replace(base, server=dataclasses.replace(base.server, host="0.0.0.0")))
    with stranger(live) as client:
        assert client.get("/").status_code == 503       # asks, and no password is set yet


def test_auth_none_on_the_lan_asks_nothing(tmp_path, scripted, make_live):
    base = make_config(tmp_path, scripted.url, auth="none")
    live = make_live(dataclasses.replace(base, server=dataclasses.replace(base.server, host="0.0.0.0")))
    assert live.get("/").status_code == 200
    assert live.get("/login").url.path.startswith("/s/")


def test_healthz_is_open_and_says_nothing_secret(guarded):
    live, _ = guarded
    with stranger(live) as client:
        response = client.get("/healthz")
    assert response.status_code == 200
    assert set(response.json()) <= {"version", "ollama", "model", "model_installed"}
    record = (live.config.data_path / "password").read_text().strip()
    for secret in (record, record.split("$")[4], (live.config.data_path / "secret_key").read_bytes().hex()):
        assert secret not in response.text


@pytest.mark.parametrize("mode, host, words, level", [
    ("auto", "127.0.0.1", "No password (auth: auto): listening on loopback", logging.INFO),
    ("auto", "0.0.0.0", "none is set: run `harvey set-password`", logging.WARNING),
    ("password", "127.0.0.1", "Password required (auth: password", logging.INFO),
    ("none", "0.0.0.0", "anyone who can reach this port", logging.WARNING),
])
def test_start_up_log_says_whether_a_password_is_asked(tmp_path, caplog, mode, host, words, level):
    base = make_config(tmp_path, "http://127.0.0.1:9", auth=mode)
    config = dataclasses.replace(base, server=dataclasses.replace(base.server, host=host))
    if mode == "password":
        auth.set_password(config.data_path, PASSWORD)
    with caplog.at_level(logging.INFO, logger="app.auth"):
        app = create_app(config)
    app.extensions["harvey"].close()
    assert [r for r in caplog.records if words in r.getMessage() and r.levelno == level]


# -- cross-site, rebinding, headers ----------------------------------------------------------

def test_loopback_without_password_refuses_other_host_names(live):
    name = live.open_session()
    assert live.get(f"/s/{name}").status_code == 200
    rebound = live.http.get(f"/s/{name}", headers={"Host": "evil.example:8080"})
    assert rebound.status_code == 400 and "localhost" in rebound.text
    post = live.http.post("/new", headers={"Host": "evil.example", "Origin": "http://evil.example",
                                           "X-CSRF-Token": live.token})
    assert post.status_code == 400
    assert live.http.get("/healthz", headers={"Host": f"localhost:{live.server.effective_port}"}).status_code == 200


@pytest.mark.parametrize("path", ["/", "/login", "/healthz", "/nowhere", "/static/harvey.css"])
def test_security_headers_on_every_answer(guarded, path):
    live, _ = guarded
    with stranger(live) as client:
        response = client.get(path)
    csp = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"
    assert response.headers["X-Frame-Options"] == "DENY"


def test_pages_have_no_inline_scripts(guarded):
    live, name = guarded
    from bs4 import BeautifulSoup

    pages = [live.get(f"/s/{name}").text, live.get("/login").text, live.get("/nowhere").text]
    with stranger(live) as client:
        pages.append(client.get("/login").text)
    for page in pages:
        soup = BeautifulSoup(page, "html.parser")
        assert soup.find("script"), "expected the page to load its scripts"
        for script in soup.find_all("script"):
            assert script.get("src") and not script.string
        for tag in soup.find_all(True):
            assert not [a for a in tag.attrs if a.startswith("on")], tag


def test_htmx_error_is_a_fragment_with_the_message(guarded):
    live, name = guarded
    response = live.post(f"/s/{name}/messages", data={"message": "x" * (3 * 1024 * 1024)})
    assert response.status_code == 413
    assert response.text.startswith('<p class="flash error" role="alert">') and "<html" not in response.text


# -- logs --------------------------------------------------------------------------------------

def test_logs_carry_no_message_text_and_no_secrets(tmp_path, scripted, make_live, caplog):
    from scripted_ollama import Reply

    config = make_config(tmp_path, scripted.url, auth="password")
    auth.set_password(config.data_path, PASSWORD)
    with caplog.at_level(logging.INFO):
        live = make_live(config)
        _login_with(live, "wrong-guess-zebra")
        sign_in(live)
        name = live.open_session()
        scripted.script = Reply(text="the secret reply flamingo")
        live.post(f"/s/{name}/messages", data={"message": "my private words okapi"})
        list(live.sse(f"/s/{name}/turns/0/stream"))
        live.post(f"/s/{name}/title", data={"title": "private title narwhal"})
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "signed in" in text and "wrong password" in text          # the log did capture the app
    record = (config.data_path / "password").read_text().strip()
    for secret in ("okapi", "flamingo", "narwhal", "zebra", PASSWORD, record.split("$")[5], live.token):
        assert secret not in text


def test_set_password_command_stores_a_hash_and_refuses_short_ones(tmp_path):
    import subprocess
    import sys

    config = tmp_path / "harvey.yaml"
    config.write_text(f"data_dir: {tmp_path}/data\n")
    command = [sys.executable, "-m", "app.cli", "--config", str(config), "set-password"]
    root = Path(__file__).resolve().parent.parent
    short = subprocess.run(command, input="short\n", capture_output=True, text=True, cwd=root, timeout=60)
    assert short.returncode == 1 and "at least 8" in short.stderr
    assert not (tmp_path / "data" / "password").exists()
    done = subprocess.run(command, input=f"{PASSWORD}\n", capture_output=True, text=True, cwd=root, timeout=60)
    assert done.returncode == 0 and "password set" in done.stdout
    assert PASSWORD not in done.stdout + done.stderr
    record = (tmp_path / "data" / "password").read_text()
    assert auth.verify_record(record, PASSWORD)
