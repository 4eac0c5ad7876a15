// The Transactions page in headless Chromium against the real binary, with real kafkajs
// transactional producers: an open transaction is listed with its state, producer id and
// epoch (the same the CLI's DescribeTransactions shows), partitions, timeout and age; after
// its commit it leaves the open list and shows CompleteCommit; a second one is aborted from
// the page (dialog with a ticked box), which fences its producer (its commit fails), and a
// read_committed consumer sees exactly the committed messages.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';

import { Kafka, logLevel } from 'kafkajs';

import { findBinary } from '../../node/lib/broker.mjs';
import { DashboardBroker, launch, screenshotter, until } from '../lib/dashboard.mjs';

const TOPIC = `txn-ui-${process.pid}`;
const COMMIT_ID = `ui-commit-${process.pid}`;
const ABORT_ID = `ui-abort-${process.pid}`;
const TIMEOUT_MS = 60_000;

/** The CLI's DescribeTransactions answer for one id (JSON). */
function describeCli(bootstrap, tid) {
  const r = spawnSync(findBinary(), ['transactions', '-b', bootstrap, '--json', 'describe', '--transactional-id', tid],
    { encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.status, 0, `streamforge transactions describe: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

describe('transactions page in headless Chromium', () => {
  let broker;
  let browser;
  let page;
  let shot;
  let kafka;
  const producers = [];
  const consoleErrors = [];

  const row = (tid) => `tr[data-txn="${tid}"]`;
  const cell = async (tid, name) => (await page.textContent(`${row(tid)} [data-${name}]`)).trim();

  before(async () => {
    broker = new DashboardBroker();
    await broker.start();
    await until('the dashboard', async () => (await fetch(`${broker.url}/healthz`)).ok);
    kafka = new Kafka({ clientId: 'txn-ui-test', brokers: [broker.bootstrap], logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: 2 }] });
    await admin.disconnect();
    ({ browser, page } = await launch(consoleErrors));
    shot = screenshotter(page, 'transactions');
  });

  after(async () => {
    for (const p of producers) await p.disconnect().catch(() => {});
    if (browser) await browser.close();
    if (broker) {
      await broker.stop();
      if (process.exitCode) console.log(broker.logTail());
      broker.cleanup();
    }
  });

  const transactional = async (transactionalId) => {
    const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1, transactionTimeout: TIMEOUT_MS });
    await producer.connect();
    producers.push(producer);
    return producer;
  };

  it('shows no open transactions before any transactional producer', async () => {
    await page.goto(`${broker.url}/transactions`);
    await page.waitForSelector('#tx-empty');
    assert.match(await page.textContent('#tx-empty'), /No transactional producer/);
  });

  it('lists an open transaction and drops it from the open list after its commit', async () => {
    const producer = await transactional(COMMIT_ID);
    const txn = await producer.transaction();
    await txn.send({ topic: TOPIC, messages: [{ key: 'a', value: 'committed-0', partition: 0 }, { key: 'b', value: 'committed-1', partition: 1 }] });

    await page.waitForSelector(row(COMMIT_ID));
    await until('the Ongoing state', async () => (await cell(COMMIT_ID, 'state')) === 'Ongoing');
    const cli = describeCli(broker.bootstrap, COMMIT_ID);
    assert.equal(cli.state, 'Ongoing');
    assert.equal(await cell(COMMIT_ID, 'producer-id'), String(cli.producer_id));
    assert.equal(await cell(COMMIT_ID, 'epoch'), String(cli.producer_epoch));
    assert.equal(await cell(COMMIT_ID, 'partitions'), `${TOPIC}-0, ${TOPIC}-1`);
    assert.equal(await cell(COMMIT_ID, 'timeout'), '1 min');
    assert.notEqual(await cell(COMMIT_ID, 'start'), '–');
    assert.match(await cell(COMMIT_ID, 'age'), /\d/);
    assert.match(await page.textContent('#tx-sub'), /^1 open/);
    await shot('open');

    await txn.commit();
    await page.waitForSelector(row(COMMIT_ID), { state: 'detached' });
    await page.waitForSelector('#tx-empty');
    await page.check('#tx-all');
    await until('CompleteCommit', async () => (await cell(COMMIT_ID, 'state')) === 'CompleteCommit');
    assert.equal(await cell(COMMIT_ID, 'partitions'), '–');
    assert.equal(await page.isVisible(`${row(COMMIT_ID)} [data-abort]`), false, 'no abort for a completed one');
    await page.uncheck('#tx-all');
  });

  it('aborts an open transaction from the page and fences its producer', async () => {
    const producer = await transactional(ABORT_ID);
    const txn = await producer.transaction();
    await txn.send({ topic: TOPIC, messages: [{ key: 'c', value: 'aborted-0', partition: 0 }] });
    await page.waitForSelector(`${row(ABORT_ID)} [data-abort]`);
    const epochBefore = Number(await cell(ABORT_ID, 'epoch'));

    await page.click(`${row(ABORT_ID)} [data-abort]`);
    await page.waitForSelector('.modal:not(.hidden) h2');
    assert.match(await page.textContent('.modal h2'), new RegExp(ABORT_ID));
    await page.click('.modal button[type=submit]');
    assert.ok(await page.isVisible('.modal'), 'the dialog stays open until the box is ticked');
    await page.check('.modal input[name=confirm]');
    await page.click('.modal button[type=submit]');
    await page.waitForSelector('.modal', { state: 'hidden' });
    await until('the banner', async () => /is aborted/.test(await page.textContent('#banner')));
    await page.waitForSelector(row(ABORT_ID), { state: 'detached' });
    await shot('aborted');

    const cli = describeCli(broker.bootstrap, ABORT_ID);
    assert.equal(cli.state, 'CompleteAbort');
    assert.equal(cli.producer_epoch, epochBefore + 1, 'the abort bumps the epoch');
    await page.check('#tx-all');
    await until('CompleteAbort', async () => (await cell(ABORT_ID, 'state')) === 'CompleteAbort');
    assert.equal(await cell(ABORT_ID, 'epoch'), String(epochBefore + 1));
    await page.uncheck('#tx-all');

    await assert.rejects(txn.commit(), /fenced|epoch|ProducerFenced|INVALID_PRODUCER_EPOCH/i, 'the aborted producer is fenced');
    // Aborting again: nothing open, Kafka's INVALID_TXN_STATE.
    // (From node, not the page: the browser would log the refusal as a console error.)
    const again = await fetch(`${broker.url}/api/transactions/${encodeURIComponent(ABORT_ID)}/abort`,
      { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
    assert.equal(again.status, 409);
    assert.equal((await again.json()).kafka_error, 'INVALID_TXN_STATE');
  });

  it('leaves exactly the committed messages for read_committed', async () => {
    const consumer = kafka.consumer({ groupId: `txn-ui-${process.pid}`, readUncommitted: false });
    await consumer.connect();
    await consumer.subscribe({ topic: TOPIC, fromBeginning: true });
    const seen = [];
    await consumer.run({ eachMessage: async ({ message }) => { seen.push(message.value.toString()); } });
    try {
      await until('the committed messages', async () => seen.length >= 2, 30_000);
      await new Promise((r) => setTimeout(r, 1000));
      assert.deepEqual(seen.sort(), ['committed-0', 'committed-1']);
    } finally {
      await consumer.disconnect();
    }
  });

  it('had no console errors', () => {
    assert.deepEqual(consoleErrors, []);
  });
});
