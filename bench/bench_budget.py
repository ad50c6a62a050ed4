"""Item 7: the budget's token estimate against the real model's prompt_eval_count.

Run from the repository root:  python bench/bench_budget.py

The real small model: SmolLM2-135M-Instruct behind Ollama's API (harvey_demo.server.DemoServer,
threads=1), with its own tokenizer and chat template.  Each prompt is sent the way the app
sends a chat turn: [system: the default system prompt, user: the text], num_ctx 8192,
num_predict 1, through app.modelserver.ollama.OllamaServer; the truth is the final line's
``prompt_eval_count``.

* before: ``estimate_messages(messages, 4.0)``, the app's estimate before any calibration
  (UTF-8 bytes / 4 per message + 4 tokens of template per message);
* after: a fresh ``app.budget.Calibration`` is fed the training prompts' counts through
  ``observe()`` (as the app does after every call), and the held-out prompts are estimated
  with ``estimate_messages(messages, calibration.bytes_per_token(model))``.
  Two ways: calibrated on the same kind of text only, and calibrated on a mix of prose and
  code (the app keeps one figure per model, whatever was sent).

Texts (real, already on the machine; different files for training and held-out):
* prose: license texts from /usr/share/common-licenses (plain English); training GPL-3,
  GFDL-1.3, MPL-2.0; held-out Apache-2.0, LGPL-2.1, GPL-2 (Debian / Raspberry Pi OS ship them);
* code: CPython standard-library modules; training argparse, textwrap, shutil; held-out
  json/decoder, http/server, tarfile.
Sizes: 500, 1,000, 2,000, 4,000, 8,000 and 16,000 bytes per prompt (cut at a line break),
one slice per source and size.

Error = (estimate - prompt_eval_count) / prompt_eval_count; the table gives the mean of
|error| (MAPE), the mean signed error (negative = the app under-estimates, the dangerous
side) and the worst |error|.  Token counts are deterministic (the first prompt is sent
twice to check), so one pass is the measurement; there is no timing here.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
from pathlib import Path

from _harness import header, table

MODEL = "smollm2:135m"
SIZES = (500, 1000, 2000, 4000, 8000, 16000)
LICENSES = Path("/usr/share/common-licenses")
PROSE_TRAIN = ("GPL-3", "GFDL-1.3", "MPL-2.0")
PROSE_HELD = ("Apache-2.0", "LGPL-2.1", "GPL-2")
CODE_TRAIN = ("argparse", "textwrap", "shutil")
CODE_HELD = ("json.decoder", "http.server", "tarfile")


def source_text(name: str) -> str:
    if (LICENSES / name).exists():
        return (LICENSES / name).read_text(encoding="utf-8")
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        raise SystemExit(f"missing text source {name}")
    return Path(spec.origin).read_text(encoding="utf-8")


def slice_of(text: str, size: int, offset_fraction: float = 0.1) -> str:
    """``size`` bytes from a little way into ``text`` (past the header), cut at line breaks."""
    data = text.encode()
    while len(data) < size + len(data) * offset_fraction + 200:
        data += b"\n" + text.encode()
    start = data.find(b"\n", int(len(data) * offset_fraction)) + 1
    piece = data[start:start + size].decode("utf-8", "ignore")
    return piece[: piece.rfind("\n") + 1]


def prompts(names: tuple[str, ...], sizes: tuple[int, ...]) -> list[tuple[str, str]]:
    return [(name, slice_of(source_text(name), size)) for name in names for size in sizes]


def main() -> None:
    from harvey_demo import server as demo_server
    from app.budget import Calibration, estimate_messages
    from app.config import Config
    from app.modelserver import Usage
    from app.modelserver.ollama import OllamaServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                        help="prompt sizes in bytes (default: %(default)s; the 16,000-byte ones take half the time)")
    args = parser.parse_args()
    sizes = tuple(args.sizes)
    if not demo_server.model_available():
        raise SystemExit(demo_server.INSTALL_HINT)
    system = Config().system_prompt
    sets = {"prose train": prompts(PROSE_TRAIN, sizes), "prose held": prompts(PROSE_HELD, sizes),
            "code train": prompts(CODE_TRAIN, sizes), "code held": prompts(CODE_HELD, sizes)}
    command = "python bench/bench_budget.py" + ("" if sizes == SIZES else
                                                  " --sizes " + " ".join(map(str, sizes)))
    print(header("Budget estimate vs prompt_eval_count, SmolLM2-135M (item 7)", command))
    counts: dict[str, list[tuple[list[dict], int]]] = {}
    sources: list[tuple] = []
    with demo_server.DemoServer(threads=1) as server:
        client = OllamaServer(server.url, read_timeout=600)

        def count(messages):
            stream = client.chat(MODEL, messages, num_ctx=8192, num_predict=1, temperature=0)
            "".join(stream)
            return stream.usage.prompt_tokens

        first = [{"role": "system", "content": system}, {"role": "user", "content": sets["prose train"][0][1]}]
        assert count(first) == count(first), "prompt_eval_count is not deterministic"
        for key, texts in sets.items():
            counts[key] = []
            for name, text in texts:
                messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
                counts[key].append((messages, count(messages)))
                sources.append((key, name, len(text.encode()), messages, counts[key][-1][1]))

    def errors(key: str, bpt: float) -> list[float]:
        return [(estimate_messages(m, bpt) - truth) / truth * 100 for m, truth in counts[key]]

    def calibrated(*keys: str) -> float:
        cal = Calibration(None)
        pairs = [p for key in keys for p in counts[key]]
        if len(keys) > 1:   # interleave, as a session that alternates between prose and code would
            pairs = [p for group in zip(*(counts[k] for k in keys)) for p in group]
        for messages, truth in pairs:
            warning = cal.observe(MODEL, messages, Usage(prompt_tokens=truth))
            assert warning is None, warning
        return cal.bytes_per_token(MODEL)

    def row(label: str, key: str, bpt: float) -> list:
        e = errors(key, bpt)
        return [label, key.split()[0], f"{bpt:.3f}", f"{statistics.mean(abs(x) for x in e):.1f} %",
                f"{statistics.mean(e):+.1f} %", f"{max(abs(x) for x in e):.1f} %"]

    bpt_prose, bpt_code = calibrated("prose train"), calibrated("code train")
    bpt_mixed = calibrated("prose train", "code train")
    rows = [row("before (4.0 bytes/token)", "prose held", 4.0), row("before (4.0 bytes/token)", "code held", 4.0),
            row("after, calibrated on prose", "prose held", bpt_prose),
            row("after, calibrated on code", "code held", bpt_code),
            row("after, calibrated on a prose+code mix", "prose held", bpt_mixed),
            row("after, calibrated on a prose+code mix", "code held", bpt_mixed)]
    listed = ", ".join(f"{s:,}" for s in sizes)
    print(f"{len(sizes)} sizes ({listed} bytes) x 3 sources per set; held-out sets: {len(counts['prose held'])} "
          f"prose and {len(counts['code held'])} code prompts, the training sets as large; prompt_eval_count "
          "was identical when a prompt was sent twice.\n")
    print(table(["estimate", "held-out text", "bytes/token used", "mean abs. error", "mean error", "worst abs. error"],
                rows))
    detail = []
    for key in ("prose held", "code held"):
        for (messages, truth), size in zip(counts[key], sizes * len(PROSE_HELD)):
            detail.append((key.split()[0], size, truth, estimate_messages(messages, 4.0)))
    print("\nPer size (held-out, before calibration; tokens summed over the 3 sources):\n")
    by = {}
    for kind, size, truth, est in detail:
        t, e = by.get((kind, size), (0, 0))
        by[(kind, size)] = (t + truth, e + est)
    print(table(["text", "bytes of text", "prompt_eval_count", "estimate at 4.0", "error"],
                [[k, f"{s:,}", f"{t:,}", f"{e:,}", f"{(e - t) / t * 100:+.1f} %"] for (k, s), (t, e) in by.items()]))
    print("\nPer source (all sizes): the bytes/token the model really gives (Calibration's formula: bytes / "
          "(prompt_eval_count - 4 per message), median over sizes) and the error at 4.0:\n")
    rows = []
    for name in dict.fromkeys(n for _, n, _, _, _ in sources):
        mine = [x for x in sources if x[1] == name]
        real = statistics.median(sum(len(m["content"].encode()) for m in x[3]) / (x[4] - 4 * len(x[3]))
                                 for x in mine)
        errs = [(estimate_messages(x[3], 4.0) - x[4]) / x[4] * 100 for x in mine]
        rows.append([name, mine[0][0], f"{real:.2f}", f"{statistics.mean(abs(e) for e in errs):.1f} %",
                     f"{min(errs):+.1f} … {max(errs):+.1f} %"])
    print(table(["source", "set", "real bytes/token", "mean abs. error at 4.0", "error range at 4.0"], rows))


if __name__ == "__main__":
    main()
