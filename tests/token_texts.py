"""Texts of every kind for checking token counts against llama.cpp (issue 30), made deterministically.

``texts()`` gives (kind, text) pairs: prose, Markdown, code, HTML text, Japanese and other scripts,
emoji, runs of spaces and newlines, control characters, text that looks like special tokens,
numbers, and pieces of real files (this repository's documents and sources, and
/work/shared/reference when it exists).
"""

from __future__ import annotations

import random
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = Path("/work/shared/reference")

WORDS = ("the of and to in is that for it as with was on be by are this or from at an not which have "
         "model token window budget chunk file session reply server Pi memory card count llama "
         "tokenizer prompt exact estimate Harvey context analysis document read write users can't "
         "won't it's we're I'll they've she'd Markdown HTML Python").split()
JAPANESE = ("日本語のテキストです。トークンの数を正確に数えます。東京都の天気は晴れ、気温は二十度。"
            "カタカナとひらがなと漢字が混ざった文章。ラズベリーパイで動くチャットアプリ。")
SCRIPTS = ["Привет, как дела? Это тест токенизатора.", "مرحبا بالعالم، هذا اختبار.", "Γειά σου Κόσμε, δοκιμή.",
           "नमस्ते दुनिया, यह एक परीक्षण है।", "안녕하세요 세계, 토큰 테스트입니다.", "你好，世界。这是一个测试。",
           "Ça va très bien, déjà vu à l'hôtel — naïve café.", "e\u0301 combining: cafe\u0301 n\u0303 a\u030a",
           "Ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３", "ẞtraße Øresund Åland ĳ ŉ ǅ", "ไทย ภาษาไทย ทดสอบ", "עברית בדיקה"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵", "🏳️‍🌈", "❤️", "✨", "🤖", "🧪", "☕", "🍣", "🔥", "1️⃣", "©", "™"]
SPECIAL_LOOKING = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>", "<bos>",
                   "<eos>", "<unk>", "<pad>", "<mask>", "<0x41>", "<0x0A>", "[multimodal]", "<unused5>",
                   "<|im_sta", "im_end|>", "<start_of_image>", "<|begin_of_text|>", "<s>", "</s>", "<file_sep>",
                   "<repo_name>", "<jupyter_code>", "<|eot_id|>", "<think>", "</think>"]
CONTROLS = ["\x00", "\x01", "\x07", "\x08", "\x0b", "\x0c", "\x1b[31m", "\x7f", "\u200b", "\ufeff", "\u00a0",
            "\u2028", "\u2003", "\u200d", "\r", "\r\n", "\t"]
CODE = ['def count(text: str) -> int:\n    """Tokens."""\n    return len(text.encode("utf-8")) // 4\n',
        "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
        "const f = (a, b) => { return a ?? b; };\nconsole.log(`x=${f(1, 2)}`);\n",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;\n",
        "fn main() {\n    let v: Vec<u32> = (0..10).collect();\n    println!(\"{:?}\", v);\n}\n",
        "if [ -f \"$HOME/.bashrc\" ]; then\n  . \"$HOME/.bashrc\"\nfi\n",
        "    x = [i**2 for i in range(10) if i % 2 == 0]  # squares\n\n\n        y = {'a': 1}\n"]


def _prose(rng: random.Random, n: int) -> str:
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 18))]
        sentence = " ".join(words)
        out.append(sentence[0].upper() + sentence[1:] + rng.choice([".", "!", "?", ",", ";", ":"]))
    return " ".join(out)


def _markdown(rng: random.Random) -> str:
    parts = [f"{'#' * rng.randint(1, 4)} {_prose(rng, 1)}", "", _prose(rng, 2), "",
             f"- {rng.choice(WORDS)} **{rng.choice(WORDS)}** `{rng.choice(WORDS)}()`",
             f"  1. [{rng.choice(WORDS)}](https://example.org/{rng.choice(WORDS)}?q={rng.randint(0, 999)})",
             "", "| a | b |", "|---|:-:|", f"| {rng.randint(0, 99999)} | {rng.choice(WORDS)} |", "",
             "```python", rng.choice(CODE).rstrip(), "```", "", f"> {_prose(rng, 1)}", "---"]
    return "\n".join(parts[: rng.randint(6, len(parts))])


def _html_text(rng: random.Random) -> str:
    return (f"<div class=\"x\"><h2>{_prose(rng, 1)}</h2>\n<p>{_prose(rng, 2)} &amp; &lt;tag&gt; &nbsp;</p>"
            f"<ul><li>{rng.choice(WORDS)}</li><li>{rng.randint(1, 10**6)}</li></ul></div>")


def _whitespace(rng: random.Random) -> str:
    pieces = [" " * rng.randint(1, 40), "\n" * rng.randint(1, 35), "\t" * rng.randint(1, 6), "\r\n", " \n",
              "\n ", rng.choice(WORDS)]
    return "".join(rng.choice(pieces) for _ in range(rng.randint(2, 12)))


def _mix(rng: random.Random) -> str:
    pool = [rng.choice(WORDS), rng.choice(EMOJI), rng.choice(SPECIAL_LOOKING), rng.choice(CONTROLS),
            rng.choice(SCRIPTS)[: rng.randint(1, 20)], str(rng.randint(0, 10**9)), " " * rng.randint(0, 5),
            "\n" * rng.randint(0, 3), JAPANESE[rng.randint(0, 40):][: rng.randint(1, 30)]]
    return "".join(rng.choice(pool) for _ in range(rng.randint(3, 15)))


def _files() -> list[tuple[str, str]]:
    """Pieces of real files: documents and sources of this repository, and the shared references."""
    paths = sorted(ROOT.glob("docs/**/*.md"))[:6] + [ROOT / "README.md"] + sorted(ROOT.glob("app/*.py"))[:6]
    paths += sorted((ROOT / "static").glob("**/*.css"))[:1] + sorted((ROOT / "templates").glob("*.html"))[:3]
    paths += sorted(ROOT.glob("tests/data/spmd/*.spmd"))[:3]
    if REFERENCE.is_dir():
        paths += sorted(REFERENCE.glob("*.md"))[:6] + sorted(REFERENCE.glob("harvey-fixtures/*"))[:6]
    out = []
    for path in paths:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        out.append((f"file:{path.name}", text[:30000]))
    return out


def texts() -> list[tuple[str, str]]:
    """At least 300 (kind, text) pairs, the same on every run."""
    rng = random.Random(30)
    out: list[tuple[str, str]] = []
    for _ in range(40):
        out.append(("prose", _prose(rng, rng.randint(1, 8))))
    for _ in range(35):
        out.append(("markdown", _markdown(rng)))
    for code in CODE:
        out.append(("code", code))
    for _ in range(18):
        out.append(("code", rng.choice(CODE).replace("    ", rng.choice(["  ", "\t", "        "]))))
    for _ in range(25):
        out.append(("html", _html_text(rng)))
    for i in range(20):
        out.append(("japanese", JAPANESE[i * 3:][: rng.randint(5, 80)] + rng.choice(["", "。", " ", "\n"])))
    for script in SCRIPTS:
        out.append(("script", script))
    for _ in range(20):
        out.append(("emoji", "".join(rng.choice(EMOJI + [" ", "a", "\n"]) for _ in range(rng.randint(1, 12)))))
    for _ in range(35):
        out.append(("whitespace", _whitespace(rng)))
    for c in CONTROLS:
        out.append(("control", f"a{c}b{c}{c} c"))
    for s in SPECIAL_LOOKING:
        out.append(("special", f"{rng.choice(WORDS)} {s}{rng.choice(WORDS)}\n{s}{s} {s}"))
    for _ in range(20):
        out.append(("numbers", " ".join(str(rng.randint(0, 10 ** rng.randint(1, 15))) for _ in range(rng.randint(1, 8)))
                    + rng.choice(["", ".5", ",000", "e-3", "%"])))
    for _ in range(40):
        out.append(("mix", _mix(rng)))
    out += [("edge", t) for t in ["", " ", "  ", "\n", "a", "'s", "'S", "I'M", "a'll", "''", "1,234.56", "..."]]
    out += _files()
    return out
