// Shared by the dashboard suites: the broker with its dashboard on a free port, a headless
// Chromium with a fresh profile, and a bounded wait.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

import { Broker, freePort } from '../../node/lib/broker.mjs';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
export const ARTIFACTS = path.join(ROOT, 'tests', 'artifacts');
export const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
export const UI_TIMEOUT_MS = 20_000;

/** The shared broker launcher, with the dashboard on its own free port. */
export class DashboardBroker extends Broker {
  async start() {
    if (this.httpPort == null) this.httpPort = await freePort();
    return super.start();
  }

  args() {
    return ['broker', '--listen', this.bootstrap, '--advertised-listener', this.bootstrap,
      '--data-dir', this.dataDir, '--http-listen', `127.0.0.1:${this.httpPort}`, ...this.extraArgs];
  }

  get url() {
    return `http://127.0.0.1:${this.httpPort}`;
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function until(what, fn, timeoutMs = UI_TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await sleep(200);
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

/** Headless Chromium with a fresh profile directory; returns {browser, page}. */
export async function launch(consoleErrors, options = {}) {
  const browser = await chromium.launchPersistentContext(fs.mkdtempSync(path.join(os.tmpdir(), 'sf-chromium-')), {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1440, height: 960 },
    acceptDownloads: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    ...options,
  });
  const page = browser.pages()[0] || await browser.newPage();
  page.setDefaultTimeout(UI_TIMEOUT_MS);
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(`${page.url()}: ${m.text()}`); });
  page.on('pageerror', (e) => consoleErrors.push(`${page.url()}: ${e.message}`));
  return { browser, page };
}

export function screenshotter(page, prefix) {
  return async (name, fullPage = true) => {
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: path.join(ARTIFACTS, `${prefix}-${name}.png`), fullPage });
  };
}
