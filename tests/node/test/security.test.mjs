// kafkajs over TLS and SASL: SSL, and SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
// (users made with `streamforge users`), and a wrong password refused. Certificates come from
// scripts/gen-certs.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import kafkajs from 'kafkajs';
import { Broker, findBinary, freePort } from '../lib/broker.mjs';

const { Kafka, logLevel } = kafkajs;
const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const PASSWORD = 'alice-secret';

describe('kafkajs over SSL and SASL_SSL', () => {
  let broker;
  let certs;
  let sslPort;
  let saslPort;

  before(async () => {
    certs = fs.mkdtempSync(path.join(os.tmpdir(), 'sf-node-certs-'));
    assert.equal(spawnSync(path.join(REPO_ROOT, 'scripts', 'gen-certs'), [certs]).status, 0);
    broker = new Broker();
    broker.port = await freePort();
    sslPort = await freePort();
    saslPort = await freePort();
    broker.extraArgs = ['--listeners',
      `PLAINTEXT://127.0.0.1:${broker.port},SSL://127.0.0.1:${sslPort},SASL_SSL://127.0.0.1:${saslPort}`,
      '--ssl-cert', path.join(certs, 'broker.pem'), '--ssl-key', path.join(certs, 'broker.key'),
      '--sasl-mechanisms', 'PLAIN,SCRAM-SHA-256,SCRAM-SHA-512'];
    await broker.start();
    const made = spawnSync(findBinary(), ['users', '-b', broker.bootstrap, 'create', 'alice', '--password', PASSWORD]);
    assert.equal(made.status, 0, made.stderr.toString());
  });

  after(async () => {
    if (broker) {
      await broker.stop();
      broker.cleanup();
    }
  });

  const ssl = () => ({ ca: [fs.readFileSync(path.join(certs, 'ca.pem'))] });

  async function roundTrip(port, sasl) {
    const kafka = new Kafka({ clientId: 'sf-node-sec', brokers: [`127.0.0.1:${port}`], ssl: ssl(), sasl,
      logLevel: logLevel.NOTHING, retry: { retries: 3 } });
    const topic = `sec-${Date.now()}-${Math.random().toString(16).slice(2, 8)}`;
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic, messages: [{ value: 'a' }, { value: 'b' }] });
    await producer.disconnect();
    const consumer = kafka.consumer({ groupId: `g-${topic}` });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    const got = [];
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`consumed ${got}`)), 30_000);
      consumer.run({ eachMessage: async ({ message }) => {
        got.push(message.value.toString());
        if (got.length === 2) { clearTimeout(timer); resolve(); }
      } });
    });
    await consumer.disconnect();
    assert.deepEqual(got, ['a', 'b']);
  }

  test('SSL', { timeout: 60_000 }, async () => roundTrip(sslPort, undefined));
  for (const mechanism of ['plain', 'scram-sha-256', 'scram-sha-512']) {
    test(`SASL_SSL ${mechanism}`, { timeout: 60_000 }, async () =>
      roundTrip(saslPort, { mechanism, username: 'alice', password: PASSWORD }));
  }

  test('a wrong password is refused', { timeout: 60_000 }, async () => {
    const kafka = new Kafka({ clientId: 'sf-node-sec', brokers: [`127.0.0.1:${saslPort}`], ssl: ssl(),
      sasl: { mechanism: 'scram-sha-512', username: 'alice', password: 'wrong' },
      logLevel: logLevel.NOTHING, retry: { retries: 0 } });
    const admin = kafka.admin();
    await assert.rejects(admin.connect(), (e) => e.name === 'KafkaJSSASLAuthenticationError' || /SASL|auth/i.test(String(e)));
  });
});
