"""Typed broker and topic configuration, with Kafka's property names and defaults.

Users bring Kafka habits (``server.properties``, ``kafka-configs``), so every
setting keeps its Kafka name. Topic-level settings fall back to a broker-level
synonym (``retention.ms`` <- ``log.retention.ms``), as in Kafka, which is also
what DescribeConfigs reports as the value's source.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration name or value Kafka would reject (INVALID_CONFIG)."""


class ConfigType(IntEnum):
    """DescribeConfigs v3+ config types."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """Where a reported value came from (DescribeConfigs ``config_source``)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ConfigError(f"expected true or false, got {raw!r}")


def _parse_int(raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigError(f"expected an integer, got {raw!r}") from None


def _parse_float(raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise ConfigError(f"expected a number, got {raw!r}") from None


def _parse_list(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


_PARSERS: dict[ConfigType, Callable[[str], Any]] = {
    ConfigType.BOOLEAN: _parse_bool,
    ConfigType.STRING: str,
    ConfigType.INT: _parse_int,
    ConfigType.SHORT: _parse_int,
    ConfigType.LONG: _parse_int,
    ConfigType.DOUBLE: _parse_float,
    ConfigType.LIST: _parse_list,
    ConfigType.CLASS: str,
    ConfigType.PASSWORD: str,
}


def format_value(value: Any) -> str:
    """Render a typed value the way Kafka prints it in DescribeConfigs."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: Any
    doc: str
    minimum: float | None = None
    choices: tuple[str, ...] | None = None
    broker_synonym: str | None = None

    def parse(self, raw: str | Any) -> Any:
        value = _PARSERS[self.type](raw) if isinstance(raw, str) else raw
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(f"{self.name} must be at least {self.minimum}, got {value}")
        if self.choices is not None:
            items = value if isinstance(value, list) else [value]
            bad = [item for item in items if item not in self.choices]
            if bad or not items:
                raise ConfigError(f"{self.name} must be one of {', '.join(self.choices)}")
        return value


_WEEK_MS = 7 * 24 * 3600 * 1000
_DAY_MS = 24 * 3600 * 1000
_MAX_LONG = 2**63 - 1

TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("cleanup.policy", ConfigType.LIST, ["delete"],
                  "delete segments past retention, compact to the latest record per key, or both",
                  choices=("delete", "compact"), broker_synonym="log.cleanup.policy"),
        ConfigDef("retention.ms", ConfigType.LONG, _WEEK_MS,
                  "age after which a whole segment is deleted (-1: no limit)",
                  minimum=-1, broker_synonym="log.retention.ms"),
        ConfigDef("retention.bytes", ConfigType.LONG, -1,
                  "partition size beyond which the oldest segments are deleted (-1: no limit)",
                  minimum=-1, broker_synonym="log.retention.bytes"),
        ConfigDef("segment.bytes", ConfigType.INT, 1024 * 1024 * 1024,
                  "size at which the active segment rolls",
                  minimum=14, broker_synonym="log.segment.bytes"),
        ConfigDef("segment.ms", ConfigType.LONG, _WEEK_MS,
                  "age at which the active segment rolls even if not full",
                  minimum=1, broker_synonym="log.roll.ms"),
        ConfigDef("segment.index.bytes", ConfigType.INT, 10 * 1024 * 1024,
                  "maximum size of a segment's offset index; the segment rolls when it is full",
                  minimum=8, broker_synonym="log.index.size.max.bytes"),
        ConfigDef("index.interval.bytes", ConfigType.INT, 4096,
                  "bytes of log between two offset index entries",
                  minimum=0, broker_synonym="log.index.interval.bytes"),
        ConfigDef("max.message.bytes", ConfigType.INT, 1024 * 1024 + 12,
                  "largest record batch the topic accepts",
                  minimum=0, broker_synonym="message.max.bytes"),
        ConfigDef("delete.retention.ms", ConfigType.LONG, _DAY_MS,
                  "how long tombstones survive compaction",
                  minimum=0, broker_synonym="log.cleaner.delete.retention.ms"),
        ConfigDef("min.cleanable.dirty.ratio", ConfigType.DOUBLE, 0.5,
                  "share of uncompacted log that triggers the cleaner",
                  minimum=0, broker_synonym="log.cleaner.min.cleanable.ratio"),
        ConfigDef("min.compaction.lag.ms", ConfigType.LONG, 0,
                  "minimum age before a record may be compacted",
                  minimum=0, broker_synonym="log.cleaner.min.compaction.lag.ms"),
        ConfigDef("max.compaction.lag.ms", ConfigType.LONG, _MAX_LONG,
                  "maximum age before a record must be eligible for compaction",
                  minimum=1, broker_synonym="log.cleaner.max.compaction.lag.ms"),
        ConfigDef("message.timestamp.type", ConfigType.STRING, "CreateTime",
                  "keep the producer's timestamps or stamp the broker's append time",
                  choices=("CreateTime", "LogAppendTime"),
                  broker_synonym="log.message.timestamp.type"),
        ConfigDef("min.insync.replicas", ConfigType.INT, 1,
                  "replicas that must acknowledge an acks=all write",
                  minimum=1, broker_synonym="min.insync.replicas"),
        ConfigDef("leader.replication.throttled.replicas", ConfigType.LIST, [],
                  "replicas (partition:broker, or *) whose leaders' replication to followers "
                  "out of the ISR counts against leader.replication.throttled.rate"),
        ConfigDef("follower.replication.throttled.replicas", ConfigType.LIST, [],
                  "replicas (partition:broker, or *) whose fetching while out of the ISR "
                  "counts against follower.replication.throttled.rate"),
        ConfigDef("unclean.leader.election.enable", ConfigType.BOOLEAN, False,
                  "allow an out-of-sync replica to become leader, losing data",
                  broker_synonym="unclean.leader.election.enable"),
        ConfigDef("flush.messages", ConfigType.LONG, _MAX_LONG,
                  "fsync after this many messages (default: leave it to the OS and rolls)",
                  minimum=1, broker_synonym="log.flush.interval.messages"),
        ConfigDef("flush.ms", ConfigType.LONG, _MAX_LONG,
                  "fsync at least this often (default: leave it to the OS and rolls)",
                  minimum=0, broker_synonym="log.flush.interval.ms"),
        ConfigDef("compression.type", ConfigType.STRING, "producer",
                  "keep the producer's codec (other values are accepted but not re-encoded)",
                  choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
                  broker_synonym="compression.type"),
        ConfigDef("file.delete.delay.ms", ConfigType.LONG, 60000,
                  "grace period before a deleted segment's files are removed",
                  minimum=0, broker_synonym="log.segment.delete.delay.ms"),
        # Accepted and without effect, as in Kafka 3.x: batches are kept in the format
        # they come in (v2), and no consumer this broker serves needs them converted.
        ConfigDef("message.format.version", ConfigType.STRING, "3.0-IV1",
                  "deprecated: ignored, as Kafka 3 ignores it (records stay in format v2)",
                  broker_synonym="log.message.format.version"),
        ConfigDef("message.downconversion.enable", ConfigType.BOOLEAN, True,
                  "without effect: Fetch v4 and later need no down-conversion",
                  broker_synonym="log.message.downconversion.enable"),
    )
}

BROKER_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("node.id", ConfigType.INT, 1, "this broker's id", minimum=0),
        ConfigDef("log.dirs", ConfigType.LIST, ["./data"], "where partition logs live"),
        ConfigDef("listeners", ConfigType.LIST, ["PLAINTEXT://127.0.0.1:9092"],
                  "addresses to listen on"),
        ConfigDef("advertised.listeners", ConfigType.LIST, [],
                  "addresses clients are told to use (default: listeners)"),
        ConfigDef("num.partitions", ConfigType.INT, 1,
                  "partitions of an auto-created topic", minimum=1),
        # Kafka's default is 1; closing thousands of logs one fsync after another made a
        # clean stop of a broker with 10,000 partitions take most of a minute.
        ConfigDef("num.recovery.threads.per.data.dir", ConfigType.INT, 8,
                  "threads that flush and close the logs at a clean shutdown", minimum=1),
        ConfigDef("default.replication.factor", ConfigType.SHORT, 1,
                  "replicas of an auto-created topic", minimum=1),
        ConfigDef("auto.create.topics.enable", ConfigType.BOOLEAN, True,
                  "create a topic when a client first asks for it"),
        ConfigDef("delete.topic.enable", ConfigType.BOOLEAN, True, "allow DeleteTopics"),
        ConfigDef("socket.request.max.bytes", ConfigType.INT, 100 * 1024 * 1024,
                  "largest request frame accepted before closing the connection", minimum=1),
        # Kafka's default is 100 KiB. A fetch answer here is megabytes sent with
        # sendfile, and with a small buffer each piece waits for the client to wake
        # and read the previous one: 4 MiB halved librdkafka's fetch round trip on 8 MB
        # answers. The kernel caps it at net.core.wmem_max; -1 leaves it to the OS.
        ConfigDef("socket.send.buffer.bytes", ConfigType.INT, 4 * 1024 * 1024,
                  "SO_SNDBUF of client connections (-1: the OS default)", minimum=-1),
        ConfigDef("socket.receive.buffer.bytes", ConfigType.INT, -1,
                  "SO_RCVBUF of client connections (-1: the OS default, which "
                  "grows with the connection)", minimum=-1),
        ConfigDef("log.retention.check.interval.ms", ConfigType.LONG, 300000,
                  "how often retention runs", minimum=1),
        ConfigDef("producer.id.expiration.ms", ConfigType.INT, 86400000,
                  "a partition forgets a producer this long after its last batch or marker "
                  "(checked with retention); it may then write at any sequence", minimum=1),
        ConfigDef("log.cleaner.backoff.ms", ConfigType.LONG, 15000,
                  "how long the cleaner sleeps when nothing is dirty", minimum=0),
        ConfigDef("log.cleaner.enable", ConfigType.BOOLEAN, True, "run log compaction"),
        ConfigDef("log.flush.scheduler.interval.ms", ConfigType.LONG, 1000,
                  "how often flush.ms is checked", minimum=1),
        ConfigDef("offsets.topic.num.partitions", ConfigType.INT, 50,
                  "partitions of __consumer_offsets", minimum=1),
        ConfigDef("transaction.state.log.num.partitions", ConfigType.INT, 50,
                  "partitions of __transaction_state", minimum=1),
        ConfigDef("transaction.state.log.replication.factor", ConfigType.SHORT, 3,
                  "replicas of __transaction_state (capped at the live brokers when it is "
                  "created)", minimum=1),
        ConfigDef("transaction.state.log.min.isr", ConfigType.INT, 2,
                  "min.insync.replicas of __transaction_state (capped at its replication "
                  "factor)", minimum=1),
        ConfigDef("request.timeout.ms", ConfigType.INT, 30000,
                  "how long a partition leader waits for its followers on WriteTxnMarkers, "
                  "and the transaction coordinator for the leader's answer", minimum=1),
        ConfigDef("transaction.max.timeout.ms", ConfigType.INT, 900000,
                  "largest transaction.timeout.ms a transactional producer may ask for",
                  minimum=1),
        ConfigDef("transactional.id.expiration.ms", ConfigType.INT, 604800000,
                  "a transactional id with no transaction open and no update for this long "
                  "is forgotten", minimum=1),
        ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", ConfigType.INT,
                  3600000, "how often expired transactional ids are looked for", minimum=1),
        ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms",
                  ConfigType.INT, 10000, "how often transactions past their timeout are "
                  "looked for (and aborted)", minimum=1),
        ConfigDef("group.initial.rebalance.delay.ms", ConfigType.INT, 3000,
                  "wait for more members before the first rebalance of a new group", minimum=0),
        ConfigDef("group.min.session.timeout.ms", ConfigType.INT, 6000,
                  "smallest session timeout a member may ask for", minimum=0),
        ConfigDef("group.max.session.timeout.ms", ConfigType.INT, 1800000,
                  "largest session timeout a member may ask for", minimum=0),
        ConfigDef("offsets.retention.minutes", ConfigType.INT, 10080,
                  "how long committed offsets of an empty group are kept", minimum=1),
        ConfigDef("offsets.retention.check.interval.ms", ConfigType.LONG, 600000,
                  "how often expired committed offsets are removed", minimum=1),
        ConfigDef("offsets.commit.timeout.ms", ConfigType.INT, 5000,
                  "how long an offset commit waits for every in-sync replica", minimum=1),
        ConfigDef("offset.metadata.max.bytes", ConfigType.INT, 4096,
                  "largest metadata string an offset commit may carry", minimum=0),
        ConfigDef("max.incremental.fetch.session.cache.slots", ConfigType.INT, 1000,
                  "fetch sessions (KIP-227) kept by the broker", minimum=0),
        # ---- cluster mode (ZooKeeper); without zookeeper.connect the broker runs alone
        ConfigDef("zookeeper.connect", ConfigType.STRING, "",
                  "ZooKeeper hosts, with an optional chroot (127.0.0.1:2181/gregor); "
                  "empty: a single broker with no ZooKeeper"),
        ConfigDef("zookeeper.session.timeout.ms", ConfigType.INT, 18000,
                  "ZooKeeper session timeout: how long a silent broker keeps its leaderships",
                  minimum=1),
        ConfigDef("zookeeper.connection.timeout.ms", ConfigType.INT, 18000,
                  "how long the broker waits for ZooKeeper at start-up", minimum=1),
        ConfigDef("broker.rack", ConfigType.STRING, "",
                  "rack of this broker; replicas of a partition are spread over racks"),
        ConfigDef("offsets.topic.replication.factor", ConfigType.SHORT, 3,
                  "replicas of __consumer_offsets (capped at the live brokers when it is "
                  "created, so a single broker works)", minimum=1),
        ConfigDef("replica.lag.time.max.ms", ConfigType.LONG, 30000,
                  "a follower not caught up for this long leaves the ISR", minimum=1),
        ConfigDef("leader.replication.throttled.rate", ConfigType.LONG, _MAX_LONG,
                  "bytes/s a leader sends of throttled replicas (changes while running)",
                  minimum=0),
        ConfigDef("follower.replication.throttled.rate", ConfigType.LONG, _MAX_LONG,
                  "bytes/s a follower fetches of throttled replicas (changes while running)",
                  minimum=0),
        ConfigDef("replica.alter.log.dirs.io.max.bytes.per.second", ConfigType.LONG, _MAX_LONG,
                  "bytes/s copied by moves between this broker's log directories (changes "
                  "while running)", minimum=0),
        ConfigDef("replica.fetch.max.bytes", ConfigType.INT, 1024 * 1024,
                  "bytes a follower asks for per partition and fetch", minimum=0),
        ConfigDef("replica.fetch.response.max.bytes", ConfigType.INT, 10 * 1024 * 1024,
                  "bytes a follower asks for per fetch", minimum=0),
        ConfigDef("replica.fetch.wait.max.ms", ConfigType.INT, 500,
                  "how long a follower's fetch waits on the leader for data", minimum=0),
        ConfigDef("replica.fetch.min.bytes", ConfigType.INT, 1,
                  "bytes a follower's fetch waits for", minimum=1),
        ConfigDef("replica.fetch.backoff.ms", ConfigType.INT, 1000,
                  "pause after a follower's fetch failed", minimum=0),
        ConfigDef("replica.socket.timeout.ms", ConfigType.INT, 30000,
                  "timeout of a follower's requests to the leader", minimum=1),
        ConfigDef("num.replica.fetchers", ConfigType.INT, 1,
                  "fetcher connections per source broker", minimum=1),
        ConfigDef("controlled.shutdown.enable", ConfigType.BOOLEAN, True,
                  "move leaderships away before stopping on SIGTERM"),
        ConfigDef("controlled.shutdown.max.retries", ConfigType.INT, 3,
                  "attempts at a controlled shutdown before stopping anyway", minimum=0),
        ConfigDef("controlled.shutdown.retry.backoff.ms", ConfigType.LONG, 5000,
                  "pause between controlled shutdown attempts", minimum=0),
        ConfigDef("auto.leader.rebalance.enable", ConfigType.BOOLEAN, True,
                  "give leaderships back to preferred replicas"),
        ConfigDef("leader.imbalance.check.interval.seconds", ConfigType.LONG, 300,
                  "how often the controller checks for non-preferred leaders", minimum=1),
        ConfigDef("leader.imbalance.per.broker.percentage", ConfigType.INT, 10,
                  "share of a broker's partitions led elsewhere that triggers a rebalance",
                  minimum=0),
        # ---- security: listeners, TLS, SASL (gregor.security)
        ConfigDef("listener.security.protocol.map", ConfigType.LIST,
                  ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT",
                   "SASL_SSL:SASL_SSL"],
                  "listener name to security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, "
                  "SASL_SSL)"),
        ConfigDef("inter.broker.listener.name", ConfigType.STRING, "",
                  "the listener other brokers reach this one on (default: the one of "
                  "security.inter.broker.protocol)"),
        ConfigDef("security.inter.broker.protocol", ConfigType.STRING, "PLAINTEXT",
                  "the security protocol between brokers, when inter.broker.listener.name "
                  "is unset", choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
        ConfigDef("ssl.keystore.type", ConfigType.STRING, "JKS",
                  "format of the key store: PEM or PKCS12 (JKS is Java's own)"),
        ConfigDef("ssl.keystore.location", ConfigType.STRING, "",
                  "file with this broker's private key and certificate chain"),
        ConfigDef("ssl.keystore.password", ConfigType.PASSWORD, "",
                  "password of a PKCS12 key store"),
        ConfigDef("ssl.key.password", ConfigType.PASSWORD, "",
                  "password of the private key (an encrypted PEM key)"),
        ConfigDef("ssl.keystore.key", ConfigType.PASSWORD, "",
                  "the private key itself, PEM (instead of ssl.keystore.location)"),
        ConfigDef("ssl.keystore.certificate.chain", ConfigType.PASSWORD, "",
                  "the certificate chain itself, PEM (with ssl.keystore.key)"),
        ConfigDef("ssl.truststore.type", ConfigType.STRING, "JKS",
                  "format of the trust store: PEM or PKCS12"),
        ConfigDef("ssl.truststore.location", ConfigType.STRING, "",
                  "file with the certificate authorities trusted for client certificates "
                  "(and for other brokers' certificates)"),
        ConfigDef("ssl.truststore.password", ConfigType.PASSWORD, "",
                  "password of a PKCS12 trust store"),
        ConfigDef("ssl.truststore.certificates", ConfigType.PASSWORD, "",
                  "the trusted certificates themselves, PEM (instead of a location)"),
        ConfigDef("ssl.client.auth", ConfigType.STRING, "none",
                  "whether clients must present a certificate (mutual TLS)",
                  choices=("required", "requested", "none")),
        ConfigDef("ssl.enabled.protocols", ConfigType.LIST, ["TLSv1.2", "TLSv1.3"],
                  "TLS versions accepted", choices=("TLSv1.2", "TLSv1.3")),
        ConfigDef("ssl.cipher.suites", ConfigType.LIST, [],
                  "cipher suites allowed, by their IANA (Java) names; empty: OpenSSL's "
                  "defaults"),
        ConfigDef("ssl.endpoint.identification.algorithm", ConfigType.STRING, "https",
                  "https: check the other broker's host name against its certificate "
                  "(inter-broker connections); empty: do not"),
        ConfigDef("sasl.enabled.mechanisms", ConfigType.LIST, ["GSSAPI"],
                  "SASL mechanisms served on SASL listeners (PLAIN, SCRAM-SHA-256, "
                  "SCRAM-SHA-512)"),
        ConfigDef("sasl.mechanism.inter.broker.protocol", ConfigType.STRING, "GSSAPI",
                  "the SASL mechanism a broker authenticates with to the others"),
        ConfigDef("sasl.jaas.config", ConfigType.PASSWORD, "",
                  "JAAS login module entry; set per listener and mechanism "
                  "(listener.name.<l>.<mechanism>.sasl.jaas.config)"),
        # Kafka's Kerberos (GSSAPI) and login-refresh (OAUTHBEARER) settings: accepted,
        # stored and described as Kafka does, without effect (neither mechanism is served).
        ConfigDef("sasl.kerberos.service.name", ConfigType.STRING, "",
                  "Kerberos principal name Kafka runs as (GSSAPI; not served)"),
        ConfigDef("sasl.kerberos.kinit.cmd", ConfigType.STRING, "/usr/bin/kinit",
                  "Kerberos kinit command (GSSAPI; not served)"),
        ConfigDef("sasl.kerberos.ticket.renew.window.factor", ConfigType.DOUBLE, 0.8,
                  "Kerberos ticket renewal point (GSSAPI; not served)"),
        ConfigDef("sasl.kerberos.ticket.renew.jitter", ConfigType.DOUBLE, 0.05,
                  "Kerberos renewal jitter (GSSAPI; not served)"),
        ConfigDef("sasl.kerberos.min.time.before.relogin", ConfigType.LONG, 60000,
                  "Kerberos login thread sleep between refreshes (GSSAPI; not served)"),
        ConfigDef("sasl.kerberos.principal.to.local.rules", ConfigType.LIST, ["DEFAULT"],
                  "Kerberos principal to short name rules (GSSAPI; not served)"),
        ConfigDef("sasl.login.refresh.window.factor", ConfigType.DOUBLE, 0.8,
                  "login refresh point (OAUTHBEARER; not served)"),
        ConfigDef("sasl.login.refresh.window.jitter", ConfigType.DOUBLE, 0.05,
                  "login refresh jitter (OAUTHBEARER; not served)"),
        ConfigDef("sasl.login.refresh.min.period.seconds", ConfigType.SHORT, 60,
                  "least time between login refreshes (OAUTHBEARER; not served)"),
        ConfigDef("sasl.login.refresh.buffer.seconds", ConfigType.SHORT, 300,
                  "login refresh buffer (OAUTHBEARER; not served)"),
        ConfigDef("connection.failed.authentication.delay.ms", ConfigType.INT, 100,
                  "how long a failed authentication is held before its answer and the "
                  "close, to slow down password guessing", minimum=0),
        ConfigDef("authorizer.class.name", ConfigType.STRING, "",
                  "switches ACL checks on (Kafka's AclAuthorizer or StandardAuthorizer class "
                  "names); empty: every client may do everything"),
        ConfigDef("super.users", ConfigType.STRING, "",
                  "principals that pass every ACL check, separated by ';' (User:admin)"),
        ConfigDef("allow.everyone.if.no.acl.found", ConfigType.BOOLEAN, False,
                  "whether a resource no ACL names is open to everyone"),
        ConfigDef("connections.max.reauth.ms", ConfigType.LONG, 0,
                  "SASL sessions last this long: a client re-authenticates on its connection "
                  "before (KIP-368) or the connection is closed; 0: forever", minimum=0),
        ConfigDef("sasl.server.max.receive.size", ConfigType.INT, 524288,
                  "largest SASL token accepted before authentication", minimum=1),
        # ---- client quotas
        ConfigDef("quota.window.num", ConfigType.INT, 11,
                  "samples a client's rate is measured over, against its quotas", minimum=1),
        ConfigDef("quota.window.size.seconds", ConfigType.INT, 1,
                  "length of each of those samples", minimum=1),
        ConfigDef("controller.quota.window.num", ConfigType.INT, 11,
                  "samples of controller_mutation_rate: its burst is this many windows' "
                  "mutations", minimum=1),
        ConfigDef("controller.quota.window.size.seconds", ConfigType.INT, 1,
                  "length of each of those samples", minimum=1),
        # ---- monitoring
        ConfigDef("metrics.listener", ConfigType.STRING, "",
                  "where Prometheus scrapes this broker's metrics "
                  "(http://127.0.0.1:9644/metrics); empty: no metrics"),
    )
}

# Broker-level settings that only exist as synonyms of topic settings.
for _topic_def in TOPIC_CONFIGS.values():
    synonym = _topic_def.broker_synonym
    if synonym and synonym not in BROKER_CONFIGS:
        BROKER_CONFIGS[synonym] = ConfigDef(
            synonym, _topic_def.type, _topic_def.default, _topic_def.doc,
            minimum=_topic_def.minimum, choices=_topic_def.choices,
        )

# The broker configs a running cluster can change (AlterConfigs of a BROKER resource, for
# one broker or as the cluster's default): the topics' defaults, Kafka's DynamicLogConfig.
# Replication throttles (a reassignment's) are dynamic too, as in Kafka.
REPLICATION_THROTTLES = ("leader.replication.throttled.rate",
                         "follower.replication.throttled.rate",
                         "replica.alter.log.dirs.io.max.bytes.per.second")
DYNAMIC_BROKER_CONFIGS = frozenset(
    d.broker_synonym for d in TOPIC_CONFIGS.values() if d.broker_synonym) | frozenset(
    REPLICATION_THROTTLES)

# Key store settings a broker takes while running, for itself alone (Kafka's per-broker
# dynamic SSL configs), for every TLS listener or per listener
# (``listener.name.<l>.ssl.keystore.location``): a certificate is rotated without a restart.
DYNAMIC_KEY_STORE_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain"})

# SASL settings a broker takes while running, for itself alone (Kafka's per-broker
# DynamicListenerConfig ones), for every listener or per listener
# (``listener.name.<l>.<mechanism>.sasl.jaas.config``): the enabled mechanisms and the
# PLAIN users apply to the next authentications; the Kerberos and login ones are kept.
DYNAMIC_SASL_CONFIGS = frozenset({
    "sasl.enabled.mechanisms", "sasl.jaas.config", "sasl.kerberos.service.name",
    "sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules", "sasl.login.refresh.window.factor",
    "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds"})

# Kafka accepts these coarser spellings too; they fill in the finer one when it is unset.
_BROKER_ALIASES = {
    "log.retention.minutes": ("log.retention.ms", 60 * 1000),
    "log.retention.hours": ("log.retention.ms", 3600 * 1000),
    "log.roll.hours": ("log.roll.ms", 3600 * 1000),
    "log.dir": ("log.dirs", None),
    # ZooKeeper-mode Kafka names the broker's id broker.id; KRaft calls it node.id.
    "broker.id": ("node.id", None),
}


_PER_LISTENER = "listener.name."


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text: ``key=value`` or ``key: value``, ``#``/``!`` comments."""
    result: dict[str, str] = {}
    pending = ""
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line = pending + line
        pending = ""
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
        if match:
            result[match.group(1)] = match.group(2).strip()
        elif line:
            result[line] = ""
    return result


@dataclass
class BrokerConfig:
    """The broker's static configuration, validated at start-up, and the dynamic configs
    set while it runs (:data:`DYNAMIC_BROKER_CONFIGS`), for this broker or for every
    broker of the cluster, which take precedence in that order over the static ones."""

    values: dict[str, Any] = field(default_factory=dict)
    explicit: set[str] = field(default_factory=set)
    dynamic: dict[str, Any] = field(default_factory=dict)  # this broker's
    dynamic_default: dict[str, Any] = field(default_factory=dict)  # the cluster's
    # ``listener.name.<listener>.<config>`` as given (Kafka's per-listener settings, e.g.
    # ``listener.name.sasl_ssl.plain.sasl.jaas.config``): read with :meth:`for_listener`.
    per_listener: dict[str, str] = field(default_factory=dict)
    # Called when this broker's key store settings changed while it runs (the broker
    # then loads its listeners' new certificates).
    key_stores_changed: Callable[[], None] | None = field(default=None, repr=False,
                                                          compare=False)
    # Called when this broker's SASL settings changed while it runs (the broker then
    # takes its listeners' mechanisms and PLAIN users again).
    sasl_changed: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    # What topics get for the configs they do not set, resolved once per change: the
    # appends read them, so each lookup is one dict access.
    _topic_defaults: dict[str, tuple[Any, ConfigSource]] = field(
        init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._resolve_topic_defaults()

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> BrokerConfig:
        values = {name: d.default for name, d in BROKER_CONFIGS.items()}
        explicit: set[str] = set()
        aliased: dict[str, Any] = {}
        per_listener: dict[str, str] = {}
        for name, value in raw.items():
            if name.startswith(_PER_LISTENER):
                per_listener[name] = str(value)
                continue
            if name in _BROKER_ALIASES:
                target, scale = _BROKER_ALIASES[name]
                parsed = BROKER_CONFIGS[target].parse(value) if scale is None else (
                    _parse_int(value) * scale if isinstance(value, str) else value * scale)
                aliased.setdefault(target, parsed)
                continue
            definition = BROKER_CONFIGS.get(name)
            if definition is None:
                # Kafka logs and ignores unknown properties; so do we (no crash on a
                # copied server.properties full of settings we don't use).
                continue
            try:
                values[name] = definition.parse(value)
            except ConfigError as exc:
                raise ConfigError(f"{name}: {exc}") from None
            explicit.add(name)
        for name, value in aliased.items():
            if name not in explicit:
                values[name] = value
                explicit.add(name)
        return cls(values, explicit, per_listener=per_listener)

    @classmethod
    def load(cls, path: str | Path | None = None,
             overrides: Mapping[str, Any] | None = None) -> BrokerConfig:
        raw: dict[str, Any] = {}
        if path is not None:
            raw.update(parse_properties(Path(path).read_text()))
        raw.update(overrides or {})
        return cls.from_mapping(raw)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def for_listener(self, listener: str, name: str, mechanism: str | None = None) -> Any:
        """A setting as one listener sees it: ``listener.name.<listener>.<name>`` (with the
        SASL mechanism between them for ``sasl.jaas.config``, as Kafka names it) when
        set, else the broker-wide value. Kafka lowercases both names in these keys."""
        infix = f"{mechanism.lower()}." if mechanism else ""
        key = f"{_PER_LISTENER}{listener.lower()}.{infix}{name}"
        # Set while running (a key store rotated) before set at start.
        if key in self.dynamic:
            return self.dynamic[key]
        if key not in self.per_listener:
            return self.dynamic.get(name, self.values.get(name, ""))
        definition = BROKER_CONFIGS.get(name)
        try:
            return self.per_listener[key] if definition is None else definition.parse(
                self.per_listener[key])
        except ConfigError as exc:
            raise ConfigError(f"{key}: {exc}") from None

    @property
    def node_id(self) -> int:
        return int(self.values["node.id"])

    @property
    def zookeeper_mode(self) -> bool:
        return bool(self.values["zookeeper.connect"])

    @property
    def rack(self) -> str | None:
        return self.values["broker.rack"] or None

    @property
    def log_dir(self) -> Path:
        return Path(self.values["log.dirs"][0])

    @property
    def log_dirs(self) -> list[Path]:
        """Every directory of ``log.dirs`` (JBOD), each holding its own partitions."""
        return [Path(path) for path in self.values["log.dirs"]]

    @property
    def source_address(self) -> str | None:
        """The address outgoing connections (to other brokers, to ZooKeeper) come from:
        the first listener's, when it names one IP address. A broker on 127.0.0.2 then
        talks from 127.0.0.2, as a host with one address would, which is what lets a
        firewall rule cut one broker off from the others on a single machine."""
        host = parse_listener(self.values["listeners"][0])[0]
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return None  # a host name, or every address
        return None if address.is_unspecified else host

    @property
    def metrics_listener(self) -> tuple[str, int, str] | None:
        """``(host, port, path)`` of the metrics endpoint, or None when metrics are off."""
        return parse_metrics_listener(self.values["metrics.listener"])

    def topic_default(self, name: str) -> tuple[Any, ConfigSource]:
        """Value a topic gets for ``name`` when it does not override it, and its source."""
        return self._topic_defaults[name]

    def _resolve_topic_defaults(self) -> None:
        resolved = {}
        for name, definition in TOPIC_CONFIGS.items():
            resolved[name] = (definition.default, ConfigSource.DEFAULT_CONFIG)
            if definition.broker_synonym:
                value, source = self.broker_value(definition.broker_synonym)
                if source != ConfigSource.DEFAULT_CONFIG:
                    resolved[name] = (value, source)
        self._topic_defaults = resolved

    def broker_value(self, name: str) -> tuple[Any, ConfigSource]:
        """A broker config's value and where it comes from: set while running for this
        broker, or for the cluster, the static configuration, or the default."""
        if name in self.dynamic:
            return self.dynamic[name], ConfigSource.DYNAMIC_BROKER_CONFIG
        if name in self.dynamic_default:
            return self.dynamic_default[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        if name in self.explicit:
            return self.values[name], ConfigSource.STATIC_BROKER_CONFIG
        return self.values[name], ConfigSource.DEFAULT_CONFIG

    def set_dynamic(self, cluster_default: Mapping[str, str],
                    this_broker: Mapping[str, str]) -> None:
        """Take the dynamic configs as stored. They were checked when written here; what
        another tool stored that this broker cannot apply (a config it does not have, a
        value it refuses) is left out rather than stopping it."""
        key_stores, sasl = self._settings(is_key_store_config), self._settings(is_sasl_config)
        self.dynamic_default = _applicable(cluster_default)
        self.dynamic = _applicable(this_broker)
        self._resolve_topic_defaults()
        if self.key_stores_changed is not None and \
                self._settings(is_key_store_config) != key_stores:
            self.key_stores_changed()
        if self.sasl_changed is not None and self._settings(is_sasl_config) != sasl:
            self.sasl_changed()

    def with_dynamic(self, this_broker: Mapping[str, str]) -> BrokerConfig:
        """A copy with other dynamic configs of its own: what a change would make of it."""
        return dataclasses.replace(self, dynamic=_applicable(this_broker),
                                   key_stores_changed=None, sasl_changed=None)

    def _settings(self, kind: Callable[[str], bool]) -> dict[str, Any]:
        return {name: value for name, value in self.dynamic.items() if kind(name)}


class NotDynamicError(ConfigError):
    """A broker config that cannot change while the broker runs."""


def _unprefixed(name: str) -> str:
    """``ssl.keystore.location`` of ``listener.name.<l>.ssl.keystore.location``."""
    if name.startswith(_PER_LISTENER):
        return name[len(_PER_LISTENER):].partition(".")[2]
    return name


def is_key_store_config(name: str) -> bool:
    """Whether ``name`` is a key store setting, for all listeners or one."""
    return _unprefixed(name) in DYNAMIC_KEY_STORE_CONFIGS


def _sasl_name(name: str) -> str:
    """``sasl.jaas.config`` of ``listener.name.<l>.<mechanism>.sasl.jaas.config``."""
    unprefixed = _unprefixed(name)
    return "sasl.jaas.config" if unprefixed.endswith(".sasl.jaas.config") else unprefixed


def is_sasl_config(name: str) -> bool:
    """Whether ``name`` is a dynamic SASL setting, for all listeners or one."""
    return _sasl_name(name) in DYNAMIC_SASL_CONFIGS


def _dynamic_definition(name: str) -> ConfigDef | None:
    """The definition of a config that can change while brokers run; None for others."""
    if name in DYNAMIC_BROKER_CONFIGS:
        return BROKER_CONFIGS[name]
    if is_key_store_config(name):
        return BROKER_CONFIGS[_unprefixed(name)]
    if is_sasl_config(name):
        return BROKER_CONFIGS[_sasl_name(name)]
    return None


def check_dynamic(names: Iterable[str]) -> None:
    """NotDynamicError, in Kafka's words, unless every config named can change while
    brokers run."""
    fixed = sorted(name for name in set(names) if _dynamic_definition(name) is None)
    if fixed:
        raise NotDynamicError(f"Cannot update these configs dynamically: {', '.join(fixed)}")


def validate_dynamic(raw: Mapping[str, str]) -> dict[str, str]:
    """Dynamic broker configs as an AlterConfigs asks for them, each value normalized;
    NotDynamicError for a config that cannot change while brokers run, ConfigError for
    a value its definition refuses."""
    check_dynamic(raw)
    normalized = {}
    for name, value in raw.items():
        definition = _dynamic_definition(name)
        assert definition is not None  # checked above
        try:
            normalized[name] = format_value(definition.parse(value))
        except ConfigError as exc:
            raise ConfigError(f"invalid value for {name}: {exc}") from None
    return normalized


def _applicable(raw: Mapping[str, str]) -> dict[str, Any]:
    parsed = {}
    for name, value in raw.items():
        definition = _dynamic_definition(name)
        if definition is not None:
            with contextlib.suppress(ConfigError):
                parsed[name] = definition.parse(value)
    return parsed


def parse_metrics_listener(text: str) -> tuple[str, int, str] | None:
    """A ``metrics.listener`` value (``http://host:port/path``, the scheme and path
    optional) to ``(host, port, path)``; None when empty (metrics off). The broker
    serves it, and the console reads it from each broker (DescribeConfigs) to scrape."""
    text = text.strip()
    if not text:
        return None
    scheme, sep, rest = text.partition("://")
    if sep and scheme != "http":
        raise ConfigError(f"metrics.listener {text!r}: only http:// is served")
    address, slash, path = (rest if sep else text).partition("/")
    try:
        host, port = parse_listener(address)
    except ConfigError as exc:
        raise ConfigError(f"metrics.listener: {exc}") from None
    return host, port, "/" + path if slash and path else "/metrics"


def parse_listener(text: str) -> tuple[str, int]:
    """``PLAINTEXT://host:port`` (or ``host:port``) to ``(host, port)``."""
    address = text.split("://", 1)[-1]
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        return host, int(port)
    except ValueError:
        raise ConfigError(f"listener {text!r} has no valid port") from None


class TopicConfig:
    """A topic's effective settings: its own overrides on top of the broker's defaults."""

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, Any] | None = None) -> None:
        self._broker = broker
        self.overrides: dict[str, Any] = {}
        for name, value in (overrides or {}).items():
            self.overrides[name] = validate_topic_config(name, value)

    def __getitem__(self, name: str) -> Any:
        if name in self.overrides:
            return self.overrides[name]
        return self._broker.topic_default(name)[0]

    def source(self, name: str) -> ConfigSource:
        if name in self.overrides:
            return ConfigSource.DYNAMIC_TOPIC_CONFIG
        return self._broker.topic_default(name)[1]

    def with_changes(self, set_values: Mapping[str, Any],
                     deleted: Iterable[str] = ()) -> TopicConfig:
        merged = dict(self.overrides)
        for name in deleted:
            merged.pop(name, None)
        merged.update(set_values)
        return TopicConfig(self._broker, merged)

    def raw_overrides(self) -> dict[str, str]:
        """Overrides as Kafka-formatted strings, for persisting next to the log."""
        return {name: format_value(value) for name, value in self.overrides.items()}

    @property
    def compacted(self) -> bool:
        return "compact" in self["cleanup.policy"]

    @property
    def deletes(self) -> bool:
        return "delete" in self["cleanup.policy"]

    @property
    def flushes_on_time(self) -> bool:
        """Whether flush.ms asks for fsyncs (its default, the largest long, never does)."""
        return self["flush.ms"] < _MAX_LONG

    @property
    def log_append_time(self) -> bool:
        return self["message.timestamp.type"] == "LogAppendTime"


def validate_topic_config(name: str, value: Any) -> Any:
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise ConfigError(f"unknown topic config {name!r}")
    try:
        return definition.parse(value)
    except ConfigError as exc:
        raise ConfigError(f"invalid value for {name}: {exc}") from None
