"""Issue 34: ``Services.close()`` is the one way the app's parts are stopped.

Each part registers its own stop where it is made; ``close()`` runs them last made
first, logs a failing one and runs the rest, and does nothing the second time.
`harvey serve`'s SIGTERM path ends with it too (tests/test_shutdown.py checks its log line).
"""

from __future__ import annotations

import logging
import threading

import pytest

from app.modelserver import ModelError
from app.services import Services
from conftest import make_config
from waiting import wait_for

EMBEDDER = "nomic-embed-text:latest"


@pytest.fixture
def svc(tmp_path, scripted):
    scripted.models[EMBEDDER] = 2048
    services = Services.from_config(make_config(tmp_path, scripted.url))
    yield services
    scripted.embed_release.set()
    services.close()


def test_close_stops_the_worker_the_jobs_the_indexer_and_the_model_client(svc, scripted, tmp_path, monkeypatch):
    # a reply in flight on the worker: it waits until something stops it
    activity = svc.activities.begin("s1", "reply", 0)
    thread = svc.worker.run(activity, lambda: activity.wait_stopped(60))
    # an index build held inside its first embedding request
    scripted.hold_embed = lambda texts: True
    doc_path = tmp_path / "workspace" / "notes.md"
    doc_path.write_text("# Notes\n\n" + "A line about the harbour and its boats.\n" * 400, encoding="utf-8")
    progress = svc.indexer.request(svc.indexer.document(doc_path))
    wait_for(lambda: scripted.embeds() or progress.finished.is_set(), 30, "the index build to ask for embeddings")
    assert not progress.finished.is_set(), progress
    assert svc.models.version()                          # the model client answers before the close
    shutdowns = []
    real_shutdown = svc.jobs.shutdown
    monkeypatch.setattr(svc.jobs, "shutdown", lambda: (shutdowns.append(1), real_shutdown()))

    stopped = svc.close("the server was stopped", timeout=10)

    assert stopped == ["job runner", "indexer", "worker", "event streams", "model client"]
    assert shutdowns == [1]
    assert not thread.is_alive() and activity.interrupted == "the server was stopped"
    assert progress.stop.is_set()                        # the build was cancelled...
    scripted.embed_release.set()
    wait_for(progress.finished.is_set, 30, "the index build to end")
    assert progress.state != "complete"                   # ...and did not go on to the end
    with pytest.raises((ModelError, RuntimeError)):      # the pooled connections are closed
        svc.models.version()
    assert svc.close() == [] and shutdowns == [1]        # a second close does nothing


def test_a_stop_that_fails_is_logged_and_the_others_still_run(tmp_path, scripted, caplog):
    svc = Services.from_config(make_config(tmp_path, scripted.url))
    ran = []
    svc.on_close("first made", lambda reason, deadline: ran.append("first made"))
    svc.on_close("broken", lambda reason, deadline: 1 / 0)
    svc.on_close("last made", lambda reason, deadline: ran.append("last made"))
    with caplog.at_level(logging.ERROR, logger="app.services"):
        stopped = svc.close()
    assert ran == ["last made", "first made"]
    assert "broken" not in stopped and stopped[0] == "last made" and stopped[-1] == "model client"
    assert "closing broken failed" in caplog.text


def test_close_from_two_threads_runs_each_stop_once(tmp_path, scripted):
    svc = Services.from_config(make_config(tmp_path, scripted.url))
    calls = []
    svc.on_close("counted", lambda reason, deadline: calls.append(threading.current_thread().name))
    threads = [threading.Thread(target=svc.close) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(calls) == 1


def test_a_vocabulary_fetch_cut_by_the_shutdown_is_said_as_that_not_as_a_warning(svc, scripted, caplog):
    """A model's vocabulary still on its way (a Pi's Ollama reading a big GGUF) when the app shuts
    down: the fetch is cut, and the log says the app is shutting down, at info level; not a warning
    that the server cannot be reached (which a CI run printed as "Bad file descriptor")."""
    scripted.verbose_gate = threading.Event()
    assert svc.models.counter("tiny:1b") is None                       # the build starts, off the request
    wait_for(lambda: scripted.verbose_shows == 1, 10, "the vocabulary asked for")
    with caplog.at_level(logging.INFO, logger="app.modelserver.counting"):
        svc.close("the test ended", 5)
        scripted.verbose_gate.set()
        wait_for(lambda: svc.models.counter_state("tiny:1b")[0] != "building", 30, "the cut build to end")
    said = [r for r in caplog.records if r.name == "app.modelserver.counting"]
    assert [r.levelname for r in said] == ["INFO"], [r.getMessage() for r in said]
    assert "shutting down" in said[0].getMessage()
