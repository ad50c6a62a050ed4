"""Chunked analysis (placeholder while the chunker lands)."""

from __future__ import annotations

from flask import Blueprint, abort

bp = Blueprint("analysis", __name__)


class JobRunner:
    def __init__(self, svc):
        self.svc = svc

    def decorate(self, session, views):
        return None

    def overflow(self, session, index, turn, prepared):
        raise NotImplementedError


@bp.post("/s/<name>/analysis/direct")
def direct(name):
    abort(501)
