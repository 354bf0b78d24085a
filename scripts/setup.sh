#!/usr/bin/env bash
# Create .venv and install gregor with what its tests need; install Debian tools
# the tests use (kcat). Safe to run again: it only installs what is missing.
# Usage: scripts/setup.sh [extras]   e.g. scripts/setup.sh test,spark
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
if [ -n "$extras" ]; then
  .venv/bin/python -m pip install --quiet -e ".[$extras]"
else
  .venv/bin/python -m pip install --quiet -e .
fi

if [[ ",$extras," == *",test,"* ]] && ! command -v kcat >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq kcat >/dev/null
  else
    echo "warning: kcat is not installed and apt-get is unavailable; kcat tests will be skipped" >&2
  fi
fi
