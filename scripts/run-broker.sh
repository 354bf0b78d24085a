#!/usr/bin/env bash
# Set up and run a single-node broker on 127.0.0.1:9092 with data in ./data, serving
# Prometheus metrics on http://127.0.0.1:9644/metrics (monitoring/ has a scrape config
# and a Grafana dashboard), and a schema registry (Confluent's API) on
# http://127.0.0.1:8081 keeping its schemas in the broker's _schemas topic (its log in
# ./data.schema-registry.log). Ctrl-C (or SIGTERM) stops both, the registry first.
# Extra arguments go to `gregor broker start` (e.g. -o num.partitions=3).
# setup.sh runs pip only on the first start or after pyproject.toml changed, so a
# restart takes about a second.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh schemas
broker=""
registry=""

stop_all() {
  trap - INT TERM
  for pid in $registry $broker; do
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM

echo "broker on 127.0.0.1:9092, metrics on http://127.0.0.1:9644/metrics" >&2
rm -f data.ready
# In sessions of their own: the terminal's Ctrl-C reaches only this script, which stops
# the registry (a client of the broker) before the broker.
setsid .venv/bin/gregor broker start --log-dirs ./data \
  --listeners PLAINTEXT://127.0.0.1:9092 --ready-file data.ready \
  -o metrics.listener=http://127.0.0.1:9644/metrics "$@" &
broker=$!
until [ -s data.ready ]; do
  if ! kill -0 "$broker" 2>/dev/null; then
    wait "$broker" || exit $?
    exit 1
  fi
  sleep 0.1
done
setsid .venv/bin/gregor schema-registry --bootstrap-server 127.0.0.1:9092 \
  --listen 127.0.0.1:8081 2>> data.schema-registry.log &
registry=$!
# The broker's end is the script's (a registry that could not start, its port taken,
# leaves the broker serving: its log says why).
status=0
wait "$broker" || status=$?
broker=""
stop_all
exit "$status"
