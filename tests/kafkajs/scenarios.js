// KafkaJS scenarios for tests/test_clients_kafkajs.py: `node scenarios.js NAME BOOTSTRAP
// ARGS_JSON` runs one against a broker and prints what it saw as one JSON object; the
// Python test checks it, often against what another client wrote or reads.
'use strict'

const { Kafka, logLevel, CompressionTypes, CompressionCodecs, ConfigResourceTypes } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')

CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec

const [name, bootstrap, argsJson] = process.argv.slice(2)
const args = JSON.parse(argsJson || '{}')
const kafka = new Kafka({
  clientId: 'gregor-kafkajs-test',
  brokers: [bootstrap],
  logLevel: logLevel.ERROR,
  retry: { retries: 5 }
})
const COMPRESSION = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy
}

function described (message, partition) {
  return {
    partition,
    offset: Number(message.offset),
    key: message.key === null ? null : message.key.toString(),
    value: message.value === null ? null : message.value.toString(),
    headers: Object.fromEntries(Object.entries(message.headers || {}).map(
      ([k, v]) => [k, v.toString()])),
    timestamp: Number(message.timestamp)
  }
}

// Runs a consumer until `count` messages arrived (or `ms` passed), then stops it.
async function consumeUntil (consumer, count, ms, onMessage) {
  const seen = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms)
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        seen.push(described(message, partition))
        if (onMessage) await onMessage(seen)
        if (seen.length >= count) { clearTimeout(timer); resolve() }
      }
    }).catch(reject)
  })
  await consumer.stop()
  return seen
}

const scenarios = {
  // An idempotent producer (acks all) of keyed records with headers, then one record
  // each at acks 1 and acks 0.
  async produce ({ topic, compression, count }) {
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
    await producer.connect()
    const results = []
    for (let start = 0; start < count; start += 100) {
      const messages = []
      for (let i = start; i < Math.min(count, start + 100); i++) {
        messages.push({ partition: 0, key: `key${i}`, value: `value ${i} é`, headers: { origin: 'kafkajs', n: String(i) } })
      }
      results.push(...await producer.send({ topic, acks: -1, compression: COMPRESSION[compression], messages }))
    }
    await producer.disconnect()
    const plain = kafka.producer()
    await plain.connect()
    for (const acks of [1, 0]) {
      results.push(...await plain.send({ topic, acks, messages: [{ partition: 0, key: null, value: `acks ${acks}` }] }))
    }
    await plain.disconnect()
    return { results: results.map((r) => ({ partition: r.partition, errorCode: r.errorCode, baseOffset: r.baseOffset === undefined ? null : Number(r.baseOffset) })) }
  },

  // A consumer in a group reads `count` records from the beginning and commits them.
  async consume ({ topic, group, count }) {
    const consumer = kafka.consumer({ groupId: group, maxWaitTimeInMs: 200 })
    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    const messages = await consumeUntil(consumer, count, 15000)
    await consumer.disconnect()
    return { messages }
  },

  // Two consumers share a group's partitions; when one leaves, the other takes them all
  // and reads what is produced next.
  async group ({ topic, group, count }) {
    const config = { groupId: group, maxWaitTimeInMs: 200, sessionTimeout: 10000, rebalanceTimeout: 10000, heartbeatInterval: 500 }
    const a = kafka.consumer(config)
    const b = kafka.consumer(config)
    const assigned = { a: [], b: [] }
    for (const [label, consumer] of [['a', a], ['b', b]]) {
      consumer.on(consumer.events.GROUP_JOIN, (e) => {
        assigned[label] = (e.payload.memberAssignment[topic] || []).slice().sort()
      })
      await consumer.connect()
      await consumer.subscribe({ topic, fromBeginning: true })
    }
    const seen = []
    let resolveAll
    const all = new Promise((resolve) => { resolveAll = resolve })
    const timer = setTimeout(resolveAll, 20000)
    const handler = (label) => async ({ partition, message }) => {
      seen.push({ member: label, ...described(message, partition) })
      if (seen.length >= count && assigned.a.length && assigned.b.length) resolveAll()
    }
    a.run({ eachMessage: handler('a') })
    b.run({ eachMessage: handler('b') })
    await all
    clearTimeout(timer)
    const shared = { a: assigned.a, b: assigned.b, seen: seen.length }
    await b.disconnect()
    // a alone after the rebalance b's leaving starts: it reads what comes next.
    const deadline = Date.now() + 15000
    while (assigned.a.length < shared.a.length + shared.b.length && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    const producer = kafka.producer()
    await producer.connect()
    const later = []
    for (let i = 0; i < count; i++) later.push({ key: `later${i}`, value: `later ${i}` })
    await producer.send({ topic, messages: later })
    await producer.disconnect()
    const before = seen.length
    while (seen.length < before + count && Date.now() < deadline + 10000) {
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    await a.disconnect()
    return {
      shared,
      alone: assigned.a,
      first: seen.slice(0, before).map((m) => m.value),
      after: seen.slice(before).map((m) => m.value),
      afterMembers: [...new Set(seen.slice(before).map((m) => m.member))]
    }
  },

  // The admin client's topic, config, offset and group calls.
  async admin ({ topic, group }) {
    const admin = kafka.admin()
    await admin.connect()
    const out = {}
    const cluster = await admin.describeCluster()
    out.cluster = { brokers: cluster.brokers.map((b) => [b.nodeId, b.host, b.port]), controller: cluster.controller }
    out.created = await admin.createTopics({
      waitForLeaders: true,
      topics: [{ topic, numPartitions: 2, configEntries: [{ name: 'retention.ms', value: '3600000' }] }]
    })
    out.createdAgain = await admin.createTopics({ topics: [{ topic, numPartitions: 2 }] })
    await admin.alterConfigs({
      validateOnly: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: 'retention.ms', value: '7200000' }] }]
    })
    const configs = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms', 'cleanup.policy'] }]
    })
    out.configs = Object.fromEntries(configs.resources[0].configEntries.map((e) => [e.configName, e.configValue]))
    await admin.createPartitions({ topicPartitions: [{ topic, count: 4 }] })
    const metadata = await admin.fetchTopicMetadata({ topics: [topic] })
    out.partitions = metadata.topics[0].partitions.map((p) => p.partitionId).sort()

    const producer = kafka.producer()
    await producer.connect()
    const before = Date.now()
    await producer.send({ topic, messages: [0, 1, 2].map((i) => ({ partition: 3, value: `v${i}`, timestamp: String(before - 60000 + i * 1000) })) })
    await producer.disconnect()
    out.offsets = (await admin.fetchTopicOffsets(topic)).map((p) => [p.partition, Number(p.low), Number(p.high)]).sort()
    out.byTimestamp = (await admin.fetchTopicOffsetsByTimestamp(topic, before - 59000))
      .map((p) => [p.partition, Number(p.offset)]).sort()

    // setOffsets commits as a group member of its own (joining, committing, leaving).
    await admin.setOffsets({ groupId: group, topic, partitions: [{ partition: 3, offset: '2' }] })
    out.committed = (await admin.fetchOffsets({ groupId: group, topics: [topic] }))[0].partitions
      .map((p) => [p.partition, Number(p.offset)]).sort()
    out.groups = (await admin.listGroups()).groups.map((g) => g.groupId).filter((g) => g === group)
    out.described = (await admin.describeGroups([group])).groups.map((g) => [g.groupId, g.state])
    out.deletedGroups = (await admin.deleteGroups([group])).map((g) => [g.groupId, g.errorCode])
    await admin.deleteTopics({ topics: [topic] })
    out.afterDelete = (await admin.listTopics()).includes(topic)
    await admin.disconnect()
    return out
  },

  // Committed and aborted transactions, one with the group's offsets in it, then a
  // read_committed consumer of what they left.
  async transactions ({ topic, group, source }) {
    const producer = kafka.producer({ transactionalId: `kafkajs-${topic}`, idempotent: true, maxInFlightRequests: 1 })
    await producer.connect()
    const batches = [['committed-a', 'commit'], ['aborted', 'abort'], ['committed-b', 'commit']]
    for (const [label, end] of batches) {
      const txn = await producer.transaction()
      await txn.send({ topic, messages: [0, 1, 2, 3].map((i) => ({ partition: i % 2, value: `${label} ${i}` })) })
      if (label === 'committed-b') {
        await txn.sendOffsets({ consumerGroupId: group, topics: [{ topic: source, partitions: [{ partition: 0, offset: '7' }] }] })
      }
      await (end === 'commit' ? txn.commit() : txn.abort())
    }
    const open = await producer.transaction()
    await open.send({ topic, messages: [{ partition: 0, value: 'open' }] })

    const consumer = kafka.consumer({ groupId: `${group}-reader`, readUncommitted: false, maxWaitTimeInMs: 200 })
    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    const messages = await consumeUntil(consumer, 9, 2500)
    await consumer.disconnect()
    await open.abort()
    await producer.disconnect()

    const admin = kafka.admin()
    await admin.connect()
    const offsets = (await admin.fetchOffsets({ groupId: group, topics: [source] }))[0].partitions
      .map((p) => [p.partition, Number(p.offset)])
    await admin.disconnect()
    return { committedRead: messages.map((m) => m.value).sort(), offsets }
  }
}

scenarios[name](args).then(
  (result) => { process.stdout.write(JSON.stringify(result) + '\n'); process.exit(0) },
  (error) => { console.error(error); process.exit(1) })
