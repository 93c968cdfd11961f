// A real Envoy running the sluice proxy-wasm filter in front of a tiny upstream, for the browser
// tests that must show a change made in the dashboard reaching traffic through the proxy. The
// config is envoy/e2e.yaml (the Envoy suite's), its ${NAME} placeholders filled as envsubst would;
// `runEnvoy` runs any other envoy/ template the same way (rlqs.test.mjs: stock Envoy over RLQS).
// Envoy and the upstream listen on free loopback ports and are stopped by PID; every wait is
// bounded.
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:http';
import { existsSync, openSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, waitFor } from './stack.mjs';

/**
 * Starts an upstream that answers 200 to everything and Envoy with the sluice filter calling the
 * backend at `decisionPort`. `repo` is the repository root (for envoy/e2e.yaml, the filter and
 * .venv/bin/envoy), `logDir` where `<name>-envoy.log` goes. The filter is built first when it is
 * missing (scripts/build-filter.sh; the Envoy suite builds it too). Returns `url` (the listener
 * that fails open on a backend error, routes `/limited/` to action `e2e_limited` keyed by the
 * `x-user` header) and `stop()`.
 */
export async function startEnvoy({ repo, decisionPort, logDir, name = 'envoy' }) {
  const wasm = process.env.SLUICE_FILTER_WASM
    ?? join(repo, 'target', 'wasm32-wasip1', 'wasm-release', 'sluice_filter.wasm');
  if (!existsSync(wasm)) {
    const built = spawnSync('bash', [join(repo, 'scripts', 'build-filter.sh')], { cwd: repo, stdio: 'inherit', timeout: 600000 });
    if (built.status !== 0) throw new Error(`scripts/build-filter.sh failed (${built.status})`);
  }
  const upstream = await startUpstream();
  const values = {
    ENVOY_ADMIN_PORT: await freePort(),
    LISTEN_OPEN_PORT: await freePort(),
    LISTEN_CLOSED_PORT: await freePort(),
    BACKEND_PORT: decisionPort,
    UPSTREAM_PORT: upstream.port,
    TIMEOUT_MS: 1000,
    FILTER_WASM: wasm,
  };
  // The listener answers once the filter's VM is up.
  const listening = async () => (await fetch(`http://127.0.0.1:${values.LISTEN_OPEN_PORT}/`)).status === 200;
  const envoy = await runEnvoy({ repo, template: 'e2e.yaml', values, logDir, name, ready: listening })
    .catch((e) => { upstream.close(); throw e; });
  const stop = () => { envoy.stop(); upstream.close(); };
  return { url: `http://127.0.0.1:${values.LISTEN_OPEN_PORT}`, stop };
}

/** An upstream on a free loopback port answering 200 `ok` to everything: `{port, close()}`. */
export async function startUpstream() {
  const server = createServer((req, res) => { req.resume(); res.writeHead(200, { 'content-type': 'text/plain' }); res.end('ok'); });
  const port = await freePort();
  await new Promise((resolve, reject) => { server.once('error', reject); server.listen(port, '127.0.0.1', resolve); });
  return { port, close: () => server.close() };
}

/**
 * Runs `.venv/bin/envoy` (or $SLUICE_ENVOY) on envoy/`template` with its ${NAME} placeholders
 * filled from `values` as envsubst would (a placeholder without a value is an error), logging to
 * `logDir`/`name`.log. Resolves once the admin port's /ready answers 200 and `ready()` (if given)
 * is true; `values.ENVOY_ADMIN_PORT` must be set. Returns `stop()` (SIGTERM by PID).
 */
export async function runEnvoy({ repo, template, values, logDir, name = 'envoy', ready = async () => true }) {
  const envoy = process.env.SLUICE_ENVOY ?? join(repo, '.venv', 'bin', 'envoy');
  if (!existsSync(envoy)) throw new Error(`${envoy} not found: run scripts/install/30-python.sh`);
  mkdirSync(logDir, { recursive: true });
  const text = readFileSync(join(repo, 'envoy', template), 'utf8');
  const config = text.replace(/\$\{([A-Z_]+)\}/g, (whole, key) => {
    if (!(key in values)) throw new Error(`envoy/${template}: no value for ${whole}`);
    return String(values[key]);
  });
  const configPath = join(logDir, `${name}-${values.ENVOY_ADMIN_PORT}.yaml`);
  writeFileSync(configPath, config);
  const log = openSync(join(logDir, `${name}.log`), 'w');
  const child = spawn(envoy, ['-c', configPath, '--disable-hot-restart', '--concurrency', '1', '--log-level', 'warn'],
    { stdio: ['ignore', log, log] });
  const stop = () => {
    if (child.exitCode === null && child.signalCode === null) {
      try { process.kill(child.pid, 'SIGTERM'); } catch { /* already gone */ }
    }
  };
  try {
    await waitFor(`${name} to be ready`, async () => {
      if (child.exitCode !== null) throw new Error(`envoy exited with ${child.exitCode}; see ${logDir}/${name}.log`);
      const admin = await fetch(`http://127.0.0.1:${values.ENVOY_ADMIN_PORT}/ready`);
      return admin.ok && ready();
    }, { timeout: 30000, every: 200 });
  } catch (e) {
    stop();
    throw e;
  }
  return { stop };
}

/** One request through Envoy as user `key` on the `/limited/` route: resolves to the status. */
export async function viaEnvoy(envoyUrl, key) {
  const response = await fetch(`${envoyUrl}/limited/x`, { headers: { 'x-user': key } });
  await response.arrayBuffer();
  return response.status;
}
