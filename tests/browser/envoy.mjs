// A real Envoy running the sluice proxy-wasm filter in front of a tiny upstream, for the browser
// tests that must show a change made in the dashboard reaching traffic through the proxy. The
// config is envoy/e2e.yaml (the Envoy suite's), its ${NAME} placeholders filled as envsubst would.
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
  const envoy = process.env.SLUICE_ENVOY ?? join(repo, '.venv', 'bin', 'envoy');
  const wasm = process.env.SLUICE_FILTER_WASM
    ?? join(repo, 'target', 'wasm32-wasip1', 'wasm-release', 'sluice_filter.wasm');
  if (!existsSync(wasm)) {
    const built = spawnSync('bash', [join(repo, 'scripts', 'build-filter.sh')], { cwd: repo, stdio: 'inherit', timeout: 600000 });
    if (built.status !== 0) throw new Error(`scripts/build-filter.sh failed (${built.status})`);
  }
  if (!existsSync(envoy)) throw new Error(`${envoy} not found: run scripts/install/30-python.sh`);
  mkdirSync(logDir, { recursive: true });

  const upstream = createServer((req, res) => { req.resume(); res.writeHead(200, { 'content-type': 'text/plain' }); res.end('ok'); });
  const upstreamPort = await freePort();
  await new Promise((resolve, reject) => { upstream.once('error', reject); upstream.listen(upstreamPort, '127.0.0.1', resolve); });

  const values = {
    ENVOY_ADMIN_PORT: await freePort(),
    LISTEN_OPEN_PORT: await freePort(),
    LISTEN_CLOSED_PORT: await freePort(),
    BACKEND_PORT: decisionPort,
    UPSTREAM_PORT: upstreamPort,
    TIMEOUT_MS: 1000,
    FILTER_WASM: wasm,
  };
  const template = readFileSync(join(repo, 'envoy', 'e2e.yaml'), 'utf8');
  const config = template.replace(/\$\{([A-Z_]+)\}/g, (whole, key) => {
    if (!(key in values)) throw new Error(`envoy/e2e.yaml: no value for ${whole}`);
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
    upstream.close();
  };
  try {
    await waitFor('envoy to be ready', async () => {
      if (child.exitCode !== null) throw new Error(`envoy exited with ${child.exitCode}; see ${logDir}/${name}.log`);
      const ready = await fetch(`http://127.0.0.1:${values.ENVOY_ADMIN_PORT}/ready`);
      if (!ready.ok) return false;
      // The listener answers once the filter's VM is up.
      const probe = await fetch(`http://127.0.0.1:${values.LISTEN_OPEN_PORT}/`);
      return probe.status === 200;
    }, { timeout: 30000, every: 200 });
  } catch (e) {
    stop();
    throw e;
  }
  return { url: `http://127.0.0.1:${values.LISTEN_OPEN_PORT}`, stop };
}

/** One request through Envoy as user `key` on the `/limited/` route: resolves to the status. */
export async function viaEnvoy(envoyUrl, key) {
  const response = await fetch(`${envoyUrl}/limited/x`, { headers: { 'x-user': key } });
  await response.arrayBuffer();
  return response.status;
}
