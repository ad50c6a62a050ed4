"""Sessions move both ways with the terminal Harvey (rsdoiel/harvey), for every scene it writes (issue 17).

Three kinds of evidence:

1. Session texts in each of the terminal Harvey's layouts (tests/data/spmd/harvey_*.spmd, written here
   from its recorder's code, FOUNTAIN_FORMAT.md and SESSIONS.md) read back with the turns, texts and
   models Harvey means, and continuing them in the app (under waitress, against the scripted Ollama
   server) sends exactly that history.
2. The page shows what the files hold: both replies of a multi-model turn, HARVEY's reply whole, the
   file's user, per-chunk replies, and says so when the session's model is not installed.
3. The other direction: ``HarveyReplay`` below is a small Python port of what the terminal Harvey runs for
   ``--continue`` (replay.go's parseFountainSession over github.com/rsdoiel/fountain v1.0.2's line
   classifier). Over a conversation this app writes, it recovers at least as much as over the terminal
   Harvey's own recording of the same conversation (``harvey_recording``: its recorder's byte layout).
"""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from fountain import FountainParser
from jouvence.parser import JouvenceParser

from app.chat import prepare
from app.sessions import fountain as spmd
from conftest import make_config, send_and_finish
from scripted_ollama import Reply, ScriptedOllama

DATA = Path(__file__).parent / "data" / "spmd"
INSTALLED = {"llama3.1:8b": 8192, "mistral:latest": 8192, "tiny:1b": 8192}


# ------------------------------------------------ the terminal Harvey's reader, ported

# Go's unicode.IsSpace (what strings.TrimSpace trims); Python's str.strip() trims more (\x1c-\x1f).
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
           "\u2028\u2029\u202f\u205f\u3000"
(GENERAL, EMPTY, TITLE, SCENE, ACTION, CHARACTER, DIALOGUE, PAREN, TRANSITION, LYRIC, NOTE, BONEYARD,
 SECTION, SYNOPSIS, CENTER, PAGEFEED) = range(16)
_SCENE_NO = re.compile(r"#*#$")
_ENDS = ("THE END.", "THE END", "LA FIN.", "LA FIN")


def _trim(s: str) -> str:
    return s.strip(GO_SPACE)


def _upper(s: str) -> str:
    """Go's strings.ToUpper maps rune by rune (no "ß" -> "SS")."""
    return "".join(c.upper() if len(c.upper()) == 1 else c for c in s)


def _scene_heading(line: str) -> bool:
    line = _upper(_trim(line))
    if line.startswith("!"):
        return False
    return bool(_SCENE_NO.search(line) or line.startswith((".", "EXT", "INT", "I/E")) or " -" in line
                or line in ("FADE IN:", *_ENDS))


def _paren(line: str) -> bool:
    return line.startswith("(") and ")" in line


def _dialogue(line: str, prev: int) -> bool:
    return _trim(line) != "" and prev in (CHARACTER, PAREN)


def _character(line: str, prev: int) -> bool:
    if line.startswith("@"):
        return True
    if line == _upper(line) and prev == EMPTY and not _paren(line):
        content = _upper(_trim(line))
        if content.startswith('"') and content.endswith('"'):
            return False
        return not ("--" in content or content.startswith(("INT.", "EXT."))
                    or content.endswith(("ANGLE", "SHOT", "P.O.V.", ":")))
    return False


def _action(line: str, prev: int) -> bool:
    if line.startswith("!"):
        return True
    if _trim(line) == "":
        return False
    return not (_scene_heading(line) or _character(line, prev) or _dialogue(line, prev) or _paren(line))


def _transition(line: str) -> bool:
    if line.startswith(">") or line.endswith(("TO:", "IN:")):
        return True
    t = _trim(line)
    return t.startswith(("FADE TO", ">")) or "THE END." in t


def _line_type(line: str, prev: int) -> int:
    """fountain.go getLineType, in its order."""
    t = _trim(line)
    if t == "===":
        return PAGEFEED
    if prev == TITLE and not _scene_heading(line) and not _transition(line):
        return TITLE
    if t.startswith("#"):
        return SECTION
    if t.startswith("="):
        return SYNOPSIS
    if (t.startswith("[[") and t.endswith("]]")) or (prev != NOTE and t.startswith("[[")) \
            or (prev == NOTE and t.endswith("]]")):
        return NOTE
    if t.startswith("~") and not t.endswith("~"):
        return LYRIC
    if _scene_heading(line):
        return SCENE
    if _action(line, prev):
        return ACTION
    if _transition(line):
        return TRANSITION
    if _character(line, prev):
        return CHARACTER
    if _paren(line):
        return PAREN
    if _dialogue(line, prev):
        return DIALOGUE
    if (t.startswith("/*") and t.endswith("*/")) or (prev != BONEYARD and t.startswith("/*")) \
            or (prev == BONEYARD and t.endswith("*/")):
        return BONEYARD
    if prev != TITLE and t == "":
        return EMPTY
    if t.startswith(">") and t.endswith("<"):
        return CENTER
    return GENERAL


@dataclasses.dataclass
class GoElement:
    type: int
    content: str
    name: str = ""


def go_parse(text: str) -> tuple[list[GoElement], list[GoElement]]:
    """fountain.go Parse: (title page, elements), with its character look-ahead repair."""
    prev, title, elements, ended = TITLE, [], [], False
    lines = text.split("\n")  # bufio.Scanner: lines without "\n" (none after the last), a trailing "\r" dropped
    if lines[-1] == "":
        lines.pop()
    for line in lines:
        line = line.removesuffix("\r")
        if ended:
            elements.append(GoElement(GENERAL, line))
            continue
        kind = _line_type(line, prev)
        if kind == TITLE:
            if ":" in line:
                key, value = line.split(":", 1)
                title.append(GoElement(TITLE, value, key))
            elif title:
                title[-1].content += "\n" + line
        elif kind == prev and elements:
            elements[-1].content += "\n" + line
        else:
            elements.append(GoElement(kind, line))
            if kind == SCENE:
                ended = _upper(_trim(line)) in _ENDS
        prev = kind
    before = TITLE
    for i, el in enumerate(elements):
        if el.type == CHARACTER and before == EMPTY and i < len(elements) - 1:
            if elements[i + 1].type not in (DIALOGUE, PAREN):
                el.type = GENERAL
        if el.type == SCENE and _upper(_trim(el.content)) in _ENDS:
            break
        before = el.type
    return title, elements


def go_character_name(el: GoElement) -> str:
    """fountain.go CharacterName: parentheticals and "'s" dropped, a trailing VOICE dropped."""
    content = _trim(el.content)
    names = []
    if not (content.startswith('"') and content.endswith('"')):
        for part in el.content.split(" "):
            part = _trim(part)
            if part and not (part.startswith("(") and part.endswith(")")):
                names.append(part.removesuffix("'s").removesuffix("'S"))
    if len(names) > 1 and _upper(names[-1]) == "VOICE":
        names = names[:-1]
    return " ".join(names)


@dataclasses.dataclass
class HarveyReplay:
    """replay.go parseFountainSession: only TALKING scenes; the user cue starts a turn; HARVEY's
    "Forwarding to X." names the model; any other cue's dialogue is the reply."""

    user: str
    model: str
    turns: list[tuple[str, str]]

    @classmethod
    def read(cls, text: str) -> "HarveyReplay":
        title, elements = go_parse(text)
        user, model = "USER", ""
        for tp in title:
            if tp.name.lower() == "model" and _trim(tp.content):
                model = _trim(tp.content)
                if model.find(" (") > 0:
                    model = model[:model.index(" (")]
        in_chat, last, cur, in_turn, turns = False, "", ["", ""], False, []
        for el in elements:
            if el.type == SCENE:
                heading = _upper(_trim(el.content))
                if " HARVEY AND " in heading and " TALKING " in heading:
                    if in_turn and cur[0]:
                        turns.append(tuple(cur))
                    cur, in_turn, in_chat = ["", ""], True, True
                    rest = heading[heading.index(" HARVEY AND ") + len(" HARVEY AND "):]
                    if rest.find(" TALKING ") > 0:
                        user = _trim(rest[:rest.index(" TALKING ")])
                else:
                    in_chat = False
                last = ""
            elif el.type == CHARACTER:
                if in_chat:
                    last = _upper(_trim(go_character_name(el)))
            elif el.type == DIALOGUE and in_chat:
                text_ = _trim(el.content)
                if last == user:
                    if cur[0] and cur[1]:
                        turns.append(tuple(cur))
                        cur = ["", ""]
                    cur[0] = text_
                elif last == "HARVEY" and text_.startswith("Forwarding to "):
                    named = _trim(text_.removeprefix("Forwarding to ")).removesuffix(".")
                    model = named or model
                elif last not in ("", "HARVEY", user):
                    cur[1] = text_
        if in_turn and cur[0]:
            turns.append(tuple(cur))
        return cls(user, model, turns)

    def history(self) -> list[dict]:
        """ContinueFromFountain: what the resumed conversation holds."""
        out = []
        for user, reply in self.turns:
            if user:
                out.append({"role": "user", "content": user})
            if reply:
                out.append({"role": "assistant", "content": reply})
        return out


def harvey_recording(user: str, model: str, exchanges: list[tuple[str, str]], when: datetime) -> str:
    """The terminal Harvey's own file of a conversation: recorder.go's byte layout (raw texts, trimmed)."""
    user, cue = user.upper(), spmd.model_cue(model)
    out = [f"Title: Harvey Session\nCredit: Recorded by Harvey\nAuthor: {user}\nDate: {when:%Y-%m-%d %H:%M:%S}\n"
           f"Draft date: {when:%Y-%m-%d}\nModel: {cue} (ollama)\nBackend: ollama\n", "\nFADE IN:\n"]
    for i, (message, reply) in enumerate(exchanges):
        ts = when + timedelta(minutes=i)
        out.append(f"\n\nINT. HARVEY AND {user} TALKING {ts:%Y-%m-%d %H:%M:%S}\n\n")
        out.append(f"Harvey and {user} are in chat mode. Model: {cue}. Workspace: /home/pi/harvey.\n\n")
        for who, text in ((user, message), ("HARVEY", f"Forwarding to {cue}."), (cue, reply)):
            out.append(who + "\n" + (text.strip() + "\n" if text.strip() else "") + "\n")
        out.append(f"ollama ({model}) · 10 reply + 100 ctx · 1s · 10.0 tok/s\n\n")
    out.append("\nTHE END.\n")
    return "".join(out)


def visible(text: str) -> str:
    """What a reader sees of a text Harvey's model gets: without zero width spaces."""
    return text.replace("\u200b", "")


def recovered(replay: HarveyReplay, exchanges: list[tuple[str, str]]) -> dict:
    """What Harvey's replay got back, counted against what was written.

    A turn counts when Harvey's user line is the start of the message written; a reply's characters
    count when Harvey's reply is the start of the reply written, otherwise Harvey took another line for
    the reply and nothing counts (``wrong_replies``). Zero width spaces (our writer's invisible guard for
    ``#``-like lines) are not counted; a backslash is (none may reach Harvey's model).
    """
    turns = chars = wrong = 0
    pending = list(replay.turns)
    for message, reply in exchanges:
        said = spmd.split_mention(message)[1]        # a leading @model is recorded in a note, as Harvey does
        match = next((t for t in pending if t[0] and said.strip().startswith(visible(t[0]))), None)
        if match is None:
            continue
        pending = pending[pending.index(match) + 1:]
        turns += 1
        got = visible(match[1])
        if got and reply.strip().startswith(got):
            chars += len(got)
        elif got:
            wrong += 1
    return {"turns": turns, "reply_chars": chars, "wrong_replies": wrong,
            "of_turns": len(exchanges), "of_chars": sum(len(r) for _, r in exchanges)}


def test_the_port_reads_harveys_own_recordings_as_its_tests_expect():
    """replay_test.go's shapes: one exchange; two exchanges in one scene; several scenes; other scenes skipped."""
    one = harvey_recording("rsdoiel", "llama3.1:8b", [("What is 2+2?", "4")], datetime(2026, 6, 27, 10, 4))
    replay = HarveyReplay.read(one)
    assert (replay.user, replay.model, replay.turns) == ("RSDOIEL", "LLAMA3.1", [("What is 2+2?", "4")])
    variants = HarveyReplay.read((DATA / "harvey_variants.spmd").read_text(encoding="utf-8"))
    assert variants.turns == [("Let's do phase 2.", "Phase 2 scope confirmed."),
                              ("I am going to hit token limits. We'll continue phase 2 later.",
                               "Knowledge base initialized and populated."),
                              ("Explain the plan.", "First paragraph of the plan."),  # cut at the blank line
                              ("And now?", "Now I answer.")]
    exact = HarveyReplay.read((DATA / "harvey_exact.spmd").read_text(encoding="utf-8"))
    assert [u for u, _ in exact.turns] == ["What is 2+2?", "Read go.mod and tell me the module path."]
    # Its library's quirks, which our writer has to live with:
    assert [e.type for e in go_parse("INT. X\n\nA\nline one\nline two\n")[1]][-3:] == [CHARACTER, DIALOGUE, ACTION]
    assert go_parse("INT. X\n\nA\nok\n  \nCODE\nnext\n")[1][-2].type == CHARACTER      # "  " is an empty line
    zwsp = go_parse("INT. X\n\nA\nok\n\u200b\nCODE\nnext\n")[1]                        # a zero width space is not
    assert [e.type for e in zwsp] == [SCENE, EMPTY, CHARACTER, DIALOGUE, ACTION]
    assert _scene_heading("Interesting - really") and _scene_heading("The end.")


# ---------------------------------------------------------------- the conversation

WHEN = datetime(2026, 6, 27, 10, 4, 0)
CONVERSATION = [
    ("How do I lower the Pi's swappiness?",
     "Set vm.swappiness in /etc/sysctl.conf.\n\nThen apply it with sysctl.\n\nCHECK IT\n"
     "cat /proc/sys/vm/swappiness"),
    ("Show me a C hello world.",
     "Here it is:\n\n```c\n#include <stdio.h>\n/* print a greeting */\nint main(void) {\n"
     "    printf(\"hello\\n\");\n    return 0;\n}\n```\n\n```\n$ ./hello\n```"),
    ("Compare ext4 and btrfs in a table.",
     "Interesting question. Here is a summary:\n\n| FS | CoW |\n|----|-----|\n| ext4 | no |\n| btrfs | yes |\n\n"
     "(a) ext4 is simpler.\n(b) btrfs has snapshots.\n\nBoth work on a Pi."),
    ("Tell me a two-line story.", "A Pi booted once.\nIt never stopped.\n\nThe End."),
    ("List three tips.",
     "# Tips\n\n1. Use a good power supply.\n2. Add a heatsink - a small one.\n3. Keep backups.\n\n42\n"
     "is the answer to the rest."),
    ("@llama3.1 Thanks!\nOne more: what is 2+2?", "4"),
]


def scripted_replies(texts):
    queue = list(texts)

    def script(body):
        return Reply(text=queue.pop(0) if queue else "extra")
    return script


def upload(live, content: bytes, filename="session.spmd"):
    if not live.token:
        live.get("/sessions/")
    response = live.post("/sessions/import", files={"file": (filename, content, "application/octet-stream")})
    assert response.status_code == 200, response.text
    return response.url.path.rsplit("/", 1)[-1]


@pytest.fixture
def harvey_app(tmp_path, make_live):
    """The app (user "tester") with an Ollama that has llama3.1:8b and mistral, not CLAUDE."""
    def start(script=None):
        server = ScriptedOllama(models=dict(INSTALLED), script=script).start()
        servers.append(server)
        return make_live(make_config(tmp_path, server.url, model="llama3.1:8b")), server
    servers = []
    yield start
    for server in servers:
        server.stop()


def written_by_the_app(harvey_app) -> str:
    """The conversation held in the app (under waitress), as the file it writes."""
    live, _server = harvey_app(scripted_replies([r for _, r in CONVERSATION]))
    name = live.open_session()
    for message, _ in CONVERSATION:
        send_and_finish(live, name, message)
    text = live.services.store.path(name).read_text(encoding="utf-8")
    assert [(t.user_text, t.reply) for t in spmd.turns(spmd.loads(text))] == CONVERSATION
    return text


def test_harveys_replay_recovers_from_our_files_at_least_what_it_recovers_from_its_own(harvey_app, capsys):
    ours = recovered(HarveyReplay.read(written_by_the_app(harvey_app)), CONVERSATION)
    theirs = recovered(HarveyReplay.read(harvey_recording("tester", "llama3.1:8b", CONVERSATION, WHEN)),
                       CONVERSATION)
    with capsys.disabled():
        print(f"\nHarvey's --continue recovers from our file: {ours}\n  and from its own recording: {theirs}")
    assert ours["turns"] >= theirs["turns"] and ours["reply_chars"] >= theirs["reply_chars"]
    assert ours["wrong_replies"] <= theirs["wrong_replies"]
    # Ours: every turn, and every reply's first line (all Harvey's reader can hold), none mistaken.
    assert ours["turns"] == len(CONVERSATION) and ours["wrong_replies"] == 0
    first_lines = sum(len(r.split("\n")[0]) for _, r in CONVERSATION)
    assert ours["reply_chars"] >= first_lines


def test_fountain_tools_still_read_every_reply_line_of_our_file(harvey_app):
    text = written_by_the_app(harvey_app)
    assert FountainParser().validate(text) == []
    pairs = []
    for scene in JouvenceParser().parseString(text).scenes:
        for p in scene.paragraphs:
            if p.type == 2:
                pairs.append([p.text, None])
            elif p.type == 3 and pairs and pairs[-1][1] is None:
                pairs[-1][1] = p.text
    replies = [t for c, t in pairs if c == "LLAMA3.1"]
    assert len(replies) == len(CONVERSATION)
    for (_, reply), got in zip(CONVERSATION, replies):
        want = [line for line in reply.split("\n") if line.strip()]
        have = [spmd._decode_line(line) for line in got.split("\n") if line.strip(" \u200b")]  # their escapes
        assert [w.lstrip() for w in want] == have


def test_screenplain_reads_every_reply_line_of_our_file(harvey_app):
    """screenplain, a third Fountain reader, keeps every line of every reply."""
    import io

    from screenplain.parsers import fountain as parsers
    text = written_by_the_app(harvey_app)
    dialogs = [p for p in parsers.parse(io.StringIO(text)) if type(p).__name__ == "Dialog"]
    replies = [p for p in dialogs if str(p.character) == "LLAMA3.1"]
    assert len(replies) == len(CONVERSATION)
    for (_, reply), dialog in zip(CONVERSATION, replies):
        lines = [str(line) for _, line in dialog.blocks]
        assert len(lines) == len(reply.split("\n"))     # every line, the blank ones included


def test_the_comparison_fails_for_a_writer_that_keeps_two_space_blank_lines(harvey_app, monkeypatch):
    """Guard: the count above can fail; with Fountain's two-space blank lines Harvey mistakes replies."""
    from app.sessions.fountain import codec

    encode = codec._encode_line
    monkeypatch.setattr(codec, "_encode_line", lambda line, first: "  " if not line and not first else encode(line, first))
    ours = recovered(HarveyReplay.read(written_by_the_app(harvey_app)), CONVERSATION)
    assert ours["wrong_replies"] > 0


# ------------------------------------------------------------- Harvey's layouts, read


def turns_of(name: str) -> list[spmd.Turn]:
    return spmd.turns(spmd.read_file(DATA / f"{name}.spmd"))


def test_multi_model_turns_keep_every_reply():
    first, second, third = turns_of("harvey_multi_model")
    assert first.user_text == "@mistral review this, then @llama3.1 give a second opinion"
    assert (first.model, first.reply) == ("MISTRAL", "First opinion: the code is well-structured.")
    # The stats line names the last hop exactly; the reply's paragraphs are joined again.
    assert first.more == [spmd.Answer("llama3.1:8b", "Second opinion: I agree, but consider adding tests.\n\n"
                                                     "Start with the parser.")]
    assert (second.model, second.reply, second.more) == ("llama3.1:8b", "The parser's edge cases.", [])
    # SESSIONS.md's form: the second model answers without a "Forwarding to" line.
    assert third.more == [spmd.Answer("LLAMA3.1", "Mine differs: one test per rule.")]
    assert all(t.user == "RSDOIEL" for t in (first, second, third))


def test_multi_model_turn_round_trips_and_stays_one_turn():
    turn = spmd.Turn(WHEN, "@a @b compare", "mistral:latest", "A says.\n\nTwo lines.", None,
                     more=[spmd.Answer("LLAMA3.1", "B says.\n\n# heading")])
    play = spmd.Screenplay(spmd.new_title_page("rsdoiel", "mistral:latest", "ollama", WHEN),
                           spmd.turn_scenes(turn, "rsdoiel", "/w"))
    text = spmd.dumps(play)
    (back,) = spmd.turns(spmd.loads(text))
    assert back == dataclasses.replace(turn, model="MISTRAL")
    assert FountainParser().validate(text) == []
    # Harvey's own reader takes the last model's reply (the first line of B) and the message without its
    # mentions, as Harvey records it (issue 26): its Fountain library takes a line starting "@" for a cue,
    # so from a recording that kept the mention it gets no turn at all.
    assert HarveyReplay.read(text).turns == [("compare", "B says.")]
    own = harvey_recording("rsdoiel", "mistral:latest", [("@a @b compare", "B says.")], WHEN)
    assert HarveyReplay.read(own).turns == []


def test_harvey_answering_as_the_local_model_keeps_the_code_after_the_blank_line():
    fix, capital = turns_of("harvey_local_model")
    assert fix.reply == ("Here is the corrected version:\n\n```go src/calc.go\nfunc Add(a, b int) int {\n"
                         "    return a + b\n}\n```\n\nIt now adds instead of subtracting.")
    assert (fix.model, fix.harvey) == ("llama3.1:8b", None)          # the model the state line names
    assert (capital.user_text, capital.reply) == ("What is the capital of France?", "The capital of France is Paris.")


def test_recorder_layout_scene_types_read_as_harvey_means():
    play = spmd.read_file(DATA / "harvey_recorder.spmd")
    headings = [s.heading.split(" 2026")[0] for s in play.scenes]
    assert headings == ["INT. CONTEXT RECALL", "INT. HARVEY AND RSDOIEL TALKING", "EXT. PI2 AND RSDOIEL",
                        "INT. SHELL", "INT. SKILL GO-REVIEW", "INT. AGENT MODE", "INT. HARVEY AND RSDOIEL TALKING"]
    init, build = spmd.turns(play)
    assert init.reply == "Run go mod init with the module path.\n\nFor this workspace: go mod init github.com/rsdoiel/harvey"
    assert init.model == "CLAUDE"                                     # the stats line names another model
    assert init.notes[-1] == 'tool: read_file({"path":"go.mod"}) — ok'
    assert (build.model, build.reply) == ("CLAUDE-SONNET-4-6", "Run go build ./...")
    assert spmd.loads(spmd.dumps(play)) == play                       # every scene kept


def test_chunk_analysis_in_harveys_recorder_layout():
    summary, read_chunks, urgent = turns_of("harvey_chunk_recorder")
    # Written before the message that named the file: it goes with that message.
    assert summary.user_text == "Summarize report.md for me."
    assert summary.reply == "The report compares three machines; the second wins."
    a = summary.analysis
    assert (a.file, a.chunks, a.model, a.boundary, a.chunk_bytes) == ("report.md", 2, "llama3.1:8b", "paragraph", 6000)
    assert a.chunk_size == 0                                            # Harvey's chunk-size is bytes (issue 26)
    assert a.replies == {1: "Part one describes the setup.\n\nIt lists three machines.", 2: "Part two reports the results."}
    assert a.answer == "The report sets up three machines and measures them.\n\nResults favour the second."
    assert (a.instruction, a.results, a.synthesis) == ("", ["ok", "ok"], "ok")
    assert summary.scenes == (0, 1)
    # /read-chunks: no message names the file; a turn of its own whose reply is the synthesis.
    assert (read_chunks.user_text, read_chunks.reply) == (None, "Two questions remain open.")
    assert read_chunks.analysis.replies == {1: "The notes list two open questions."}
    assert (urgent.user_text, urgent.analysis) == ("Which is more urgent?", None)


def test_chunk_replies_round_trip_in_harveys_layout():
    a = spmd.ChunkAnalysis("r.md", 2, "llama3.1:8b", "paragraph", 100, "Sum up.", WHEN, ["ok", "error: x"], "ok",
                           {1: "One.\n\n(two)", 2: "[chunk 2 failed: x]"}, "All.\n\nDone.")
    scene = spmd.chunk_scene(a, "rsdoiel")
    text = spmd.dumps(spmd.Screenplay({}, [scene]))
    assert "\n@LLAMA3.1\n(chunk 1/2)\nOne.\n" in text and "\n@LLAMA3.1\n(synthesis)\nAll.\n" in text
    assert spmd.read_chunk_scene(spmd.loads(text).scenes[0]) == a
    assert FountainParser().validate(text) == []


def test_seed_000_layout_still_reads():
    (turn,) = turns_of("seed000_chunk")
    assert turn.analysis.instruction.startswith("Summarize the methodology")
    assert turn.reply.startswith("The methodology section")


# ------------------------------------------------------- continuing, through the app


def continued(harvey_app, name: str, message="And next?", model=None):
    """Import the fixture, send one message, return (messages sent, model, the live app, session name)."""
    live, server = harvey_app()
    session = upload(live, (DATA / f"{name}.spmd").read_bytes(), f"{name}.spmd")
    send_and_finish(live, session, message, **({"model": model} if model else {}))
    body = server.chats()[-1].body
    assert body["messages"][-1] == {"role": "user", "content": message}
    return body["messages"][1:-1], body["model"], live, session


def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


def test_continuing_a_multi_model_session_sends_both_replies(harvey_app):
    sent, model, _, _ = continued(harvey_app, "harvey_multi_model")
    assert sent == [
        u("review this, then @llama3.1 give a second opinion"),
        a("MISTRAL answered:\nFirst opinion: the code is well-structured.\n\n"
          "LLAMA3.1 answered:\nSecond opinion: I agree, but consider adding tests.\n\nStart with the parser."),
        u("Which tests first?"), a("The parser's edge cases."),
        u("compare your approaches"),
        a("MISTRAL answered:\nMy approach uses a table of cases.\n\nLLAMA3.1 answered:\nMine differs: one test per rule."),
    ]
    assert model == "mistral:latest"


def test_continuing_a_local_model_session_sends_harveys_replies_whole(harvey_app):
    sent, model, _, _ = continued(harvey_app, "harvey_local_model")
    assert sent == [u("This function has a bug. Please fix it."),
                    a(turns_of("harvey_local_model")[0].reply),
                    u("What is the capital of France?"), a("The capital of France is Paris.")]
    assert model == "llama3.1:8b"


def test_continuing_the_recorder_layout_sends_its_chat_turns_only(harvey_app):
    """EXT route, shell, skill, agent and recall scenes are not chat turns for Harvey's --continue either."""
    sent, model, _, _ = continued(harvey_app, "harvey_recorder")
    assert sent == [u("How do I initialise a Go module?"),
                    a("Run go mod init with the module path.\n\nFor this workspace: go mod init github.com/rsdoiel/harvey"),
                    u("And now build it."), a("Run go build ./...")]
    assert model == "llama3.1:8b"          # CLAUDE-SONNET-4-6 is not installed: the configured default


def test_continuing_harveys_chunk_analyses(harvey_app):
    sent, _, _, _ = continued(harvey_app, "harvey_chunk_recorder")
    assert sent == [u("Summarize report.md for me."), a("The report compares three machines; the second wins."),
                    u("[/read-chunks notes.md — 1 chunk(s)]"), a("Two questions remain open."),
                    u("Which is more urgent?"), a("The first one.")]


def test_continuing_the_seed_000_layout(harvey_app):
    sent, _, _, _ = continued(harvey_app, "seed000_chunk")
    assert sent == [u("Read document.md and summarize the methodology section."),
                    a("The methodology section describes a three-phase experiment…")]


def test_continuing_the_variants_layout(harvey_app):
    sent, _, _, _ = continued(harvey_app, "harvey_variants")
    assert sent == [u("Let's do phase 2."), a("Phase 2 scope confirmed."),
                    u("I am going to hit token limits. We'll continue phase 2 later."),
                    a("Knowledge base initialized and populated."),
                    u("Explain the plan."),
                    a("First paragraph of the plan.\n\nSecond paragraph, still the reply.\n\nThird and last."),
                    u("And now?"), a("Now I answer.")]


def test_continuing_the_exact_layout_leaves_out_the_agent_and_ext_scenes(harvey_app):
    sent, model, _, _ = continued(harvey_app, "harvey_exact")
    assert sent == [u("What is 2+2?"), a("4"), u("Read go.mod and tell me the module path."),
                    a("The module path is github.com/rsdoiel/harvey.")]
    assert model == "llama3.1:8b"


def test_the_continued_file_reads_the_old_turns_as_before(harvey_app):
    _, _, live, session = continued(harvey_app, "harvey_multi_model")
    after = live.services.store.load(session).turns
    assert after[:3] == turns_of("harvey_multi_model")
    assert [t.user for t in after] == ["RSDOIEL", "RSDOIEL", "RSDOIEL", "TESTER"]


def test_harvey_reads_back_a_session_continued_here(harvey_app):
    """Import Harvey's multi-model file, continue it here, and hand it back: Harvey's replay gets every turn."""
    _, _, live, session = continued(harvey_app, "harvey_multi_model", message="One more thing?")
    replay = HarveyReplay.read(live.services.store.path(session).read_text(encoding="utf-8"))
    own = HarveyReplay.read((DATA / "harvey_multi_model.spmd").read_text(encoding="utf-8"))
    assert own.turns == [("Which tests first?", "The parser's edge cases.")]  # "@..." lines are cues to it
    # Harvey's own scenes are kept as they were (re-encoded element by element, not as our turns): their
    # "@mistral" line reaches Harvey with a zero width space, where its own file gave it no turn at all.
    assert replay.turns == [("\u200b@mistral review this, then @llama3.1 give a second opinion",
                             "Second opinion: I agree, but consider adding tests."),
                            ("Which tests first?", "The parser's edge cases."),
                            ("\u200b@mistral @llama3.1 compare your approaches", "Mine differs: one test per rule."),
                            ("One more thing?", "You said: One more thing?")]
    assert replay.user == "TESTER" and replay.model == "MISTRAL"          # the model the new turn went to


# ------------------------------------------------------------------------ the page


def page_of(harvey_app, name: str):
    live, _ = harvey_app()
    session = upload(live, (DATA / f"{name}.spmd").read_bytes(), f"{name}.spmd")
    return BeautifulSoup(live.get(f"/s/{session}").text, "html.parser"), live, session


def test_page_shows_both_replies_and_the_files_user(harvey_app):
    page, _, _ = page_of(harvey_app, "harvey_multi_model")
    first = page.select_one("#turn-0")
    assert [w.get_text() for w in first.select(".who")] == ["RSDOIEL", "mistral:latest", "llama3.1:8b"]
    assert "Start with the parser." in first.select(".msg.reply")[-1].get_text()
    assert "TESTER" not in page.select_one("#conversation").get_text()


def test_page_shows_harveys_reply_with_its_code_block(harvey_app):
    page, _, _ = page_of(harvey_app, "harvey_local_model")
    reply = page.select_one("#turn-0 .msg.reply .markdown")
    assert reply.select_one("code").get_text().startswith("func Add(a, b int) int {")
    assert "It now adds instead of subtracting." in reply.get_text()


def test_page_shows_per_chunk_replies_in_the_analysis_block(harvey_app):
    page, live, session = page_of(harvey_app, "harvey_chunk_recorder")
    block = page.select_one("#turn-0 details.analysis-summary")
    assert [r.get_text() for r in block.select(".chunk-reply")] == [
        "Part one describes the setup.\n\nIt lists three machines.", "Part two reports the results.",
        "The report sets up three machines and measures them.\n\nResults favour the second."]
    screenplay = BeautifulSoup(live.get(f"/sessions/{session}").text, "html.parser")
    assert "Part two reports the results." in screenplay.select_one("details.chunk-analysis").get_text()


def test_a_model_that_is_not_installed_is_said_and_the_installed_ones_offered(harvey_app):
    live, server = harvey_app()
    text = (DATA / "harvey_variants.spmd").read_text(encoding="utf-8")
    text = text.split("INT. HARVEY AND RSDOIEL TALKING 2026-07-03 19:20:00")[0] + "THE END.\n"  # CLAUDE only
    session = upload(live, text.encode())
    page = BeautifulSoup(live.get(f"/s/{session}").text, "html.parser")
    problem = page.select_one("#status .problem").get_text()
    assert "CLAUDE is not installed" in problem and "llama3.1:8b" in problem
    options = [o.get_text() for o in page.select("#model option")]
    assert sorted(options) == sorted(INSTALLED)
    assert page.select_one("#model option[selected]")["value"] == "llama3.1:8b"
    send_and_finish(live, session, "Go on.")            # no model posted: it still reaches an installed one
    assert server.chats()[-1].body["model"] == "llama3.1:8b"
