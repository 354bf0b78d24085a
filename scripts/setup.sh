#!/usr/bin/env bash
# Create .venv and install gregor with what its tests need; install Debian tools
# the tests use (kcat); with the spark extra, build the Spark source's JVM jar; with the
# console extra, build the web console's front end.
# Safe to run again: it only installs (and builds) what is missing or changed.
# Usage: scripts/setup.sh [extras]   e.g. scripts/setup.sh test,spark
#
# pip runs only when needed, so that run-broker.sh restarts in about a second: each
# install leaves a stamp per extra (and "gregor" for the package itself) in
# .venv/.installed/<hash of pyproject.toml and setup.py>/, and pip runs again when they
# changed (its stamps are gone) or an extra asked for has no stamp yet.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# setup.py and the C source it compiles (the Spark source's record scanner) count too:
# a changed extension must be built again.
key=$(.venv/bin/python -c 'import hashlib
print(hashlib.sha256(b"".join(open(f, "rb").read() for f in ("pyproject.toml", "setup.py",
      "src/gregor/spark/_record_scan.c"))).hexdigest()[:16])')
stamps=".venv/.installed/$key"
IFS=, read -ra wanted <<< "gregor,$extras"
up_to_date=true
for name in "${wanted[@]}"; do
  [ -e "$stamps/$name" ] || up_to_date=false
done
if ! $up_to_date; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  if [ -n "$extras" ]; then
    .venv/bin/python -m pip install --quiet -e ".[$extras]"
  else
    .venv/bin/python -m pip install --quiet -e .
  fi
  mkdir -p "$stamps"
  # Stamps of an earlier pyproject.toml say nothing about this one.
  find .venv/.installed -mindepth 1 -maxdepth 1 ! -name "$key" -exec rm -rf {} +
  for name in "${wanted[@]}"; do
    touch "$stamps/$name"
  done
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

# The Spark source's JVM read path; without a JDK this only says so (the Python source serves).
if [[ ",$extras," == *",spark,"* ]]; then
  scripts/build-spark-jar.sh
fi

if [[ ",$extras," == *",console,"* ]]; then
  scripts/build-console.sh
fi
