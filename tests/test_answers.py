"""Issue 32: answers that hold up where small models go wrong, through waitress and the scripted Ollama.

A list question's items are listed and counted by the app from every chunk's structured answer (the
synthesis names only a few and miscounts, as a small model does); a file of records with numbers gets
the exact count and total; chunks that disagree on a point question show both versions; every answer
states how much of the file it rests on.
"""

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from app import chunking
from app.analysis import answers, mapreduce
from app.analysis.job import ChunkResult
from app.sessions import fountain, notes
from scripted_ollama import Reply
from test_analysis import PARAGRAPH, big_file_config, session_text
from test_cited_answers import recorded_turn, run_analysis

WHEN = datetime(2026, 3, 1, 9, 0)
CHUNK = re.compile(r"\nChunk (\d+) of (\d+)(?: \([^\n]*\))?:\n(.*?)(?:\n---\n[^\n]*)?$", re.S)


def codes_markdown(codes: dict[tuple[int, int], str], sections=12, paragraphs=10) -> str:
    parts = []
    for s in range(1, sections + 1):
        parts.append(f"## Section {s}\n")
        for p in range(1, paragraphs + 1):
            planted = codes.get((s, p), "")
            parts.append(f"Paragraph {s}.{p}. " + PARAGRAPH * 2 + planted + " " + PARAGRAPH + "\n")
    return "\n".join(parts)


def planted_codes(n: int) -> dict[tuple[int, int], str]:
    """``n`` vault-code sentences spread over the sections (VC-001 …)."""
    spots = [(s, p) for p in range(1, 11) for s in range(1, 13)]
    spots.sort(key=lambda sp: (sp[0] * 7 + sp[1] * 3) % 11)        # spread, in no simple order
    return {spot: f"Vault code VC-{i:03d} opens locker {i}." for i, spot in enumerate(sorted(spots[:n]), 1)}


def is_reduce(body) -> bool:
    return body["messages"][0]["content"].startswith("You combine")


def chunk_text(body) -> tuple[int, str]:
    m = CHUNK.search(body["messages"][-1]["content"])
    return int(m.group(1)), m.group(3)


class ListScript:
    """Map: every sentence matching ``pattern`` as an item (quote = the sentence, value = its number
    when ``valued``). Reduce: names only the last ``names`` items it sees and counts those, as a small
    model does with a long list."""

    def __init__(self, pattern: str, names: int = 4, valued: bool = False):
        self.pattern, self.names, self.valued = re.compile(pattern), names, valued
        self.reduce_prompts: list[str] = []

    def __call__(self, body) -> Reply:
        if is_reduce(body):
            prompt = body["messages"][-1]["content"]
            self.reduce_prompts.append(prompt)
            seen = re.findall(r"VC-\d{3}|R-\d{3}", prompt.split("\n---\n", 1)[1])
            last = list(dict.fromkeys(seen))[-self.names:]
            return Reply(text=f"There are {len(last)} vault codes: {', '.join(last)}.")
        _, text = chunk_text(body)
        items = []
        for m in self.pattern.finditer(text):
            sentence = m.group(0)
            value = float(m.group("value")) if self.valued else None
            items.append({"item": m.group("name"), "quote": sentence, "value": value})
        return Reply(text=json.dumps({"relevant": bool(items), "items": items, "confidence": 4}), piece_size=400)


@pytest.fixture
def codes_live(tmp_path, scripted, make_live):
    config = big_file_config(tmp_path, scripted)
    path = Path(config.workspace) / "facts.md"
    path.write_text(codes_markdown(planted_codes(37)))
    return make_live(config), scripted, path


def page_items(html: str, index: int) -> list[tuple[str, str]]:
    """(item text, passage url) of every linked record the chat page's table shows under turn ``index``."""
    block = html.split(f'id="computed-{index}"', 1)[1].split("</table>", 1)[0]
    return [(text, url) for url, text in re.findall(r'<tr class="record"><td>\d+</td>\s*<td><a class="cite" '
                                                    r'href="([^"]+)"[^>]*>([^<]+)</a>', block)]


def test_a_37_item_list_shows_all_37_and_the_count_though_the_synthesis_names_4(codes_live):
    live, scripted, path = codes_live
    script = scripted.script = ListScript(r"Vault code (?P<name>VC-\d{3}) opens locker (?P<value>\d+)\.")
    name, job, _ = run_analysis(live, instruction="List every vault code in the file.", scope="all")
    assert job.state == "done", job.message
    maps = [c for c in scripted.chats() if not is_reduce(c.body)]
    assert maps and all(c.format == mapreduce.LIST_SCHEMA for c in maps)
    assert "List every vault code in this chunk" in maps[0].body["messages"][-1]["content"]
    assert script.reduce_prompts and "Do not list them" in script.reduce_prompts[-1]
    turn = recorded_turn(live, name)
    assert turn.reply.startswith("There are 4 vault codes")             # the model's own words are kept
    computed = notes.read_computed(turn.analysis.computed)
    assert [it["text"] for it in computed.items] == [f"VC-{i:03d}" for i in range(1, 38)]
    assert computed.count["count"] == 37 and computed.count["model_says"] == 4 and computed.count["op"] == "count"
    html = live.get(f"/s/{name}").text
    shown = page_items(html, 0)
    assert [t for t, _ in shown] == [f"VC-{i:03d}" for i in range(1, 38)]
    assert f"37 vault codes in all {job.total} chunks of the file" in html
    assert f"The model&#39;s answer says:</strong> 4; the app counted 37 in all {job.total} chunks" in html
    text = chunking.read_document(path).text
    for code, url in shown:                                              # each opens its passage, which holds it
        passage = live.get(url.replace("&amp;", "&"), headers={"HX-Request": "true"}).text
        assert code in passage
        chunk = int(url.rsplit("/", 1)[1])
        p = turn.analysis.passages[chunk]
        assert code in text[p.start:p.end]
    assert "Coverage: read " in html


def test_102_records_with_numbers_give_the_exact_count_and_total(tmp_path, scripted, make_live):
    config = big_file_config(tmp_path, scripted)
    records = {}
    spots = [(s, p) for s in range(1, 13) for p in range(1, 11)][:102]
    for i, spot in enumerate(spots, 1):
        records[spot] = f"Record R-{i:03d} has an amount of {i * 1.25 + 1000:.2f} euros."
    path = Path(config.workspace) / "ledger.md"
    path.write_text(codes_markdown(records))
    live = make_live(config)
    scripted.script = ListScript(r"Record (?P<name>R-\d{3}) has an amount of (?P<value>[\d.]+) euros\.", valued=True)
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": "What is the total of the records in ledger.md?"})
    job = live.services.jobs.open_for(name)
    assert job.file == "ledger.md"
    card = live.get(f"/s/{name}").text
    assert 'name="list_of"' in card and 'value="records"' in card          # recognised, shown to edit
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": "What is the total of the records?",
                                                          "list_of": "records", "scope": "all"})
    list(live.sse(f"/s/{name}/analysis/{job.id}/events", timeout=60, total=120))
    from waiting import wait_for
    wait_for(lambda: job.id not in live.services.jobs.jobs, 60, what="the job to settle")
    assert job.state == "done", job.message
    assert job.total > 3                                               # several chunks, with overlap between them
    computed = notes.read_computed(recorded_turn(live, name).analysis.computed)
    expected = sum(i * 1.25 + 1000 for i in range(1, 103))
    assert computed.count["count"] == 102 and abs(computed.count["totals"]["EUR"] - expected) < 1e-6
    html = live.get(f"/s/{name}").text
    assert f"total {answers.amount_text(expected, 'EUR')} (sum of 102 values in EUR)" in html


def test_chunks_that_disagree_show_both_versions_with_their_passages(tmp_path, scripted, make_live):
    config = big_file_config(tmp_path, scripted)
    planted = {(2, 3): "The survey was signed on 3 March by Dr. Okafor.",
               (10, 6): "A later note says the survey was signed on 5 May."}
    path = Path(config.workspace) / "facts.md"
    path.write_text(codes_markdown(planted))
    live = make_live(config)
    reduce_prompts = []

    def script(body):
        if is_reduce(body):
            reduce_prompts.append(body["messages"][-1]["content"])
            return Reply(text="The survey was signed on 3 March [2].")
        _, text = chunk_text(body)
        for sentence, answer, confidence in ((planted[(2, 3)], "3 March", 4), (planted[(10, 6)], "5 May", 2)):
            if sentence in text:
                return Reply(text=json.dumps({"relevant": True, "points": [{"point": f"signed {answer}",
                             "quote": sentence}], "confidence": confidence, "answer": answer}))
        return Reply(text=json.dumps({"relevant": False, "points": [], "confidence": 5, "answer": ""}))

    scripted.script = script
    name, job, _ = run_analysis(live, instruction="When was the survey signed?", scope="all")
    assert job.state == "done", job.message
    maps = [c for c in scripted.chats() if not is_reduce(c.body)]
    assert all(c.format == mapreduce.POINT_SCHEMA for c in maps)
    assert "The chunks disagree" in reduce_prompts[-1] and "Weigh them by their confidence" in reduce_prompts[-1]
    assert "\"3 March\"" in reduce_prompts[-1] and "\"5 May\"" in reduce_prompts[-1]
    turn = recorded_turn(live, name)
    computed = notes.read_computed(turn.analysis.computed)
    assert [v["answer"] for v in computed.conflicts] == ["3 March", "5 May"]     # most confident first
    html = live.get(f"/s/{name}").text
    block = html.split('class="conflicts"', 1)[1].split("</div>", 1)[0]
    links = re.findall(r'href="([^"]+)"', block)
    assert len(links) == 2 and "confidence 4 of 5" in block and "confidence 2 of 5" in block
    for url, sentence in zip(links, (planted[(2, 3)], planted[(10, 6)])):
        assert sentence in re.sub(r"<[^>]+>", "", live.get(url, headers={"HX-Request": "true"}).text)


def test_a_full_read_states_its_coverage_in_the_answer_and_the_scene(codes_live):
    live, scripted, path = codes_live
    scripted.script = ListScript(r"Vault code (?P<name>VC-\d{3}) opens locker (?P<value>\d+)\.")
    name, job, _ = run_analysis(live, instruction="Summarize the methodology.", list_of="", scope="all")
    assert job.state == "done", job.message
    lines = chunking.read_document(path).text.count("\n")
    irrelevant = sum(1 for r in job.results.values() if not r.relevant)
    want = f"read {job.total} of {job.total} chunks (lines 1–{lines:,})"
    text = session_text(live, name)
    assert f"[[chunk-coverage: {want}" in text and f"notice: Coverage: {want}" in text
    if irrelevant:
        assert f"{irrelevant} had nothing relevant" in text
    assert "chunk-item:" not in text                                # the list was cleared on the card
    assert f"Coverage: {want}" in live.get(f"/s/{name}").text


# -- the pure parts ----------------------------------------------------------------------------------

def test_list_target_is_recognised_and_other_instructions_are_not():
    assert answers.list_target("List every vault code in the file.") == "vault code"
    assert answers.list_target("How many invoices are there?") == "invoices"
    assert answers.list_target("What is the total of the amounts?") == "amounts"
    assert answers.list_target("Summarize the methodology.") == ""
    assert answers.list_target("Find the facts about the rig.") == ""
    assert answers.point_question("When was the survey signed?")
    assert not answers.point_question("Summarize each section.")


def test_merge_keeps_one_item_per_place_and_per_near_same_words():
    text = "Alpha code A1 here. Beta code B2 here. Alpha code A1 here again."
    a = ChunkResult(0, "ok", start=0, end=40, points=[{"point": "A1", "quote": "Alpha code A1 here"},
                                                      {"point": "B2", "quote": "Beta code B2 here"}])
    b = ChunkResult(1, "ok", start=20, end=len(text), points=[{"point": "B2", "quote": "beta  code b2 HERE"},
                                                              {"point": "A1", "quote": "Alpha code A1 here again"},
                                                              {"point": "made up", "quote": ""}])
    items, cut = answers.merge_items([a, b], text)
    assert [i.text for i in items] == ["A1", "B2", "made up"] and cut == 0
    assert items[1].chunks == [1, 2] and items[0].chunks == [1, 2]
    assert not answers.near("Record R-017 amount 5", "Record R-018 amount 5")
    row = "Codes A1 and B2 open the doors."                # two items quoting one sentence stay two
    both = ChunkResult(0, "ok", start=0, end=len(row), points=[{"point": "A1", "quote": row},
                                                              {"point": "B2", "quote": row},
                                                              {"point": "code B2", "quote": "B2 open the doors"}])
    items, _ = answers.merge_items([both], row)
    assert [i.text for i in items] == ["A1", "B2"]


def test_the_models_figure_and_the_values_come_from_the_words():
    count = {"op": "count", "target": "vault codes"}
    assert answers.model_figure("There are 4 vault codes: a, b.", count) == 4
    assert answers.model_figure("I found twelve codes.", count) == 12
    assert answers.model_figure("Section 3 is long.", count) is None
    assert answers.model_figure("In 2023 the bank added 3 vault codes [2].", count) == 3     # not the year
    text = "Record R-001 has an amount of 1,002.50 euros."
    r = ChunkResult(0, "ok", start=0, end=len(text), points=[{"point": "R-001", "quote": text, "value": 999}])
    (item,), _ = answers.merge_items([r], text)
    assert item.value is None                       # 999 is not in the quote
    r.points[0]["value"] = 1002.5
    (item,), _ = answers.merge_items([r], text)
    assert (item.value, item.unit) == (1002.5, "EUR")


def test_computed_notes_survive_the_session_file():
    analysis = fountain.ChunkAnalysis(file="f.md", chunks=2, model="m", boundary="paragraph", chunk_size=100,
                                      instruction="List every code.", when=WHEN, results=["ok", "ok"], synthesis="ok",
                                      computed=[notes.item(1, 1, {"text": "x]]", "quote": "q [[y", "value": 2.0,
                                                                  "chunks": [1]}),
                                                notes.count("codes", 1, 2.0, 1, 4, 0), notes.coverage("read 2 of 2")])
    turn = fountain.Turn(when=WHEN, user_text="List every code.", model="m", reply="Some codes.", analysis=analysis)
    play = fountain.Screenplay(fountain.new_title_page("u", "m", "ollama", WHEN))
    play.scenes += fountain.turn_scenes(turn, "u", "/w")
    (back,) = fountain.turns(fountain.loads(fountain.dumps(play)))
    read = notes.read_computed(back.analysis.computed)
    assert read.items[0]["text"] == "x]]" and read.items[0]["quote"] == "q [[y"
    assert read.count["stated"] == 4 and read.coverage == "read 2 of 2"


# -- Self-Route: a passages answer that cannot answer offers the whole-file read -----------------------

SPARE = "Mrs. Alder holds the only spare for the lamp room."


def test_a_passages_answer_that_cannot_answer_offers_the_costed_whole_file_read_which_lands_the_fact(
        tmp_path, scripted, make_live):
    from conftest import make_config
    from haystacks import haystack
    from waiting import wait_for
    config = make_config(tmp_path, scripted.url)
    Path(config.workspace).mkdir(parents=True)
    path = Path(config.workspace) / "harbour.md"
    path.write_text(haystack(40, {31: SPARE}))
    live = make_live(config)
    asked = []

    def script(body):
        system = body["messages"][0]["content"]
        prompt = body["messages"][-1]["content"]
        if system.startswith("You answer questions"):              # the passages answer
            asked.append(body)
            return Reply(text=json.dumps({"answer": "The passages do not say who keeps the key.",
                                          "in_passages": False}))
        if is_reduce(body):
            n = re.search(r"- \[(\d+)\] Mrs\. Alder", prompt).group(1)
            return Reply(text=f"Mrs. Alder keeps it [{n}].")
        _, text = chunk_text(body)
        if SPARE in text:
            return Reply(text=json.dumps({"relevant": True, "points": [{"point": "Mrs. Alder holds the spare",
                                          "quote": SPARE}], "confidence": 4, "answer": "Mrs. Alder"}))
        return Reply(text=json.dumps({"relevant": False, "points": [], "confidence": 5, "answer": ""}))

    scripted.script = script
    question = "Who keeps the lighthouse key in harbour.md?"  # (a point question: no list)
    name = live.open_session()
    live.post(f"/s/{name}/messages", data={"message": question})
    job = live.services.jobs.open_for(name)
    live.post(f"/s/{name}/analysis/{job.id}/start", data={"instruction": question, "way": "retrieve"})
    wait_for(lambda: job.id not in live.services.jobs.jobs, 120, what=f"the passages answer ({job.state})")
    assert job.state == "done", job.message
    assert asked and asked[0]["format"] == __import__("app.analysis.retrieve", fromlist=["x"]).ROUTE_SCHEMA
    page = live.get(f"/s/{name}").text
    assert "The passages do not say who keeps the key." in page
    assert "Counted by the app" not in page and "chunk-item:" not in session_text(live, name)   # no list computed
    assert re.search(r"Coverage: \d+ passages, about (?:\d+ %|under 1 %) of the file \(sections? Section", page)
    offer = re.search(r'Read the whole file \((\d+) chunks, (\d+) model calls, ([^)]*)\)', page)
    assert offer and int(offer.group(1)) == job.chunks and int(offer.group(2)) == job.estimated_calls
    url = re.search(r'hx-post="([^"]*/read-whole)"', page).group(1)
    before = len(scripted.chats())
    live.post(url, headers={"HX-Request": "true"})
    wait_for(lambda: not live.services.jobs.for_session(name), 120, what="the whole-file read")
    assert len(scripted.chats()) - before > 3                              # every chunk was read
    turn = recorded_turn(live, name)
    assert turn.reply.startswith("Mrs. Alder keeps it [")                  # the read's answer is the reply
    computed = notes.read_computed(turn.analysis.computed)
    assert computed.replaced == "The passages do not say who keeps the key."     # the passages answer kept
    assert turn.analysis.rag is None and turn.analysis.results
    n = int(re.search(r"\[(\d+)\]", turn.reply).group(1))
    opened = re.sub(r"<[^>]+>", "", live.get(f"/s/{name}/turns/0/passages/{n}", headers={"HX-Request": "true"}).text)
    assert SPARE in opened
    page = live.get(f"/s/{name}").text
    assert "Coverage: read " in page and "Read the whole file (" not in page
    assert "passages, about" not in page                                   # the replaced answer's notices went


def test_a_passages_answer_to_a_list_question_records_no_count_of_its_own():
    from app.analysis import record
    from app.analysis.job import Job
    job = Job(id="j", session="s", turn=0, file="f.md", user_text="List every code.", instruction="List every code.",
              model="m", file_tokens=9000, remaining=100, chunks=12, size_tokens=1500, boundary="paragraph",
              kind="prose", fingerprint="x", window=4096, bytes_per_token=4.0, state="done", list_of="code",
              way="retrieve", coverage="9 passages, about 4 % of the file", rag_answerable=False,
              estimated_calls=13, seconds_per_chunk=30.0)
    written = record.computed_notes(job)
    assert not any(n.startswith(("chunk-item:", "chunk-count:")) for n in written)
    read = notes.read_computed(written)
    assert read.answerable is False and read.cost == {"chunks": 12, "calls": 13, "minutes": 6.0}
    assert read.coverage == "9 passages, about 4 % of the file"
    job.way, job.items = "read", [{"text": "A1", "quote": "code A1", "value": None, "chunks": [2], "at": 5}]
    read = notes.read_computed(record.computed_notes(job))
    assert read.count["count"] == 1 and read.items[0]["chunk"] == 2


def test_names_that_differ_by_a_letter_stay_apart_and_a_long_list_merges_in_linear_time():
    import itertools
    names = ["".join(p).title() + "son" for p in itertools.islice(itertools.product("abcdefghij", repeat=3), 600)]
    sentences = [f"The person called {n} works here." for n in names]
    text = " ".join(sentences)
    results = []
    for c in range(6):                                       # 100 a chunk, each chunk sharing 5 with the next
        part = sentences[c * 100:(c + 1) * 100 + 5]
        start = text.index(part[0])
        results.append(ChunkResult(c, "ok", start=start, end=text.index(part[-1]) + len(part[-1]),
                                   points=[{"point": s.split()[3], "quote": s} for s in part]))
    items, cut = answers.merge_items(results, text)
    assert [i.text for i in items] == names and cut == 0
    assert all(i.chunks == [c + 1, c + 2] for c in range(5) for i in items[(c + 1) * 100:(c + 1) * 100 + 5])


def test_a_list_item_the_chunk_does_not_hold_is_left_out():
    chunk = "Vault code VC-004 opens locker 4. The tides move ships."
    reply = json.dumps({"relevant": True, "confidence": 3, "items": [
        {"item": "Victus", "quote": "Victus", "value": 100},                 # made up (SmolLM2 did this)
        {"item": "VC-004", "quote": "vault code  vc-004 opens", "value": 4},  # the chunk's words, folded
        {"item": "VC-004", "quote": "it opens a locker", "value": None}]})    # a bad quote, a name it holds
    answer = mapreduce.read_list_reply(reply, chunk)
    assert [(p["point"], p["quote"]) for p in answer.points] == [("VC-004", "Vault code VC-004 opens"),
                                                                ("VC-004", "VC-004")]
    free = mapreduce.read_list_reply("- Victus\n- vault code VC-004", chunk)
    assert [p["quote"] for p in free.points] == ["Vault code VC-004"]
    assert mapreduce.read_list_reply("- Victus", chunk).points == []


def test_the_passages_verdict_is_read_from_json_cut_json_or_plain_words():
    from app.analysis.retrieve import read_routed
    assert read_routed('{"answer": "Admiral Pepper [3].", "in_passages": true}') == ("Admiral Pepper [3].", True)
    assert read_routed('```json\n{"answer": "Not there.", "in_passages": false}\n```') == ("Not there.", False)
    assert read_routed('{"answer": "The parrot is called Admiral \\"Pep') == ('The parrot is called Admiral "Pep […]', True)
    assert read_routed("The passages do not mention the parrot.")[1] is False
    assert read_routed("It is Admiral Pepper [3].") == ("It is Admiral Pepper [3].", True)
