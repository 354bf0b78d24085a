// bench.txn_bench's KafkaJS producer: `node kafkajs_produce.js BOOTSTRAP TOPIC VALUES
// PARTITIONS RECORD_SIZE PER_LANE MODE`. VALUES holds each partition's records in
// order, one partition after the other, RECORD_SIZE bytes each; every group of PER_LANE
// records of each partition (one transaction's records) goes in one sendBatch.
// MODE "transactional": a transaction per group, begun, sent (KafkaJS answers a send once
// its records are acknowledged) and committed before the next; MODE "idempotent": the
// groups sent one after another, each awaited. Sends not awaited would keep more than one
// group in the client, but KafkaJS keeps no order between them: a scratch run's log began
// with the fourth group's records, and the bench checks that every partition holds its
// records in order. (Its idempotent producer allows one request in flight anyway.)
// It connects (and, transactional, gets its producer id) before it prints "ready", then
// waits for a line on stdin to start, so that the bench times the sends only; it prints
// each group's phases (its send; its commit) as JSON once all are acknowledged.
'use strict'

const fs = require('fs')
const readline = require('readline')
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, valuesPath, partitionsArg, sizeArg, perLaneArg, mode] = process.argv.slice(2)
const partitions = Number(partitionsArg)
const size = Number(sizeArg)
const perLane = Number(perLaneArg)
const transactional = mode === 'transactional'

const values = fs.readFileSync(valuesPath)
const laneLength = values.length / size / partitions
const lanes = []
for (let p = 0; p < partitions; p++) {
  const lane = []
  for (let i = 0; i < laneLength; i++) {
    const start = (p * laneLength + i) * size
    lane.push(values.subarray(start, start + size))
  }
  lanes.push(lane)
}

function group (start) {
  const messages = []
  for (let p = 0; p < partitions; p++) {
    for (const value of lanes[p].slice(start, start + perLane)) messages.push({ partition: p, value })
  }
  return { topicMessages: [{ topic, messages }], acks: -1 }
}

const seconds = (since) => Number(process.hrtime.bigint() - since) / 1e9

async function main () {
  const kafka = new Kafka({ clientId: 'gregor-bench', brokers: [bootstrap], logLevel: logLevel.ERROR })
  const producer = kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    ...(transactional ? { transactionalId: `bench-kafkajs-${topic}` } : {})
  })
  await producer.connect()
  process.stdout.write('ready\n')
  await new Promise((resolve) => readline.createInterface({ input: process.stdin }).once('line', resolve))

  const phases = { queue: [], commit: [] }
  for (let start = 0; start < laneLength; start += perLane) {
    const began = process.hrtime.bigint()
    const transaction = transactional ? await producer.transaction() : producer
    await transaction.sendBatch(group(start))
    const sent = process.hrtime.bigint()
    if (transactional) await transaction.commit()
    phases.queue.push(Number(sent - began) / 1e9)
    phases.commit.push(transactional ? seconds(sent) : 0)
  }
  process.stdout.write(JSON.stringify(phases) + '\n')
  await producer.disconnect()
}

main().then(() => process.exit(0), (error) => { console.error(error); process.exit(1) })
