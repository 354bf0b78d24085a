#!/usr/bin/env bash
# Set up and run a single-node broker on 127.0.0.1:9092 with data in ./data, serving
# Prometheus metrics on http://127.0.0.1:9644/metrics (monitoring/ has a scrape config
# and a Grafana dashboard).
# Extra arguments go to `gregor broker start` (e.g. -o num.partitions=3).
# setup.sh runs pip only on the first start or after pyproject.toml changed, so a
# restart takes about a second.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "broker on 127.0.0.1:9092, metrics on http://127.0.0.1:9644/metrics" >&2
exec .venv/bin/gregor broker start --log-dirs ./data \
  --listeners PLAINTEXT://127.0.0.1:9092 \
  -o metrics.listener=http://127.0.0.1:9644/metrics "$@"
