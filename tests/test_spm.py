"""The SentencePiece counter's own rules (app/modelserver/spm.py): cutting a text into words changes
no token, the special tokens come out whole, and the word cache stays bounded.  Its counts against
llama.cpp itself are tests/test_token_counter.py's (Gemma 3's 262k tokens, with and without the
space prefix)."""

from __future__ import annotations

import random

import pytest

from app.modelserver import spm
from app.modelserver.spm import SentencePiece
from app.modelserver.tokens import SPECIAL_TYPES

# A toy vocabulary: byte tokens, characters, merges of different scores, a token that holds a "▁"
# after ">" (so ">" joins the "▁" after it), runs of "▁", and two specials that overlap.
_TOKENS = ([f"<0x{b:02X}>" for b in range(256)]
           + ["a", "b", "c", ">", "▁", "ab", "bc", "abc", "▁a", "▁ab", "▁▁", "▁▁▁", ">▁", ">▁a", "ca", "cab",
              "<s>", "<tag>", "\nbb"])
_SCORES = [0.0] * 256 + [-float(i) for i in range(len(_TOKENS) - 256)]
_TYPES = [6] * 256 + [1] * (len(_TOKENS) - 259) + [3, 4, 4]


def _toy(space_prefix: bool = False) -> SentencePiece:
    return SentencePiece(_TOKENS, _SCORES, _TYPES, space_prefix, SPECIAL_TYPES)


def _whole(counter: SentencePiece) -> SentencePiece:
    """The same counter without cuts: each piece of text merged whole, as llama.cpp does."""
    counter._words_in = None
    counter._words = {}
    return counter


def test_a_joiner_keeps_its_space():
    """">" joins the "▁" after it (the vocabulary has ">▁"): no cut there; elsewhere a cut before "▁"."""
    counter = _toy()
    assert counter._words_of("ab▁a>▁ab▁▁c") == ["ab", "▁a>▁ab", "▁▁c"]


@pytest.mark.parametrize("space_prefix", [False, True])
def test_words_give_the_whole_texts_tokens(space_prefix):
    rng = random.Random(30)
    cut, whole = _toy(space_prefix), _whole(_toy(space_prefix))
    alphabet = ["a", "b", "c", ">", " ", " ", "<s>", "<tag>", "x", "日", "\n"]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))
        assert cut.ids(text) == whole.ids(text), text
        assert cut.count(text) == len(cut.ids(text)) == len(cut.starts(text))


def test_merges_take_the_highest_score_first_and_bytes_for_the_rest():
    counter = _toy()
    ids = {t: i for i, t in enumerate(_TOKENS)}
    assert counter.ids("abc") == [ids["abc"]]             # "ab" (-5) before "bc" (-6), then "abc" (-7)
    assert counter.ids("cab") == [ids["cab"]]
    assert counter.ids("x") == [ids["<0x78>"]]             # no token: its byte
    assert counter.ids("日") == [ids["<0xE6>"], ids["<0x97>"], ids["<0xA5>"]]
    assert list(counter.starts("a日")) == [0, 1, 1, 1]     # a character's bytes start where it does


def test_specials_are_whole_and_the_space_prefix_follows_them():
    counter = _toy(space_prefix=True)
    ids = {t: i for i, t in enumerate(_TOKENS)}
    assert counter.ids("a<s>a") == [ids["▁a"], ids["<s>"], ids["▁a"]]
    assert list(counter.starts("a<s>a")) == [0, 1, 4]
    assert counter.ids("<tag>") == [ids["<tag>"]]


def test_a_long_text_is_matched_in_pieces_with_the_same_tokens(monkeypatch):
    """Specials are matched in pieces, never cut between two characters a special holds side by
    side ("\nbb", "<s>"): the same ids, starts and count as matched whole."""
    rng = random.Random(35)
    whole = _toy()
    monkeypatch.setattr(spm, "PIECE_CHARS", 3)
    pieces = _toy()
    alphabet = ["a", "b", " ", "\n", "\nbb", "<s>", "<tag>", ">"]
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        monkeypatch.setattr(spm, "PIECE_CHARS", 10**9)
        expected = (whole.ids(text), list(whole.starts(text)))
        monkeypatch.setattr(spm, "PIECE_CHARS", 3)
        assert (pieces.ids(text), list(pieces.starts(text))) == expected, text
        assert pieces.count(text) == len(expected[0])


def test_a_long_word_is_merged_in_pieces_and_not_kept(monkeypatch):
    """A word longer than ``LONG_WORD`` is merged a piece at a time (bounded memory): its count
    is off by at most one token a piece, and it is not kept in the word cache."""
    rng = random.Random(36)
    exact = _toy()
    monkeypatch.setattr(spm, "LONG_WORD", 7)
    pieces = _toy()
    for _ in range(300):
        word = "".join(rng.choice("abc>") for _ in range(rng.randint(8, 120)))
        monkeypatch.setattr(spm, "LONG_WORD", 10**9)
        expected = exact.count(word)
        monkeypatch.setattr(spm, "LONG_WORD", 7)
        got = pieces.count(word)
        assert abs(got - expected) <= len(word) // 7, word
        assert len(pieces.starts(word)) == got
    assert all(len(word) <= spm.CACHED_WORD_CHARS for word in pieces._words)


def test_the_word_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(spm, "WORD_CACHE", 50)
    counter = _toy()
    for i in range(500):
        counter.count(" ".join(format(i * 7 + j, "b").replace("0", "a").replace("1", "c") for j in range(5)))
        assert len(counter._words) <= 50


def test_two_threads_share_the_word_cache(monkeypatch):
    """The word cache is the counter's one piece of state, filled and emptied by whichever thread
    counts (a page and the worker at once): counts from two threads at once, with the cache
    emptied again and again under them, are the counts of one thread alone."""
    import threading

    monkeypatch.setattr(spm, "WORD_CACHE", 8)
    rng = random.Random(37)
    texts = [" ".join("".join(rng.choice("abc>") for _ in range(rng.randint(1, 6)))
                      for _ in range(rng.randint(1, 30))) for _ in range(200)]
    expected = [_toy().count(text) for text in texts]
    shared, results, start = _toy(), {0: [], 1: []}, threading.Barrier(2)

    def count(me: int) -> None:
        start.wait()
        for _ in range(20):
            results[me].append([shared.count(text) for text in texts])

    threads = [threading.Thread(target=count, args=(me,)) for me in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert all(run == expected for me in (0, 1) for run in results[me]) and len(results[0]) == len(results[1]) == 20
    assert len(shared._words) <= 8


@pytest.mark.slow
def test_gemmas_words_give_the_whole_texts_tokens():
    """On Gemma 3's own vocabulary: cutting into words is the text merged whole, every kind of text."""
    from token_texts import texts
    from vocab import gemma_gguf, model_info

    info = model_info(gemma_gguf())
    key = "tokenizer.ggml."

    def make():
        return SentencePiece(info[key + "tokens"], info[key + "scores"], info[key + "token_type"], False,
                             SPECIAL_TYPES)

    cut, whole = make(), _whole(make())
    for kind, text in texts()[::2]:
        if len(text) <= 4000:           # merged whole in Python a long text takes a while
            assert cut.ids(text) == whole.ids(text), kind
