"""Issue 40: every figure the app states is right, on a labelled corpus of realistic record files and
questions written for this (``data/records/cases.yaml``: doses, ledgers with refunds and decimal commas,
invoices with years and ids, staff lists with near-identical names, stated totals and subtotals, facts
written two ways, codes, measures with mixed units, records without a readable value, plain lists and
questions that ask for no figure).

Each case runs through waitress: the file is analysed in small chunks with a scripted model that reads
its records correctly (``careful.CarefulModel``), so every figure on the answer is the app's doing.  What
the app states is compared with the labels: what the question asks it to compute, the count, the totals
per unit (none where a value is unreadable), the file's own stated figure, the model's figure, and for a
point question whether the chunks "disagree".  The guess of what a question asks (``answers.asked``) is
measured on its own too, with its precision and recall per kind printed and pinned.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path

import pytest
import yaml

from careful import CarefulModel, analyse
from conftest import LiveApp, make_config

DATA = Path(__file__).parent / "data" / "records"
# "tuned": the cases the rules were written against (51 of 84 right as they came); "held-out": 56 more,
# written by someone else after the rules were done, measured once as they came (30 of 56 right; what is
# asked: 7 of 56 read wrong), then their general misses fixed.
CORPORA = {name: yaml.safe_load((DATA / file).read_text("utf-8"))["cases"]
           for name, file in (("tuned", "cases.yaml"), ("held-out", "held_out.yaml"))}
CASES = [case for cases in CORPORA.values() for case in cases]
OPS = ("count", "total", "average", "list", "none")

# As measured (a change that lowers one fails); known misses are named, with why (style-examples §18, §19).
PINNED = {"cases_right": 140, "ask_precision": 1.0, "ask_recall": 1.0}
KNOWN_MISSES: dict[str, str] = {}


def test_the_corpus_is_what_the_issue_asks_for():
    assert len(CASES) >= 60 and len({c["id"] for c in CASES}) == len(CASES)
    kinds = Counter(c["kind"] for c in CASES)
    assert {"dose", "ledger", "invoice", "staff", "stated", "subtotal", "twoways"} <= set(kinds)
    for case in CASES:
        for r in case.get("records") or []:
            assert r["quote"] in case["file"], (case["id"], r["quote"])


def test_what_a_question_asks_is_read_right(capsys):
    from app.analysis import answers

    right, said, want = Counter(), Counter(), Counter()
    wrong = []
    for case in CASES:
        items = [answers.Item(r["item"], r["quote"], r.get("value"), unit=answers.quantities.normal_unit(r.get("unit")))
                 for r in case.get("records") or []]
        got, truth = answers.settled(answers.asked(case["question"]), items).op, case["truth"]["ask"]
        said[got] += 1
        want[truth] += 1
        if got == truth:
            right[got] += 1
        else:
            wrong.append(f"{case['id']}: {case['question']!r} read as {got}, is {truth}")
    precision = {op: right[op] / said[op] if said[op] else 1.0 for op in OPS}
    recall = {op: right[op] / want[op] if want[op] else 1.0 for op in OPS}
    with capsys.disabled():
        print("\nissue 40, what is asked: " + "; ".join(
            f"{op} precision {precision[op]:.2f} recall {recall[op]:.2f}" for op in OPS))
        for line in wrong:
            print("  " + line)
    assert min(precision.values()) >= PINNED["ask_precision"], wrong
    assert min(recall.values()) >= PINNED["ask_recall"], wrong


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from scripted_ollama import ScriptedOllama

    root = tmp_path_factory.mktemp("records")
    with ScriptedOllama() as scripted:
        config = make_config(root, scripted.url)
        config = dataclasses.replace(config, chunking=dataclasses.replace(config.chunking, chunk_size_tokens=300))
        workspace = Path(config.workspace)
        workspace.mkdir(parents=True)
        for case in CASES:
            (workspace / f"{case['id']}.md").write_text(case["file"], "utf-8")
        live = LiveApp(config)
        yield live, scripted
        live.close()


def judge(case: dict, job) -> list[str]:
    """What the app stated that the labels say is wrong (empty: every figure right).  A point question
    whose answers all lie in one chunk cannot show versions (the model reads them together, and gives
    one): its versions are judged only where the chunks gave two answers or more."""
    truth, figures = case["truth"], job.figures or {}
    problems = []
    ask = truth["ask"]
    got = figures.get("op", "none") if job.list_of else "none"
    if got != ask:
        problems.append(f"computed {got}, the question asks {ask}")
    if ask in ("count", "list", "total", "average") and figures and figures.get("count") != truth.get("count"):
        problems.append(f"{figures.get('count')} items, not {truth.get('count')}")
    totals = figures.get("totals") or {}
    if ask in ("total", "average"):
        want = {} if truth.get("no_figure") else {k: float(v) for k, v in (truth.get("totals") or {}).items()}
        if set(totals) != set(want) or any(not math.isclose(totals[u], want[u], abs_tol=0.0051) for u in want):
            problems.append(f"totals {totals}, not {want}")
    elif totals:
        problems.append(f"totals {totals} nobody asked for")
    states = [s["value"] for s in figures.get("file_states") or []]
    if truth.get("stated") is not None and (not states or not math.isclose(states[0], truth["stated"])):
        problems.append(f"the file's figure {states}, not {truth['stated']}")
    # The model's figure matters where the answer sets it beside the app's (one unit's total, a count, the
    # file's figure): read wrong there, it would say a disagreement that is not, or miss one that is.
    says, want_says = figures.get("model_says"), truth.get("model_says")
    shown_beside = bool(figures.get("file_states")) or ask == "count" or len(totals) == 1
    if shown_beside and ((says is None) != (want_says is None) or (
            says is not None and want_says is not None and not math.isclose(abs(says), abs(want_says), abs_tol=0.005))):
        problems.append(f"the model says {says}, not {want_says}")
    given = {r.answer for r in job.results.values() if r.answer}
    if truth.get("versions") is not None and len(given) > 1:
        shown = len(job.versions) if len(job.versions) > 1 else 1
        if shown != truth["versions"]:
            problems.append(f"{shown} versions, not {truth['versions']}")
    return problems


@pytest.mark.slow
def test_every_figure_the_app_states_is_right(app, capsys):
    live, scripted = app
    wrong: dict[str, list[str]] = {}
    for case in CASES:
        scripted.script = CarefulModel(case.get("records") or [], case.get("stated") or [], case.get("answers") or [],
                                       case["synthesis"])
        _, job = analyse(live, f"{case['id']}.md", case["question"])
        problems = [f"the job ended {job.state}: {job.message}"] if job.state != "done" else judge(case, job)
        if problems:
            wrong[case["id"]] = problems
    right = len(CASES) - len(wrong)
    with capsys.disabled():
        for name, cases in CORPORA.items():
            good = sum(1 for c in cases if c["id"] not in wrong)
            print(f"\nissue 40, {name} corpus: {good} of {len(cases)} cases with every figure right", end="")
        print()
        for case_id, problems in wrong.items():
            print(f"  {case_id}{' (known)' if case_id in KNOWN_MISSES else ''}: {'; '.join(problems)}")
    assert right >= PINNED["cases_right"], wrong
    assert set(wrong) <= set(KNOWN_MISSES), wrong
