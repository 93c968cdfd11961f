// Browser test of issue 30's sizes: an envoyproxy/ratelimit configuration directory of 5,000
// descriptors, each with a nested one, loaded by a real sluice (`--ratelimit-config`, memory
// store) as 10,000 rules. Traffic to a few of them; then each view of the dashboard, in
// Debian Chromium, must be interactive (within 2 s on a quiet machine: measured from the click, or
// from navigation for the first view, and printed; asserted within 10 s), with no request failed or cut off (no ERR_* in the console,
// no `requestfailed` event, no "cut off" line in the backend's log) and a screenshot that does not
// crash the page. dashboard.test.mjs imports this file; it also runs alone:
// `node --test manyrules.test.mjs`.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startStack, adminApi, throttle, waitFor, persistentChromium, RECOMMENDED_REDIS } from './stack.mjs';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const bin = process.env.SLUICE_BIN ?? join(repo, 'target', 'debug', 'sluice');
const dashboardDir = process.env.SLUICE_DASHBOARD_DIR ?? join(repo, 'dashboard', 'dist');
const artifacts = process.env.SLUICE_ARTIFACTS ?? join(repo, 'artifacts');
const shots = join(artifacts, 'screenshots');
const logDir = join(artifacts, 'browser-logs');

/** Descriptors in the generated file; each has one nested descriptor: twice as many rules. */
const DESCRIPTORS = 5000;
const RULES = 2 * DESCRIPTORS;
/** The target of the issue: each view interactive within 2 s, on a quiet machine. Printed for
 * every view, every run ("over the 2 s target" when missed). */
const TARGET_MS = 2000;
/** What is asserted: a view that is not interactive within 10 s is broken (it waits on every
 * rule, or on a cut-off response), whatever else the machine does. The 2 s target itself is a
 * speed, and speeds are not asserted in tests here: the test command runs this suite beside the
 * Envoy suites on two shared cores, where a Redis round trip can take 100s of ms (issue 38). */
const BOUND_MS = 10000;

/**
 * Writes a configuration directory as the peer's users have them: one domain, `DESCRIPTORS`
 * tenants, each limited per day with a per-user limit per hour nested under it (long windows: the
 * views list a key's state only while its window lasts, and a per-second window ended between a
 * request and the read on a slow run).
 */
export function writeRatelimitDir(dir, descriptors = DESCRIPTORS) {
  mkdirSync(dir, { recursive: true });
  const lines = ['domain: big', 'descriptors:'];
  for (let i = 0; i < descriptors; i++) {
    lines.push(
      '  - key: tenant',
      `    value: t${i}`,
      `    rate_limit: {unit: day, requests_per_unit: ${100 + i}}`,
      '    descriptors:',
      '      - key: user',
      '        rate_limit: {unit: hour, requests_per_unit: 5}',
    );
  }
  writeFileSync(join(dir, 'big.yaml'), `${lines.join('\n')}\n`);
}

// Each store: on Redis the views of what is active read the touched actions only (the store's
// index of touched actions), not one store read per rule.
for (const store of ['memory', 'redis']) describe(`10,000 rules from a ratelimit configuration directory (${store} store)`, () => {
  let stack, api, context, page, profile, configDir;
  const failed = [];
  const consoleErrors = [];
  const figures = [];

  /** Runs `ready` (which waits for the view to answer) and records how long it took since `t0`. */
  async function timed(name, t0, ready) {
    await ready();
    const ms = Date.now() - t0;
    figures.push([name, ms]);
    const missed = ms < TARGET_MS ? '' : ` (over the ${TARGET_MS} ms target on this run)`;
    console.log(`many rules (${store}): ${name} interactive in ${ms} ms${missed}`);
    assert.ok(ms < BOUND_MS, `${name}: interactive after ${ms} ms (bound ${BOUND_MS} ms)`);
  }

  before(async () => {
    mkdirSync(shots, { recursive: true });
    configDir = mkdtempSync(join(tmpdir(), 'sluice-many-rules-'));
    writeRatelimitDir(configDir);
    stack = await startStack({
      bin, dashboardDir, logDir, name: `manyrules-${store}`, redis: store === 'redis' ? RECOMMENDED_REDIS : false,
      sluiceArgs: ['--ratelimit-config', configDir],
    });
    api = adminApi(stack);
    profile = mkdtempSync(join(tmpdir(), 'sluice-chromium-'));
    context = await persistentChromium(chromium, profile);
    page = context.pages()[0] ?? (await context.newPage());
    page.on('requestfailed', (r) => failed.push(`${r.url()}: ${r.failure()?.errorText}`));
    page.on('pageerror', (e) => consoleErrors.push(`pageerror: ${e}`));
    page.on('console', (m) => {
      if (m.type() === 'error' || m.text().includes('panicked')) consoleErrors.push(m.text());
    });
  });

  after(async () => {
    await context?.close();
    stack?.stop();
    if (profile) rmSync(profile, { recursive: true, force: true });
    if (configDir) rmSync(configDir, { recursive: true, force: true });
    if (figures.length) console.log(`many rules (${store}): ${figures.map(([n, ms]) => `${n} ${ms} ms`).join(', ')}`);
  });

  test('the directory loads as 10,000 rules; a few of them see traffic', async () => {
    const rules = await api('GET', '/v1/rules');
    assert.equal(rules.status, 200);
    assert.equal(rules.body.rules.length, RULES);
    console.log(`many rules (${store}): GET /v1/rules is ${rules.text.length} bytes`);
    // Two tenants and one tenant's users: 3 active actions of 10,000, alice denied on one.
    for (let i = 0; i < 8; i++) assert.equal((await throttle(stack, 'rl:big.tenant_t42.user', 'alice')).status, 200);
    for (let i = 0; i < 3; i++) await throttle(stack, 'rl:big.tenant_t42', 'alice');
    for (let i = 0; i < 3; i++) await throttle(stack, 'rl:big.tenant_t4242', 'bob');
    // The lists the views read answer for the active actions only, in bytes, not megabytes.
    // The key view lists the actions under which the key has state (while its window lasts): read
    // again, right after touching it, should an hour end in between.
    let listed;
    await waitFor('the key view to list both of alice\'s actions', async () => {
      await throttle(stack, 'rl:big.tenant_t42.user', 'alice');
      const key = await api('GET', '/v1/keys?key=alice&scope=active');
      listed = key.body.actions.map((a) => a.action);
      return listed.length === 2;
    }, { timeout: 10000 });
    assert.deepEqual(listed, ['rl:big.tenant_t42', 'rl:big.tenant_t42.user']);
    if (store === 'memory') {
      // On Redis, every action of 10,000 is 40,000 reads: more than the view's 5 s allow a
      // debug build (docs/dashboard.md, "Many rules"); the dashboard never asks for it.
      const everyAction = await api('GET', '/v1/keys?key=alice');
      assert.equal(everyAction.body.actions.length, RULES, 'without scope: every action, as before');
    }
    await waitFor('the history to count the traffic', async () => {
      const h = await api('GET', '/v1/history?range=5m&scope=active');
      return h.body.actions.length === 3;
    }, { timeout: 10000 });
  });

  test('the rules view: a search answers and a page turns within 2 s', async () => {
    const session = await context.request.post(`${stack.admin}/v1/session`, { data: { token: stack.token } });
    assert.ok(session.ok());
    const t0 = Date.now();
    await page.goto(stack.admin + '/');
    await timed('rules view (from navigation, search answered)', t0, async () => {
      await page.locator('#rules-count', { hasText: '1–50 of 10,000 rules' }).waitFor({ timeout: 30000 });
      await page.fill('#rule-search', 'tenant_t4242');
      await page.locator('#rules-count', { hasText: /^2 of 2 rules matching/ }).waitFor({ timeout: 30000 });
      await page.locator('tr[data-action="rl:big.tenant_t4242.user"]').waitFor({ timeout: 30000 });
    });
    assert.equal(await page.locator('tr[data-action]').count(), 2, 'only the matching rows are drawn');
    await page.fill('#rule-search', '');
    await page.locator('#rules-count', { hasText: '1–50 of 10,000 rules' }).waitFor();
    assert.equal(await page.locator('tr[data-action]').count(), 50, 'one page of rows');
    const t1 = Date.now();
    await page.click('#rules-next');
    await timed('rules view (next page)', t1, () => page.locator('#rules-count', { hasText: '51–100 of 10,000 rules' }).waitFor({ timeout: 30000 }));
    // A row is clickable: its Add override opens the editor.
    const t2 = Date.now();
    await page.locator('tr[data-action] button.add-override').first().click();
    await timed('editor (from a row)', t2, () => page.locator('#rule-action').waitFor({ timeout: 30000 }));
    await page.click('#cancel-edit');
    // The screenshot that crashed the page with 20,001 rows in it.
    await page.screenshot({ path: join(shots, `many-rules-${store}-rules.png`), fullPage: true });
  });

  test('the live view shows the active actions and counts the rest within 2 s', async () => {
    await throttle(stack, 'rl:big.tenant_t42.user', 'alice');
    const t0 = Date.now();
    await page.click('#tab-live');
    await timed('live view', t0, async () => {
      await page.locator('article.action-card[data-action="rl:big.tenant_t42.user"] li.funnel-item').first().waitFor({ timeout: 30000 });
      await page.locator('#live-idle', { hasText: /^9,99\d more rules have no active key\.$/ }).waitFor({ timeout: 30000 });
    });
    assert.ok((await page.locator('article.action-card').count()) <= 3);
    await page.screenshot({ path: join(shots, `many-rules-${store}-live.png`), fullPage: true });
  });

  test('the history view draws the active actions and a few quiet ones within 2 s', async () => {
    const t0 = Date.now();
    await page.click('#tab-history');
    await timed('history view', t0, async () => {
      await page.locator('article.history-card[data-action="rl:big.tenant_t4242"]').waitFor({ timeout: 30000 });
      await page.locator('#history-more', { hasText: /^and 9,98\d more quiet rules/ }).waitFor({ timeout: 30000 });
    });
    const t1 = Date.now();
    await page.click('#range-1h');
    await timed('history view (1 hour)', t1, () =>
      page.locator('article.history-card[data-action="rl:big.tenant_t4242"] rect.column').nth(359).waitFor({ timeout: 30000 }));
    await page.click('#range-5m');
    await page.screenshot({ path: join(shots, `many-rules-${store}-history.png`), fullPage: true });
  });

  test('the key view answers a search within 2 s', async () => {
    await page.click('#tab-keys');
    // alice's state under the `.user` rule must be there when the view reads it (an hour may end).
    await throttle(stack, 'rl:big.tenant_t42.user', 'alice');
    const t0 = Date.now();
    await page.fill('#key-search', 'alice');
    await page.click('#key-search-button');
    await timed('key view', t0, async () => {
      const row = page.locator('#key-result tr.key-state[data-action="rl:big.tenant_t42.user"]');
      await row.waitFor({ timeout: 30000 });
      await page.locator('#key-more', { hasText: /^and 9,98\d more actions where this key has no state/ }).waitFor({ timeout: 30000 });
    });
    assert.ok((await page.locator('#key-result tr.key-state').count()) <= 2 + 12);
  });

  test('the audit view answers within 2 s', async () => {
    const t0 = Date.now();
    await page.click('#tab-audit');
    await timed('audit view', t0, async () => {
      await page.locator('#audit-action option[value="rl:big.tenant_t4242"]').waitFor({ state: 'attached', timeout: 30000 });
      await page.locator('#audit-list li.audit-entry, #audit-empty').first().waitFor({ timeout: 30000 });
    });
    await page.click('#tab-rules');
  });

  test('nothing failed or was cut off, over longer than the backend waits for a reader', async () => {
    // The stall bound is 10 s: a page too busy to read for that long has its responses cut off.
    await page.click('#tab-live');
    await page.waitForTimeout(12000);
    await page.click('#tab-history');
    await page.waitForTimeout(1000);
    await page.screenshot({ path: join(shots, `many-rules-${store}-end.png`), fullPage: true });
    assert.deepEqual(failed, [], 'no request failed');
    assert.deepEqual(consoleErrors, [], 'no console error');
    const log = readFileSync(join(logDir, `manyrules-${store}.log`), 'utf8');
    assert.ok(!log.includes('cut off'), 'the backend cut no response off');
  });
});
