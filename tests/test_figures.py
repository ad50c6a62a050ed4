"""Issue 40, "figures you can trust": what the app computes from a file is right, typed, only what was
asked, and never overrules a right answer. Through waitress, with a scripted model that reads records
correctly (``careful.CarefulModel``): whatever figure the page states is the app's own doing.

Each of the issue's six rows is a test here (each failed on a4f9b9d); the labelled corpus is
``test_figures_corpus.py``.
"""

from __future__ import annotations

import dataclasses
import html as htmllib
from pathlib import Path

import pytest

from careful import CarefulModel, analyse
from conftest import make_config
from test_analysis import PARAGRAPH


@pytest.fixture
def small_chunks(tmp_path, scripted, make_live):
    """An app whose chunks are small (a few records each), so a file's records spread over chunks."""
    config = make_config(tmp_path, scripted.url)
    config = dataclasses.replace(config, chunking=dataclasses.replace(config.chunking, chunk_size_tokens=300))
    Path(config.workspace).mkdir(parents=True)
    return make_live(config), scripted, Path(config.workspace)


def page_of(live, name: str) -> str:
    return htmllib.unescape(live.get(f"/s/{name}").text)


def computed_box(page: str) -> str:
    return page.split('class="computed"', 1)[1].split("</table>", 1)[0]


def filler(n: int) -> str:
    return " ".join([PARAGRAPH] * n)


DOSES = [("1 March 2021 08:00", "12.5mg"), ("1 March 2021 20:00", "7.5 mg"), ("2 March 2021 08:00", "10mg"),
         ("2 March 2021 20:00", "10 mg"), ("3 March 2021 08:00", "12.5 mg"), ("3 March 2021 20:00", "7.5mg"),
         ("4 March 2021 08:00", "10mg"), ("4 March 2021 20:00", "5 mg"), ("5 March 2021 08:00", "12.5mg"),
         ("5 March 2021 20:00", "7.5 mg"), ("6 March 2021 08:00", "10 mg"), ("6 March 2021 20:00", "5mg")]


def test_doses_glued_to_their_unit_total_right_and_the_models_total_stands(small_chunks):
    live, scripted, workspace = small_chunks
    lines = [f"## Day {i // 2 + 1}\n\n{filler(2)}\n\n- {when}: drug X {dose} given by nurse Okafor (room 12B).\n"
             for i, (when, dose) in enumerate(DOSES)]
    (workspace / "chart.md").write_text("# Medication chart, patient 4471\n\n" + "\n".join(lines))
    records = [{"item": f"Dose {when}", "quote": f"{when}: drug X {dose}", "value": float(dose.rstrip("mg ").strip()),
                "unit": "mg"} for when, dose in DOSES]
    scripted.script = CarefulModel(records, synthesis="A total of 110 mg of drug X was given over 12 doses.")
    name, job = analyse(live, "chart.md", "What is the total dose of drug X given?")
    assert job.state == "done", job.message and job.total > 2
    box = computed_box(page_of(live, name))
    assert "total 110 mg (sum of 12 values in mg)" in box
    assert "74.5" not in box and "The model's answer says" not in box        # it agrees: nothing to say


LEDGER = [("INV-2023-0041", "2023-01-09", "€1,250.00", 1250.0), ("INV-2023-0042", "2023-02-14", "€980.50", 980.5),
          ("REFUND-0042", "2023-02-20", "-€12.50", -12.5), ("INV-2023-0043", "2023-03-01", "€1,100.00", 1100.0),
          ("CREDIT-0043", "2023-03-05", "-€43.75", -43.75), ("INV-2023-0044", "2023-03-28", "€973.00", 973.0)]


def test_refunds_are_taken_off_the_net_total(small_chunks):
    live, scripted, workspace = small_chunks
    rows = [f"{filler(2)}\n\n| {ref} | {date} | {amount} |\n" for ref, date, amount, _ in LEDGER]
    (workspace / "ledger.md").write_text("# Ledger 2023 (account 0012-3344)\n\n" + "\n".join(rows))
    records = [{"item": ref, "quote": f"{ref} | {date} | {amount}", "value": value, "unit": "€"}
               for ref, date, amount, value in LEDGER]
    scripted.script = CarefulModel(records, synthesis="The net total is €4,247.25.")
    name, job = analyse(live, "ledger.md", "What is the net total?")
    assert job.state == "done", job.message
    box = computed_box(page_of(live, name))
    assert "total €4,247.25 (sum of 6 values in EUR)" in box
    assert "4,359.75" not in box and "The model's answer says" not in box


def test_a_figure_the_file_states_is_the_answer_and_the_named_staff_are_what_they_are(small_chunks):
    live, scripted, workspace = small_chunks
    staff = ["Ann Smith", "Joe Brown", "Li Wei"]
    text = (f"# Northwind\n\n{filler(2)}\n\nNorthwind has 250 employees across three sites.\n\n{filler(3)}\n\n"
            + "\n\n".join(f"{filler(2)} {who} joined the team in 2021." for who in staff))
    (workspace / "northwind.md").write_text(text)
    records = [{"item": who, "quote": f"{who} joined the team", "value": None, "unit": None} for who in staff]
    stated = [{"quote": "Northwind has 250 employees", "value": 250, "unit": None}]
    scripted.script = CarefulModel(records, stated, synthesis="Northwind has 250 employees.")
    name, job = analyse(live, "northwind.md", "How many employees does Northwind have?")
    assert job.state == "done", job.message
    box = computed_box(page_of(live, name))
    assert "The file states:</strong> 250 (chunk" in box and "“Northwind has 250 employees”" in box
    assert "3 employees are named in all" in box
    assert "the app counted 3" not in box and "Counted by the app" not in box and "The model's answer says" not in box


def test_one_date_written_two_ways_is_one_answer(small_chunks):
    live, scripted, workspace = small_chunks
    text = (f"# Lease\n\n{filler(2)} The lease was signed on 3 March 2021 by both parties.\n\n{filler(6)}\n\n"
            f"{filler(2)} As agreed, it was signed March 3, 2021 at the notary.\n")
    (workspace / "lease.md").write_text(text)
    answers = [{"answer": "3 March 2021", "quote": "signed on 3 March 2021"},
               {"answer": "March 3, 2021", "quote": "signed March 3, 2021"}]
    model = scripted.script = CarefulModel(answers=answers, synthesis="The lease was signed on 3 March 2021.")
    name, job = analyse(live, "lease.md", "When was the lease signed?")
    assert job.state == "done", job.message
    assert sum(1 for r in job.results.values() if r.answer) == 2            # both chunks answered
    page = page_of(live, name)
    assert "The chunks disagree" not in page
    assert "The chunks disagree" not in model.reduces[-1]["messages"][-1]["content"]


def test_a_codes_digits_are_no_value_and_nobody_asked_for_a_total(small_chunks):
    live, scripted, workspace = small_chunks
    codes = ["ASTER-1", "BEGONIA-7", "CROCUS-3", "DAHLIA-4", "ERICA-9", "FREESIA-2", "GERBERA-8", "HOSTA-5",
             "IRIS-6", "JASMINE-10"]
    text = "# Vaults\n\n" + "\n\n".join(f"{filler(2)} The vault code {c} opens door {i + 1}." for i, c in enumerate(codes))
    (workspace / "vaults.md").write_text(text)
    records = [{"item": c, "quote": f"vault code {c}", "value": None, "unit": None} for c in codes]
    scripted.script = CarefulModel(records, synthesis="There are 10 vault codes.")
    name, job = analyse(live, "vaults.md", "List every vault code")
    assert job.state == "done", job.message
    box = computed_box(page_of(live, name))
    figures = [line for line in box.split("\n") if 'class="figure"' in line]
    assert any("10 vault codes in all" in line for line in figures) and not any("total" in line for line in figures)
    assert "DAHLIA-4" in box


def test_a_count_over_part_of_the_file_says_so(small_chunks):
    live, scripted, workspace = small_chunks
    codes = [f"VAC-{i:02d}" for i in range(1, 11)]
    sections = []
    for s in range(60):
        planted = f" The vault access code {codes[s // 6]} opens the north door." if s % 6 == 0 else ""
        sections.append(f"## Section {s + 1}\n\n{filler(4)}{planted}\n")
    (workspace / "manual.md").write_text("# Manual\n\n" + "\n".join(sections))
    records = [{"item": c, "quote": f"vault access code {c}", "value": None, "unit": None} for c in codes]
    scripted.script = CarefulModel(records, synthesis="There are several vault access codes.")
    name, job = analyse(live, "manual.md", "List every vault access code", scope="first")
    assert job.state == "done", job.message
    assert job.total == 20 and job.file_chunks > 20
    read = job.total
    box = computed_box(page_of(live, name))
    found = box.count('<tr class="record">')
    assert 0 < found < 10                                   # the codes past chunk 20 were not read
    assert f"{found} vault access codes in the {read} of {job.file_chunks} chunks read" in box


def test_reading_the_rest_reads_only_the_unread_chunks_and_replaces_the_partial_count(small_chunks):
    live, scripted, workspace = small_chunks
    codes = [f"VAC-{i:02d}" for i in range(1, 11)]
    sections = [f"## Section {s + 1}\n\n{filler(4)}" + (f" The vault access code {codes[s // 6]} opens the north door."
                                                         if s % 6 == 0 else "") + "\n" for s in range(60)]
    (workspace / "manual.md").write_text("# Manual\n\n" + "\n".join(sections))
    records = [{"item": c, "quote": f"vault access code {c}", "value": None, "unit": None} for c in codes]
    scripted.script = CarefulModel(records, synthesis="There are several vault access codes.")
    name, job = analyse(live, "manual.md", "List every vault access code", scope="first")
    first_maps = len([c for c in scripted.chats() if c.format])
    assert job.state == "done" and job.total == 20
    page = page_of(live, name)
    left = job.file_chunks - 20
    assert f"Read the other {left} chunks ({left + 1} model calls" in page and "the 20 read are not read again)" in page
    before = len(scripted.chats())
    response = live.post(f"/s/{name}/turns/0/read-rest")
    assert response.status_code == 200, response.text
    rest = live.services.jobs.open_for(name) or live.services.jobs.settled_for(name)[-1]
    from waiting import wait_for
    wait_for(lambda: rest.state in ("done", "failed") and rest.id not in live.services.jobs.jobs, 60,
             what="the rest to be read")
    assert rest.state == "done", rest.message
    maps = [c for c in scripted.chats()[before:] if c.format]
    assert len(maps) == left and rest.seeds["taken"] == 20         # no chunk read twice
    assert first_maps == 20
    box = computed_box(page_of(live, name))
    assert f"10 vault access codes in all {job.file_chunks} chunks of the file" in box
    assert "Read the other" not in box
    turn = live.services.store.load(name).turns[0]
    assert turn.reply == "There are several vault access codes." and "chunk-replaces:" in "\n".join(turn.analysis.computed)
