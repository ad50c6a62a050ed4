"""harvey.yaml: defaults, overrides, and one clear message per mistake."""

import dataclasses
from pathlib import Path

import pytest
import yaml

from app.config import Config, ConfigError, load_config

EXAMPLE = Path(__file__).parent.parent / "harvey.yaml.example"


def write(tmp_path, text):
    path = tmp_path / "harvey.yaml"
    path.write_text(text)
    return path


def test_missing_file_gives_defaults(tmp_path):
    config = load_config(tmp_path / "nope.yaml", env={})
    assert config.chunking.threshold == 0.80 and config.chunking.chunk_size_tokens == 1500
    assert config.chunking.max_chunks == 20 and config.chunking.overlap == "paragraph"
    assert config.model_server.url == "http://127.0.0.1:11434"


def test_example_documents_every_key_and_loads():
    config = load_config(EXAMPLE, env={})
    assert config.models["llama3.2:3b"].effective_context == 6144
    data = yaml.safe_load(EXAMPLE.read_text())
    assert "ollama" not in data                      # the section's old name (issue 34)
    for f in dataclasses.fields(Config):
        if f.name == "source":
            continue
        assert f.name in data, f"harvey.yaml.example lacks '{f.name}'"
        sub = getattr(Config(), f.name)
        if dataclasses.is_dataclass(sub):
            for g in dataclasses.fields(sub):
                assert g.name in data[f.name], f"harvey.yaml.example lacks '{f.name}.{g.name}'"
    text = EXAMPLE.read_text()
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#") and ":" in line and not line.startswith("  llama3.2"):
            if line.startswith(" ") or line.rstrip().endswith(":"):
                continue
            assert "#" in line, f"undocumented key line: {line}"


@pytest.mark.parametrize("text, key, expected", [
    ("chunking: [1, 2\n", None, "not valid YAML at line"),
    ("chunking:\n  threshold: high\n", "chunking.threshold", "expected a number"),
    ("chunking:\n  threshold: 1.5\n", "chunking.threshold", "(0, 1]"),
    ("chunking:\n  threshold: 0\n", "chunking.threshold", "(0, 1]"),
    ("chunking:\n  treshold: 0.5\n", "chunking.treshold", "unknown key"),
    ("colour: blue\n", "colour", "unknown key"),
    ("server:\n  port: eighty\n", "server.port", "expected a whole number"),
    ("models:\n  m:\n    context_window: lots\n", "models.m.context_window", "expected a whole number"),
    ("chunking:\n  enabled: 3\n", "chunking.enabled", "expected true or false"),
    ("- a list\n", None, "expected a mapping"),
    ("model_server:\n  url: localhost\n", "model_server.url", "an http:// or https:// URL"),
    ("model_server:\n  modle: m\n", "model_server.modle", "unknown key"),
    ("ollama:\n  parallel: 0\n", "model_server.parallel", "at least 1"),
    ("model_server:\n  url: http://a:1\nollama:\n  url: http://b:2\n", None,
     "both 'model_server:' and 'ollama:' are set"),
])
def test_broken_file_gives_one_clear_message(tmp_path, text, key, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    message = str(info.value)
    assert str(path) in message and expected in message
    if key:
        assert f"'{key}'" in message
    assert "\n" not in message


def test_the_model_server_section_is_read_and_its_old_name_too_with_a_log_line(tmp_path, caplog):
    text = "{}:\n  url: http://box:8080\n  api: openai\n  model: m1\n  parallel: 2\n"
    with caplog.at_level("WARNING", logger="app.config"):
        new = load_config(write(tmp_path, text.format("model_server")), env={})
    assert not caplog.records
    with caplog.at_level("WARNING", logger="app.config"):
        old = load_config(write(tmp_path, text.format("ollama")), env={})
    assert new.model_server == old.model_server
    assert (new.model_server.url, new.model_server.api, new.model_server.model, new.model_server.parallel) == ("http://box:8080", "openai",
                                                                                        "m1", 2)
    (record,) = caplog.records
    assert "'ollama:' is now called 'model_server:'" in record.getMessage() and "rename" in record.getMessage()


def test_the_old_chunking_concurrency_lands_in_the_model_server_section(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="app.config"):
        config = load_config(write(tmp_path, "chunking:\n  concurrency: 3\n"), env={})
    assert config.model_server.parallel == 3 and "now model_server.parallel" in caplog.text


def test_environment_overrides_url_and_model(tmp_path):
    path = write(tmp_path, "model_server:\n  url: http://a:1\n  model: m1\n")
    config = load_config(path, env={"OLLAMA_HOST": "10.0.0.5", "HARVEY_MODEL": "m2"})
    assert config.model_server.url == "http://10.0.0.5:11434" and config.model_server.model == "m2"
    assert load_config(path, env={"OLLAMA_HOST": "http://h:99/"}).model_server.url == "http://h:99"
