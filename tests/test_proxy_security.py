"""Issue 13, item 14: Harvey behind a reverse proxy, the secret key, uploads.

Every test runs the app under the waitress that ``harvey serve`` builds
(``app.cli.make_server``), on loopback, and sends real HTTP. A "proxy" is a
client that connects from 127.0.0.2 (any 127/8 address reaches a server bound
to 127.0.0.1 on Linux) and adds the headers Caddy or nginx add; a "direct"
client connects from 127.0.0.1. Throttle clocks are frozen by hand, so no
test waits on the wall clock.
"""

from __future__ import annotations

import dataclasses
import html
import logging
import re
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from app import auth
from balancer import Nginx, free_port
from conftest import LiveApp, make_config, require

PASSWORD = "correct horse battery"
PROXY = "127.0.0.2"
ROOT = Path(__file__).resolve().parent.parent


class HarveyServe(LiveApp):
    """LiveApp, but waitress is created exactly as ``harvey serve`` creates it (the config's host and port)."""

    def __init__(self, config, wrap=None):
        super().__init__(config, wrap=wrap, as_configured=True)


@pytest.fixture
def serve():
    """Start apps the way `harvey serve` does; all are closed at the end of the test."""
    apps = []

    def start(config, **kw):
        app = HarveyServe(config, **kw)
        apps.append(app)
        return app

    yield start
    for app in apps:
        app.close()


@pytest.fixture(autouse=True)
def cheap_password_hash(monkeypatch):
    """Passwords here are hashed at scrypt n=2**10, not 2**15 (0.15 s of CPU per check, and the throttle
    tests check many): these tests are about who gets in; test_security checks the real cost."""
    monkeypatch.setattr(auth, "SCRYPT_N", 2 ** 10)


def configured(tmp_path, scripted, *, auth_mode="auto", host="127.0.0.1", trusted_proxy=None, password=True):
    base = make_config(tmp_path, scripted.url, auth=auth_mode)
    config = dataclasses.replace(base, server=dataclasses.replace(base.server, host=host,
                                                                  trusted_proxy=trusted_proxy))
    if password:
        auth.set_password(config.data_path, PASSWORD)
    return config


def client(live, source="127.0.0.1", headers=None) -> httpx.Client:
    """A client with no cookies, connecting from ``source``, adding ``headers`` to every request."""
    return httpx.Client(base_url=live.url, transport=httpx.HTTPTransport(local_address=source),
                        headers=headers or {}, timeout=10.0, follow_redirects=False)


def via_proxy(live, client_ip="192.168.1.10", **extra) -> httpx.Client:
    """What a proxy on the Pi sends for a browser at ``client_ip`` (nginx: Host stays 127.0.0.1:port)."""
    return client(live, PROXY, {"X-Forwarded-For": client_ip, **extra})


def token_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert found, page.text[:300]
    return html.unescape(found.group(1))


def login(http: httpx.Client, password: str, headers=None) -> httpx.Response:
    page = http.get("/login", headers=headers or {})
    assert page.status_code == 200, (page.status_code, page.text[:300])
    return http.post("/login", data={"password": password, "csrf_token": token_of(page)}, headers=headers or {})


def freeze_throttle(live) -> list[float]:
    now = [1000.0]
    state = live.app.extensions["harvey_auth"]
    state.per_client.clock = state.everyone.clock = lambda: now[0]
    return now


# -- waitress: what reaches the app ----------------------------------------------------------

FORWARDING = {"Forwarded": "for=192.168.1.50;proto=https", "X-Forwarded-For": "192.168.1.50",
              "X-Forwarded-Host": "pi.lan", "X-Forwarded-Proto": "https", "X-Real-IP": "192.168.1.50",
              "Via": "1.1 caddy"}


def recorder(seen: list):
    def wrap(wsgi_app):
        def app(environ, start_response):
            seen.append({k: v for k, v in environ.items() if isinstance(v, str)})
            return wsgi_app(environ, start_response)
        return app
    return wrap


def test_harvey_serve_hands_forwarding_headers_to_the_app_where_plain_waitress_deletes_them(
        tmp_path, scripted, serve):
    """The reason for clear_untrusted_proxy_headers=False: waitress 3's default hides the proxy."""
    from waitress import create_server

    seen: list = []
    live = serve(configured(tmp_path, scripted), wrap=recorder(seen))
    with client(live, headers=FORWARDING) as http:
        http.get("/healthz")
    assert seen[-1]["HTTP_FORWARDED"] == FORWARDING["Forwarded"]
    assert seen[-1]["HTTP_X_FORWARDED_FOR"] == "192.168.1.50" and seen[-1]["REMOTE_ADDR"] == "127.0.0.1"

    plain_seen: list = []
    app = recorder(plain_seen)(lambda environ, start: (start("200 OK", []), [b""])[1])
    plain = create_server(app, host="127.0.0.1", port=0)      # waitress's defaults

    def run():
        try:
            plain.run()
        except (OSError, ValueError):
            pass   # closed under its loop's feet, as LiveApp.close does it
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        httpx.get(f"http://127.0.0.1:{plain.effective_port}/", headers=FORWARDING, timeout=10.0)
    finally:
        plain.close()
        thread.join(2)
    assert "HTTP_FORWARDED" not in plain_seen[-1] and "HTTP_X_FORWARDED_FOR" not in plain_seen[-1]
    assert plain_seen[-1]["HTTP_X_REAL_IP"] == "192.168.1.50"   # not on waitress's list: kept


def test_trusted_proxy_is_believed_only_from_its_address(tmp_path, scripted, serve):
    seen: list = []
    live = serve(configured(tmp_path, scripted, trusted_proxy=PROXY), wrap=recorder(seen))
    spoofed = {"X-Forwarded-For": "6.6.6.6, 192.168.1.10", "X-Forwarded-Host": "pi.lan",
               "X-Forwarded-Proto": "https"}
    with client(live, PROXY, spoofed) as http:
        http.get("/healthz")
    assert seen[-1]["REMOTE_ADDR"] == "192.168.1.10"            # the hop the proxy appended
    assert seen[-1]["HTTP_HOST"] == "pi.lan" and seen[-1]["wsgi.url_scheme"] == "https"
    with client(live, "127.0.0.1", spoofed) as http:
        http.get("/healthz")
    assert seen[-1]["REMOTE_ADDR"] == "127.0.0.1" and seen[-1]["HTTP_HOST"].startswith("127.0.0.1:")
    assert seen[-1]["HTTP_X_FORWARDED_FOR"] == spoofed["X-Forwarded-For"]   # still visible: it asks the password


# -- item 14a: auth: auto behind a proxy -----------------------------------------------------

@pytest.mark.parametrize("header", sorted(FORWARDING))
def test_auto_on_loopback_asks_the_password_of_a_request_through_a_proxy(tmp_path, scripted, serve, header):
    live = serve(configured(tmp_path, scripted))
    with client(live) as local:
        chat = local.get("/", follow_redirects=True)
        assert chat.status_code == 200                                        # this machine: no password
    name = chat.url.path.rsplit("/", 1)[-1]
    sessions = live.services.store.names()
    with client(live, PROXY, {header: FORWARDING[header]}) as proxied:
        page = proxied.get(f"/s/{name}?draft=hi")                            # the old code served it: 200
        assert page.status_code == 303 and page.headers["Location"].startswith(f"/login?next=/s/{name}")
        htmx = proxied.post("/new", headers={"HX-Request": "true"})
        assert htmx.status_code == 401 and htmx.headers["HX-Redirect"].startswith("/login")
        assert proxied.get("/login").status_code == 200                     # the form, not the chat
        assert proxied.get("/healthz").status_code == 200
    assert live.services.store.names() == sessions                        # the proxied POST made nothing


def test_a_proxy_that_passes_the_browsers_host_gets_the_login_page(tmp_path, scripted, serve):
    """Caddy passes Host: pi.lan; the loopback-name check must not stand in for the password."""
    live = serve(configured(tmp_path, scripted))
    with client(live, PROXY, {"Host": "pi.lan", "X-Forwarded-For": "192.168.1.10"}) as proxied:
        page = proxied.get("/")
        assert page.status_code == 303 and page.headers["Location"].startswith("/login")
        assert login(proxied, PASSWORD).status_code == 303
        assert proxied.get("/", follow_redirects=True).status_code == 200
    with client(live, headers={"Host": "pi.lan"}) as rebound:       # no proxy headers: rebinding guard
        assert rebound.get("/").status_code == 400


def test_signing_in_through_the_proxy_opens_the_app_and_offers_sign_out(tmp_path, scripted, serve):
    live = serve(configured(tmp_path, scripted))
    with via_proxy(live) as proxied:
        assert login(proxied, "wrong guess").status_code == 401
        assert login(proxied, PASSWORD).status_code == 303
        page = proxied.get("/", follow_redirects=True)
        assert page.status_code == 200 and page.url.path.startswith("/s/")
        assert "Sign out" in page.text
    with client(live) as local:
        assert "Sign out" not in local.get("/", follow_redirects=True).text


def test_through_a_proxy_without_a_password_set_only_the_setup_page_answers(tmp_path, scripted, serve):
    live = serve(configured(tmp_path, scripted, password=False))
    with via_proxy(live) as proxied:
        page = proxied.get("/")
        assert page.status_code == 503 and "harvey set-password" in page.text
        assert proxied.get("/login").status_code == 503
    with client(live) as local:
        assert local.get("/", follow_redirects=True).status_code == 200


def test_trusted_proxy_makes_the_password_required_even_without_headers(tmp_path, scripted, serve, caplog):
    """nginx's bare proxy_pass adds no header at all: naming the proxy is what protects that set-up."""
    with caplog.at_level(logging.INFO, logger="app.auth"):
        live = serve(configured(tmp_path, scripted, trusted_proxy=PROXY))
    assert any("Password required (auth: auto" in r.getMessage() and PROXY in r.getMessage()
               for r in caplog.records)
    with client(live, PROXY) as bare:
        page = bare.get("/")
        assert page.status_code == 303 and page.headers["Location"].startswith("/login")


def test_auth_none_behind_a_proxy_still_asks_nothing(tmp_path, scripted, serve):
    live = serve(configured(tmp_path, scripted, auth_mode="none", password=False))
    with via_proxy(live) as proxied:
        assert proxied.get("/", follow_redirects=True).status_code == 200


# -- item 14b: whose wrong passwords are counted ---------------------------------------------

def test_behind_a_trusted_proxy_one_client_cannot_lock_the_owner_out(tmp_path, scripted, serve, caplog):
    live = serve(configured(tmp_path, scripted, trusted_proxy=PROXY))
    freeze_throttle(live)
    with via_proxy(live, "192.168.1.66") as attacker:
        assert [login(attacker, f"guess {i}").status_code for i in range(4)] == [401] * 4
        blocked = login(attacker, PASSWORD)
        assert blocked.status_code == 429 and "try again in" in blocked.text
    # the same client, posing as others with a spoofed first hop: the hop the proxy appended counts
    with via_proxy(live, "10.9.9.9, 192.168.1.66") as spoofing:
        assert login(spoofing, PASSWORD).status_code == 429
    with caplog.at_level(logging.INFO, logger="app.auth"):
        with via_proxy(live, "192.168.1.10") as owner:
            assert login(owner, PASSWORD).status_code == 303
            assert owner.get("/", follow_redirects=True).status_code == 200
    assert any(r.getMessage() == "signed in from 192.168.1.10" for r in caplog.records)


def test_forwarding_headers_from_another_peer_are_not_believed_by_the_throttle(tmp_path, scripted, serve):
    """A direct client that types a new X-Forwarded-For each time is still one client."""
    live = serve(configured(tmp_path, scripted, trusted_proxy=PROXY))
    freeze_throttle(live)
    with client(live, "127.0.0.1") as direct:
        statuses = [login(direct, "guess", headers={"X-Forwarded-For": f"10.0.0.{i}"}).status_code
                    for i in range(5)]
    assert statuses == [401, 401, 401, 401, 429]
    with via_proxy(live, "192.168.1.10") as owner:
        assert login(owner, PASSWORD).status_code == 303


def test_without_a_trusted_proxy_the_throttle_keys_on_the_peer(tmp_path, scripted, serve, caplog):
    """Not trusted: the header is no one's name. The log says how to count per client."""
    live = serve(configured(tmp_path, scripted))
    freeze_throttle(live)
    with caplog.at_level(logging.WARNING, logger="app.auth"):
        with client(live, PROXY) as proxy:
            statuses = [login(proxy, "guess", headers={"X-Forwarded-For": f"192.168.1.{i}"}).status_code
                        for i in range(5)]
    assert statuses == [401, 401, 401, 401, 429]
    assert any(f"server.trusted_proxy: {PROXY}" in r.getMessage() for r in caplog.records)


def test_trusted_proxy_forms_sent_from_the_browsers_name_pass_the_origin_check(tmp_path, scripted, serve):
    """Bare nginx sends Host: 127.0.0.1:port; the trusted X-Forwarded-Host is the name to compare with."""
    live = serve(configured(tmp_path, scripted, trusted_proxy=PROXY))
    browser = {"X-Forwarded-Host": "pi.lan", "X-Forwarded-Proto": "https"}
    with via_proxy(live, **browser) as proxied:
        assert login(proxied, PASSWORD).status_code == 303
        page = proxied.get("/", follow_redirects=True)
        token = re.search(r'"X-CSRF-Token": "([^"]+)"', html.unescape(page.text)).group(1)
        made = proxied.post("/new", headers={"Origin": "https://pi.lan", "X-CSRF-Token": token})
        assert made.status_code == 303
        evil = proxied.post("/new", headers={"Origin": "https://evil.example", "X-CSRF-Token": token})
        assert evil.status_code == 403


def test_a_proxy_that_hides_the_browsers_name_gets_a_refusal_that_says_why(tmp_path, scripted, serve):
    """Bare nginx, not trusted: the browser's Origin is pi.lan, the Host 127.0.0.1:port."""
    live = serve(configured(tmp_path, scripted))
    with via_proxy(live) as proxied:
        page = proxied.get("/login")
        refused = proxied.post("/login", data={"password": PASSWORD, "csrf_token": token_of(page)},
                               headers={"Origin": "https://pi.lan"})
    assert refused.status_code == 403
    assert "the proxy must pass on the Host header" in html.unescape(refused.text)


def test_trusted_proxy_must_be_one_ip_address(tmp_path):
    from app.config import ConfigError, load_config

    for bad in ("'*'", "pi.local", "192.168.1.0/24", "''"):
        path = tmp_path / "harvey.yaml"
        path.write_text(f"server:\n  trusted_proxy: {bad}\n")
        with pytest.raises(ConfigError, match="server.trusted_proxy"):
            load_config(path, env={})
    path.write_text("server:\n  trusted_proxy: ::1\n")
    assert load_config(path, env={}).server.trusted_proxy == "::1"


# -- item 14c: the secret key ----------------------------------------------------------------

def test_a_failed_first_write_never_leaves_a_short_secret_key(tmp_path, scripted, serve):
    """The disk fills (RLIMIT_FSIZE: 16 bytes) while the key is written: no key, never half of one."""
    key = tmp_path / "data" / "secret_key"
    script = ("import resource, sys\n"
              "from pathlib import Path\n"
              "from app.security import load_secret_key\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (16, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
              "load_secret_key(Path(sys.argv[1]))\n")
    done = subprocess.run([sys.executable, "-c", script, str(key)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and "File too large" in done.stderr, done.stderr[-500:]
    assert not key.exists() or len(key.read_bytes()) == 32
    assert [p.name for p in key.parent.iterdir() if p.name != "password"] in ([], ["secret_key"])

    live = serve(configured(tmp_path, scripted, auth_mode="password"))
    assert len(key.read_bytes()) == 32 and key.stat().st_mode & 0o777 == 0o600
    assert live.app.secret_key == key.read_bytes()
    with client(live) as http:
        assert login(http, PASSWORD).status_code == 303
        assert http.get("/", follow_redirects=True).url.path.startswith("/s/")   # signed in: the chat


def test_a_short_secret_key_left_by_an_old_crash_is_replaced(tmp_path, scripted, serve):
    key = tmp_path / "data" / "secret_key"
    key.parent.mkdir(parents=True)
    key.write_bytes(b"half a key")
    live = serve(configured(tmp_path, scripted, auth_mode="password"))
    assert len(key.read_bytes()) == 32 and key.read_bytes() != b"half a key"
    assert key.stat().st_mode & 0o777 == 0o600 and live.app.secret_key == key.read_bytes()
    restarted = serve(configured(tmp_path, scripted, auth_mode="password"))
    assert restarted.app.secret_key == live.app.secret_key                   # a whole key is kept


# -- item 14d: uploads never replace a file --------------------------------------------------

def upload(live, session, filename, data) -> httpx.Response:
    return live.post("/files/upload", data={"session": session}, files={"file": (filename, data)},
                     headers={"HX-Request": ""})


def test_an_upload_keeps_both_files_and_says_so(tmp_path, scripted, serve):
    config = configured(tmp_path, scripted, password=False)
    workspace = config.workspace_path
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_bytes(b"the user's own notes\n")
    (tmp_path / "outside.txt").write_bytes(b"outside\n")
    (workspace / "escape.txt").symlink_to(tmp_path / "outside.txt")
    live = serve(config)
    session = live.open_session()

    first = upload(live, session, "notes.txt", b"a new version\n")
    assert first.status_code == 200
    assert "already in the workspace, so this upload was saved as notes-2.txt" in html.unescape(first.text)
    assert (workspace / "notes.txt").read_bytes() == b"the user's own notes\n"
    assert (workspace / "notes-2.txt").read_bytes() == b"a new version\n"

    again = upload(live, session, "notes.txt", b"a third version\n")
    assert "saved as notes-3.txt" in html.unescape(again.text)
    assert (workspace / "notes-3.txt").read_bytes() == b"a third version\n"

    same = upload(live, session, "notes.txt", b"a new version\n")
    assert "notes-2.txt is already in the workspace with the same content" in html.unescape(same.text)
    assert sorted(p.name for p in workspace.iterdir() if p.name.startswith("notes")) == [
        "notes-2.txt", "notes-3.txt", "notes.txt"]

    linked = upload(live, session, "escape.txt", b"outside\n")          # same bytes as the link's target
    assert "saved as escape-2.txt" in html.unescape(linked.text)
    assert (workspace / "escape.txt").is_symlink() and (tmp_path / "outside.txt").read_bytes() == b"outside\n"

    fresh = upload(live, session, "data.tar.gz", b"\x1f\x8b")
    assert "Uploaded data.tar.gz" in fresh.text
    taken = upload(live, session, "data.tar.gz", b"\x1f\x8b\x08")
    assert "saved as data-2.tar.gz" in html.unescape(taken.text)
    assert not [p for p in workspace.iterdir() if p.name.startswith(".")]   # no temporary file left


# -- the real command ------------------------------------------------------------------------

def test_harvey_serve_itself_asks_the_password_behind_its_trusted_proxy(tmp_path, scripted):
    """`harvey serve` as systemd runs it, not a test harness: cmd_serve builds waitress with the proxy set-up."""
    import queue

    config = tmp_path / "harvey.yaml"
    config.write_text(f"model_server:\n  url: {scripted.url}\n  model: tiny:1b\n"
                      f"server:\n  host: 127.0.0.1\n  port: 0\n  trusted_proxy: {PROXY}\n"
                      f"workspace: {tmp_path}/workspace\nsessions_dir: {tmp_path}/sessions\n"
                      f"data_dir: {tmp_path}/data\n")
    auth.set_password(tmp_path / "data", PASSWORD)
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "--config", str(config), "serve"], cwd=ROOT,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
    try:
        url, seen = None, []
        while url is None:
            line = lines.get(timeout=60)                   # the deadline: Empty fails the test
            seen.append(line)
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)/", line)
            url = found and found.group(1)
        assert any("Password required (auth: auto" in line and PROXY in line for line in seen), seen
        with httpx.Client(base_url=url, transport=httpx.HTTPTransport(local_address=PROXY), timeout=10.0) as proxy:
            assert proxy.get("/").status_code == 303                                    # to /login
            seen_as = {"X-Forwarded-For": "192.168.1.10"}
            page = proxy.get("/login", headers=seen_as)
            signed = proxy.post("/login", headers=seen_as,
                                data={"password": PASSWORD, "csrf_token": token_of(page)})
            assert signed.status_code == 303
        while True:
            line = lines.get(timeout=30)
            if "signed in from" in line:
                assert line.rstrip().endswith("signed in from 192.168.1.10")           # the client, not the proxy
                break
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


# -- issue 23 item 11: the documented TLS set-up, with Debian's nginx in front ----------------

NGINX_SITE = ROOT / "deploy" / "nginx-harvey.conf"


def documented_site(app_port: int, tls_port: int, http_port: int, cert: Path, key: Path) -> str:
    """deploy/nginx-harvey.conf with only its ports and certificate paths changed (each must be found once)."""
    text = NGINX_SITE.read_text()
    for old, new in [("listen 443 ssl;", f"listen 127.0.0.1:{tls_port} ssl;"), ("listen [::]:443 ssl;", ""),
                     ("listen 80;", f"listen 127.0.0.1:{http_port};"), ("listen [::]:80;", ""),
                     ("/etc/ssl/certs/harvey.pem", str(cert)), ("/etc/ssl/private/harvey.key", str(key)),
                     ("proxy_pass http://127.0.0.1:8080;", f"proxy_pass http://127.0.0.1:{app_port};")]:
        assert text.count(old) == 1, f"deploy/nginx-harvey.conf no longer has {old!r} once"
        text = text.replace(old, new)
    return text


def bare_site(app_port: int, http_port: int) -> str:
    """The set-up item 11 is about: a bare proxy_pass, no forwarding header at all."""
    return (f"server {{\n    listen 127.0.0.1:{http_port};\n"
            f"    location / {{\n        proxy_pass http://127.0.0.1:{app_port};\n    }}\n}}\n")


@pytest.fixture
def nginx(tmp_path):
    started = []

    def start(site: str, port: int) -> Nginx:
        proxy = Nginx(tmp_path / f"nginx-{len(started)}", site, port)
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (openssl, as the docs' reader would make one for the Pi's name)."""
    import shutil

    require(shutil.which("openssl") is not None, "openssl is not installed")
    cert, key = folder / "harvey.pem", folder / "harvey.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=pi.lan",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:pi.lan", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.mark.parametrize("trusted", [None, "127.0.0.1"], ids=["auto", "trusted-proxy"])
def test_the_documented_tls_setup_asks_the_password_and_signs_in_through_nginx(tmp_path, scripted, serve, nginx,
                                                                              caplog, trusted):
    live = serve(configured(tmp_path, scripted, trusted_proxy=trusted))
    app_port, tls_port, http_port = live.server.effective_port, free_port(), free_port()
    cert, key = self_signed(tmp_path)
    nginx(documented_site(app_port, tls_port, http_port, cert, key), tls_port)
    base = f"https://127.0.0.1:{tls_port}"
    import ssl

    trusting = ssl.create_default_context(cafile=str(cert))
    with httpx.Client(base_url=base, timeout=10.0,
                      transport=httpx.HTTPTransport(local_address="127.0.0.3", verify=trusting)) as browser:
        page = browser.get("/")
        assert page.status_code == 303 and page.headers["Location"].startswith("/login"), page.text[:300]
        with caplog.at_level(logging.INFO, logger="app.auth"):
            assert login(browser, PASSWORD).status_code == 303
        chat = browser.get("/", follow_redirects=True)
        assert chat.status_code == 200 and chat.url.path.startswith("/s/") and "Sign out" in chat.text
        token = re.search(r'"X-CSRF-Token": "([^"]+)"', html.unescape(chat.text)).group(1)
        sent = browser.post(f"{chat.url.path}/title", data={"title": "Through nginx"},
                            headers={"X-CSRF-Token": token, "HX-Request": "true", "Origin": base})
        assert sent.status_code == 200, sent.text[:300]                   # the Origin check sees the browser's name
    signed = [r.getMessage() for r in caplog.records if "signed in from" in r.getMessage()]
    assert signed == [f"signed in from {'127.0.0.3' if trusted else '127.0.0.1'}"]   # the client, when trusted
    with httpx.Client(timeout=10.0) as plain:                            # plain HTTP only redirects to TLS
        moved = plain.get(f"http://127.0.0.1:{http_port}/")
        assert moved.status_code == 301 and moved.headers["Location"].startswith("https://127.0.0.1")
    with client(live) as local:                                          # this machine itself: no password
        assert local.get("/", follow_redirects=True).status_code == 200
    assert auth.proxy_problems(live.config, sites=()) == []


def test_a_bare_proxy_pass_is_asked_the_password_and_harvey_check_says_why(tmp_path, scripted, serve, nginx):
    live = serve(configured(tmp_path, scripted, password=False))
    app_port, http_port = live.server.effective_port, free_port()
    nginx(bare_site(app_port, http_port), http_port)
    with httpx.Client(timeout=10.0) as browser:
        page = browser.get(f"http://127.0.0.1:{http_port}/")
        assert page.status_code == 503 and "harvey set-password" in page.text     # not the chat
    with client(live) as local:
        assert local.get("/", follow_redirects=True).status_code == 200          # this machine itself
    (tmp_path / "harvey.yaml").write_text(
        f"model_server:\n  url: {scripted.url}\n  model: tiny:1b\nserver:\n  host: 127.0.0.1\n  port: {app_port}\n"
        f"workspace: {tmp_path}/workspace\nsessions_dir: {tmp_path}/sessions\ndata_dir: {tmp_path}/data\n")
    check = subprocess.run([sys.executable, "-m", "app.cli", "--config", str(tmp_path / "harvey.yaml"), "check"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert check.returncode == 1, check.stdout
    assert "through a proxy on this machine that sends no forwarding headers (HTTP/1.0" in check.stdout
    assert "deploy/nginx-harvey.conf" in check.stdout


def test_harvey_check_names_an_nginx_site_that_passes_to_harvey_without_forwarding_headers(tmp_path, scripted):
    config = configured(tmp_path, scripted, password=False)
    config = dataclasses.replace(config, server=dataclasses.replace(config.server, port=8080))
    sites = tmp_path / "sites-enabled"
    sites.mkdir()
    (sites / "bare").write_text(bare_site(8080, 80) + "# proxy_set_header X-Forwarded-For (a comment is no header)\n")
    (sites / "documented").write_text(NGINX_SITE.read_text())
    (sites / "elsewhere").write_text(bare_site(9000, 81))
    problems = auth.proxy_problems(config, sites=(sites, tmp_path / "missing"))
    assert problems == [f"{sites / 'bare'} passes requests to Harvey (port 8080) without X-Forwarded-For: "
                        "add the proxy_set_header lines of deploy/nginx-harvey.conf."]
