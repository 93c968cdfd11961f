// The real parts the browser tests run against: a redis-server (or the memory store) and a sluice
// backend on free loopback ports, started as child processes and stopped by PID. Every wait is bounded.
import { spawn } from 'node:child_process';
import { createServer, connect } from 'node:net';
import { mkdtempSync, openSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// Ports come from SLUICE_TEST_PORTS=LOW-HIGH (default 20000-31999), below the kernel's ephemeral
// range: no outgoing connection can take one between freePort() and the server's bind, and the
// suites scripts/test.sh runs side by side get disjoint ranges (tests/e2e/stack.py does the same).
const [portLow, portHigh] = (() => {
  const spec = process.env.SLUICE_TEST_PORTS || '20000-31999';
  const m = /^(\d+)-(\d+)$/.exec(spec);
  const [low, high] = m ? [Number(m[1]), Number(m[2])] : [NaN, NaN];
  if (!(low >= 1024 && low < high && high <= 65535)) {
    throw new Error(`SLUICE_TEST_PORTS=${spec}: expected LOW-HIGH with 1024 <= LOW < HIGH <= 65535`);
  }
  return [low, high];
})();
// The range in a shuffled order, round after round: a port comes back only after all the others.
const portOrder = [];

function nextCandidate() {
  if (portOrder.length === 0) {
    for (let p = portLow; p <= portHigh; p++) portOrder.push(p);
    for (let i = portOrder.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [portOrder[i], portOrder[j]] = [portOrder[j], portOrder[i]];
    }
  }
  return portOrder.pop();
}

function bindable(port) {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A port free a moment ago on 127.0.0.1, from this process's range, not handed out this round. */
export async function freePort() {
  for (let tries = 0; tries < 1000; tries++) {
    const port = nextCandidate();
    if (await bindable(port)) return port;
  }
  throw new Error(`no free loopback port in ${portLow}-${portHigh} after 1000 tries`);
}

/** Polls `check` (async, truthy = done) every `every` ms until `timeout` ms; throws `what` on timeout. */
export async function waitFor(what, check, { timeout = 15000, every = 100 } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeout} ms waiting for ${what}${last ? `: ${last.message}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, every));
  }
}

function redisPing(port) {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port }, () => socket.write('PING\r\n'));
    socket.setTimeout(1000, () => { socket.destroy(); resolve(false); });
    socket.on('data', (d) => { socket.destroy(); resolve(d.toString().startsWith('+PONG')); });
    socket.on('error', () => resolve(false));
  });
}

/** One command to the redis-server on `port` (e.g. `CONFIG SET ...`): resolves to its first reply line. */
export function redisCommand(port, ...args) {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port }, () => {
      socket.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`);
    });
    socket.setTimeout(2000, () => { socket.destroy(); reject(new Error(`redis ${args[0]}: no answer`)); });
    socket.on('data', (d) => { socket.destroy(); resolve(d.toString().split('\r\n')[0]); });
    socket.on('error', reject);
  });
}

function stop(child) {
  if (child && child.exitCode === null && child.signalCode === null) {
    try { process.kill(child.pid, 'SIGTERM'); } catch { /* already gone */ }
  }
}

/**
 * Starts redis-server and sluice. `bin` is the sluice binary, `dashboardDir` the trunk output,
 * `logDir` where their logs go (`<name>-redis.log`, `<name>.log`; the default stack's are
 * `redis.log` and `sluice.log`). Returns URLs, the token and `stop()`.
 *
 * `redis`: the redis-server settings (by default the ones docs/storage.md recommends, so that
 * sluice has nothing to warn about), or `false` for no redis-server and sluice's memory store.
 * `sluiceArgs`: extra sluice arguments. The result has `redisPort` when there is a redis-server.
 */
export const RECOMMENDED_REDIS = ['--maxmemory', '256mb', '--maxmemory-policy', 'volatile-lfu'];
export async function startStack({
  bin, dashboardDir, logDir, name = 'sluice', redis = RECOMMENDED_REDIS, sluiceArgs = [],
}) {
  mkdirSync(logDir, { recursive: true });
  const children = [];
  const stopAll = () => children.reverse().forEach(stop);
  const logName = (what) => (name === 'sluice' ? `${what}.log` : `${name}-${what}.log`);
  try {
    const storeArgs = [];
    let redisPort;
    if (redis !== false) {
      redisPort = await freePort();
      const redisDir = mkdtempSync(join(tmpdir(), 'sluice-browser-redis-'));
      const server = spawn('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1',
        '--save', '', '--appendonly', 'no', '--dir', redisDir, ...redis],
      { stdio: ['ignore', openSync(join(logDir, logName('redis')), 'w'), 'inherit'] });
      children.push(server);
      await waitFor('redis-server to answer PING', () => redisPing(redisPort), { timeout: 10000 });
      storeArgs.push('--redis-url', `redis://127.0.0.1:${redisPort}/`, '--key-prefix', `browser${redisPort}`);
      // Redis commands may take 100s of ms on two cores shared with the Envoy suites (issue 38): a
      // store_timeout (503) at the default 100 ms is a console error these tests fail on. No
      // browser test is about the store's timeout (a test may still name its own).
      if (!sluiceArgs.includes('--redis-timeout-ms')) storeArgs.push('--redis-timeout-ms', '1000');
    }

    const adminPort = await freePort();
    const decisionPort = await freePort();
    // The gRPC listener is on by default at 127.0.0.1:8082: a free port, so stacks never collide.
    const grpcPort = await freePort();
    const token = `browser-test-${Math.random().toString(36).slice(2)}`;
    const log = openSync(join(logDir, name === 'sluice' ? 'sluice.log' : `${name}.log`), 'w');
    const sluice = spawn(bin, [
      '--admin-listen', `127.0.0.1:${adminPort}`,
      '--decision-listen', `127.0.0.1:${decisionPort}`,
      '--grpc-listen', `127.0.0.1:${grpcPort}`,
      '--admin-token', token,
      '--dashboard-dir', dashboardDir,
      ...storeArgs,
      ...sluiceArgs,
    ], { stdio: ['ignore', log, log], env: { ...process.env, RUST_LOG: 'info' } });
    children.push(sluice);
    const admin = `http://127.0.0.1:${adminPort}`;
    const decision = `http://127.0.0.1:${decisionPort}`;
    await waitFor('sluice to answer /healthz', async () => {
      if (sluice.exitCode !== null) throw new Error(`sluice exited with ${sluice.exitCode}; see ${logDir}/${name}.log`);
      return (await fetch(`${admin}/healthz`)).ok;
    }, { timeout: 20000 });
    // Stops only sluice (to see how the page reports a backend that went away).
    const stopSluice = () => new Promise((resolve) => {
      if (sluice.exitCode !== null || sluice.signalCode !== null) return resolve();
      sluice.once('exit', () => resolve());
      stop(sluice);
    });
    // `sluicePid`: to stop the process in place (SIGSTOP: a hung backend that closes nothing).
    return { admin, decision, grpcPort, token, redisPort, sluicePid: sluice.pid, stop: stopAll, stopSluice };
  } catch (e) {
    stopAll();
    throw e;
  }
}

/** The admin API with the Bearer token: `api(stack)('PUT', '/v1/rules/x', body)` → {status, body}. */
export function adminApi({ admin, token }) {
  return async (method, path, body) => {
    const response = await fetch(`${admin}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let json = null;
    try { json = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
    return { status: response.status, body: json, text };
  };
}

/** One decision: `POST /v1/throttle`. */
export async function throttle({ decision }, action, key, quantity = 1) {
  const response = await fetch(`${decision}/v1/throttle`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ action, key, quantity }),
  });
  return { status: response.status, body: await response.json() };
}

/**
 * A headless Debian Chromium with its profile in `profile` (a persistent context: one browser,
 * one cookie jar), 1280x800, every wait bounded at 15 s. `chromium` is playwright-core's.
 */
export async function persistentChromium(chromium, profile) {
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1280, height: 800 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  context.setDefaultTimeout(15000);
  return context;
}

/**
 * A headless Debian Chromium with one 1280x800 page signed in to `admin` with `token` (through
 * the API, so the page's first check of its session meets no 401, which Chromium would log as a
 * console error), open at the dashboard. Console errors and page errors (and any line saying
 * "panicked") are collected in `consoleErrors`. `chromium` is playwright-core's.
 */
export async function signedInPage(chromium, { admin, token }) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  context.setDefaultTimeout(15000);
  const page = await context.newPage();
  const consoleErrors = [];
  page.on('pageerror', (e) => consoleErrors.push(`pageerror: ${e}`));
  page.on('console', (m) => { if (m.type() === 'error' || m.text().includes('panicked')) consoleErrors.push(m.text()); });
  const session = await context.request.post(`${admin}/v1/session`, { data: { token } });
  if (!session.ok()) throw new Error(`sign-in: ${session.status()}`);
  await page.goto(admin + '/');
  await page.locator('#new-rule').waitFor();
  return { browser, context, page, consoleErrors };
}
