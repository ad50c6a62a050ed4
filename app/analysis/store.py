"""Durable jobs: ``job.json`` + ``results.jsonl`` per job, under data_dir/jobs.

``job.json`` holds the job's state (written atomically on every transition);
each partial answer is appended to ``results.jsonl`` and fsynced as it arrives,
so a crash or a restart loses no finished chunk.  The last line for a chunk wins
(a chunk that errored and was retried later has two lines).  A line a crash left
half-written is skipped (with a log line) and never glued to the next record: an
append after it starts on a line of its own.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import threading
from pathlib import Path

from ..storage import atomic_write_text
from .job import ChunkResult, Job

log = logging.getLogger(__name__)

KEEP_PARTIALS = 64      # partial answers whose chunk answers are kept for "read the rest"


class JobStore:
    def __init__(self, folder: Path):
        self.folder = folder
        self._lock = threading.Lock()
        self._removed: set[str] = set()
        folder.mkdir(parents=True, exist_ok=True)

    def save(self, job: Job) -> None:
        """Atomic write of the job's state; a job whose folder was removed stays removed."""
        path = self.folder / job.id / "job.json"
        with self._lock:
            if job.id in self._removed:
                return
            path.parent.mkdir(exist_ok=True)
            atomic_write_text(path, json.dumps(job.public(), indent=1))

    def add_result(self, job: Job, result: ChunkResult) -> None:
        """Append one partial answer and fsync: a crash keeps every finished chunk."""
        with self._lock:
            if job.id in self._removed:
                return
            with open(self.folder / job.id / "results.jsonl", "a+b") as fh:
                line = json.dumps(dataclasses.asdict(result)).encode() + b"\n"
                fh.write(_after_torn_line(fh) + line)
                fh.flush()
                os.fsync(fh.fileno())
            job.results[result.index] = result

    def remove(self, job: Job, keep_results: bool = False) -> None:
        """Delete the job's folder (its outcome is recorded, or the user threw it away).  ``keep_results``:
        an answer that rests on part of its file keeps its chunks' answers (``partials/``, the newest
        ``KEEP_PARTIALS``), so reading the rest reads only the chunks not read (``partial``)."""
        with self._lock:
            self._removed.add(job.id)
            if keep_results:
                self._keep(job)
            shutil.rmtree(self.folder / job.id, ignore_errors=True)

    def _keep(self, job: Job) -> None:
        partials = self.folder / "partials"
        try:
            partials.mkdir(exist_ok=True)
            os.replace(self.folder / job.id / "results.jsonl", partials / f"{job.id}.jsonl")
            kept = sorted(partials.glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
            for old in kept[:-KEEP_PARTIALS]:
                old.unlink(missing_ok=True)
        except OSError as exc:              # (a full disk: reading the rest then reads every chunk)
            log.warning("the chunk answers of analysis %s could not be kept: %s", job.id, exc)

    def partial(self, job_id: str) -> dict[int, ChunkResult]:
        """The chunk answers a partial answer kept (``remove``), by chunk; {} when they are gone."""
        if not job_id or not job_id.isalnum():
            return {}
        return self._results(self.folder / "partials" / f"{job_id}.jsonl")

    def exists(self, job: Job) -> bool:
        return (self.folder / job.id).exists()

    def forget(self, job_id: str) -> None:
        """Stop remembering that a job was removed (it is settled and evicted: bounded memory)."""
        with self._lock:
            self._removed.discard(job_id)

    def load_all(self) -> list[Job]:
        jobs = []
        for path in sorted(self.folder.glob("*/job.json")):
            try:
                data = json.loads(path.read_text())
                job = Job(**{k: v for k, v in data.items() if k in Job.__dataclass_fields__})
            except (OSError, ValueError, TypeError) as exc:
                log.warning("skipping unreadable job %s: %s", path, exc)
                continue
            job.results = self._results(path.parent / "results.jsonl")
            jobs.append(job)
        return jobs

    @staticmethod
    def _results(path: Path) -> dict[int, ChunkResult]:
        """Read partial answers; a torn last line (crash mid-write) is skipped."""
        results: dict[int, ChunkResult] = {}
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return results
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                r = ChunkResult(**json.loads(line))
            except (ValueError, TypeError) as exc:
                log.warning("%s line %d: skipping a torn or unreadable result (%s)", path, number,
                            exc.__class__.__name__)
                continue
            results[r.index] = r
        return results


def _after_torn_line(fh) -> bytes:
    """b"\\n" when the file (opened for append) ends inside a line a crash cut short, else b"".

    Without it the next record would be written onto the torn line and be lost with it.
    """
    size = fh.seek(0, os.SEEK_END)
    if size == 0:
        return b""
    return b"" if os.pread(fh.fileno(), 1, size - 1) == b"\n" else b"\n"
