// Replication on the topic page in headless Chromium, against two real brokers replicating one
// partition (the `replicated_pair` example: two brokers in one process, broker 1 leads, broker 2
// follows, as in crates/broker/tests/replication.rs). The leader's page shows replicas 1, 2, ISR
// 1, 2 and follower 2's lag 0; the follower's page its lag to the leader's HW. Once the follower
// stops, the leader's row shows the lag growing, then the partition under-replicated with ISR 1,
// and /metrics counts the shrink.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import { after, before, describe, it } from 'node:test';

import { findBinary } from '../../node/lib/broker.mjs';
import { ROOT, launch, screenshotter, until } from '../lib/dashboard.mjs';

// replica.lag.time.max.ms of the pair: short, so the shrink comes within the test's waits.
const REPLICA_LAG_MS = 1500;
const PAIR_START_MS = 120_000;

function pairBinary() {
  if (process.env.SF_REPLICATED_PAIR_BIN) return process.env.SF_REPLICATED_PAIR_BIN;
  return path.join(path.dirname(findBinary()), 'examples', 'replicated_pair');
}

/** Starts the pair; resolves {child, ready, lines} once it printed READY. */
function startPair() {
  const bin = pairBinary();
  const built = spawnSync('test', ['-x', bin]);
  if (built.status !== 0) {
    const r = spawnSync('cargo', ['build', '-p', 'streamforge-broker', '--example', 'replicated_pair'], { cwd: ROOT, stdio: 'inherit' });
    assert.equal(r.status, 0, 'cargo build --example replicated_pair');
  }
  const child = spawn(bin, [String(REPLICA_LAG_MS)], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, RUST_LOG: 'warn' } });
  const stderr = [];
  child.stderr.on('data', (d) => { stderr.push(d.toString()); if (stderr.length > 200) stderr.shift(); });
  const lines = [];
  readline.createInterface({ input: child.stdout }).on('line', (l) => lines.push(l));
  return until('the replicated pair', async () => {
    assert.equal(child.exitCode, null, `replicated_pair exited: ${stderr.join('')}`);
    const line = lines.find((l) => l.startsWith('READY '));
    return line && { child, lines, stderr, ready: JSON.parse(line.slice('READY '.length)) };
  }, PAIR_START_MS);
}

describe('replication on the topic page', () => {
  let pair;
  let browser;
  let page;
  let shot;
  const consoleErrors = [];

  const rowText = async (sel) => (await page.textContent(`#t-parts tr[data-partition="0"] ${sel}`)).replace(/\s+/g, ' ').trim();
  const produce = async (url, n) => {
    for (let i = 0; i < n; i += 1) {
      const r = await fetch(`${url}/api/topics/${pair.ready.topic}/messages`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ partition: 0, value: `m-${i}` }),
      });
      assert.equal(r.status, 201, await r.text());
    }
  };

  before(async () => {
    pair = await startPair();
    ({ browser, page } = await launch(consoleErrors));
    shot = screenshotter(page, 'replication');
  });

  after(async () => {
    if (browser) await browser.close();
    if (pair) {
      pair.child.stdin.end();
      const exited = await until('the pair to exit', async () => pair.child.exitCode !== null, 20_000).catch(() => false);
      if (!exited) pair.child.kill('SIGKILL');
      if (process.exitCode) console.log(pair.stderr.join(''));
    }
  });

  it('shows replicas, ISR and the follower lag of a partition led here', async () => {
    const { leader_url: leader, follower_url: follower, topic } = pair.ready;
    await produce(leader, 5);
    await page.goto(`${leader}/topics/${topic}`, { waitUntil: 'domcontentloaded' });
    await page.waitForSelector('#t-parts tr[data-partition="0"]');
    assert.equal(await rowText('.p-replicas'), '1, 2');
    await until('ISR 1, 2 and follower 2 at lag 0', async () => (await rowText('.p-isr')) === '1, 2' && (await rowText('.p-lag')) === '2: 0');
    assert.ok(await page.isVisible('#t-parts tr[data-partition="0"] .p-lag .badge-ok'), 'an in-sync follower is green');
    assert.equal(await page.$$eval('#t-parts tr.under-replicated', (trs) => trs.length), 0);
    await shot('leader-in-sync');

    await page.goto(`${follower}/topics/${topic}`, { waitUntil: 'domcontentloaded' });
    await until('the follower lag', async () => /follower, 0 behind/.test(await rowText('.p-lag')));
  });

  it('shows the lag growing, then the partition under-replicated, once the follower stops', async () => {
    const { leader_url: leader, topic } = pair.ready;
    pair.child.stdin.write('stop-follower\n');
    await until('the follower to stop', async () => pair.lines.includes('STOPPED'), 60_000);
    await produce(leader, 3);
    await page.goto(`${leader}/topics/${topic}`, { waitUntil: 'domcontentloaded' });
    await until('lag 3 for follower 2', async () => (await rowText('.p-lag')) === '2: 3');
    await until('the ISR shrink (replica.lag.time.max.ms)', async () => (await rowText('.p-isr')) === '1');
    assert.ok(await page.isVisible('#t-parts tr[data-partition="0"].under-replicated'), 'the row is highlighted');
    assert.match(await rowText('td:first-child'), /under-replicated/);
    assert.ok(await page.isVisible('#t-parts tr[data-partition="0"] .p-lag .badge-warn'), 'an out-of-sync follower is amber');
    await shot('leader-under-replicated');
    const metrics = await (await fetch(`${leader}/metrics`)).text();
    assert.match(metrics, /^streamforge_isr_shrinks_total 1$/m);
    assert.match(metrics, /^streamforge_under_replicated_partitions 1$/m);
    assert.match(metrics, new RegExp(`^streamforge_replica_lag_messages\\{topic="${topic}",partition="0",follower="2"\\} 3$`, 'm'));
    assert.deepEqual(consoleErrors, []);
  });
});
