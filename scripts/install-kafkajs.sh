#!/usr/bin/env bash
# Install KafkaJS (the Node.js client, with its snappy codec) into node/ for
# tests/test_clients_kafkajs.py and bench.txn_bench. npm ci installs exactly the
# committed package-lock.json; it runs again only when that file changed
# (node_modules/.installed holds its hash). Without Node.js and npm this only says so:
# the KafkaJS tests are skipped, and the bench runs without KafkaJS.
set -euo pipefail
cd "$(dirname "$0")/../node"
if ! command -v npm >/dev/null 2>&1; then
  echo "warning: npm is not installed; the KafkaJS tests will be skipped, and the bench runs without it" >&2
  exit 0
fi
lock=$(sha256sum package-lock.json | cut -c1-16)
if [ "$(cat node_modules/.installed 2>/dev/null)" != "$lock" ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock" > node_modules/.installed
fi
