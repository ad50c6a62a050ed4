"""llama.cpp's SentencePiece tokenizer (``tokenizer.ggml.model`` = ``llama``: Gemma, Llama 2,
Mistral 7B) in plain Python, small enough for a Pi (issue 30).

Hugging Face's ``tokenizers`` can run it as BPE, but only with every way to write each token as two
tokens listed as a merge: for Gemma's 262,144 tokens that is 514,847 merges and two hash maps of the
vocabulary.  What llama.cpp does (``llm_tokenizer_spm_session``
in ``src/llama-vocab.cpp``) needs only each token's score:

1. Control, user-defined and unknown tokens are split out of the raw text first, longest first
   (``tokenizer_st_partition`` with ``parse_special``); each counts one token.
2. Each piece of text between them gets a leading space when ``add_space_prefix`` and it is the
   first piece or follows a special token; every space becomes "▁".
3. Its characters are symbols; adjacent symbols whose concatenation is a token are merged, the
   highest score first (on a tie the leftmost), until no such pair is left.  A symbol that is no
   token is written as its UTF-8 byte tokens (``<0xNN>``).

Here step 3 runs on one word at a time: the text is cut before each "▁" that no token of the
vocabulary joins to the character before it (for Gemma, each "▁" that does not follow another "▁"
or a ">"), so no merge can cross a cut and the words' tokens are the whole text's.  Words repeat,
so each word's tokens are kept in a bounded cache.  A vocabulary is a dict of its token strings and
an array of their places by score: Gemma's 262,144 tokens add 49 MB to the app, where ``tokenizers``
added 84 MB (bench/RESULTS.md).
"""

from __future__ import annotations

import heapq
import re
from array import array

SPACE = "▁"
JOINERS_MAX = 512         # more characters that a token joins to a following "▁": the text is not cut
WORD_CACHE = 65_536       # words kept with their tokens (~10 MB); the cache is emptied when it is full
CACHED_WORD_CHARS = 64    # a longer word is not kept (the cache's size is its count of words)
LONG_WORD = 65_536        # a longer word is merged in pieces of this many characters (``_symbols``)
PIECE_CHARS = 65_536      # a longer text is matched for special tokens in pieces (``_partition``)
_ONE = (0,)               # the tokens of a word that is one token (most are): one tuple for all


class SentencePiece:
    """A vocabulary's SentencePiece tokenizer, as llama.cpp runs it (see the module).  Thread-safe:
    the word cache is a dict that threads may fill at once (a word computed twice is the same)."""

    segmentable = True      # ``count`` is the number of ``starts`` (``tokens.Counter``)

    def __init__(self, tokens: list[str], scores, types: list[int], add_space_prefix: bool,
                 special_types: tuple[int, ...]):
        self._ids = {token: i for i, token in enumerate(tokens)}     # llama.cpp: the last of equal texts
        self._rank = _ranks(scores[:len(tokens)])
        self._bytes = {b: self._ids.get(f"<0x{b:02X}>", -1) for b in range(256)}
        self._space_prefix = add_space_prefix
        specials = sorted({t for t, ty in zip(tokens, types) if ty in special_types and t})
        self._splitter = _special_splitter(specials) if specials else None
        self._special_of = {self._splitter.token_to_id(t): t for t in specials} if specials else {}
        # two characters side by side in a special token: no piece ends between them (``_piece_end``)
        self._special_pairs = {t[i:i + 2] for t in specials for i in range(len(t) - 1)}
        self._words_in = _word_pattern(tokens)
        self._words: dict[str, tuple[int, ...]] = {}

    # -- what the counter asks --------------------------------------------------------------

    def count(self, text: str) -> int:
        """How many tokens ``text`` is (specials parsed, no BOS)."""
        total = 0
        for piece in self._pieces(text):
            if isinstance(piece, int):
                total += 1
                continue
            known, starts_of = self._words.get, self._starts_of
            total += sum(len(known(word) or starts_of(word)) for word in self._words_of(piece[0]))
        return total

    def starts(self, text: str) -> array:
        """The character offset in ``text`` where each token starts (ascending; the byte tokens of
        one character share its offset, and a prepended "▁" has the offset of its piece)."""
        out = array("i")
        for piece in self._pieces(text):
            if isinstance(piece, int):
                out.append(piece)
                continue
            escaped, offset, prefixed = piece
            base = offset - prefixed
            for word in self._words_of(escaped):
                out.extend(max(offset, base + s) for s in self._starts_of(word))
                base += len(word)
        return out

    def ids(self, text: str) -> list[int]:
        """The token ids (for the tests against llama.cpp's own)."""
        out: list[int] = []
        for piece in self._pieces(text, ids=True):
            if isinstance(piece, int):
                out.append(piece)
                continue
            for word in self._words_of(piece[0]):
                for start, size in self._symbols(word):
                    symbol = word[start:start + size]
                    token = self._ids.get(symbol)
                    if token is not None:
                        out.append(token)
                    else:
                        out.extend(self._bytes[b] for b in symbol.encode("utf-8"))
        return out

    # -- steps 1 and 2: specials out, spaces escaped ------------------------------------------

    def _pieces(self, text: str, ids: bool = False):
        """The text as it goes to the merging: special tokens (their offset in ``text``, or their
        id with ``ids``) and pieces of text: ("▁"-escaped, the offset where they start, 1 when a
        "▁" was put in front)."""
        previous_special = True
        for start, end, special in self._partition(text):
            if special is not None:
                yield self._ids[special] if ids else start
                previous_special = True
                continue
            prefixed = self._space_prefix and previous_special
            raw = (" " if prefixed else "") + text[start:end]
            yield raw.replace(" ", "▁"), start, int(prefixed)
            previous_special = False

    def _partition(self, text: str) -> list[tuple[int, int, str | None]]:
        """The text cut into special tokens and the text between them: (start, end, the special
        or None).  Hugging Face's added-token matcher finds them (Aho-Corasick in Rust, as the
        counter always did; tests/test_token_counter.py checks it against llama.cpp's
        ``tokenizer_st_partition`` on special-looking texts); the rest is one piece between them.
        A long text is matched in pieces of about ``PIECE_CHARS`` (the matcher keeps ~64 bytes a
        character while it works), cut where no special can span, and the text on both sides
        of a cut is one piece again."""
        if self._splitter is None or not text:
            return [(0, len(text), None)] if text else []
        parts: list[tuple[int, int, str | None]] = []
        start = 0
        while start < len(text):
            end = self._piece_end(text, start)
            encoding = self._splitter.encode(text[start:end], add_special_tokens=False)
            for token, (a, b) in zip(encoding.ids, encoding.offsets):
                special = None if token == 0 else self._special_of[token]
                if special is None and parts and parts[-1][2] is None and parts[-1][1] == start + a:
                    parts[-1] = (parts[-1][0], start + b, None)
                else:
                    parts.append((start + a, start + b, special))
            start = end
        return parts

    def _piece_end(self, text: str, start: int) -> int:
        """Where the piece of ``text`` from ``start`` ends: at the first place past ``PIECE_CHARS``
        between two characters that are side by side in no special token (so none spans it)."""
        pairs = self._special_pairs
        for at in range(start + PIECE_CHARS, len(text)):
            if text[at - 1:at + 1] not in pairs:
                return at
        return len(text)

    # -- step 3, a word at a time ---------------------------------------------------------------

    def _words_of(self, escaped: str) -> list[str]:
        """``escaped`` cut into words that merge apart (``_word_pattern``)."""
        if self._words_in is None:
            return [escaped]
        words = self._words_in.findall(escaped)
        if words and not words[-1]:
            words.pop()                 # findall's empty match at the end
        return words

    def _starts_of(self, word: str):
        """Where each of ``word``'s tokens starts in it: a tuple, kept in the cache when the word
        is short; an ``array('i')`` (4 bytes a token) for a long one."""
        starts = self._words.get(word)
        if starts is not None:
            return starts
        out, ids = array("i"), self._ids
        for start, size in self._symbols(word):
            if size > 1 or word[start] in ids:
                out.append(start)
            else:                               # no token: its UTF-8 bytes are
                out.extend([start] * len(word[start].encode("utf-8")))
        if len(word) > CACHED_WORD_CHARS:
            return out
        starts = _ONE if len(out) == 1 else tuple(out)
        if len(self._words) >= WORD_CACHE:
            self._words = {}
        self._words[word] = starts
        return starts

    def _symbols(self, word: str):
        """The word's final symbols (``_merge``).  A word longer than ``LONG_WORD`` (a data URI's
        base64, a minified line without a space) is merged ``LONG_WORD`` characters at a time:
        memory stays bounded (~90 bytes a character of one piece while merging), and its count
        may be a little above llama.cpp's where a piece ends (bench/RESULTS.md: 3 tokens more
        in a megabyte of base64)."""
        if len(word) <= LONG_WORD:
            yield from self._merge(word)
            return
        for at in range(0, len(word), LONG_WORD):
            for start, size in self._merge(word[at:at + LONG_WORD]):
                yield at + start, size

    def _merge(self, word: str) -> list[tuple[int, int]]:
        """llama.cpp's merging of one word: its final symbols as (start, length).  A symbol is named
        by its first character: the one after symbol ``i`` is ``i + size[i]``.  A candidate pair
        is one int, ordered as llama.cpp's queue pops them (the merged token's score, highest first,
        then the leftmost) and holding its length: ``(rank * m + left) * m + length``; an int and
        two arrays keep a long word (a data URI's megabyte of base64) to ~45 bytes a character."""
        n = len(word)
        if n < 2:
            return [(0, n)] if n else []
        ids, rank, m = self._ids, self._rank, n + 1
        size = array("i", [1]) * n
        prev = array("i", range(-1, n - 1))
        queue = []
        for left in range(n - 1):
            token = ids.get(word[left:left + 2])
            if token is not None:
                queue.append((rank[token] * m + left) * m + 2)
        heapq.heapify(queue)
        pop, push = heapq.heappop, heapq.heappush
        while queue:
            key = pop(queue)
            together, left = key % m, key // m % m
            right = left + size[left]
            # gone stale: either symbol was merged since (llama.cpp's own test)
            if size[left] == 0 or right >= n or size[right] == 0 or size[left] + size[right] != together:
                continue
            size[left], size[right] = together, 0
            after = left + together
            if after < n:
                prev[after] = left
                token = ids.get(word[left:after + size[after]])
                if token is not None:
                    push(queue, (rank[token] * m + left) * m + together + size[after])
            before = prev[left]
            if before >= 0:
                token = ids.get(word[before:after])
                if token is not None:
                    push(queue, (rank[token] * m + before) * m + size[before] + together)
        out, at = [], 0
        while at < n:
            out.append((at, size[at]))
            at += size[at]
        return out


def _ranks(scores) -> array:
    """Each token's place by score, highest first (0), equal scores sharing a place: the order
    llama.cpp's queue takes merges in, as small ints."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    ranks = array("i", bytes(4 * len(scores)))
    place, last = -1, None
    for i in order:
        if scores[i] != last:
            place, last = place + 1, scores[i]
        ranks[i] = place
    return ranks


def _word_pattern(tokens: list[str]) -> re.Pattern | None:
    """What ``findall`` cuts a piece of text into words with: a word is a run of "▁", then the
    text up to the next "▁" that starts a word.  A "▁" starts a word unless a token of the
    vocabulary holds it right after the character before it (that character "joins" it: "▁"
    itself, and for Gemma ">").  None (no cuts) when too many characters join."""
    joiners = {token[i - 1] for token in tokens if SPACE in token[1:]
               for i in range(1, len(token)) if token[i] == SPACE and token[i - 1] != SPACE}
    if len(joiners) > JOINERS_MAX:
        return None
    if not joiners:
        return re.compile(f"{SPACE}*[^{SPACE}]*")
    joined = "".join(re.escape(c) for c in sorted(joiners))
    return re.compile(f"{SPACE}*(?:[^{SPACE}]*[{joined}]{SPACE}+)*[^{SPACE}]*")


def _special_splitter(specials: list[str]):
    """A Hugging Face tokenizer that only finds the special tokens: each is an added token, and the
    text between two is one unknown word (id 0, no pre-tokenizer), with its offsets."""
    from tokenizers import AddedToken, Tokenizer, models

    splitter = Tokenizer(models.WordLevel({"\x00text": 0}, unk_token="\x00text"))
    splitter.add_special_tokens([AddedToken(t, special=True, normalized=False, single_word=False, lstrip=False,
                                            rstrip=False) for t in specials])
    return splitter
