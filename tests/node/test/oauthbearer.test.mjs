// kafkajs with SASL/OAUTHBEARER (`oauthBearerProvider`): JWTs signed here with throw-away RSA
// and EC keys (node:crypto), checked by the broker against a JWKS file; an expired token and a
// badly signed one are refused.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, test } from 'node:test';
import kafkajs from 'kafkajs';
import { Broker, freePort } from '../lib/broker.mjs';

const { Kafka, logLevel } = kafkajs;
const ISSUER = 'https://idp.streamforge.test';

const b64url = (data) => Buffer.from(data).toString('base64url');

function makeKey(alg, kid) {
  const { privateKey, publicKey } = alg === 'RS256'
    ? crypto.generateKeyPairSync('rsa', { modulusLength: 2048 })
    : crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return { alg, kid, privateKey, jwk: { ...publicKey.export({ format: 'jwk' }), kid, alg, use: 'sig' } };
}

function sign(key, claims) {
  const input = `${b64url(JSON.stringify({ alg: key.alg, typ: 'JWT', kid: key.kid }))}.${b64url(JSON.stringify(claims))}`;
  const sig = key.alg === 'RS256'
    ? crypto.sign('sha256', Buffer.from(input), key.privateKey)
    : crypto.sign('sha256', Buffer.from(input), { key: key.privateKey, dsaEncoding: 'ieee-p1363' });
  return `${input}.${b64url(sig)}`;
}

function claims(sub, lifetimeS = 300) {
  const now = Math.floor(Date.now() / 1000);
  return { sub, iss: ISSUER, aud: 'kafka', iat: now, exp: now + lifetimeS };
}

describe('kafkajs over SASL_PLAINTEXT with OAUTHBEARER', () => {
  let broker;
  let dir;
  let saslPort;
  const rsa = makeKey('RS256', 'rsa-1');
  const ec = makeKey('ES256', 'ec-1');

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sf-node-oauth-'));
    const jwks = path.join(dir, 'jwks.json');
    fs.writeFileSync(jwks, JSON.stringify({ keys: [rsa.jwk, ec.jwk] }));
    broker = new Broker();
    broker.env = { RUST_LOG: 'info,streamforge_broker::security=debug' };
    broker.port = await freePort();
    saslPort = await freePort();
    broker.extraArgs = ['--listeners',
      `PLAINTEXT://127.0.0.1:${broker.port},SASL_PLAINTEXT://127.0.0.1:${saslPort}`,
      '--sasl-mechanisms', 'OAUTHBEARER',
      '--sasl-oauthbearer-jwks-endpoint-url', pathToFileURL(jwks).href,
      '--sasl-oauthbearer-expected-issuer', ISSUER,
      '--sasl-oauthbearer-expected-audience', 'kafka'];
    await broker.start();
  });

  after(async () => {
    if (broker) {
      await broker.stop();
      broker.cleanup();
    }
  });

  const client = (token, retries = 3) => new Kafka({ clientId: 'sf-node-oauth', brokers: [`127.0.0.1:${saslPort}`],
    sasl: { mechanism: 'oauthbearer', oauthBearerProvider: async () => ({ value: token }) },
    logLevel: logLevel.NOTHING, retry: { retries } });

  for (const [name, key] of [['RS256', rsa], ['ES256', ec]]) {
    test(`a ${name} token produces and consumes`, { timeout: 60_000 }, async () => {
      const kafka = client(sign(key, claims(`node-${name}`)));
      const topic = `oauth-${Date.now()}-${Math.random().toString(16).slice(2, 8)}`;
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
      assert.match(fs.readFileSync(broker.logPath, 'utf8'), new RegExp(`principal=User:node-${name}`));
    });
  }

  test('expired and badly signed tokens are refused', { timeout: 60_000 }, async () => {
    const impostor = makeKey('RS256', 'rsa-1');
    for (const token of [sign(rsa, claims('late', -120)), sign(impostor, claims('mallory'))]) {
      // kafkajs takes the invalid_token challenge (error code 0) for success, so the refusal
      // shows on its first request, when the broker closes the unauthenticated connection.
      const admin = client(token, 0).admin();
      await assert.rejects((async () => { await admin.connect(); await admin.listTopics(); })());
      await admin.disconnect();
    }
    const log = fs.readFileSync(broker.logPath, 'utf8');
    assert.match(log, /ExpiredSignature/);
    assert.match(log, /InvalidSignature/);
  });
});
