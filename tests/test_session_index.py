"""Issue 23 item 5: the session list keeps metadata and a short preview per session, not its text.

Through waitress: sessions of ~100 KB with an emoji (which made Python keep the whole text at
four bytes a character) are listed, searched (the words are read from the files), and the
index's entries stay small whatever the files hold.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.sessions import index as sessions
from test_session_pages import T0, listed, write_session


def big_reply(n: int, secret: str) -> str:
    """About 100 KB of reply with an emoji, and ``secret`` deep inside it."""
    para = "The fan spins faster when the CPU is hot; a heatsink helps. 🌡️ "
    return "\n\n".join([para * 40] * (n // 2) + [f"Deep inside: {secret}."] + [para * 40] * (n - n // 2))


def size_of(entry) -> int:
    """Bytes the entry's own fields hold (strings, lists of models), not the file's."""
    total = 0
    for f in fields(entry):
        value = getattr(entry, f.name)
        total += sys.getsizeof(value)
        if isinstance(value, (list, tuple)):
            total += sum(sys.getsizeof(v) for v in value)
    return total


def test_the_index_holds_metadata_and_a_preview_not_the_text(live):
    store = live.services.store
    names = [write_session(store, T0 + timedelta(hours=i),
                           [(f"question {i}", big_reply(40, f"zeppelin{i}"), "tiny:1b"),
                            (f"last question {i}", f"Short answer {i} 🚀 in the end.", "tiny:1b")])
             for i in range(3)]
    files = {name: (store.folder / f"{name}.spmd").stat().st_size for name in names}
    assert min(files.values()) > 90_000

    shown = listed(live)
    assert {name for name, _, _ in shown} == set(names)
    entries = store.index().entries()
    assert {e.name for e in entries} == set(names)
    for entry in entries:
        assert entry.preview == f"Short answer {names.index(entry.name)} 🚀 in the end."
        assert entry.size == files[entry.name] and entry.turns == 2
        held = repr(entry)
        assert "zeppelin" not in held and "heatsink" not in held        # no text of the session
        assert size_of(entry) < 4_000, f"{size_of(entry)} bytes for a {files[entry.name]}-byte file"
        assert not hasattr(entry, "text")


def test_search_reads_the_files_and_keeps_nothing(live, monkeypatch):
    store = live.services.store
    monkeypatch.setattr(sessions, "SEARCH_CHUNK", 7)       # every longer word crosses a chunk's end
    deep = write_session(store, T0, [("what about airships?", big_reply(40, "Zeppelin"), "tiny:1b")])
    other = write_session(store, T0 + timedelta(hours=1), [("fans", "The fan spins. 🌡️", "tiny:1b")])
    assert [r[0] for r in listed(live, "zeppelin")] == [deep]           # a word deep in a 100 KB reply
    assert [r[0] for r in listed(live, "ZEPPELIN airships")] == [deep]   # every word, any case, any line
    assert {r[0] for r in listed(live, "fan 🌡️")} == {deep, other}
    assert listed(live, "zeppelin spins-not") == []
    assert all(not hasattr(e, "text") for e in store.index().entries())
    (store.folder / f"{deep}.spmd").unlink()                               # gone since the last scan
    assert [r[0] for r in listed(live, "fan")] == [other]


# -- search through the word files (issue 23: a search read every session whole) -------------------------

def test_a_search_reads_each_session_once_until_it_changes(live, monkeypatch):
    """The first search makes each session's word file; the next reads only those (no session file is
    opened); a session changed since is read again, alone; the answers never change."""
    store = live.services.store
    assert store.index().warmed.wait(10)                # the start-up warm-up (word files included) is done
    deep = write_session(store, T0, [("what about airships?", big_reply(40, "Zeppelin"), "tiny:1b")])
    other = write_session(store, T0 + timedelta(hours=1), [("fans", "The fan spins. 🌡️", "tiny:1b")])
    made: list[str] = []
    real_make = sessions.WordFiles.make
    monkeypatch.setattr(sessions.WordFiles, "make", lambda self, name: made.append(name) or real_make(self, name))
    assert [r[0] for r in listed(live, "zeppelin")] == [deep]
    assert sorted(made) == sorted([deep, other])
    words = store.folder / sessions.WORDS_DIR / f"{deep}.words"
    assert words.stat().st_size < (store.folder / f"{deep}.spmd").stat().st_size / 20

    made.clear()
    opened: list[str] = []
    real_open = sessions.Path.open
    monkeypatch.setattr(sessions.Path, "open", lambda self, *a, **k: opened.append(self.name) or real_open(self, *a, **k))
    assert [r[0] for r in listed(live, "ZEPPELIN airships")] == [deep]
    assert {r[0] for r in listed(live, "fan 🌡️")} == {deep, other}
    assert made == [] and not any(name.endswith(".spmd") for name in opened)

    new = write_session(store, T0 + timedelta(hours=2), [("blimps", "A blimp has no frame.", "tiny:1b")])
    store.rename(other, "Fans and blimps")                  # a change: its word file is stale
    made.clear()
    assert {r[0] for r in listed(live, "blimp")} == {new, other}     # the new title is searched
    assert sorted(made) == sorted([other, new])


def test_a_torn_or_foreign_word_file_is_made_again(live):
    store = live.services.store
    name = write_session(store, T0, [("what about airships?", "Zeppelins float. 🎈", "tiny:1b")])
    assert [r[0] for r in listed(live, "zeppelins")] == [name]
    words = store.folder / sessions.WORDS_DIR / f"{name}.words"
    whole = words.read_bytes()
    for damaged in (whole[:-3], whole.replace(b"zeppelins", b"zeppelinz"), b"", b"harvey-words 1 x y z\n"):
        words.write_bytes(damaged)
        if damaged.startswith(b"harvey-words 1 ") and len(damaged) == len(whole):
            continue                          # same length and header: a cache edited by hand is not looked for
        assert [r[0] for r in listed(live, "zeppelins 🎈")] == [name], damaged[:40]
        assert words.read_bytes() == whole


def test_the_start_up_makes_missing_word_files_and_drops_those_of_deleted_sessions(tmp_path, scripted, make_live):
    from conftest import make_config

    config = make_config(tmp_path, scripted.url)
    first = make_live(config)
    store = first.services.store
    names = [write_session(store, T0 + timedelta(hours=i), [(f"q{i}", f"answer{i}", "tiny:1b")]) for i in range(3)]
    folder = store.folder / sessions.WORDS_DIR
    assert [r[0] for r in listed(first, "answer1")] == [names[1]]
    (store.folder / f"{names[1]}.spmd").unlink()            # deleted by hand while the app is down
    (folder / f"{names[2]}.words").unlink()
    again = make_live(config)
    assert again.services.store.index().warmed.wait(10)
    from waiting import wait_for
    wait_for(lambda: sorted(p.name for p in folder.iterdir()) == sorted(f"{n}.words" for n in (names[0], names[2])),
             what="the word files brought up to date")


@given(st.lists(st.sampled_from(["Fan", "fAN", "ß", "SS", "straße", "\u200b", " ", "\n", "\r\n", "\t", "🌡️",
                                 "x", "é", "E\u0301", "İ", "\x1c", "ǅ"]), max_size=30),
       st.lists(st.sampled_from(["fan", "ss", "strasse", "x", "🌡️", "fanx", "e\u0301", "i̇", "ǆ", "an", "xfan"]),
                min_size=1, max_size=3))
@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_word_file_answers_as_reading_the_session_would(tmp_path, pieces, words):
    """The words of a text, looked for in its word file: found exactly when the casefolded text (without the
    writer's zero width spaces) holds them, a word cut by a read chunk's end included."""
    folder = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    path = folder / "harvey-session-20260101-080000.spmd"
    path.write_text("".join(pieces), encoding="utf-8", newline="")
    with path.open(encoding="utf-8") as file:          # as the search reads it (universal newlines)
        text = file.read().replace("\u200b", "").casefold()
    st_ = path.stat()
    files = sessions.WordFiles(folder)
    expected = all(w in text for w in words)
    saved = sessions.SEARCH_CHUNK
    sessions.SEARCH_CHUNK = 3
    try:
        assert files.holds(path.stem, (st_.st_mtime_ns, st_.st_size), words) == expected     # made now
        assert files.holds(path.stem, (st_.st_mtime_ns, st_.st_size), words) == expected     # read back
    finally:
        sessions.SEARCH_CHUNK = saved


def test_a_same_size_rewrite_in_the_same_clock_tick_is_searched_anew(live):
    """The (mtime, size) key misses a same-size rewrite within the file system's timestamp granularity
    (coarse on some SD-card file systems): the store's write drops the word file too."""
    import os
    store = live.services.store
    assert store.index().warmed.wait(10)
    name = write_session(store, T0, [("colours", "The sky was grey all day.", "tiny:1b")], title="grey cats")
    assert [r[0] for r in listed(live, "grey")] == [name]
    path = store.folder / f"{name}.spmd"
    before = path.stat()
    store.rename(name, "blue cats")
    assert path.stat().st_size == before.st_size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))     # the same tick, as a coarse clock gives
    assert [r[0] for r in listed(live, "blue cats")] == [name]
    assert [r[0] for r in listed(live, "cats grey sky")] == [name]   # "grey" is still in the reply
    assert listed(live, "blue grey") and not listed(live, "grey cats blue whales")


def test_a_session_with_too_many_distinct_words_is_read_not_listed(live, monkeypatch):
    """Making a word file holds the distinct words in memory: past MAX_WORDS (pasted logs, ids) the
    session gets none and a search reads it a chunk at a time, with the same answers."""
    monkeypatch.setattr(sessions, "MAX_WORDS", 50)
    store = live.services.store
    assert store.index().warmed.wait(10)
    log = " ".join(f"id-{i:05d}" for i in range(400))
    many = write_session(store, T0, [("a log", f"Here it is: {log} and a Quokka.", "tiny:1b")])
    few = write_session(store, T0 + timedelta(hours=1), [("hello", "Hi there, quokka fan.", "tiny:1b")])
    assert {r[0] for r in listed(live, "quokka")} == {many, few}
    assert [r[0] for r in listed(live, "ID-00399 quokka")] == [many]
    assert listed(live, "id-00400") == []
    folder = store.folder / sessions.WORDS_DIR
    assert not (folder / f"{many}.words").exists() and (folder / f"{few}.words").exists()


def test_a_search_of_too_many_words_is_refused_before_any_file_is_read(live, monkeypatch):
    """Issue 35, item 7: a 6,000-word query took 6.8 s of CPU in a request thread."""
    store = live.services.store
    write_session(store, T0, [("what about airships?", big_reply(4, "Zeppelin"), "tiny:1b")])
    reads = []
    monkeypatch.setattr(sessions, "_finds_all", lambda *a, **k: reads.append(a) or True)
    query = " ".join(f"w{i}" for i in range(6000))
    page = live.get("/sessions/", params={"q": query})
    assert page.status_code == 400
    assert f"Search for at most {sessions.MAX_SEARCH_WORDS} words" in page.text and "6000 words" in page.text
    assert reads == [] and 'class="session-link"' not in page.text
    assert [r[0] for r in listed(live, "zeppelin airships")]                # a short search still works
