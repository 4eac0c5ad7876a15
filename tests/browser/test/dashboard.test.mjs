// The dashboard in headless Chromium against the real `streamforge broker` binary: every page
// opens and shows real data (a topic the test creates through the UI, messages it produces with
// kafkajs, a running consumer group's lag), a small benchmark runs from the UI, a topic is
// deleted through the confirmation dialog, and no page logs a console error. Screenshots of each
// page go to tests/artifacts/ (gitignored).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { Kafka, logLevel } from 'kafkajs';

import { DashboardBroker, launch, screenshotter, sleep, until } from '../lib/dashboard.mjs';

const TOPIC = `dash-orders-${process.pid}`;
const GROUP = `dash-group-${process.pid}`;
const FIRST_BATCH = 20;
const SECOND_BATCH = 15;

describe('dashboard in headless Chromium', () => {
  let broker;
  let browser;
  let page;
  let kafka;
  let consumer;
  const consoleErrors = [];

  let shot;
  const open = async (p) => {
    await page.goto(broker.url + p, { waitUntil: 'domcontentloaded' });
  };

  before(async () => {
    broker = new DashboardBroker();
    await broker.start();
    await until('the dashboard', async () => (await fetch(`${broker.url}/healthz`)).ok);
    kafka = new Kafka({ clientId: 'dash-test', brokers: [broker.bootstrap], logLevel: logLevel.NOTHING, retry: { retries: 8 } });
    ({ browser, page } = await launch(consoleErrors));
    shot = screenshotter(page, 'dashboard');
  });

  after(async () => {
    if (consumer) await consumer.disconnect().catch(() => {});
    if (browser) await browser.close();
    if (broker) {
      await broker.stop();
      if (process.exitCode) console.log(broker.logTail());
      broker.cleanup();
    }
  });

  it('creates a topic from the overview with confirmation', async () => {
    await open('/');
    await page.getByRole('button', { name: 'Create topic' }).click();
    await page.fill('input[name=name]', TOPIC);
    await page.fill('input[name=partitions]', '2');
    // Without ticking the confirmation the form does not submit.
    await page.click('.modal button[type=submit]');
    assert.ok(await page.isVisible('.modal'), 'the dialog stays open until confirmed');
    await page.check('input[name=confirm]');
    await page.click('.modal button[type=submit]');
    await page.waitForSelector(`tr[data-topic="${TOPIC}"]`);
    const partitions = await page.textContent(`tr[data-topic="${TOPIC}"] td:nth-child(2)`);
    assert.equal(partitions.trim(), '2');
  });

  it('shows produced messages in the message browser', async () => {
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({
      topic: TOPIC,
      messages: Array.from({ length: FIRST_BATCH }, (_, i) => ({
        partition: 0, key: `key-${i}`, value: `hello from the browser test #${i}`, headers: { source: 'dash-test' },
      })),
    });
    await producer.disconnect();
    await open(`/topics/${TOPIC}/partitions/0`);
    await page.waitForSelector('table.messages tr.msg');
    const rows = await page.$$eval('table.messages tr.msg', (trs) => trs.map((tr) => tr.textContent));
    assert.equal(rows.length, FIRST_BATCH);
    assert.match(rows[0], /key-0/);
    assert.match(rows[0], /hello from the browser test #0/);
    assert.match(rows[0], /source=dash-test/);
    // Expanding a row shows the batch details.
    await page.click('table.messages tr.msg');
    const detail = await page.textContent('tr.msg-detail:not(.hidden)');
    assert.match(detail, /compression\s*none/);
    assert.match(detail, /hello from the browser test #0/);
    await page.waitForFunction(() => /High watermark\s*20/i.test(document.querySelector('#p-stats')?.innerText || ''));
    await shot('partition');
    // From the latest end with a limit of 5.
    await page.selectOption('select[name=mode]', 'latest');
    await page.fill('input[name=limit]', '5');
    await page.click('#mb-form button[type=submit]');
    await page.waitForFunction(() => document.querySelectorAll('table.messages tr.msg').length === 5);
    assert.match(await page.textContent('table.messages tr.msg'), /key-15/);
  });

  it('shows the topic page with partitions and configs', async () => {
    await open(`/topics/${TOPIC}`);
    await page.waitForSelector('#t-parts table');
    const parts = await page.$$eval('#t-parts tbody tr', (trs) => trs.map((tr) => tr.textContent));
    assert.equal(parts.length, 2);
    // A lone leader: replicas and ISR are this broker, no follower lag, not under-replicated.
    assert.match(await page.textContent('#t-parts thead'), /Replication lag/);
    assert.equal((await page.textContent('#t-parts tr[data-partition="0"] .p-lag')).trim(), '–');
    assert.equal(await page.$$eval('#t-parts tr.under-replicated', (trs) => trs.length), 0);
    assert.match(await page.textContent('#t-configs'), /retention\.ms/);
    assert.match(await page.textContent('#t-stats'), /20/);
    await shot('topic');
  });

  it("shows a running group's lag", async () => {
    consumer = kafka.consumer({ groupId: GROUP, sessionTimeout: 30_000, heartbeatInterval: 1_000 });
    await consumer.connect();
    await consumer.subscribe({ topics: [TOPIC], fromBeginning: true });
    let seen = 0;
    await consumer.run({ autoCommit: true, autoCommitInterval: 200, eachMessage: async () => { seen += 1; } });
    await until('the consumer to read the first batch', async () => seen >= FIRST_BATCH, 60_000);
    // Stop fetching but stay in the group, then produce more: the lag is exactly the new messages.
    consumer.pause([{ topic: TOPIC }]);
    await until('offsets to be committed', async () => {
      const g = await (await fetch(`${broker.url}/api/groups/${GROUP}`)).json();
      return g.offsets && g.offsets.some((o) => o.partition === 0 && o.committed_offset === FIRST_BATCH);
    }, 30_000);
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic: TOPIC, messages: Array.from({ length: SECOND_BATCH }, (_, i) => ({ partition: 0, value: `later ${i}` })) });
    await producer.disconnect();

    await open('/groups');
    await page.waitForSelector(`tr[data-group="${GROUP}"]`);
    await until('the group list to show the lag', async () =>
      (await page.textContent(`tr[data-group="${GROUP}"] td.lag`)).trim() === String(SECOND_BATCH));
    await shot('groups');
    await open(`/groups/${GROUP}`);
    await until('the group page to show the lag', async () =>
      (await page.textContent('[data-stat=lag] .stat-value')).trim() === String(SECOND_BATCH));
    assert.match(await page.textContent('#gd-sub'), /Stable/);
    assert.match(await page.textContent('#gd-members'), /dash-test/);
    await page.waitForTimeout(2500); // a few points on the lag chart
    await shot('group');
  });

  it('shows live throughput and the topic on the overview', async () => {
    // Traffic while the page is open, so the live charts have something to draw.
    const producer = kafka.producer();
    await producer.connect();
    await open('/');
    for (let i = 0; i < 6; i++) {
      await producer.send({ topic: TOPIC, messages: Array.from({ length: 200 }, (_, j) => ({ partition: 1, value: `burst ${i}-${j}` })) });
      await sleep(500);
    }
    await producer.disconnect();
    await page.waitForSelector(`tr[data-topic="${TOPIC}"]`);
    await until('the live indicator', async () => (await page.textContent('#live-label')) === 'live');
    assert.equal(await page.locator('.uplot').count(), 3, 'three live charts');
    await until('requests in the API table', async () => /Produce/.test(await page.textContent('#ov-apis')));
    await until('the topic messages to be counted', async () =>
      (await page.textContent(`tr[data-topic="${TOPIC}"] td:nth-child(3)`)).replace(/,/g, '').trim() === String(FIRST_BATCH + SECOND_BATCH + 1200));
    await page.waitForTimeout(1500);
    await shot('overview');
  });

  it('opens the topics list and the message picker', async () => {
    await open('/topics');
    await page.waitForSelector(`tr[data-topic="${TOPIC}"]`);
    await shot('topics');
    await open(`/messages?topic=${TOPIC}`);
    await page.waitForFunction((t) => document.querySelector('select[name=topic]')?.value === t, TOPIC);
    await page.click('#mp-form button[type=submit]');
    await page.waitForSelector('table.messages tr.msg');
    await shot('messages');
  });

  it('runs a small benchmark from the UI and shows its result', async () => {
    await open('/bench');
    await page.waitForSelector('#bn-start:not([disabled])');
    await page.fill('input[name=messages]', '20000');
    await page.fill('input[name=partitions]', '2');
    await page.fill('input[name=batch_size]', '500');
    await page.fill('input[name=message_size]', '100');
    await page.selectOption('select[name=acks]', 'all');
    await page.click('#bn-start');
    await page.waitForSelector('#bn-current .badge-ok, #bn-current .badge-bad', { timeout: 180_000 });
    const failed = await page.locator('#bn-current .badge-bad').count();
    assert.equal(failed, 0, `the benchmark failed: ${await page.textContent('#bn-current')}`);
    const results = await page.$$eval('table.results tr', (trs) => trs.map((tr) => tr.textContent));
    assert.ok(results.length > 0, 'a results table');
    assert.match(await page.textContent('#bn-history'), /20,000 msgs · 2 partitions · batch 500 · 100 B · acks=all/);
    await page.waitForTimeout(500);
    await shot('bench');
  });

  it('deletes the topic only after the name is typed', async () => {
    await open(`/topics/${TOPIC}`);
    await page.click('#t-delete');
    await page.fill('input[name=confirm]', 'wrong-name');
    await page.click('.modal button[type=submit]');
    await page.waitForSelector('.modal-error:not(.hidden)');
    assert.match(await page.textContent('.modal-error'), /does not match/);
    await shot('delete-dialog', false); // the dialog covers the viewport, not the whole page
    await page.fill('input[name=confirm]', TOPIC);
    await page.click('.modal button[type=submit]');
    await page.waitForURL(`${broker.url}/topics`);
    await until('the topic to disappear', async () => (await page.locator(`tr[data-topic="${TOPIC}"]`).count()) === 0);
    const list = await (await fetch(`${broker.url}/api/topics`)).json();
    assert.ok(!list.some((t) => t.name === TOPIC));
  });

  it('logged no console errors on any page', () => {
    assert.deepEqual(consoleErrors, []);
  });
});
