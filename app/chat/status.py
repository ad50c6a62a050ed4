"""What the chat shows about a session's model: which model, its window, the tokens left.

Plain functions of the services and a session (no request, no template), used
by the chat page, the analysis card's direct start and the use cases.
"""

from __future__ import annotations

import logging

from ..budget import Sizing, new_budget
from ..errors import ModelError
from ..retrieval import embedding
from ..routing import match_recorded
from ..sessions import fountain
from ..sessions.store import Session
from . import prepare

log = logging.getLogger(__name__)


def installed(sizing: Sizing) -> tuple[list[str], str]:
    """The installed models and, when the server cannot be asked, why (else "")."""
    try:
        return sizing.models.models(), ""
    except ModelError as exc:
        return [], str(exc)


def can_chat(sizing: Sizing, model: str) -> bool:
    """Is ``model`` a chat model?  What the server says (``ModelFacts.capabilities``), else its
    name: an embedding model is not offered for chat (issue 33: all-minilm in the picker
    answered "does not support chat")."""
    try:
        capabilities = sizing.models.facts(model).capabilities
    except ModelError:
        capabilities = ()
    if capabilities:
        return "completion" in capabilities
    return not embedding.is_embedder(model)


def chat_models(sizing: Sizing, models: list[str]) -> list[str]:
    """The models the picker offers: chat models only (embedding ones serve retrieval)."""
    return [m for m in models if can_chat(sizing, m)]


def match_model(name: str | None, models: list[str]) -> str | None:
    """An installed model for a name read from a session file (maybe only its cue)."""
    return match_recorded(name, models, fountain.model_cue)


def recorded_model(session: Session) -> str | None:
    """The model the session's last turn names, as recorded."""
    return next((turn.model for turn in reversed(session.turns) if turn.model), None)


def session_model(sizing: Sizing, session: Session, models: list[str] | None = None) -> str:
    """The model of the session's last turn, else the configured default.

    A recorded model that is not installed here (a cloud model of the terminal
    Harvey, say) gives way to the configured default, or the first installed model.
    """
    default = sizing.config.model_server.model
    recorded = recorded_model(session)
    if recorded is None:
        return default
    if models is None:
        models, _ = installed(sizing)
    model = match_model(recorded, models)
    if models and model not in models:
        return default if default in models else models[0]
    return model


def status_for(sizing: Sizing, session: Session, model: str) -> dict:
    """The status line: model, window, tokens free for the next message, by component."""
    status = {"model": model, "window": None, "remaining": None, "low": False, "problem": "", "exact": False,
              "demo": False,
              "components": {}, "effective": None, "bytes_per_token": sizing.calibration.bytes_per_token(model),
              "samples": sizing.calibration.samples(model), "limited_by": "", "memory": ""}
    try:
        facts = sizing.models.facts(model)
        fit = sizing.models.memory_fit(model)
    except ModelError as exc:
        status["problem"] = str(exc)
        return status
    status["demo"] = facts.demo        # the bundled stand-in model: the page says so (issue 31)
    counter = sizing.models.counter(model)            # issue 30: counted where the model's tokenizer is known
    try:
        budget = _history_budget(sizing, session, model, facts, fit, status["bytes_per_token"], counter)
    except ModelError as exc:      # the server's own count failed (its /tokenize): the estimate stands in
        log.warning("status line of %s: the server's token count failed (%s); estimated instead", model, exc)
        budget = _history_budget(sizing, session, model, facts, fit, status["bytes_per_token"], None)
    status["exact"] = budget.exact
    status["counter_loading"] = not budget.exact and sizing.models.counter_state(model)[0] == "building"
    status.update(window=budget.window, effective=budget.effective, remaining=budget.remaining,
                  low=budget.low, components=dict(budget.components), limited_by=budget.limited_by,
                  memory="; ".join(fit.lines()) if fit else "",
                  reply_cap=min(sizing.config.chat.reply_tokens,
                                budget.components.get("reply", 0) + max(0, budget.remaining)))
    return status


def _history_budget(sizing: Sizing, session: Session, model: str, facts, fit, bytes_per_token: float, counter):
    """The budget with the system prompt and the session's history fitted: counted with ``counter``
    (the model's own tokens), or estimated from bytes when it is None."""
    template = sizing.calibration.templates.cost(model) if counter is not None else None
    budget = new_budget(sizing.config, model, facts.context_length, bytes_per_token,
                        fit.cap if fit else None, counter=counter, template=template)
    prepare.fit_past(budget, prepare.system_prompt(sizing.config, sizing.config.workspace_path), session.turns)
    return budget
