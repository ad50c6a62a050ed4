"""A results line a crash cut short is skipped, and never takes the next result with it (issue 23 item 7)."""

import json
import logging
from pathlib import Path

from app.analysis.job import ChunkResult, Job
from app.analysis.store import JobStore
from test_analysis import big_file_config, slow_maps, start_job, wait_for, wait_state


def tear_last_line(path: Path) -> str:
    """Cut the file's last record in half, as a crash in the middle of its write would; return what is left of it."""
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    torn = data[:last + (len(data) - last) // 2]
    path.write_bytes(torn)
    return torn[last:].decode()


def test_a_result_added_after_a_torn_line_is_kept_and_the_torn_one_skipped(tmp_path, caplog):
    store = JobStore(tmp_path / "jobs")
    job = Job(id="abc123", session="s", turn=0, file="big.md", user_text="Summarize.", instruction="Summarize.",
              model="tiny:1b", file_tokens=9000, remaining=4000, chunks=6, size_tokens=1500, boundary="paragraph",
              kind="markdown", fingerprint="f", window=8192, bytes_per_token=4.0)
    store.save(job)
    store.add_result(job, ChunkResult(index=0, status="ok", text="first"))
    store.add_result(job, ChunkResult(index=1, status="ok", text="second"))
    results = tmp_path / "jobs" / job.id / "results.jsonl"
    assert tear_last_line(results).startswith('{"index": 1')
    store.add_result(job, ChunkResult(index=2, status="ok", text="third, after the crash"))
    with caplog.at_level(logging.WARNING, logger="app.analysis.store"):
        (loaded,) = JobStore(tmp_path / "jobs").load_all()
    assert {i: r.text for i, r in loaded.results.items()} == {0: "first", 2: "third, after the crash"}
    assert "line 2: skipping a torn or unreadable result" in caplog.text
    assert json.loads(results.read_text().splitlines()[-1])["index"] == 2     # a line of its own


def test_a_job_resumed_after_a_torn_line_keeps_what_it_adds_over_the_next_restart(tmp_path, scripted, make_live):
    """Through waitress: interrupted, torn, resumed, interrupted again: the second run's chunks survive."""
    scripted.script = slow_maps(0.03)
    config = big_file_config(tmp_path, scripted)
    first = make_live(config)
    name = first.open_session()
    job, _ = start_job(first, name, "Summarize.")
    wait_for(lambda: job.done_count >= 2, what="two chunks")
    first.close()
    wait_state(first, job, ("interrupted",))
    results = Path(config.data_dir) / "jobs" / job.id / "results.jsonl"
    tear_last_line(results)
    second = make_live(config)
    resumed = second.services.jobs.get(job.id)
    kept = {i for i, r in resumed.results.items() if r.status == "ok"}
    assert resumed.state == "interrupted" and len(kept) >= 1
    second.post(f"/s/{name}/analysis/{job.id}/resume")
    wait_for(lambda: len(resumed.results) >= len(kept) + 2, what="two more chunks after the resume")
    second.close()
    wait_state(second, resumed, ("interrupted",))
    added = {i for i, r in resumed.results.items() if r.status == "ok"} - kept
    third = make_live(config)
    again = third.services.jobs.get(job.id)
    assert added and added <= set(again.results), (added, sorted(again.results))
