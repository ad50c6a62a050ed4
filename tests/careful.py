"""A scripted model that reads records right, and a helper that runs an analysis of one file (issue 40).

``CarefulModel`` answers as a careful model would, from a case's labels: a list question's map call lists
every record whose quote the chunk holds (its name, the file's words, the value and unit as a careful
model reads them) and every figure the chunk states as the answer; a point question's map call gives the
short answer whose quote the chunk holds; a plain map call gives points; the synthesis is the case's
own.  So whatever the app then shows is the app's doing: its typing, merging, counting and words.
"""

from __future__ import annotations

import json
import re

from app.analysis import mapreduce
from scripted_ollama import Reply
from waiting import wait_for

CHUNK = re.compile(r"\nChunk (\d+) of (\d+)(?: \([^\n]*\))?:\n(.*?)(?:\n---\n[^\n]*)?$", re.S)


def _folded(text: str) -> str:
    return " ".join(text.split()).casefold()


class CarefulModel:
    def __init__(self, records=(), stated=(), answers=(), synthesis: str = "A careful answer."):
        self.records, self.stated, self.answers = list(records), list(stated), list(answers)
        self.synthesis = synthesis
        self.reduces: list[dict] = []

    def __call__(self, body) -> Reply:
        if body["messages"][0]["content"].startswith("You combine"):
            self.reduces.append(body)
            return Reply(text=self.synthesis, piece_size=200)
        m = CHUNK.search(body["messages"][-1]["content"])
        chunk = _folded(m.group(3)) if m else ""
        held = lambda quote: bool(quote) and _folded(quote) in chunk       # noqa: E731
        schema = body.get("format")
        if schema == mapreduce.LIST_SCHEMA:
            items = [{"item": r["item"], "quote": r["quote"], "value": r.get("value"), "unit": r.get("unit")}
                     for r in self.records if held(r["quote"])]
            stated = [{"quote": s["quote"], "value": s["value"], "unit": s.get("unit")}
                      for s in self.stated if held(s["quote"])]
            return Reply(text=json.dumps({"relevant": bool(items or stated), "items": items, "stated": stated,
                                          "confidence": 4}), piece_size=400)
        if schema == mapreduce.POINT_SCHEMA:
            found = next((a for a in self.answers if held(a["quote"])), None)
            if found is None:
                return Reply(text=json.dumps({"relevant": False, "points": [], "confidence": 4, "answer": ""}))
            return Reply(text=json.dumps({"relevant": True, "points": [{"point": found["answer"], "quote": found["quote"]}],
                                          "confidence": 4, "answer": found["answer"]}))
        return Reply(text=json.dumps({"relevant": True, "points": [{"point": "Something relevant.", "quote": ""}],
                                      "confidence": 3}))


def analyse(live, file: str, question: str, scope: str = "all", **form):
    """Ask for a chunked analysis of ``file`` (as the file list's "Analyse in chunks" does), start it with
    ``question``, follow its events to the end; (session, job)."""
    name = live.open_session()
    response = live.post(f"/s/{name}/analysis/direct", data={"file": file})
    assert response.status_code in (200, 303), response.text
    job = wait_for(lambda: live.services.jobs.open_for(name), 10, what="the card")
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": question, "scope": scope, **form})
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=60, total=120))
    if job.state == "confirm":          # the estimate's plan grew once the file was read: read the rest, as agreed
        live.post(f"/s/{name}/analysis/{job.id}/read-on", data={"rest": "yes" if scope == "all" else "no"})
        list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=60, total=120))
    wait_for(lambda: job.state in ("done", "failed") and job.id not in live.services.jobs.jobs, 60,
             what=f"the job to settle (it is {job.state})")
    return name, job
