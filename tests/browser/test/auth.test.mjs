// The dashboard's login in headless Chromium against the real binary with a SASL listener: a
// page asks for the login first, a wrong password is refused on the page, the broker user
// (created with `streamforge users`, the same user Kafka clients log in as over SASL) logs in
// and sees the topics, logs out, and is refused after (pages go back to the login page, the API
// answers 401).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, it } from 'node:test';

import { Kafka, logLevel } from 'kafkajs';

import { findBinary, freePort } from '../../node/lib/broker.mjs';
import { DashboardBroker, launch, screenshotter, until } from '../lib/dashboard.mjs';

const TOPIC = `auth-topic-${process.pid}`;
const USER = 'alice';
const PASSWORD = 'alice-secret';

/** The dashboard broker with a SASL_PLAINTEXT listener besides the PLAINTEXT one. */
class SaslDashboardBroker extends DashboardBroker {
  async start() {
    if (this.saslPort == null) this.saslPort = await freePort();
    return super.start();
  }

  args() {
    return ['broker', '--listeners', `PLAINTEXT://${this.bootstrap},SASL_PLAINTEXT://127.0.0.1:${this.saslPort}`,
      '--sasl-mechanisms', 'PLAIN,SCRAM-SHA-256', '--data-dir', this.dataDir,
      '--http-listen', `127.0.0.1:${this.httpPort}`];
  }
}

describe('dashboard login in headless Chromium', () => {
  let broker;
  let browser;
  let page;
  let shot;
  const consoleErrors = [];

  before(async () => {
    broker = new SaslDashboardBroker();
    await broker.start();
    await until('the dashboard', async () => (await fetch(`${broker.url}/healthz`)).ok);
    const created = spawnSync(findBinary(), ['users', '-b', broker.bootstrap, 'create', USER, '--password', PASSWORD],
      { encoding: 'utf8', timeout: 30_000 });
    assert.equal(created.status, 0, `streamforge users create: ${created.stderr}`);
    const kafka = new Kafka({ clientId: 'auth-test', brokers: [broker.bootstrap], logLevel: logLevel.NOTHING });
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: 1 }] });
    await admin.disconnect();
    ({ browser, page } = await launch(consoleErrors));
    shot = screenshotter(page, 'auth');
  });

  after(async () => {
    if (browser) await browser.close();
    if (broker) {
      await broker.stop();
      if (process.exitCode) console.log(broker.logTail());
      broker.cleanup();
    }
  });

  it('asks for the login before any page', async () => {
    await page.goto(`${broker.url}/topics`, { waitUntil: 'domcontentloaded' });
    assert.equal(new URL(page.url()).pathname, '/login');
    assert.equal(new URL(page.url()).searchParams.get('next'), '/topics');
    await page.waitForSelector('input[name=password]');
    const status = await page.evaluate(async () => (await fetch('/api/topics')).status);
    assert.equal(status, 401);
  });

  it('refuses a wrong password on the page', async () => {
    await page.fill('input[name=username]', USER);
    await page.fill('input[name=password]', 'not-the-password');
    await page.click('button[type=submit]');
    await page.waitForSelector('.login-error:not(.hidden)');
    assert.match(await page.textContent('.login-error'), /Invalid username or password/);
    assert.equal(new URL(page.url()).pathname, '/login');
    await shot('refused');
  });

  it('logs in and sees the topics', async () => {
    await page.fill('input[name=username]', USER);
    await page.fill('input[name=password]', PASSWORD);
    await page.click('button[type=submit]');
    await page.waitForSelector(`tr[data-topic="${TOPIC}"]`);
    assert.equal(new URL(page.url()).pathname, '/topics', 'back where the login started');
    await until('the user in the sidebar', async () => (await page.textContent('#user-name')) === USER);
    assert.ok(await page.isVisible('#logout'));
    const cookies = await browser.cookies(broker.url);
    const session = cookies.find((c) => c.name === 'sf_session');
    assert.ok(session, 'a session cookie');
    assert.equal(session.httpOnly, true);
    assert.equal(session.sameSite, 'Strict');
    assert.equal(await page.evaluate(() => document.cookie.includes('sf_session')), false, 'not readable by scripts');
    await shot('topics');
  });

  it('logs out and is refused after', async () => {
    await page.click('#logout');
    await page.waitForSelector('input[name=password]');
    assert.equal(new URL(page.url()).pathname, '/login');
    await page.goto(`${broker.url}/`, { waitUntil: 'domcontentloaded' });
    assert.equal(new URL(page.url()).pathname, '/login');
    const status = await page.evaluate(async () => (await fetch('/api/topics')).status);
    assert.equal(status, 401);
  });

  it('logs no console errors but the expected 401s', () => {
    const unexpected = consoleErrors.filter((e) => !/status of 401/.test(e));
    assert.deepEqual(unexpected, []);
  });
});
