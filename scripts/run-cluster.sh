#!/usr/bin/env bash
# Set up and run a three-broker cluster on one machine: a standalone ZooKeeper on
# 127.0.0.1:2181 (data in ./data/zookeeper) and brokers 1, 2, 3 on 127.0.0.1:9092,
# 9093 and 9094 (data in ./data/broker-N, configs in ./data/server-N.properties).
# Ctrl-C stops the brokers cleanly (each hands its leaderships over first), then
# ZooKeeper. Extra arguments go to every broker (e.g. -o min.insync.replicas=1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/install-zookeeper.sh
mkdir -p data
pids=()

stop_all() {
  trap - INT TERM
  echo "stopping the brokers ..." >&2
  for pid in "${pids[@]:1}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]:1}"; do wait "$pid" 2>/dev/null || true; done
  echo "stopping ZooKeeper ..." >&2
  kill -TERM "${pids[0]}" 2>/dev/null || true
  wait "${pids[0]}" 2>/dev/null || true
  exit 130
}
trap stop_all INT TERM

# Each in a session of its own: the terminal's Ctrl-C reaches only this script,
# which stops them in order (ZooKeeper last, so brokers can hand over leaderships).
setsid .venv/bin/gregor zookeeper start --data-dir ./data/zookeeper --port 2181 &
pids+=($!)
zookeeper_ok() {  # ZooKeeper's own readiness word: ruok -> imok
  { exec 3<>/dev/tcp/127.0.0.1/2181 && printf ruok >&3 && [ "$(head -c 4 <&3)" = imok ]; } \
    2>/dev/null
  local ok=$?
  exec 3>&-
  return $ok
}
for _ in $(seq 300); do zookeeper_ok && break; sleep 0.1; done

for id in 1 2 3; do
  port=$((9091 + id))
  cat > "data/server-$id.properties" <<PROPERTIES
broker.id=$id
listeners=PLAINTEXT://127.0.0.1:$port
log.dirs=./data/broker-$id
zookeeper.connect=127.0.0.1:2181/gregor
zookeeper.session.timeout.ms=6000
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
PROPERTIES
  setsid .venv/bin/gregor broker start --config "data/server-$id.properties" "$@" &
  pids+=($!)
done
echo "cluster starting: ZooKeeper 127.0.0.1:2181, brokers 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 (Ctrl-C stops it)" >&2
wait
