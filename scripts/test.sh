#!/usr/bin/env bash
# Set up everything the tests need, check lint and types, and run the whole suite.
# pytest runs in WORKERS (default 3) workers (pytest-xdist; tests/conftest.py hands each
# worker whole modules, all of tests/console, and the standalone Spark cluster's modules
# together, so shared things start once; the slowest units first). The suite mostly waits
# on brokers, ZooKeeper, Spark and chromium, so a third worker on two cores keeps them
# busier.
# Extra arguments go to pytest (e.g. -k produce -x; -n 0 runs in one process). The 30
# slowest tests are listed at the end of every run, so each CI log says where its time went.
#
# To save wall time on a fresh clone: KafkaJS's npm install runs while pip installs, and
# mypy checks src while the tests run (its verdict is printed, and fails the run, after
# pytest's). The Debian packages go first, one apt at a time.
# Bytecode is cached (in git-ignored __pycache__ directories) even where the environment
# says not to: the suite starts hundreds of brokers and commands, each of which would
# compile gregor's modules again (~0.5 s of CPU a broker), and each worker would rewrite
# every test module's asserts again.
set -euo pipefail
cd "$(dirname "$0")/.."
unset PYTHONDONTWRITEBYTECODE
scripts/install-zookeeper.sh tests
scripts/install-chromium.sh
scripts/apt-install.sh openssl kcat  # scripts/make-certs.sh makes the TLS tests' certificates
kafkajs_log=$(mktemp)
mypy_log=$(mktemp)
trap 'rm -f "$kafkajs_log" "$mypy_log"' EXIT
scripts/install-kafkajs.sh > "$kafkajs_log" 2>&1 &
kafkajs=$!
scripts/setup.sh test,spark,bench,console,schemas
if ! wait "$kafkajs"; then
  cat "$kafkajs_log" >&2
  exit 1
fi
cat "$kafkajs_log"
.venv/bin/ruff check src tests bench
.venv/bin/mypy > "$mypy_log" 2>&1 &
mypy=$!
status=0
.venv/bin/python -m pytest -q -n "${WORKERS:-3}" --durations=30 "$@" || status=$?
if ! wait "$mypy"; then
  cat "$mypy_log"
  exit 1
fi
exit "$status"
