"""The chunk plan of a file for a model: its window and calibration decide the chunk size.

Planning reads the file (``chunking``) and asks Ollama for the model's window;
it sends nothing to a model.  ``plan`` returns the job fields it decides, so the
caller applies them through a transition.
"""

from __future__ import annotations

import math

from .. import chunking
from ..budget import context_window, estimate_messages
from ..workspace import Workspace
from .job import Job
from .mapreduce import MAP_SYSTEM


def plan(svc, file: str, model: str, instruction: str) -> dict:
    """The plan's job fields for ``file`` analysed by ``model``."""
    config = svc.config
    window = context_window(config, model, svc.client.show(model).context_length)
    bpt = svc.calibration.bytes_per_token(model)
    chosen = settings(svc, model, window, bpt, instruction)
    doc = chunking.read_document(Workspace(config.workspace_path).resolve(file).path, chosen)
    chunks = chunking.plan_document(doc).chunks
    return dict(model=model, window=window, bytes_per_token=bpt, chunks=chunks, size_tokens=chosen.size_tokens,
                boundary=doc.boundary, kind=doc.kind, fingerprint=doc.fingerprint,
                seconds_per_chunk=seconds_per_chunk(svc, model, chosen.size_tokens),
                selected=chunks if chunks <= config.chunking.max_chunks else 0)


def settings(svc, model: str, window: int, bpt: float, instruction: str) -> chunking.ChunkSettings:
    """Chunk size from the config, shrunk if a map request would not fit the window."""
    config = svc.config
    effective = effective_context(svc, model, window)
    fixed = (estimate_messages([{"content": MAP_SYSTEM}, {"content": instruction + "\n\n---\nChunk 99 of 99:\n"}],
                               bpt) + config.chunking.map_reply_tokens
             + math.ceil(config.budget.safety_margin * effective))
    size = max(64, min(config.chunking.chunk_size_tokens, effective - fixed))
    return chunking.ChunkSettings(size_tokens=size, overlap=config.chunking.overlap, bytes_per_token=bpt)


def effective_context(svc, model: str, window: int) -> int:
    """What the model uses well of its window (the config may say less than the window)."""
    return min(svc.config.model(model).effective_context or window, window)


def seconds_per_chunk(svc, model: str, size_tokens: int) -> float:
    """From the model's measured speed, once known (0 = unknown)."""
    speed = svc.calibration.speed(model)
    if not speed:
        return 0.0
    prompt_tps, eval_tps = speed
    return size_tokens / prompt_tps + svc.config.chunking.map_reply_tokens / eval_tps


def document(svc, job: Job) -> chunking.Document:
    """The job's file read with the job's settings (raises a HarveyError when it is gone or unreadable)."""
    wf = Workspace(svc.config.workspace_path).resolve(job.file)
    chosen = chunking.ChunkSettings(size_tokens=job.size_tokens, overlap=svc.config.chunking.overlap,
                                    bytes_per_token=job.bytes_per_token)
    return chunking.read_document(wf.path, chosen)


def file_tokens(svc, file: str, bpt: float) -> tuple[str, int]:
    """The file's name as the workspace knows it and its size estimate (from stat: nothing is read)."""
    wf = Workspace(svc.config.workspace_path).resolve(file)
    return wf.name, math.ceil(wf.size / bpt)
