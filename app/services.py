"""The long-lived parts of the app, made once from the config.

One ``Services`` object per app holds the model server, the session store, the
calibration, the owner of each session's model work (``activities``, run by the
``worker``, each call made through ``calls``) and the analysis job runner. Views reach it with
``app.web.context.services()``; tests build an app around their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from .budget import Calibration
from .config import Config
from .modelserver import ModelServer, connect


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
    extra: dict = field(default_factory=dict)

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
        store = SessionStore(config.sessions_path, user_name=config.user_name,
                             workspace=str(config.workspace_path))
        activities = Activities()
        svc = cls(config=config, models=models, calibration=calibration, store=store, activities=activities,
                  worker=Worker(activities), calls=ModelCalls(models, calibration))
        svc.jobs = JobRunner(svc)
        chat = config.ollama.model          # seed 004's help asks the configured chat model
        chunk_help = ChunkHelp(llmhelp.Help.from_config(config.chunking), chat,
                               window=lambda: context_window(config, chat, models.window(chat),
                                                             models.memory_window(chat)),
                               bytes_per_token=lambda: calibration.bytes_per_token(chat, conservative=True))
        svc.indexer = Indexer(config.data_path, models, svc.worker, config.retrieval, calibration, svc.calls,
                              chunk_help)
        return svc

