"""harvey.yaml, read once into typed, frozen objects.

Every key has a default, so a missing file is a working configuration. A broken
file stops start-up with one message that names the file, the key and what was
expected: a typo in a key must not be silently ignored on a headless Pi.

The schema is the dataclasses below; ``harvey.yaml.example`` documents every key
and ``tests/test_config.py`` checks that the two agree.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml


from .errors import ConfigError  # noqa: E402,F401 (the config's error lives in the one tree)

log = logging.getLogger(__name__)

API_KINDS = ("native", "openai")     # model_server.api: the kinds of model server app.modelserver can talk to

# The model server's section in harvey.yaml is ``model_server:`` (Ollama or an OpenAI-compatible
# server alike); files written before it was renamed say ``ollama:``, still read (with a log line).
SECTION, OLD_SECTION = "model_server", "ollama"


@dataclass(frozen=True)
class ModelServerConfig:
    url: str = "http://127.0.0.1:11434"
    # The server's API: "native" (Ollama's own) or "openai" (an OpenAI-compatible server that
    # refuses over-long prompts: llama-server, llamafile, vLLM; see harvey.yaml.example).
    api: str = "native"
    model: str = "llama3.2:3b"
    # Connect fails fast when Ollama is down; reads wait for a slow Pi.
    connect_timeout_s: float = 3.0
    timeout_s: float = 600.0
    keep_alive: str = "30m"
    # The window used when a model's own length is larger: a size a Pi can hold.
    default_context_window: int = 8192
    # Calls the server answers at once: an analysis keeps this many map calls in flight. 1 on a
    # Pi; match OLLAMA_NUM_PARALLEL, llama-server's -np, or the boxes behind a balancer.
    parallel: int = 1
    # The window is never larger than the model server's machine holds (app/modelserver/memory.py):
    # its memory ("8G"; empty: this machine's MemTotal when url is loopback, else not known, so no
    # cap) and the KV cache type Ollama uses (empty: OLLAMA_KV_CACHE_TYPE when local, else f16).
    server_memory: str = ""
    kv_cache_type: str = ""


@dataclass(frozen=True)
class ModelConfig:
    context_window: int | None = None
    effective_context: int | None = None


@dataclass(frozen=True)
class ChunkingConfig:
    enabled: bool = True
    threshold: float = 0.80
    chunk_size_tokens: int = 1500
    max_chunks: int = 20
    overlap: str = "paragraph"
    # Bound on each partial answer, so that the partials can be synthesized.
    map_reply_tokens: int = 400
    # Seed 004, opt-in: the model chooses chunk boundaries / writes a short situating context
    # for chunks that need one (app/chunking/llmhelp.py). Off: no extra model call is made.
    llm_boundaries: bool = False
    llm_context: bool = False


@dataclass(frozen=True)
class RetrievalConfig:
    # The model that embeds passages for vector search: "auto" (an installed model whose name says it
    # embeds: nomic-embed-text, all-minilm, ...), a model name, or "" (keyword search only).
    embed_model: str = "auto"
    # Passages (about 600 tokens each) an answer from the most relevant passages draws on at most.
    passages: int = 8
    # Chunks embedded per request while indexing (a cancel waits for at most one batch).
    embed_batch: int = 8


@dataclass(frozen=True)
class ChatConfig:
    # The most a chat reply may generate (num_predict; max_tokens on an OpenAI-compatible server).
    # 1024 tokens is about 750 words: a full answer with a code block, a few minutes on a Pi; a
    # reply that reaches it is marked "cut" with a Continue. Never "whatever the window has free":
    # a looping small model would hold the one model slot for half an hour.
    reply_tokens: int = 1024


@dataclass(frozen=True)
class BudgetConfig:
    safety_margin: float = 0.10
    reply_tokens: int = 512
    bytes_per_token: float = 4.0


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    # Each open SSE stream holds a waitress thread; size for a few pages open.
    threads: int = 8
    channel_timeout_s: int = 120
    connection_limit: int = 50
    max_upload_mb: int = 20
    max_message_kb: int = 256
    # The address of the reverse proxy in front of Harvey (e.g. 127.0.0.1 for Caddy or nginx on
    # the Pi): its X-Forwarded-For/-Host/-Proto are believed, and the password is asked.
    trusted_proxy: str | None = None
    # Open event streams at once (None: threads - 2), so that two threads are always
    # left for pages, Stop and /healthz; a stream over the cap is told to retry later.
    max_streams: int | None = None
    # An event stream ends itself after this and the browser reconnects at once
    # (Last-Event-ID replay), so a dead phone's socket holds a thread no longer.
    stream_lifetime_s: float = 60.0

    @property
    def stream_limit(self) -> int:
        """How many event streams may be open at once."""
        return self.max_streams if self.max_streams is not None else max(1, self.threads - 2)


@dataclass(frozen=True)
class Config:
    model_server: ModelServerConfig = field(default_factory=ModelServerConfig)
    models: dict[str, ModelConfig] = field(default_factory=dict)
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    chat: ChatConfig = field(default_factory=ChatConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    workspace: str = "./data/workspace"
    sessions_dir: str = "./data/sessions"
    data_dir: str = "./data"
    user_name: str = "USER"
    system_prompt: str = (
        "You are Harvey, a helpful assistant running on a small computer. "
        "Answer clearly and concisely."
    )
    auth: str = "auto"
    # Where the file came from, for messages; not a key in the file.
    source: str = field(default="(defaults)", compare=False)

    def model(self, name: str) -> ModelConfig:
        """The per-model settings for ``name``, or the defaults."""
        return self.models.get(name, ModelConfig())

    @property
    def workspace_path(self) -> Path:
        return Path(self.workspace).expanduser().resolve()

    @property
    def sessions_path(self) -> Path:
        return Path(self.sessions_dir).expanduser().resolve()

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser().resolve()


def load_config(path: str | os.PathLike | None = None, env: dict | None = None) -> Config:
    """Read ``path`` (missing file = defaults), apply environment overrides.

    ``OLLAMA_HOST`` (Ollama's own convention) and ``HARVEY_MODEL`` win over the
    file, so one machine can point at another Ollama without editing it.
    """
    env = os.environ if env is None else env
    source = str(path) if path else "(defaults)"
    data: dict = {}
    if path and Path(path).exists():
        data = _read_yaml(Path(path))
    data = _fold_old_keys(_renamed_section(data, source), source)
    config = _build(Config, data, source, prefix="")
    server = data.get(SECTION) if isinstance(data.get(SECTION), dict) else {}
    if config.model_server.api == "openai" and "url" not in server:     # Ollama's port is no OpenAI server's
        config = dataclasses.replace(config, model_server=dataclasses.replace(config.model_server,
                                                                              url=LLAMA_SERVER_URLS[0]))
    config = dataclasses.replace(config, source=source)
    return _apply_env(config, env)


# A local llama-server's default address (issue 42: its default port moves from 8080 to 9931; both are
# seen): ``api: openai`` without a ``url`` uses the first, and ``harvey serve`` tries the next when the
# first does not answer (not the port Harvey itself listens on).
LLAMA_SERVER_URLS = ("http://127.0.0.1:9931", "http://127.0.0.1:8080")


def _renamed_section(data: dict, source: str) -> dict:
    """The ``ollama:`` section of an older file, read as ``model_server:`` (the log says to rename it);
    both in one file is an error: which one is meant cannot be guessed."""
    if OLD_SECTION not in data:
        return data
    if SECTION in data:
        raise ConfigError(f"{source}: both '{SECTION}:' and '{OLD_SECTION}:' are set; '{OLD_SECTION}:' is the "
                          f"old name of '{SECTION}:': keep one section (move its keys into '{SECTION}:')")
    log.warning("%s: the section '%s:' is now called '%s:' (for any model server); rename it in the file",
                source, OLD_SECTION, SECTION)
    return {(SECTION if key == OLD_SECTION else key): value for key, value in data.items()}


def _fold_old_keys(data: dict, source: str) -> dict:
    """Keys of older files, moved: ``chunking.concurrency`` (documented, never read) is now
    ``model_server.parallel``; an old file still loads, its value is used unless the new key is set,
    and the log names the new key."""
    chunking = data.get("chunking")
    if not isinstance(chunking, dict) or "concurrency" not in chunking:
        return data
    chunking = dict(chunking)
    value = chunking.pop("concurrency")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{source}: key 'chunking.concurrency': expected a whole number of at least 1, got "
                          f"{value!r} (the key is now {SECTION}.parallel)")
    server = data.get(SECTION) if isinstance(data.get(SECTION), dict) else {}
    log.warning("%s: chunking.concurrency is now %s.parallel (calls in flight at once); %s", source, SECTION,
                f"{SECTION}.parallel is set, so chunking.concurrency is ignored" if "parallel" in server
                else f"using {value} as {SECTION}.parallel")
    folded = {**data, "chunking": chunking}
    if SECTION not in data or isinstance(data.get(SECTION), dict):
        folded[SECTION] = {"parallel": value, **server}
    return folded


def _read_yaml(path: Path) -> dict:
    """Parse the YAML, turning a syntax error into one readable line."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level, got {_kind(data)}")
    return data


def _build(cls, data: dict, source: str, prefix: str):
    """Build dataclass ``cls`` from ``data``, checking every key and type."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: key '{prefix.rstrip('.')}': expected a mapping, got {_kind(data)}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        known = ", ".join(sorted(fields))
        raise ConfigError(f"{source}: unknown key '{prefix}{unknown[0]}' (known keys here: {known})")
    values = {name: _value(hints[name], raw, source, f"{prefix}{name}") for name, raw in data.items()}
    obj = cls(**values)
    _check(obj, source, prefix)
    return obj


def _value(hint, raw, source: str, key: str):
    """Convert one raw YAML value to the field's type or raise ConfigError."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if raw is None and type(None) in args:
            return None
        (hint,) = [a for a in args if a is not type(None)]
        return _value(hint, raw, source, key)
    if origin is dict:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: key '{key}': expected a mapping of names, got {_kind(raw)}")
        return {str(k): _build(args[1], v or {}, source, f"{key}.{k}.") for k, v in raw.items()}
    if dataclasses.is_dataclass(hint):
        return _build(hint, raw if raw is not None else {}, source, f"{key}.")
    if hint is bool:
        if isinstance(raw, bool):
            return raw
    elif hint is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
    elif hint is float:
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return float(raw)
    elif hint is str:
        if isinstance(raw, (str, int, float)) and not isinstance(raw, bool):
            return str(raw)
    names = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}
    raise ConfigError(f"{source}: key '{key}': expected {names.get(hint, hint)}, got {_kind(raw)} {raw!r}")


def _check(obj, source: str, prefix: str) -> None:
    """Range checks that types alone cannot express."""
    def bad(key: str, expected: str, got) -> ConfigError:
        return ConfigError(f"{source}: key '{prefix}{key}': expected {expected}, got {got!r}")

    if isinstance(obj, ChunkingConfig):
        if not 0 < obj.threshold <= 1:
            raise bad("threshold", "a number in (0, 1]", obj.threshold)
        if obj.overlap not in ("paragraph", "sentence", "none"):
            raise bad("overlap", "one of paragraph, sentence, none", obj.overlap)
        for key in ("chunk_size_tokens", "max_chunks", "map_reply_tokens"):
            if getattr(obj, key) < 1:
                raise bad(key, "a whole number of at least 1", getattr(obj, key))
    elif isinstance(obj, RetrievalConfig):
        for key in ("passages", "embed_batch"):
            if getattr(obj, key) < 1:
                raise bad(key, "a whole number of at least 1", getattr(obj, key))
    elif isinstance(obj, ChatConfig):
        if obj.reply_tokens < 16:
            raise bad("reply_tokens", "a whole number of at least 16", obj.reply_tokens)
    elif isinstance(obj, BudgetConfig):
        if not 0 <= obj.safety_margin < 1:
            raise bad("safety_margin", "a number in [0, 1)", obj.safety_margin)
        if obj.reply_tokens < 0:
            raise bad("reply_tokens", "a whole number of at least 0", obj.reply_tokens)
        if obj.bytes_per_token <= 0:
            raise bad("bytes_per_token", "a positive number", obj.bytes_per_token)
    elif isinstance(obj, ModelConfig):
        for key in ("context_window", "effective_context"):
            value = getattr(obj, key)
            if value is not None and value < 256:
                raise bad(key, "a whole number of at least 256", value)
    elif isinstance(obj, ServerConfig):
        if not 0 <= obj.port <= 65535:
            raise bad("port", "a port number 0-65535", obj.port)
        if obj.threads < 2:
            raise bad("threads", "at least 2 (one SSE stream holds a thread)", obj.threads)
        if obj.trusted_proxy is not None:
            try:
                ipaddress.ip_address(obj.trusted_proxy.strip().strip("[]"))
            except ValueError:
                raise bad("trusted_proxy", "the IP address the proxy connects from (one address, "
                                           "e.g. 127.0.0.1; not a name, a range or '*')",
                          obj.trusted_proxy) from None
        if obj.max_streams is not None and not 1 <= obj.max_streams <= obj.threads - 1:
            raise bad("max_streams", f"a whole number from 1 to threads - 1 = {obj.threads - 1} "
                      "(each open stream holds a thread; pages need one too)", obj.max_streams)
        if obj.stream_lifetime_s <= 0:
            raise bad("stream_lifetime_s", "a positive number of seconds", obj.stream_lifetime_s)
    elif isinstance(obj, Config):
        if obj.auth not in ("auto", "password", "none"):
            raise bad("auth", "one of auto, password, none", obj.auth)
        if not obj.user_name.strip():
            raise bad("user_name", "a non-empty name", obj.user_name)
    elif isinstance(obj, ModelServerConfig):
        if not obj.url.startswith(("http://", "https://")):
            raise bad("url", "an http:// or https:// URL", obj.url)
        if obj.api not in API_KINDS:
            raise bad("api", "native (Ollama) or openai (an OpenAI-compatible server such as llama-server)",
                      obj.api)
        if obj.timeout_s <= 0 or obj.connect_timeout_s <= 0:
            raise bad("timeout_s", "a positive number of seconds", obj.timeout_s)
        if obj.parallel < 1:
            raise bad("parallel", "a whole number of at least 1", obj.parallel)
        if obj.server_memory:
            from .modelserver.memory import parse_size
            try:
                parse_size(obj.server_memory)
            except ValueError:
                raise bad("server_memory", "a size such as 8G, 8GiB, 8000MB or a number of bytes",
                          obj.server_memory) from None
        if obj.kv_cache_type:
            from .modelserver.memory import CACHE_BYTES
            if obj.kv_cache_type.lower() not in CACHE_BYTES:
                raise bad("kv_cache_type", f"one of {', '.join(CACHE_BYTES)}", obj.kv_cache_type)


def _apply_env(config: Config, env) -> Config:
    """Apply OLLAMA_HOST / HARVEY_MODEL overrides."""
    server = config.model_server
    host = env.get("OLLAMA_HOST")
    if host:
        url = host if host.startswith(("http://", "https://")) else f"http://{host}"
        if url.count(":") < 2:  # no port given: Ollama's default
            url = f"{url}:11434"
        server = dataclasses.replace(server, url=url.rstrip("/"))
    if env.get("HARVEY_MODEL"):
        server = dataclasses.replace(server, model=env["HARVEY_MODEL"])
    return dataclasses.replace(config, model_server=server)


def _kind(value) -> str:
    """A plain-words name for a YAML value's type."""
    if isinstance(value, bool):
        return "true/false"
    return {dict: "a mapping", list: "a list", str: "a string", int: "a number",
            float: "a number", type(None): "nothing"}.get(type(value), type(value).__name__)
