"""Issue 23 item 5: the session list keeps metadata and a short preview per session, not its text.

Through waitress: sessions of ~100 KB with an emoji (which made Python keep the whole text at
four bytes a character) are listed, searched (the words are read from the files), and the
index's entries stay small whatever the files hold.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from datetime import timedelta

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
