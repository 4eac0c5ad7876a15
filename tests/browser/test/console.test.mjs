// The dashboard as a console, in headless Chromium against the real `streamforge broker`
// binary, through real clicks: readable errors, human-readable configs, topic actions (edit a
// config with a validation error, add partitions, delete records, produce with key/value/
// headers), group actions (reset and delete offsets, delete the group, refused while the group
// is active), per-topic consumers, lag history that survives a reload, search/filter/sort on
// the lists, the all-partition message browser with JSON and download, and the broker page.
// What the UI changed is checked again through a real Kafka client (kafkajs).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from 'node:test';

import { Kafka, logLevel } from 'kafkajs';

import { DashboardBroker, launch, screenshotter, sleep, until } from '../lib/dashboard.mjs';

const TOPIC = `console-orders-${process.pid}`;
const OTHER = `console-zeta-${process.pid}`;
const GROUP = `console-group-${process.pid}`;

describe('dashboard console actions', () => {
  let broker;
  let browser;
  let page;
  let kafka;
  let admin;
  let shot;
  const consoleErrors = [];

  const open = async (p) => { await page.goto(broker.url + p, { waitUntil: 'domcontentloaded' }); };
  const submit = () => page.click('.modal button[type=submit]');
  const modalError = async () => {
    await page.waitForSelector('.modal-error:not(.hidden)');
    return page.textContent('.modal-error');
  };
  const banner = async (re) => until(`a banner matching ${re}`, async () => re.test(await page.textContent('#banner')));
  const api = async (p) => (await fetch(broker.url + p)).json();

  before(async () => {
    broker = new DashboardBroker();
    await broker.start();
    await until('the dashboard', async () => (await fetch(`${broker.url}/healthz`)).ok);
    kafka = new Kafka({ clientId: 'console-test', brokers: [broker.bootstrap], logLevel: logLevel.NOTHING, retry: { retries: 8 } });
    admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [
      { topic: TOPIC, numPartitions: 2, configEntries: [{ name: 'retention.ms', value: '3600000' }] },
      { topic: OTHER, numPartitions: 1 },
    ] });
    ({ browser, page } = await launch(consoleErrors));
    shot = screenshotter(page, 'console');
  });

  after(async () => {
    if (admin) await admin.disconnect().catch(() => {});
    if (browser) await browser.close();
    if (broker) {
      await broker.stop();
      if (process.exitCode) console.log(broker.logTail());
      broker.cleanup();
    }
  });

  it('says the broker cannot be reached instead of "Failed to fetch", and shows Kafka errors by name', async () => {
    await open('/topics');
    await page.waitForSelector(`tr[data-topic="${TOPIC}"]`);
    await page.route('**/api/topics', (route) => route.abort());
    await banner(/Cannot reach the broker at 127\.0\.0\.1:\d+/);
    assert.doesNotMatch(await page.textContent('#banner'), /Failed to fetch/);
    await page.unroute('**/api/topics');
    // Creating a topic that exists: Kafka's TOPIC_ALREADY_EXISTS with its message.
    await page.getByRole('button', { name: 'Create topic' }).click();
    await page.fill('input[name=name]', TOPIC);
    await page.check('input[name=confirm]');
    await submit();
    assert.match(await modalError(), new RegExp(`TOPIC_ALREADY_EXISTS: Topic '${TOPIC}' already exists`));
    await page.click('.modal [data-cancel]');
  });

  it('shows configs human-readable and keeps the requests-by-API table inside its card', async () => {
    await open(`/topics/${TOPIC}`);
    await page.waitForSelector('tr[data-config="retention.ms"]');
    const cell = await page.textContent('tr[data-config="retention.ms"] .cfg-value');
    assert.match(cell, /^1 h\s+3600000$/);
    await page.click('.config-defaults summary');
    assert.match(await page.textContent('tr[data-config="segment.bytes"] .cfg-value'), /GiB|MiB/);
    for (const width of [1440, 1100]) {
      await page.setViewportSize({ width, height: 960 });
      await open('/');
      await until('requests in the API table', async () => /ApiVersions|Metadata/.test(await page.textContent('#ov-apis')));
      const fits = await page.$eval('#ov-apis-card', (el) => el.scrollWidth <= el.clientWidth);
      assert.ok(fits, `the requests-by-API table overflows its card at ${width} px`);
    }
    await page.setViewportSize({ width: 1440, height: 960 });
  });

  it('edits a topic config, showing the validation error first', async () => {
    await open(`/topics/${TOPIC}`);
    await page.click('tr[data-config="retention.ms"] [data-edit-config]');
    await page.fill('.modal input[name=value]', 'an hour');
    await submit();
    assert.match(await modalError(), /^INVALID_CONFIG: .*retention\.ms/);
    await page.fill('.modal input[name=value]', '7200000');
    assert.match(await page.textContent('#cfg-hint'), /2 h/);
    await submit();
    await banner(/retention\.ms of .* set to 7200000/);
    await until('the table to show 2 h', async () => /^2 h/.test(await page.textContent('tr[data-config="retention.ms"] .cfg-value')));
    const described = await admin.describeConfigs({ resources: [{ type: 2, name: TOPIC, configNames: ['retention.ms'] }], includeSynonyms: false });
    assert.equal(described.resources[0].configEntries.find((c) => c.configName === 'retention.ms').configValue, '7200000');
  });

  it('adds partitions, refusing fewer than there are', async () => {
    await open(`/topics/${TOPIC}`);
    await page.waitForSelector('#t-parts table');
    await page.click('#t-add-parts');
    await page.fill('.modal input[name=count]', '1');
    await page.check('.modal input[name=confirm]');
    await submit();
    assert.match(await modalError(), /^INVALID_PARTITIONS: Topic currently has 2 partitions/);
    await page.fill('.modal input[name=count]', '3');
    await submit();
    await until('three partitions on the page', async () => (await page.locator('#t-parts tbody tr').count()) === 3);
    const meta = await admin.fetchTopicMetadata({ topics: [TOPIC] });
    assert.equal(meta.topics[0].partitions.length, 3);
  });

  it('produces a message with key, value and headers that a Kafka consumer reads back', async () => {
    await open(`/topics/${TOPIC}`);
    await page.waitForSelector('#t-parts table');
    await page.click('#t-produce');
    await page.selectOption('.modal select[name=partition]', '2');
    await page.fill('.modal input[name=key]', 'order-42');
    await page.fill('.modal textarea[name=value]', '{"id":42,"items":["tea","milk"]}');
    await page.fill('.modal textarea[name=headers]', 'source=dashboard\ntrace=abc-1');
    await submit();
    await banner(/Produced to .* partition 2 at offset 0/);
    const consumer = kafka.consumer({ groupId: `${GROUP}-reader` });
    await consumer.connect();
    await consumer.subscribe({ topics: [TOPIC], fromBeginning: true });
    let got = null;
    await consumer.run({ eachMessage: async ({ partition, message }) => { if (partition === 2) got = message; } });
    await until('the consumer to read the produced message', async () => got, 30_000);
    await consumer.disconnect();
    assert.equal(got.key.toString(), 'order-42');
    assert.equal(got.value.toString(), '{"id":42,"items":["tea","milk"]}');
    assert.equal(got.headers.source.toString(), 'dashboard');
    assert.equal(got.headers.trace.toString(), 'abc-1');
  });

  it('deletes records below an offset', async () => {
    const producer = kafka.producer();
    await producer.connect();
    await producer.send({ topic: TOPIC, messages: Array.from({ length: 10 }, (_, i) => ({
      partition: 0, key: `k${i % 3}`, value: i % 2 ? JSON.stringify({ n: i, kind: 'odd' }) : `plain ${i}`,
      headers: { parity: i % 2 ? 'odd' : 'even' },
    })) });
    await producer.send({ topic: TOPIC, messages: Array.from({ length: 4 }, (_, i) => ({
      partition: 1, key: `k${i % 3}`, value: `partition one ${i}`, headers: { parity: i % 2 ? 'odd' : 'even' },
    })) });
    await producer.disconnect();
    await open(`/topics/${TOPIC}/partitions/0`);
    await page.waitForFunction(() => /High watermark\s*10/i.test(document.querySelector('#p-stats')?.innerText || ''));
    await page.click('#p-delete-records');
    await page.fill('.modal input[name=before]', '11');
    await page.check('.modal input[name=confirm]');
    await submit();
    assert.match(await modalError(), /^OFFSET_OUT_OF_RANGE/);
    await page.fill('.modal input[name=before]', '4');
    await submit();
    await until('the log to start at 4', async () => /Log start offset\s*4/i.test(await page.innerText('#p-stats')));
    const offsets = await admin.fetchTopicOffsets(TOPIC);
    assert.equal(offsets.find((o) => o.partition === 0).low, '4');
    // The partition's browser downloads what it shows: offsets 4..9.
    await page.click('#mb-form button[type=submit]');
    await until('the browser from the new log start', async () => (await page.locator('table.messages tr.msg').count()) === 6);
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#mb-download')]);
    const saved = JSON.parse(fs.readFileSync(await download.path(), 'utf8'));
    assert.deepEqual(saved.map((m) => m.offset), [4, 5, 6, 7, 8, 9]);
  });

  it('searches messages across partitions by key, value, header and time, pretty-prints JSON and downloads', async () => {
    await open(`/messages?topic=${TOPIC}`);
    await page.waitForFunction((t) => document.querySelector('select[name=topic]')?.value === t, TOPIC);
    await page.fill('#mp-form input[name=key]', 'k1');
    await page.click('#mp-form button[type=submit]');
    await page.waitForSelector('table.messages tr.msg');
    const rows = await page.$$eval('table.messages tr.msg', (trs) => trs.map((tr) => tr.children[0].textContent.trim()));
    // Partition 0 keeps offsets 4..9 (k1 at 4 and 7), partition 1 has k1 at offset 1.
    assert.deepEqual([...rows].sort(), ['0', '0', '1']);
    await page.fill('#mp-form input[name=key]', '');
    await page.fill('#mp-form input[name=header]', 'parity=odd');
    await page.fill('#mp-form input[name=value]', 'kind');
    await page.click('#mp-form button[type=submit]');
    await until('three odd JSON values', async () => (await page.locator('table.messages tr.msg').count()) === 3);
    await page.click('table.messages tr.msg');
    const pretty = await page.textContent('tr.msg-detail:not(.hidden) pre.json');
    assert.match(pretty, /\{\n {2}"n": 5,\n {2}"kind": "odd"\n\}/);
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#mp-download')]);
    const saved = JSON.parse(fs.readFileSync(await download.path(), 'utf8'));
    assert.equal(saved.length, 3);
    assert.ok(saved.every((m) => m.headers.some((h) => h.key === 'parity' && h.value.data === 'odd')));
    await shot('messages');
    // A time window that ends before anything was written finds nothing.
    await page.fill('#mp-form input[name=value]', '');
    await page.fill('#mp-form input[name=header]', '');
    await page.fill('#mp-form input[name=until]', '2001-01-01T00:00:00');
    await page.click('#mp-form button[type=submit]');
    await until('no messages before 2001', async () => /^0 message/.test(await page.textContent('#mp-info')));
  });

  it('refuses group actions while the group is active, then resets, deletes offsets and deletes the group', async () => {
    const consumer = kafka.consumer({ groupId: GROUP, sessionTimeout: 30_000, heartbeatInterval: 1_000 });
    await consumer.connect();
    await consumer.subscribe({ topics: [TOPIC], fromBeginning: true });
    let seen = 0;
    await consumer.run({ autoCommit: true, autoCommitInterval: 200, eachMessage: async () => { seen += 1; } });
    await until('the group to consume everything', async () => seen >= 11, 60_000);
    await until('the commits', async () => (await api(`/api/groups/${GROUP}`)).offsets?.length === 3, 30_000);
    // Per-topic consumers: the topic page lists the group.
    await open(`/topics/${TOPIC}`);
    await page.waitForSelector(`#t-consumers tr[data-consumer="${GROUP}"]`);
    await open(`/groups/${GROUP}`);
    await page.waitForSelector('#gd-offsets table');
    await page.click('#gd-reset');
    await page.check('.modal input[name=confirm]');
    await submit();
    assert.match(await modalError(), /^NON_EMPTY_GROUP: .*current state is Stable/);
    await page.click('.modal [data-cancel]');
    await page.click('#gd-delete');
    await page.fill('.modal input[name=confirm]', GROUP);
    await submit();
    assert.match(await modalError(), /^NON_EMPTY_GROUP/);
    await page.click('.modal [data-cancel]');
    await consumer.disconnect();
    await until('the group to be empty', async () => (await api(`/api/groups/${GROUP}`)).state === 'Empty');

    // Reset every partition of the topic to the earliest offset.
    await page.click('#gd-reset');
    await page.selectOption('.modal select[name=topic]', TOPIC);
    await page.selectOption('.modal select[name=to]', 'earliest');
    await page.check('.modal input[name=confirm]');
    await submit();
    await banner(/Offsets of .* reset/);
    let committed = await admin.fetchOffsets({ groupId: GROUP, topics: [TOPIC] });
    assert.deepEqual(committed[0].partitions.map((p) => [p.partition, p.offset]).sort(), [[0, '4'], [1, '0'], [2, '0']]);
    // One partition to an offset, another to a time after everything (its high watermark).
    await page.click('#gd-reset');
    await page.selectOption('.modal select[name=partition]', '0');
    await page.selectOption('.modal select[name=to]', 'offset');
    await page.fill('.modal input[name=offset]', '7');
    await page.check('.modal input[name=confirm]');
    await submit();
    await banner(/-0 → 7/);
    await page.click('#gd-reset');
    await page.selectOption('.modal select[name=partition]', '1');
    await page.selectOption('.modal select[name=to]', 'timestamp');
    await page.fill('.modal input[name=time]', '2100-01-01T00:00:00');
    await page.check('.modal input[name=confirm]');
    await submit();
    await banner(/-1 → 4/);
    committed = await admin.fetchOffsets({ groupId: GROUP, topics: [TOPIC] });
    assert.deepEqual(committed[0].partitions.map((p) => [p.partition, p.offset]).sort(), [[0, '7'], [1, '4'], [2, '0']]);
    await until('the lag on the page', async () => (await page.textContent('[data-stat=lag] .stat-value')).trim() === '4'); // 10-7 + 4-4 + 1-0

    // The broker keeps the lag history: after a reload the chart still has the earlier points.
    await until('a lag history point', async () => (await api(`/api/groups/${GROUP}/lag-history`)).points.length >= 1, 15_000);
    const before = (await api(`/api/groups/${GROUP}/lag-history`)).points;
    await page.reload({ waitUntil: 'domcontentloaded' });
    await until('the chart from the broker history', async () =>
      Number(await page.getAttribute('#gd-chart', 'data-points')) >= before.length);
    assert.match(await page.textContent('#gd-chart .chart-title'), /last hour/);
    await shot('group');

    await page.click('#gd-delete-offsets');
    await page.selectOption('.modal select[name=topic]', TOPIC);
    await page.selectOption('.modal select[name=partition]', '2');
    await page.check('.modal input[name=confirm]');
    await submit();
    await banner(/Offsets of .* deleted/);
    committed = await admin.fetchOffsets({ groupId: GROUP, topics: [TOPIC] });
    assert.equal(committed[0].partitions.find((p) => p.partition === 2).offset, '-1');

    await page.click('#gd-delete');
    await page.fill('.modal input[name=confirm]', GROUP);
    await submit();
    await page.waitForURL(`${broker.url}/groups`);
    const { groups } = await admin.listGroups();
    assert.ok(!groups.some((g) => g.groupId === GROUP), 'the group is gone for Kafka clients too');
  });

  it('searches, filters and sorts the topics and groups lists', async () => {
    await open('/topics');
    await page.waitForSelector(`tr[data-topic="${OTHER}"]`);
    await page.fill('input[data-search=topics]', 'zeta');
    await until('only the zeta topic', async () => {
      const names = await page.$$eval('#tp-list tr[data-topic]', (trs) => trs.map((t) => t.dataset.topic));
      return names.length === 1 && names[0] === OTHER;
    });
    await page.fill('input[data-search=topics]', '');
    await page.selectOption('select[data-filter=topics]', 'internal');
    await until('only internal topics', async () => {
      const names = await page.$$eval('#tp-list tr[data-topic]', (trs) => trs.map((t) => t.dataset.topic));
      return names.length === 1 && names[0] === '__consumer_offsets';
    });
    await page.selectOption('select[data-filter=topics]', 'user');
    await page.click('#tp-list th[data-sort=messages]');
    await page.click('#tp-list th[data-sort=messages]'); // descending
    const names = await page.$$eval('#tp-list tr[data-topic]', (trs) => trs.map((t) => t.dataset.topic));
    assert.deepEqual(names, [TOPIC, OTHER]);
    assert.match(await page.textContent('[data-count=topics]'), /2 of 3/);

    // Groups: the reader group from the produce test is still there (Empty).
    await open('/groups');
    await page.waitForSelector('tr[data-group]');
    await page.fill('input[data-search=groups]', 'no-such-group');
    await page.waitForSelector('#g-list td.empty');
    await page.fill('input[data-search=groups]', 'reader');
    await page.selectOption('select[data-filter=groups]', 'Empty');
    await until('the reader group', async () => (await page.locator(`tr[data-group="${GROUP}-reader"]`).count()) === 1);
    await page.click('#g-list th[data-sort=lag]');
    assert.match(await page.textContent('#g-list th[data-sort=lag]'), /▲/);
  });

  it('shows the broker page with version, data directory, disk use, uptime and configs', async () => {
    await open('/broker');
    await page.waitForSelector('#br-data-dir');
    assert.equal((await page.textContent('#br-data-dir')).trim(), broker.dataDir);
    assert.match(await page.textContent('[data-stat=version] .stat-value'), /^\d+\.\d+\.\d+/);
    assert.match(await page.textContent('[data-stat=uptime] .stat-value'), /\d+(s|m|h)/);
    assert.match(await page.textContent('[data-stat=disk] .stat-value'), /\d+ %/);
    assert.match(await page.textContent('#br-storage'), /used of .* free/);
    assert.match(await page.textContent('#br-configs'), /log\.dirs/);
    await shot('broker');
  });

  it('shows the brokers page: the broker, its role, the quorum and partition health', async () => {
    await open('/brokers');
    await page.waitForSelector('#bs-brokers tr[data-broker]');
    const cluster = await api('/api/cluster');
    const row = `#bs-brokers tr[data-broker="${cluster.node_id}"]`;
    assert.equal(await page.locator('#bs-brokers tr[data-broker]').count(), cluster.brokers.length);
    assert.match(await page.textContent(`${row} [data-state]`), /live/);
    assert.match(await page.textContent(`${row} [data-role]`), /controller/);
    assert.equal((await page.textContent('#bs-quorum-leader')).trim(), String(cluster.quorum.leader_id));
    assert.equal(cluster.quorum.leader_id, cluster.node_id);
    await page.waitForSelector('#bs-all-good');
    await shot('brokers');
  });

  it('logged no script errors (refused requests aside)', () => {
    // Chromium logs every 4xx and aborted request as "Failed to load resource"; the tests above
    // cause those on purpose. Anything else is a bug.
    assert.deepEqual(consoleErrors.filter((e) => !/Failed to load resource/.test(e)), []);
  });
});
