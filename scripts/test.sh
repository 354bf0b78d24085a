#!/usr/bin/env bash
# Set up everything the tests need, check lint and types, and run the whole suite.
# pytest runs in two workers (pytest-xdist; tests/conftest.py hands each worker whole
# modules, all of tests/console, and the standalone Spark cluster's modules together, so
# shared things start once; the slowest units first).
# Extra arguments go to pytest (e.g. -k produce -x; -n 0 runs in one process).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test,spark,bench,console,schemas
scripts/install-zookeeper.sh tests
scripts/install-chromium.sh
scripts/install-kafkajs.sh
scripts/apt-install.sh openssl  # scripts/make-certs.sh makes the TLS tests' certificates
.venv/bin/ruff check src tests bench
.venv/bin/mypy
exec .venv/bin/python -m pytest -q -n 2 "$@"
