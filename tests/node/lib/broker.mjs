// Start and stop the real `streamforge broker` binary for node tests: free loopback port, temp data
// dir, log captured to a file (printed by the tests on failure), stopped by pid (SIGTERM, SIGKILL).
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 20_000;

export function findBinary() {
  if (process.env.STREAMFORGE_BIN) return process.env.STREAMFORGE_BIN;
  let target = process.env.CARGO_TARGET_DIR || path.join(REPO_ROOT, 'target');
  if (!path.isAbsolute(target)) target = path.join(REPO_ROOT, target);
  return path.join(target, 'debug', 'streamforge');
}

let helpText;
function brokerHelp() {
  if (helpText === undefined) {
    const r = spawnSync(findBinary(), ['broker', '--help'], { encoding: 'utf8', timeout: 30_000 });
    helpText = `${r.stdout || ''}${r.stderr || ''}`;
  }
  return helpText;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// One ApiVersions v0 round trip over a raw socket: resolves true if the broker answered.
function apiVersionsOk(port) {
  return new Promise((resolve) => {
    const sock = net.connect({ host: '127.0.0.1', port });
    const done = (ok) => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(2000, () => done(false));
    sock.once('error', () => done(false));
    let buf = Buffer.alloc(0);
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      if (buf.length >= 4 && buf.length >= 4 + buf.readInt32BE(0)) {
        // correlation id (4) then error code (2)
        done(buf.length >= 10 && buf.readInt32BE(4) === 42 && buf.readInt16BE(8) === 0);
      }
    });
    sock.once('connect', () => {
      const clientId = Buffer.from('sf-node-probe');
      const hdr = Buffer.alloc(10);
      hdr.writeInt16BE(18, 0); // ApiVersions
      hdr.writeInt16BE(0, 2); // v0
      hdr.writeInt32BE(42, 4); // correlation id
      hdr.writeInt16BE(clientId.length, 8);
      const payload = Buffer.concat([hdr, clientId]);
      const len = Buffer.alloc(4);
      len.writeInt32BE(payload.length, 0);
      sock.write(Buffer.concat([len, payload]));
    });
  });
}

export class Broker {
  constructor({ extraArgs = [], env = {} } = {}) {
    this.workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sf-node-'));
    this.dataDir = path.join(this.workDir, 'data');
    this.logPath = path.join(this.workDir, 'broker.log');
    this.extraArgs = extraArgs;
    this.env = env;
    this.proc = null;
    this.port = null;
  }

  get bootstrap() {
    return `127.0.0.1:${this.port}`;
  }

  args() {
    const a = ['broker', '--listen', this.bootstrap, '--advertised-listener', this.bootstrap,
      '--data-dir', this.dataDir];
    if (brokerHelp().includes('--http-listen')) a.push('--http-listen', 'off');
    return a.concat(this.extraArgs);
  }

  async start() {
    if (this.port === null) this.port = await freePort();
    fs.mkdirSync(this.dataDir, { recursive: true });
    const fd = fs.openSync(this.logPath, 'a');
    fs.writeSync(fd, `\n===== start: ${findBinary()} ${this.args().join(' ')}\n`);
    this.proc = spawn(findBinary(), this.args(), {
      cwd: this.workDir,
      stdio: ['ignore', fd, fd],
      env: { RUST_LOG: 'info', ...process.env, ...this.env },
    });
    fs.closeSync(fd);
    this.exited = new Promise((resolve) => this.proc.once('exit', (code, sig) => resolve({ code, sig })));
    const deadline = Date.now() + START_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (this.proc.exitCode !== null) throw new Error(`broker exited during startup\n${this.logTail()}`);
      if (await apiVersionsOk(this.port)) return this;
      await sleep(100);
    }
    throw new Error(`broker not ready after ${START_TIMEOUT_MS} ms\n${this.logTail()}`);
  }

  async stop() {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.kill('SIGTERM');
    const timeout = sleep(STOP_TIMEOUT_MS).then(() => 'timeout');
    if ((await Promise.race([this.exited, timeout])) === 'timeout') {
      this.proc.kill('SIGKILL');
      await this.exited;
    }
  }

  // SIGKILL (kill -9): no shutdown at all, as a crash. The data dir and port stay for start().
  async kill() {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.kill('SIGKILL');
    await this.exited;
  }

  logTail(lines = 150) {
    try {
      return fs.readFileSync(this.logPath, 'utf8').split('\n').slice(-lines).join('\n');
    } catch {
      return '';
    }
  }

  cleanup() {
    fs.rmSync(this.workDir, { recursive: true, force: true });
  }
}
