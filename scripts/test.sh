#!/usr/bin/env bash
# Set up everything the tests need, check lint and types, and run the whole suite.
# Extra arguments go to pytest (e.g. -k produce -x).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test,spark,bench,console
scripts/install-zookeeper.sh tests
scripts/install-chromium.sh
.venv/bin/ruff check src tests bench
.venv/bin/mypy
exec .venv/bin/python -m pytest -q "$@"
