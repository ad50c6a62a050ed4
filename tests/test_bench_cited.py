"""The cited-answers benchmark's own parts (bench/bench_cited_answers.py): its documents put the
facts where they say, and its scoring gives known numbers for known answers. No server, no model."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_cited_answers.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_cited_answers", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def doc(bench):
    return bench.make_document(1, 8_000)


def test_each_planted_value_is_where_the_document_says(bench, doc):
    text = doc.text
    for p in doc.planted:
        assert text[p.start:p.end] == p.value
        assert bench.find_value(text, p.value) == [p.start]          # once, and only there
        line = text[text.rfind("\n", 0, p.start) + 1:text.find("\n", p.end)]
        if p.where == "table":
            assert line.startswith(f"| {p.key} |")
        elif p.where == "list":
            assert line.startswith("- ")
        else:
            assert not line.startswith(("#", "- ", "|"))             # inside a prose paragraph
    where = {p.where: p for p in doc.planted if p.where in ("start", "end")}
    first_paragraph = text.split("\n\n")[1]
    assert where["start"].value in first_paragraph
    assert where["end"].value in text.rstrip("\n").split("\n\n")[-1]
    middle = [p for p in doc.planted if p.where == "prose" and not p.contradiction]
    assert all(0.35 < p.start / len(text) < 0.65 for p in middle)


def test_a_contradiction_is_two_values_of_one_fact_far_apart(bench, doc):
    (a, b), = doc.contradictions()
    assert a.fact == b.fact and a.value != b.value and a.contradiction and b.contradiction
    assert (b.start - a.start) / len(doc.text) > 0.3


def test_the_full_layout_has_more_positions_and_two_contradictions(bench):
    full = bench.make_document(2, 12_000, full=True)
    assert len(full.planted) == 14 and len(full.contradictions()) == 2
    assert {p.where for p in full.planted} == {"start", "end", "prose", "table", "list"}
    assert sum(p.where == "table" for p in full.planted) == 2


def test_documents_are_the_same_every_run_and_differ_between_numbers(bench):
    assert bench.make_document(1, 8_000).text == bench.make_document(1, 8_000).text
    assert bench.make_document(1, 8_000).text != bench.make_document(2, 8_000).text


def test_find_value_ignores_case_and_punctuation_but_not_word_edges(bench):
    assert bench.find_value("code: 4471 k, then", "4471-K") == [6]
    assert bench.find_value("code 4471K", "4471-K") == [5]
    assert bench.find_value("code 14471-K or 4471-KB", "4471-K") == []
    assert bench.find_value("The budget is 84300 euros", "84,300") == [14]


def test_claims_cover_the_text_before_each_citation_group(bench):
    got = bench.claims("Chunk 2 says X [2], chunk 6 says Y [2, 6]. Uncited Z\n- W [1]")
    assert [(c.text, c.cites) for c in got] == [
        ("Chunk 2 says X ", (2,)), (", chunk 6 says Y ", (2, 6)), (". Uncited Z", ()), ("- W ", (1,))]


def _known_answer(doc):
    """An answer naming four planted values: one cited right, one cited wrong, one with a group
    where one chunk is right, one uncited; both sides of the contradiction named."""
    by_where = {}
    for p in doc.planted:
        by_where.setdefault(p.where, []).append(p)
    start, end, table = by_where["start"][0], by_where["end"][0], by_where["table"][0]
    (a, b), = doc.contradictions()
    return start, end, table, a, b, (
        f"- The first fact is {start.value} [1].\n"
        f"- The table says {table.value} [1].\n"
        f"- The last one is {end.value} [1, 9].\n"
        f"- One part says {a.value} and another says {b.value}, with no citation.\n")


def test_score_of_a_known_answer(bench, doc):
    start, end, table, a, b, answer = _known_answer(doc)
    passages = {1: (0, start.end + 10), 9: (end.start - 50, len(doc.text))}   # chunk 1: only the start
    s = bench.score(answer, doc, passages)
    assert (s.planted, s.found) == (7, 5) and s.recall == pytest.approx(5 / 7)
    assert (s.cited_claims, s.correct_claims, s.uncited_mentions) == (3, 2, 2)
    assert s.accuracy == pytest.approx(2 / 3)
    assert (s.contradictions, s.contradictions_named) == (1, 1)


def test_an_answer_without_citations_has_no_accuracy(bench, doc):
    start, *_ = doc.planted
    s = bench.score(f"The code is {start.value}.", doc, {1: (0, len(doc.text))})
    assert s.found == 1 and s.cited_claims == 0 and s.accuracy is None
    assert s.contradictions_named == 0


def test_a_citation_to_a_chunk_with_no_known_passage_is_wrong(bench, doc):
    start = doc.planted[0]
    s = bench.score(f"It is {start.value} [4].", doc, {1: (0, len(doc.text))})
    assert (s.cited_claims, s.correct_claims, s.accuracy) == (1, 0, 0.0)


def test_usage_reads_the_apps_notice(bench):
    spmd = ("[[notice: Chunk analysis: 9 model calls, 12,345 prompt tokens, 2,001 generated tokens, "
            "250 s of model time.]]")
    assert bench.usage(spmd) == {"calls": 9, "prompt": 12345, "generated": 2001, "model_s": 250.0}
    stats = "ollama (tiny:1b) · 312 reply + 1840 ctx · 18.437s · 16.9 tok/s"
    assert bench.usage(stats) == {"calls": None, "prompt": 1840, "generated": 312, "model_s": None}
    assert bench.usage("no notice")["calls"] is None


def test_written_rows_go_under_the_sections_table(bench, tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text(f"# R\n\n{bench.SECTION}\n\nIntro.\n\n| a |\n|---|\n| before |\n\nAfter: pending.\n\n## Next\n\nx\n")
    bench.write_rows(["| after 1 |", "| after 2 |"], "after: `cmd`.", path)
    assert path.read_text() == (f"# R\n\n{bench.SECTION}\n\nIntro.\n\n| a |\n|---|\n| before |\n| after 1 |\n"
                                "| after 2 |\n\nAfter: pending.\n\nafter: `cmd`.\n\n## Next\n\nx\n")


def test_the_oracle_finds_each_value_and_cites_the_chunk_label_it_came_from(bench, doc):
    a, b = doc.planted[0], doc.planted[1]
    assert bench.oracle_map(f"text {a.value} more", [doc]) == f"{a.key}: {a.value}"
    assert bench.oracle_map("nothing here", [doc]) == "Nothing relevant in this chunk."
    reduce = (f"Instruction: Find these facts: x.\n---\n[Chunk 2 of 7 (1. Opening)]\n{a.key}: {a.value}\n\n"
              f"[Chunk 5 of 7]\n{a.key}: {a.value}\n{b.key}: {b.value}")
    assert bench.oracle_reduce(reduce) == "\n".join(sorted([f"- {a.key}: {a.value} [2, 5]",
                                                            f"- {b.key}: {b.value} [5]"]))


def test_report_rows_say_what_was_not_counted(bench, doc):
    start = doc.planted[0]
    result = {"doc": doc, "answer": start.value, "score": bench.score(start.value, doc, {}), "in_partials": 2,
              "usage": bench.usage("no notice"), "chunks": 7, "relevant": None, "wall_s": 3.0}
    line = bench.row("before", "abc", "m", result)
    assert "| 2/7 (29 %) | 1/7 (14 %) | 0 | n/a (no citations) | 0/1 | ? | ? | ? | ? | 3 |" in line
    total = bench.total_row("before", "abc", "m", [result, result])
    assert "| 4/14 (29 %) | 2/14 (14 %) | 0 | n/a (no citations) | 0/2 | ? | ? | ? | ? | 6 |" in total
