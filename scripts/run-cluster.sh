#!/usr/bin/env bash
# Set up and run a three-broker cluster on one machine: a standalone ZooKeeper on
# 127.0.0.1:2181 (data in ./data/zookeeper) and brokers 1, 2, 3 on 127.0.0.1:9092,
# 9093 and 9094 (data in ./data/broker-N, configs in ./data/server-N.properties,
# output in ./data/broker-N.log), serving Prometheus metrics on
# http://127.0.0.1:9644/metrics, 9645 and 9646 (monitoring/prometheus.yml scrapes
# them), and a schema registry (Confluent's API) on http://127.0.0.1:8081, its schemas
# in the cluster's _schemas topic (output in ./data/schema-registry.log). Ctrl-C (or
# SIGTERM) stops the registry, then the brokers cleanly, each handing its leaderships
# over first, then ZooKeeper. A broker killed meanwhile (to
# watch a failover) leaves the others running; start it again by hand with
#   .venv/bin/gregor broker start --config data/server-N.properties
# Extra arguments go to every broker (e.g. -o unclean.leader.election.enable=true).
# With --secure first, the cluster is secured as Kafka users secure theirs: one SASL_SSL
# listener per broker (TLS certificates from scripts/make-certs.sh in ./data/certs; SASL
# PLAIN and SCRAM), brokers among themselves over it as the super user admin, ACLs
# switched on; the client settings (with admin's generated password) are written to
# ./data/client.properties, which gregor commands take with --command-config. The
# schema registry then reaches the brokers over SASL_SSL too, as the SCRAM user
# schema-registry (password generated into ./data/schema-registry.password, settings in
# ./data/schema-registry.properties), allowed by ACLs what it needs: _schemas and its
# two groups.
# Beside another cluster (its test runs it so), GREGOR_CLUSTER_HOST sets the address
# everything listens on (another loopback address, e.g. 127.0.1.1, keeps the ports)
# and GREGOR_CLUSTER_DATA the directory for ./data.
set -euo pipefail
cd "$(dirname "$0")/.."
host="${GREGOR_CLUSTER_HOST:-127.0.0.1}"
data="${GREGOR_CLUSTER_DATA:-data}"
secure=""
if [ "${1:-}" = "--secure" ]; then
  secure=1
  shift
fi
scripts/setup.sh schemas
scripts/install-zookeeper.sh
mkdir -p "$data"
zookeeper=""
brokers=()
registry=""

stop_all() {
  trap - INT TERM
  if [ -n "$registry" ]; then
    echo "stopping the schema registry ..." >&2
    kill -TERM "$registry" 2>/dev/null || true
    wait "$registry" 2>/dev/null || true
  fi
  # One at a time, as in a rolling restart: each hands its leaderships to brokers
  # that are not stopping themselves.
  for i in "${!brokers[@]}"; do
    echo "stopping broker $((i + 1)) ..." >&2
    kill -TERM "${brokers[$i]}" 2>/dev/null || true
    wait "${brokers[$i]}" 2>/dev/null || true
  done
  if [ -n "$zookeeper" ]; then
    echo "stopping ZooKeeper ..." >&2
    kill -TERM "$zookeeper" 2>/dev/null || true
    wait "$zookeeper" 2>/dev/null || true
  fi
}
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM

# Wait until a process says it is ready (writes FILE), or stop everything if it dies.
wait_ready() {  # wait_ready PID FILE WHAT LOG
  until [ -s "$2" ]; do
    if ! kill -0 "$1" 2>/dev/null; then
      echo "error: $3 exited before it was ready; the end of $4:" >&2
      tail -n 15 "$4" >&2 || true
      stop_all
      exit 1
    fi
    sleep 0.1
  done
}

# Each in a session of its own: the terminal's Ctrl-C reaches only this script,
# which stops them in order (ZooKeeper last, so brokers can hand over leaderships).
# gregor zookeeper start prints its first line once its own ZooKeeper serves.
rm -f "$data/zookeeper.out"
setsid .venv/bin/gregor zookeeper start --data-dir "$data/zookeeper" --host "$host" \
  --port 2181 > "$data/zookeeper.out" &
zookeeper=$!
wait_ready "$zookeeper" "$data/zookeeper.out" ZooKeeper "$data/zookeeper/zookeeper.log"
cat "$data/zookeeper.out" >&2

listener="PLAINTEXT"
security=""
advertised="$host"
if [ -n "$secure" ]; then
  # librdkafka checks the broker's DNS name; on another loopback address than
  # 127.0.0.1 (which localhost names) clients must turn that check off.
  [ "$host" = 127.0.0.1 ] && advertised=localhost
  scripts/make-certs.sh "$data/certs" "$host" >/dev/null
  [ -s "$data/admin.password" ] || (umask 077; openssl rand -hex 16 > "$data/admin.password")
  password=$(cat "$data/admin.password")
  listener="SASL_SSL"
  security="advertised.listeners=SASL_SSL://$advertised:PORT
security.inter.broker.protocol=SASL_SSL
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" password=\"$password\" user_admin=\"$password\";
ssl.keystore.type=PEM
ssl.keystore.location=$data/certs/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$data/certs/ca.pem
authorizer.class.name=kafka.security.authorizer.AclAuthorizer
super.users=User:admin"
  (umask 077; cat > "$data/client.properties" <<PROPERTIES
security.protocol=SASL_SSL
sasl.mechanism=PLAIN
sasl.username=admin
sasl.password=$password
ssl.ca.location=$data/certs/ca.pem
PROPERTIES
  )
  if [ "$advertised" != localhost ]; then
    echo "ssl.endpoint.identification.algorithm=none" >> "$data/client.properties"
  fi
fi
for id in 1 2 3; do
  port=$((9091 + id))
  cat > "$data/server-$id.properties" <<PROPERTIES
broker.id=$id
listeners=$listener://$host:$port
${security//PORT/$port}
log.dirs=$data/broker-$id
zookeeper.connect=$host:2181/gregor
zookeeper.session.timeout.ms=6000
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
metrics.listener=http://$host:$((9643 + id))/metrics
PROPERTIES
  rm -f "$data/broker-$id.ready"
  setsid .venv/bin/gregor broker start --config "$data/server-$id.properties" \
    --ready-file "$data/broker-$id.ready" "$@" >> "$data/broker-$id.log" 2>&1 &
  brokers+=($!)
done
for id in 1 2 3; do
  wait_ready "${brokers[$((id - 1))]}" "$data/broker-$id.ready" "broker $id" \
    "$data/broker-$id.log"
done
registry_bootstrap="$host:9092,$host:9093,$host:9094"
registry_options=()
if [ -n "$secure" ]; then
  # The registry is a Kafka client like any other: a SCRAM user of its own, allowed by
  # ACLs only what it does (create, read and write _schemas, join its election's group
  # and name its reader's), known to every broker before it starts (a broker that has
  # not yet read the new credential from ZooKeeper would refuse it for good).
  registry_bootstrap="$advertised:9092,$advertised:9093,$advertised:9094"
  [ -s "$data/schema-registry.password" ] ||
    (umask 077; openssl rand -hex 16 > "$data/schema-registry.password")
  admin=(-b "$registry_bootstrap" --command-config "$data/client.properties")
  .venv/bin/gregor users create schema-registry --mechanism SCRAM-SHA-512 "${admin[@]}" \
    < "$data/schema-registry.password" >/dev/null
  .venv/bin/gregor acls add --topic _schemas --allow-principal User:schema-registry \
    --operation Create --operation Read --operation Write --operation DescribeConfigs \
    "${admin[@]}" >/dev/null
  for group in schema-registry gregor-schema-registry; do
    .venv/bin/gregor acls add --group "$group" --allow-principal User:schema-registry \
      --operation Read "${admin[@]}" >/dev/null
  done
  (umask 077; sed -e 's/^sasl.mechanism=.*/sasl.mechanism=SCRAM-SHA-512/' \
    -e 's/^sasl.username=.*/sasl.username=schema-registry/' \
    -e "s/^sasl.password=.*/sasl.password=$(cat "$data/schema-registry.password")/" \
    "$data/client.properties" > "$data/schema-registry.properties")
  registry_options=(--command-config "$data/schema-registry.properties")
  for port in 9092 9093 9094; do
    tries=0
    until .venv/bin/gregor topics list -b "$advertised:$port" "${registry_options[@]}" \
        >/dev/null 2>&1; do
      tries=$((tries + 1))
      if [ "$tries" -ge 60 ]; then
        echo "error: broker on port $port does not accept the user schema-registry" >&2
        stop_all
        exit 1
      fi
      sleep 0.5
    done
  done
fi
# The registry prints its first line once it has read _schemas and listens.
rm -f "$data/schema-registry.out"
setsid .venv/bin/gregor schema-registry --bootstrap-server "$registry_bootstrap" \
  --listen "$host:8081" "${registry_options[@]}" \
  > "$data/schema-registry.out" 2>> "$data/schema-registry.log" &
registry=$!
wait_ready "$registry" "$data/schema-registry.out" "the schema registry" \
  "$data/schema-registry.log"
if [ -n "$secure" ]; then
  echo "cluster ready: ZooKeeper $host:2181/gregor, brokers" \
    "$advertised:9092,$advertised:9093,$advertised:9094 (SASL_SSL; client settings in" \
    "$data/client.properties: super user admin, SASL PLAIN), schema registry" \
    "http://$host:8081 (a SCRAM client of the brokers), metrics on" \
    "http://$host:9644/metrics, :9645 and :9646 (Ctrl-C stops it); e.g." \
    ".venv/bin/gregor topics list -b $advertised:9092 --command-config" \
    "$data/client.properties" >&2
else
  echo "cluster ready: ZooKeeper $host:2181/gregor, brokers" \
    "$host:9092,$host:9093,$host:9094, schema registry http://$host:8081, metrics on" \
    "http://$host:9644/metrics, :9645 and :9646 (Ctrl-C stops it)" >&2
fi
wait
