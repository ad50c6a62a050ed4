"""The long-lived parts of the app, made once from the config.

One ``Services`` object per app holds the model server, the session store, the
calibration, the owner of each session's model work (``activities``, run by the
``worker``, each call made through ``calls``) and the analysis job runner. Views reach it with
``app.web.context.services()``; tests build an app around their own.

Each part registers its own stop (``on_close``) where it is made, so the shutdown
order is written once, here: ``close()`` runs the stops in reverse order of
registration (what was made last stops first; the model client, made first, is
closed last). ``harvey serve`` (``app.cli.serve_until_signalled``) and the tests'
fixtures both end the app with ``close()``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Callable

from .budget import Calibration, Sizing
from .config import Config
from .events import StreamGate
from .modelserver import ModelServer, connect

if TYPE_CHECKING:           # what the fields hold; made (and imported) in ``from_config``
    from .analysis.runner import JobRunner
    from .retrieval.indexer import Indexer
    from .sessions.store import SessionStore
    from .work.activity import Activities
    from .work.calls import ModelCalls
    from .work.worker import Worker

log = logging.getLogger(__name__)

# A stop is called with why the app is closing (recorded on interrupted replies) and the
# time.monotonic() deadline by which it should have returned.
Stop = Callable[[str, float], None]


@dataclass
class Services:
    config: Config
    models: ModelServer              # the model server (app.modelserver), the one way to it
    calibration: Calibration
    store: "SessionStore"
    activities: "Activities"          # the one owner of each session's model work
    worker: "Worker"                  # where that work runs
    calls: "ModelCalls"               # how each model call is made, checked and accounted for
    jobs: "JobRunner | None" = None
    indexer: "Indexer | None" = None   # the one writer of retrieval indexes (app.retrieval)
    started_at: datetime = field(default_factory=lambda: datetime.now().replace(microsecond=0))
    streams: "StreamGate | None" = None  # bounds the open event streams (app.events)
    _stops: list[tuple[str, Stop]] = field(default_factory=list, repr=False)
    _closed: bool = field(default=False, repr=False)
    _close_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def sizing(self) -> Sizing:
        """What the chat's budget and the analysis plan may use: the settings, the model server and
        the calibration (made on each use, so it always names the parts in use now)."""
        return Sizing(self.config, self.models, self.calibration)

    def on_close(self, name: str, stop: Stop) -> None:
        """Register ``stop`` to run at ``close()``: stops run in reverse order of registration."""
        self._stops.append((name, stop))

    def close(self, reason: str = "the server was stopped", timeout: float = 8.0) -> list[str]:
        """Stop every part, last registered first; the names of the parts stopped.

        A stop that fails is logged and the others still run. A second call does
        nothing (returns []). ``timeout``: how long, in all, the parts may take to
        let their work end (replies in flight are recorded with what arrived).
        """
        with self._close_lock:
            if self._closed:
                return []
            self._closed = True
        deadline = time.monotonic() + timeout
        stopped = []
        for name, stop in reversed(self._stops):
            try:
                stop(reason, deadline)
                stopped.append(name)
            except Exception:
                log.exception("closing %s failed; closing the rest", name)
        log.info("closed: %s", ", ".join(stopped) or "nothing")
        return stopped

    @classmethod
    def from_config(cls, config: Config) -> "Services":
        """Build every service; creates the data folders, reads nothing else."""
        from .analysis.runner import JobRunner
        from .budget import context_window
        from .chunking import llmhelp
        from .retrieval.indexer import ChunkHelp, Indexer
        from .sessions.store import SessionStore
        from .work.activity import Activities
        from .work.calls import ModelCalls
        from .work.worker import Worker

        for path in (config.data_path, config.sessions_path, config.workspace_path):
            path.mkdir(parents=True, exist_ok=True)
        models = connect(config)
        calibration = Calibration(config.data_path / "calibration.json", config.budget.bytes_per_token)
        # the scenes name the workspace folder, not where it lives on this machine (issue 45: a shared
        # session file told others the owner's home); Harvey's reader reads no path from that line
        store = SessionStore(config.sessions_path, user_name=config.user_name,
                             workspace=config.workspace_path.name or ".")
        activities = Activities()
        svc = cls(config=config, models=models, calibration=calibration, store=store, activities=activities,
                  worker=Worker(activities), calls=ModelCalls(models, calibration))
        svc.on_close("model client", lambda reason, deadline: models.close())
        svc.streams = StreamGate(config.server.stream_limit, config.server.stream_lifetime_s)
        svc.on_close("event streams", lambda reason, deadline: svc.streams.close_all())
        svc.on_close("worker", lambda reason, deadline: _stop_worker(svc.worker, reason, deadline))
        chat = config.model_server.model          # seed 004's help asks the configured chat model
        chunk_help = ChunkHelp(llmhelp.Help.from_config(config.chunking), chat,
                               window=lambda: context_window(config, chat, models.window(chat),
                                                             models.memory_window(chat)),
                               bytes_per_token=lambda: calibration.bytes_per_token(chat, conservative=True))
        svc.indexer = Indexer(config.data_path, models, svc.worker, config.retrieval, calibration, svc.calls,
                              chunk_help)
        svc.on_close("indexer", lambda reason, deadline: svc.indexer.close())
        svc.jobs = JobRunner(svc.sizing, store, activities, svc.worker, svc.calls, svc.indexer)
        svc.on_close("job runner", lambda reason, deadline: svc.jobs.shutdown())
        return svc


def _stop_worker(worker: "Worker", reason: str, deadline: float) -> None:
    """Interrupt the model work in flight (replies are recorded with what arrived) and wait for it."""
    cut = worker.shutdown(reason, timeout=max(0.0, deadline - time.monotonic()))
    if cut:
        log.info("interrupted %d piece(s) of model work in flight; replies recorded with what arrived",
                 len(cut))
