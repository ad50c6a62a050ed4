"""The long-lived parts of the app, made once from the config.

One ``Services`` object per app holds the model server (``models``), the session store, the
calibration, the reply registry and the analysis job runner. Views reach it with
``services()``; tests build an app around their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flask import current_app

from .budget import Calibration
from .config import Config
from .modelserver import ModelServer, connect


@dataclass
class Services:
    config: Config
    models: ModelServer
    calibration: Calibration
    store: "SessionStore"
    replies: "Replies"
    jobs: "JobRunner | None" = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Config) -> "Services":
        """Build every service; creates the data folders, reads nothing else."""
        from .analysis.runner import JobRunner
        from .chat.replies import Replies
        from .sessions.store import SessionStore

        for path in (config.data_path, config.sessions_path, config.workspace_path):
            path.mkdir(parents=True, exist_ok=True)
        models = connect(config)
        calibration = Calibration(config.data_path / "calibration.json", config.budget.bytes_per_token)
        store = SessionStore(config.sessions_path, user_name=config.user_name,
                             workspace=str(config.workspace_path))
        svc = cls(config=config, models=models, calibration=calibration, store=store, replies=Replies())
        svc.jobs = JobRunner(svc)
        return svc


def services() -> Services:
    """The current app's services (inside a request or app context)."""
    return current_app.extensions["harvey"]
