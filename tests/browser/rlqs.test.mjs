// Browser test of the RLQS shares view (issue 32): two real stock Envoy 1.40 processes
// (.venv/bin/envoy, envoy/rlqs.yaml: Envoy's own rate_limit_quota filter, no sluice filter) ask
// this test's sluice for quota over RLQS; a few requests as user alice go through each. The Keys
// view, with alice looked up, then shows each Envoy's share of the key and the rule's whole bucket
// exactly as GET /v1/rlqs/shares has them, the Live view lists the key too, and its key link
// opens the Keys view on it; at 1280 and 390 wide, with no console errors.
//
// Against a stack of its own (the memory store and sluice), in a browser of its own; every
// process listens on loopback and is stopped by PID. dashboard.test.mjs imports this file; it
// also runs alone: `node --test rlqs.test.mjs`.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startStack, adminApi, freePort, waitFor, signedInPage } from './stack.mjs';
import { runEnvoy, startUpstream } from './envoy.mjs';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const bin = process.env.SLUICE_BIN ?? join(repo, 'target', 'debug', 'sluice');
const dashboardDir = process.env.SLUICE_DASHBOARD_DIR ?? join(repo, 'dashboard', 'dist');
const artifacts = process.env.SLUICE_ARTIFACTS ?? join(repo, 'artifacts');
const shots = join(artifacts, 'screenshots');
const logDir = join(artifacts, 'browser-logs');

// The rule's whole token bucket for a key: 20 burst, 10 per 1 s (token_bucket maps directly).
const RULE = { action: 'user', algorithm: 'token_bucket', capacity: 20, rate: { count: 10, period: '1s' } };
const KEY = 'alice';

/** One request through `envoy`'s allow-all-until-assigned listener as `user`: its status. */
async function viaEnvoy(envoy, user) {
  const response = await fetch(`${envoy.url}/`, { headers: { 'x-user-id': user } });
  await response.arrayBuffer();
  return response.status;
}

describe('rlqs shares', () => {
  let stack, api, browser, page, consoleErrors, upstream, traffic;
  const envoys = [];

  const fits = () => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);

  before(async () => {
    mkdirSync(shots, { recursive: true });
    stack = await startStack({ bin, dashboardDir, logDir, name: 'rlqs', redis: false });
    api = adminApi(stack);
    const put = await api('PUT', `/v1/rules/${RULE.action}`, RULE);
    assert.equal(put.status, 200, put.text);
    upstream = await startUpstream();
    for (const name of ['rlqs-envoy-a', 'rlqs-envoy-b']) {
      const values = {
        ENVOY_ADMIN_PORT: await freePort(),
        LISTEN_OPEN_PORT: await freePort(),
        LISTEN_CLOSED_PORT: await freePort(),
        SLUICE_GRPC_PORT: stack.grpcPort,
        UPSTREAM_PORT: upstream.port,
      };
      const envoy = await runEnvoy({ repo, template: 'rlqs.yaml', values, logDir, name });
      envoys.push({ ...envoy, url: `http://127.0.0.1:${values.LISTEN_OPEN_PORT}` });
    }
    ({ browser, page, consoleErrors } = await signedInPage(chromium, stack));
    // A request a second through each Envoy for as long as the test runs: a bucket with no
    // request in 3 reports (15 s) is abandoned and its share goes.
    traffic = setInterval(() => envoys.forEach((e) => viaEnvoy(e, KEY).catch(() => {})), 1000);
  });

  after(async () => {
    clearInterval(traffic);
    await browser?.close();
    envoys.forEach((e) => e.stop());
    upstream?.close();
    stack?.stop();
  });

  test('each Envoy holds a share of the key, within the rule\'s bucket', async () => {
    // A few requests through each Envoy: each opens its stream and reports the bucket. Envoy
    // decides them itself: admitted, or 429 once its share is spent (or while it holds
    // DENY_ALL, the key having nothing left when its burst was due).
    for (const envoy of envoys) {
      for (let i = 0; i < 3; i += 1) assert.ok([200, 429].includes(await viaEnvoy(envoy, KEY)));
    }
    const held = await waitFor('both Envoys to hold a share of alice', async () => {
      const { status, body } = await api('GET', `/v1/rlqs/shares?key=${KEY}`);
      assert.equal(status, 200);
      const key = body.keys[0];
      // A DENY_ALL holder is offered a burst again on each tick the key has one.
      return key?.holders.length === 2 && key.holders.every((h) => h.share && h.domain === 'sluice') && body;
    }, { timeout: 20000, every: 250 });
    const key = held.keys[0];
    assert.deepEqual(key.total, { max_tokens: 20, tokens_per_fill: 10, fill_interval_s: 1 });
    assert.ok(key.sum.max_tokens <= 20 && key.sum.tokens_per_fill <= 10, JSON.stringify(key.sum));
    assert.ok(key.sum.allowed >= 1, 'the Envoys reported their admissions');
    // /readyz reports the streams (no token), and stays ready.
    const ready = await (await fetch(`${stack.admin}/readyz`)).json();
    assert.equal(ready.status, 'ready');
    assert.equal(ready.rlqs.streams, 2, JSON.stringify(ready));
  });

  for (const width of [1280, 390]) {
    test(`at ${width} wide: the key view and the live view show the shares and the total`, async () => {
      await page.setViewportSize({ width, height: width > 500 ? 800 : 844 });
      await page.click('#tab-keys');
      await page.fill('#key-search', KEY);
      await page.click('#key-search-button');
      const card = page.locator(`.rlqs[data-view="keys"] .rlqs-key[data-key="${KEY}"]`);
      await card.waitFor();
      assert.match(await card.locator('.rlqs-total').innerText(), /the rule's bucket: 20 burst · 10 per 1s/);
      // What the page shows is what the ledger says (read until a refresh has caught up: shares
      // move on Envoy's reports and sluice's tick).
      await waitFor('the page to show the ledger\'s shares', async () => {
        const { body } = await api('GET', `/v1/rlqs/shares?key=${KEY}`);
        const want = body.keys[0].holders.map((h) => [String(h.stream), String(h.share?.max_tokens ?? 0), String(h.share?.tokens_per_fill ?? 0)]);
        const shown = await card.locator('.rlqs-holder').evaluateAll((rows) => rows.map((r) => [
          r.dataset.stream, r.dataset.maxTokens, r.dataset.tokensPerFill]));
        const sum = body.keys[0].sum;
        const sumText = await card.locator('.rlqs-sum').innerText();
        return JSON.stringify(shown) === JSON.stringify(want)
          && sumText === `${sum.max_tokens} of 20 burst · ${sum.tokens_per_fill} of 10 per 1s held by 2 Envoys`;
      }, { timeout: 10000, every: 500 });
      const rows = card.locator('.rlqs-holder');
      assert.equal(await rows.count(), 2);
      for (let i = 0; i < 2; i += 1) {
        const text = await rows.nth(i).innerText();
        assert.match(text, /127\.0\.0\.1:\d+ · domain sluice · open/);
        assert.match(text, /\d+ burst · \d+ per 1s|DENY_ALL \(nothing left\)/);
        assert.match(text, /\d+ allowed · \d+ paid/);
      }
      assert.ok(await fits(), `the key view fits ${width} px`);
      await card.screenshot({ path: join(shots, `rlqs-key-${width}.png`) });

      // The Live view lists every key held over RLQS; its key link opens the key's view.
      await page.click('#tab-live');
      const live = page.locator(`.rlqs[data-view="live"] .rlqs-key[data-key="${KEY}"]`);
      await live.waitFor();
      assert.equal(await live.locator('.rlqs-holder').count(), 2);
      assert.ok(await fits(), `the live view fits ${width} px`);
      await page.locator('.rlqs[data-view="live"]').screenshot({ path: join(shots, `rlqs-live-${width}.png`) });
      await live.locator('button.key-link').click();
      await page.locator('#shown-key').filter({ hasText: KEY }).waitFor();
      assert.equal(await page.locator('#tab-keys').getAttribute('aria-pressed'), 'true');
    });
  }

  test('no console errors', () => {
    assert.deepEqual(consoleErrors, []);
  });
});
