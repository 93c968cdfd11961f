// Browser tests of sluice's dashboard: a real sluice backend on a real redis-server, the built
// dashboard, and Debian's Chromium driven by playwright-core. Run by tests/suites/30-browser.sh
// (which builds everything) with: SLUICE_BIN, SLUICE_DASHBOARD_DIR, SLUICE_ARTIFACTS.
// Tests run in order and share one signed-in browser; screenshots go to artifacts/screenshots.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startStack, adminApi, throttle, waitFor, persistentChromium } from './stack.mjs';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const bin = process.env.SLUICE_BIN ?? join(repo, 'target', 'debug', 'sluice');
const dashboardDir = process.env.SLUICE_DASHBOARD_DIR ?? join(repo, 'dashboard', 'dist');
const artifacts = process.env.SLUICE_ARTIFACTS ?? join(repo, 'artifacts');
const shots = join(artifacts, 'screenshots');
const XSS_KEY = '<img src=x onerror=alert(1)>';

let stack, api, context, page, profile;
const pageErrors = [];
const dialogs = [];

async function shot(name, target = page) {
  await target.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

/** The `d` of the what-if allowed area, once the plot has drawn. */
async function allowedPath() {
  const d = await page.locator('#whatif-count-chart path.allowed-area').getAttribute('d');
  assert.ok(d && d.startsWith('M'), `allowed path drawn: ${d}`);
  return d;
}

/** Leaves the editor if a failed test left it open, so later tests start from the table. */
async function closeEditor() {
  const cancel = page.locator('#cancel-edit');
  if (await cancel.count()) await cancel.click();
}

async function levelOf(key) {
  const items = page.locator('li.funnel-item').filter({ has: page.locator('.key-name', { hasText: key }) });
  if ((await items.count()) === 0) return null;
  return Number(await items.first().getAttribute('data-level'));
}

before(async () => {
  mkdirSync(shots, { recursive: true });
  stack = await startStack({ bin, dashboardDir, logDir: join(artifacts, 'browser-logs') });
  api = adminApi(stack);
  profile = mkdtempSync(join(tmpdir(), 'sluice-chromium-'));
  context = await persistentChromium(chromium, profile);
  page = context.pages()[0] ?? (await context.newPage());
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => { if (m.text().includes('panicked')) pageErrors.push(m.text()); });
  page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
});

after(async () => {
  await context?.close();
  stack?.stop();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

test('a wrong token shows a clear message; the right one signs in', async () => {
  await page.goto(stack.admin + '/');
  await page.locator('#token').waitFor();
  await shot('01-sign-in');
  await page.fill('#token', 'not-the-token');
  await page.click('button[type=submit]');
  await page.locator('#signin-error', { hasText: 'not accepted' }).waitFor();
  assert.equal(await page.locator('#tab-rules').count(), 0, 'still signed out');
  await shot('02-sign-in-wrong-token');
  await page.fill('#token', stack.token);
  await page.click('button[type=submit]');
  await page.locator('#new-rule').waitFor();
  await page.locator('.badge.link-live').waitFor();
});

test('the rules view is keyboard reachable', async () => {
  await page.locator('body').focus();
  let reached = false;
  for (let i = 0; i < 20 && !reached; i++) {
    await page.keyboard.press('Tab');
    reached = await page.evaluate(() => document.activeElement?.id === 'new-rule');
  }
  assert.ok(reached, 'Tab reaches "New rule"');
  await page.keyboard.press('Enter');
  await page.locator('#rule-action').waitFor();
  await page.keyboard.press('Tab'); // algorithm, and so on: all native controls
  await page.click('#cancel-edit');
  await page.locator('#new-rule').waitFor();
});

test('create a rule and see it in the table', async () => {
  await page.click('#new-rule');
  await page.fill('#rule-action', 'browser-post');
  await page.fill('#rule-capacity', '16');
  await page.fill('#rule-rate-count', '30');
  await page.fill('#rule-rate-period', '60s');
  await page.fill('#rule-description', 'posts per user');
  await page.click('#save-rule');
  const row = page.locator('tr[data-action="browser-post"]');
  await row.waitFor();
  assert.match(await row.innerText(), /gcra[\s\S]*16[\s\S]*30 per 1m/);
  const stored = await api('GET', '/v1/rules/browser-post');
  assert.equal(stored.status, 200);
  assert.equal(stored.body.capacity, 16);
  assert.deepEqual(stored.body.rate, { count: 30, period: '1m' });
  await shot('03-rules');
});

test('edit it', async () => {
  try {
    await page.locator('tr[data-action="browser-post"] button.edit').click();
    assert.equal(await page.locator('#rule-action').getAttribute('readonly'), '', 'the action is fixed while editing');
    await page.fill('#rule-capacity', '20');
    await page.fill('#rule-rate-count', '60');
    await page.click('#save-rule');
    const row = page.locator('tr[data-action="browser-post"]');
    await row.locator('td', { hasText: '60 per 1m' }).waitFor();
    assert.match(await row.innerText(), /20/);
    const stored = await api('GET', '/v1/rules/browser-post');
    assert.equal(stored.body.capacity, 20);
    assert.equal(stored.body.rate.count, 60);
  } finally {
    await closeEditor();
  }
});

test('a bad value shows the field message, does not move the form, and is not saved', async () => {
  try {
    await page.locator('tr[data-action="browser-post"] button.edit').click();
    const saveBefore = await page.locator('#save-rule').boundingBox();
    await page.fill('#rule-capacity', '0');
    await page.locator('#rule-capacity-error', { hasText: 'must be at least 1' }).waitFor();
    assert.equal(await page.locator('#rule-capacity').getAttribute('aria-invalid'), 'true');
    const saveAfter = await page.locator('#save-rule').boundingBox();
    assert.equal(saveAfter.y, saveBefore.y, 'the message has a reserved line: nothing jumps');
    await page.click('#save-rule');
    await page.locator('#rule-capacity-error', { hasText: 'must be at least 1' }).waitFor();
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'rule-capacity', 'focus goes to the bad field');
    // An emptied input is "required", in core's words, next to that input.
    await page.fill('#rule-capacity', '');
    await page.locator('#rule-capacity-error', { hasText: 'is required' }).waitFor();
    await page.fill('#rule-capacity', '20');
    await page.fill('#rule-rate-period', 'soon');
    await page.locator('#rule-rate-period-error', { hasText: 'whole number followed by a unit' }).waitFor();
    await page.click('#save-rule');
    await shot('05-editor-invalid');
    // Switching to a window algorithm swaps the rate inputs for the window input.
    await page.selectOption('#rule-algorithm', 'sliding_log');
    assert.ok(await page.locator('#rule-window').isVisible());
    assert.ok(!(await page.locator('#rule-rate-count').isVisible()));
    await page.fill('#rule-capacity', '20000');
    await page.locator('#rule-capacity-error', { hasText: 'at most 10000' }).waitFor();
    await page.click('#save-rule');
    await page.click('#cancel-edit');
    const stored = await api('GET', '/v1/rules/browser-post');
    assert.equal(stored.body.algorithm, 'gcra');
    assert.equal(stored.body.capacity, 20);
    assert.equal(stored.body.rate.period, '1m');
  } finally {
    await closeEditor();
  }
});

test('the what-if plot changes when capacity or rate change', async () => {
  try {
    await page.locator('tr[data-action="browser-post"] button.edit').click();
    const base = await allowedPath();
    const baseSummary = await page.locator('#whatif-summary').innerText();
    assert.match(baseSummary, /^allowed \d+ of \d+ requests/);
    await page.fill('#rule-capacity', '40');
    await waitFor('the plot to follow the capacity', async () => (await allowedPath()) !== base);
    const bigger = await allowedPath();
    await page.fill('#rule-rate-count', '120');
    await waitFor('the plot to follow the rate', async () => (await allowedPath()) !== bigger);
    const levelBefore = await page.locator('#whatif-level-chart path.level-line').getAttribute('d');
    await page.selectOption('#whatif-pattern', 'spikes');
    await waitFor('the plot to follow the pattern', async () =>
      (await page.locator('#whatif-level-chart path.level-line').getAttribute('d')) !== levelBefore);
    await page.selectOption('#whatif-pattern', 'burst');
    await page.fill('#whatif-rate', '3');
    const spanBefore = await allowedPath();
    await page.fill('#whatif-span', 'a while');
    await page.locator('#whatif-span-error', { hasText: 'whole number followed by a unit' }).waitFor();
    await page.fill('#whatif-span', '5m');
    await waitFor('the plot to follow the span', async () => (await allowedPath()) !== spanBefore);
    // Edited, so the saved rule is summed up beside it, over the same traffic.
    assert.match(await page.locator('#whatif-summary').innerText(), /over 5m; the saved rule: allowed \d+ of \d+$/);
    await shot('04-editor-what-if');
    // An invalid rule has no plot, and says why.
    await page.fill('#rule-capacity', '0');
    await page.locator('#whatif-summary', { hasText: 'Fix the rule' }).waitFor();
    await page.click('#cancel-edit');
    assert.equal((await api('GET', '/v1/rules/browser-post')).body.capacity, 20, 'plotting saves nothing');
  } finally {
    await closeEditor();
  }
});

test('changes made elsewhere appear without a reload', async () => {
  const put = await api('PUT', '/v1/rules/from-api', {
    action: 'from-api', algorithm: 'fixed_window', capacity: 5, window: '10s', mode: 'shadow',
  });
  assert.equal(put.status, 200, put.text);
  const row = page.locator('tr[data-action="from-api"]');
  await row.waitFor();
  assert.match(await row.innerText(), /fixed_window[\s\S]*10s window[\s\S]*shadow/);
  assert.equal((await api('DELETE', '/v1/rules/from-api')).status, 204);
  await row.waitFor({ state: 'detached' });
});

test('delete it', async () => {
  const row = page.locator('tr[data-action="browser-post"]');
  await row.locator('button.delete').click();
  await row.locator('button.confirm-delete').click();
  await row.waitFor({ state: 'detached' });
  assert.equal((await api('GET', '/v1/rules/browser-post')).status, 404);
});

test("traffic to one key makes its funnel rise, then drain", async () => {
  // Room for 20 back to back, draining 5 per second: full in a moment, empty four seconds later
  // (slow enough to be seen at two snapshots a second on a busy machine).
  const put = await api('PUT', '/v1/rules/live-demo', {
    action: 'live-demo', algorithm: 'gcra', capacity: 20, rate: { count: 5, period: '1s' },
  });
  assert.equal(put.status, 200, put.text);
  await page.click('#tab-live');
  // The live view draws the actions with traffic (docs/dashboard.md, "Many rules"): an idle
  // rule is counted under the cards, not drawn.
  await page.locator('#live-idle', { hasText: /rules? ha(s|ve) no active key\.$/ }).waitFor();
  // The stack's Redis is set as docs/storage.md recommends: the store line, and nothing to warn.
  await page.locator('#store-line[data-kind="redis"]').waitFor();
  assert.ok(await page.locator('#store-warnings').isHidden(), 'no store warning for a well-set Redis');
  assert.ok(await page.locator('#tab-live .tab-warning').isHidden());
  const answers = [];
  for (let i = 0; i < 30; i++) answers.push(await throttle(stack, 'live-demo', 'alice'));
  assert.ok(answers.some((a) => !a.body.allowed), 'some requests were denied');
  await page.locator('article.action-card[data-action="live-demo"]').waitFor();
  const peak = await waitFor('alice\'s funnel to rise', async () => {
    const level = await levelOf('alice');
    return level !== null && level >= 10 ? level : null;
  }, { timeout: 5000 });
  const card = page.locator('article.action-card[data-action="live-demo"]');
  await card.locator('.denied-rate').filter({ hasNotText: /^0\/s$/ }).waitFor({ timeout: 5000 });
  await shot('06-live');
  await waitFor('alice\'s funnel to drain', async () => {
    const level = await levelOf('alice');
    return level === null || level < peak / 2;
  }, { timeout: 8000 });
});

test('a key that looks like HTML is shown as text', async () => {
  for (let i = 0; i < 5; i++) await throttle(stack, 'live-demo', XSS_KEY);
  await waitFor('the odd key to show', async () =>
    page.evaluate((k) => [...document.querySelectorAll('.key-name')].some((e) => e.textContent === k), XSS_KEY),
  { timeout: 5000 });
  assert.equal(await page.locator('img').count(), 0, 'no <img> element was created');
  assert.deepEqual(dialogs, [], 'no dialog opened');
  await shot('07-live-odd-key');
});

test('usable 390 wide: no sideways scrolling, every view reachable', async () => {
  const phone = await context.newPage();
  phone.on('pageerror', (e) => pageErrors.push(String(e)));
  phone.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  await phone.setViewportSize({ width: 390, height: 844 });
  await phone.goto(stack.admin + '/');
  await phone.locator('#new-rule').waitFor(); // the session cookie is shared
  const fits = () => phone.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
  await phone.locator('tr[data-action="live-demo"]').waitFor();
  assert.ok(await fits(), 'rules fit');
  await shot('08-phone-rules', phone);
  await phone.locator('tr[data-action="live-demo"] button.edit').click();
  await phone.locator('#whatif-count-chart path.allowed-area[d^="M"]').waitFor();
  assert.ok(await fits(), 'editor fits');
  await shot('09-phone-editor', phone);
  await phone.click('#cancel-edit');
  await phone.click('#tab-live');
  for (let i = 0; i < 10; i++) await throttle(stack, 'live-demo', 'bob');
  await phone.locator('li.funnel-item .key-name', { hasText: 'bob' }).waitFor();
  assert.ok(await fits(), 'live view fits');
  await shot('10-phone-live', phone);
  await phone.close();
});

test('a backend that went away is reported, not swallowed', async () => {
  await page.click('#tab-rules');
  const row = page.locator('tr[data-action="live-demo"]');
  await row.waitFor();
  await stack.stopSluice();
  await page.locator('.badge.link-connecting, .badge.link-offline').waitFor({ timeout: 10000 });
  await row.locator('button.delete').click();
  await row.locator('button.confirm-delete').click();
  const toast = page.locator('.toast.error');
  await toast.waitFor();
  assert.match(await toast.innerText(), /Could not delete live-demo: could not reach the sluice backend/);
  assert.equal(await row.count(), 1, 'the row stays: nothing was deleted');
  await shot('11-backend-gone');
});

test('no script errors or panics in the page', () => {
  assert.deepEqual(pageErrors, []);
  assert.deepEqual(dialogs, []);
});

// The store line and the store's warnings run against stacks of their own (the memory store with
// a key bound; Redis set up well and badly), in a browser of their own: store.test.mjs. Imported
// here so that the suite's one `node --test dashboard.test.mjs` runs them too, after these.
await import('./store.test.mjs');
// The operator views of issues 11 and 15 (history, one key, safe edits, the lease field), on a
// stack of their own too: ops.test.mjs.
await import('./ops.test.mjs');
// Per-key overrides, resetting a key (live view and key view) and the audit page (issue 13), on a
// stack of their own too: overrides.test.mjs.
await import('./overrides.test.mjs');
// The badge when the backend stops in place (issue 24), in a stack of its own: incident.test.mjs.
await import('./incident.test.mjs');
// One-step fixes with names (issue 24), in a stack of its own: fixes.test.mjs.
await import('./fixes.test.mjs');
// Budgets (issue 23): a calendar month's rule, its editor and a key's budget: budgets.test.mjs.
await import('./budgets.test.mjs');
// 10,000 rules from a ratelimit configuration directory (issue 30): every view interactive
// within 2 s, nothing cut off, in a stack of its own: manyrules.test.mjs.
await import('./manyrules.test.mjs');
// Stock Envoy over RLQS (issue 32): two real Envoys' shares of a key and the rule's bucket, in the
// Keys and Live views, in a stack of its own: rlqs.test.mjs.
await import('./rlqs.test.mjs');
