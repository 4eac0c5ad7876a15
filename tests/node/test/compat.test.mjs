// kafkajs (an independent JavaScript implementation) against the real broker: 10,000 keyed messages
// with headers across several partitions, with every compression codec, consumed back through a
// consumer group and checked for content, per-partition order and offsets.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import kafkajs from 'kafkajs';
import { Broker } from '../lib/broker.mjs';
import { CODECS, registerCodecs } from '../lib/codecs.mjs';
import { MESSAGES, PARTITIONS, makeMessage, verifyRoundTrip } from '../lib/verify.mjs';

const { Kafka, Partitioners, logLevel } = kafkajs;

const SEND_BATCH = 500;
const CONSUME_TIMEOUT_MS = 120_000;

describe('kafkajs compatibility', () => {
  let broker;
  let kafka;

  before(async () => {
    await registerCodecs();
    broker = await new Broker().start();
    kafka = new Kafka({ clientId: 'sf-node-compat', brokers: [broker.bootstrap], logLevel: logLevel.WARN,
      retry: { retries: 5 } });
  });

  after(async (t) => {
    if (broker) {
      await broker.stop();
      broker.cleanup();
    }
  });

  for (const [codec, type] of Object.entries(CODECS)) {
    test(`produce and consume ${MESSAGES} messages with ${codec}`, { timeout: 240_000 }, async (t) => {
      try {
        await roundTrip(kafka, codec, type);
      } catch (e) {
        t.diagnostic(`broker log tail:\n${broker.logTail()}`);
        throw e;
      }
    });
  }
});

async function roundTrip(kafka, codec, compression) {
  const topic = `kafkajs-${codec}-${Date.now()}`;
  const admin = kafka.admin();
  await admin.connect();
  try {
    assert.equal(await admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS }], waitForLeaders: true }), true);
  } finally {
    await admin.disconnect();
  }

  // Produce in batches; remember which seqs went into each send and the base offsets returned.
  const producer = kafka.producer({ allowAutoTopicCreation: false, createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const sends = [];
  try {
    for (let start = 0; start < MESSAGES; start += SEND_BATCH) {
      const messages = [];
      for (let i = start; i < Math.min(start + SEND_BATCH, MESSAGES); i++) messages.push(makeMessage(i, codec));
      const meta = await producer.send({ topic, compression, acks: -1, messages });
      for (const m of meta) assert.equal(m.errorCode, 0, `produce error ${m.errorCode} on partition ${m.partition}`);
      sends.push({ start, end: start + messages.length, meta });
    }
  } finally {
    await producer.disconnect();
  }

  // Consume everything back through a consumer group.
  const consumer = kafka.consumer({ groupId: `g-${topic}`, maxWaitTimeInMs: 500 });
  const consumed = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    let resolveDone;
    const done = new Promise((r) => { resolveDone = r; });
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        consumed.push({ partition, offset: Number(message.offset), key: message.key.toString(),
          value: message.value.toString(), headers: message.headers });
        if (consumed.length >= MESSAGES) resolveDone();
      },
    });
    const timer = new Promise((_, reject) => setTimeout(() => reject(new Error(
      `timed out after ${CONSUME_TIMEOUT_MS} ms with ${consumed.length}/${MESSAGES} messages`)), CONSUME_TIMEOUT_MS).unref());
    await Promise.race([done, timer]);
  } finally {
    await consumer.disconnect();
  }

  const byPartition = verifyRoundTrip(consumed, codec);
  // Each send's base offset per partition points at that send's first message in the partition.
  const seqAt = new Map();
  for (const [p, list] of byPartition) for (const e of list) seqAt.set(`${p}:${e.offset}`, e.seq);
  for (const s of sends) {
    for (const m of s.meta) {
      const seq = seqAt.get(`${m.partition}:${Number(m.baseOffset)}`);
      assert.ok(seq !== undefined && seq >= s.start && seq < s.end,
        `send [${s.start},${s.end}) partition ${m.partition} base offset ${m.baseOffset} holds seq ${seq}`);
    }
  }
}
