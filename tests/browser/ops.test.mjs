// Browser tests of the views an operator needs on a bad day (issue 15) and of the rule's lease
// field (issue 11): the history chart and its "passed unchecked" panel, one key's state on every
// action and the most denied keys, and the editor's safe edits (every field error at once, no
// broken chart for an invalid rule, the saved rule overlaid on the what-if plot, a 10× change
// asks to confirm, quiet actions marked, the lease shown and edited).
//
// Against a stack of its own (real redis-server and sluice), in a browser of its own (the session
// cookie belongs to 127.0.0.1 whatever the port). Traffic goes through the real decision API
// (`POST /v1/throttle`); what only a filter knows (cached denials, failed callouts) through the
// real `POST /v1/report`. Screenshots at 1280 and 390 wide. Every console error fails the run.
// dashboard.test.mjs imports this file; it also runs alone: `node --test ops.test.mjs`.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startStack, adminApi, throttle, waitFor } from './stack.mjs';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const bin = process.env.SLUICE_BIN ?? join(repo, 'target', 'debug', 'sluice');
const dashboardDir = process.env.SLUICE_DASHBOARD_DIR ?? join(repo, 'dashboard', 'dist');
const artifacts = process.env.SLUICE_ARTIFACTS ?? join(repo, 'artifacts');
const shots = join(artifacts, 'screenshots');

// Keys from the internet: markup, quotes, and one far longer than any layout expects.
const SCRIPT_KEY = '<script>window.__pwned = 1</script>';
const QUOTE_KEY = '"\'><img src=x onerror=alert(1)>';
const LONG_KEY = `long-${'x'.repeat(400)}`;

describe('the operator views: history, one key, safe edits, leases', () => {
  let stack, api, browser, context, page;
  const consoleErrors = [];
  const dialogs = [];

  const watch = (p) => {
    p.on('pageerror', (e) => consoleErrors.push(`pageerror: ${e}`));
    p.on('console', (m) => { if (m.type() === 'error' || m.text().includes('panicked')) consoleErrors.push(m.text()); });
    p.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  };
  const shot = (name, target = page) => target.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  const fits = (target) => target.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);

  before(async () => {
    mkdirSync(shots, { recursive: true });
    // Redis commands may take 1 s here, not 50 ms: on a busy CI machine a store_timeout (503) on a
    // refresh would be a console error that says nothing about the views under test.
    stack = await startStack({
      bin, dashboardDir, logDir: join(artifacts, 'browser-logs'), name: 'ops', sluiceArgs: ['--redis-timeout-ms', '1000'],
    });
    api = adminApi(stack);
    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    context.setDefaultTimeout(15000);
    page = await context.newPage();
    watch(page);
    // Rules made through the API: one that will see traffic, one that never will.
    for (const [action, rule] of [
      ['ops-post', { algorithm: 'gcra', capacity: 5, rate: { count: 1, period: '1s' } }],
      ['ops-quiet', { algorithm: 'sliding_window', capacity: 100, window: '1m' }],
    ]) {
      const put = await api('PUT', `/v1/rules/${action}`, { action, ...rule });
      assert.equal(put.status, 200, put.text);
    }
    // Signed in through the API (the sign-in form is dashboard.test.mjs's), so the page's first
    // check of its session does not meet a 401, which Chromium logs as a console error.
    const session = await context.request.post(`${stack.admin}/v1/session`, { data: { token: stack.token } });
    assert.ok(session.ok(), `sign-in: ${session.status()}`);
    await page.goto(stack.admin + '/');
    await page.locator('#new-rule').waitFor();
  });

  /** Leaves the editor if a failed test left it open, so later tests start from the table. */
  const closeEditor = async () => {
    const cancel = page.locator('#cancel-edit');
    if (await cancel.count()) await cancel.click();
  };

  after(async () => {
    await browser?.close();
    stack?.stop();
  });

  test('a new rule shows every mistake at once and is not saved until all are fixed', async () => {
   try {
    await page.click('#new-rule');
    await page.fill('#rule-action', 'a b');
    await page.fill('#rule-capacity', '0');
    await page.fill('#rule-rate-period', 'soon');
    await page.check('#rule-lease-on');
    await page.fill('#rule-lease-max', '0');
    await page.click('#save-rule');
    // All four messages at once, each next to its input, after one save.
    await page.locator('#rule-action-error', { hasText: 'may hold only' }).waitFor();
    await page.locator('#rule-capacity-error', { hasText: 'must be at least 1' }).waitFor();
    await page.locator('#rule-rate-period-error', { hasText: 'whole number followed by a unit' }).waitFor();
    await page.locator('#rule-lease-max-error', { hasText: 'must be 1 to' }).waitFor();
    await page.locator('#rule-form-error', { hasText: '4 fields need a fix' }).waitFor();
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'rule-action', 'focus on the first');
    // An invalid rule draws no chart: no capacity line, no paths, and says why.
    await page.locator('#whatif-summary', { hasText: 'Fix the rule' }).waitFor();
    assert.equal(await page.locator('#whatif-level-chart line.capacity-line').count(), 0, 'no stray capacity line');
    assert.equal(await page.locator('#whatif-count-chart path, #whatif-level-chart path').count(), 0, 'no paths');
    await shot('20-editor-all-errors');
    assert.equal((await api('GET', '/v1/rules/a%20b')).status === 200, false);
    // Fixing them one by one leaves the others standing.
    await page.fill('#rule-action', 'ops-leased');
    await page.locator('#rule-action-error').filter({ hasText: /^$/ }).waitFor();
    assert.match(await page.locator('#rule-capacity-error').innerText(), /at least 1/);
    await page.fill('#rule-capacity', '40');
    await page.fill('#rule-rate-count', '20');
    await page.fill('#rule-rate-period', '1s');
    // A wrong lease does not take the plot away: the plot ignores the lease.
    await page.locator('#whatif-count-chart path.allowed-area[d^="M"]').waitFor();
    await page.fill('#rule-lease-max', '32');
    await page.fill('#rule-lease-ttl', '2m');
    await page.locator('#rule-lease-ttl-error', { hasText: 'at most 60s' }).waitFor();
    const plotWithLease = await page.locator('#whatif-count-chart path.allowed-area').getAttribute('d');
    await page.fill('#rule-lease-ttl', '1s');
    await page.uncheck('#rule-lease-on');
    assert.equal(await page.locator('#whatif-count-chart path.allowed-area').getAttribute('d'), plotWithLease,
      'the what-if plot is the same with the lease on or off');
    await page.check('#rule-lease-on');
    await page.click('#save-rule');
    const row = page.locator('tr[data-action="ops-leased"]');
    await row.waitFor();
    assert.equal(await row.locator('td.lease').innerText(), 'up to 32 for 1s');
    assert.equal(await page.locator('tr[data-action="ops-post"] td.lease').innerText(), 'off');
    const stored = await api('GET', '/v1/rules/ops-leased');
    assert.deepEqual(stored.body.lease, { max: 32, ttl: '1s' });
    // Reopened, the editor shows the lease; switched off and saved, the rule has none.
    await row.locator('button.edit').click();
    assert.ok(await page.locator('#rule-lease-on').isChecked());
    assert.equal(await page.inputValue('#rule-lease-max'), '32');
    await page.uncheck('#rule-lease-on');
    assert.ok(await page.locator('#rule-lease-max').isHidden());
    await page.click('#save-rule');
    await row.locator('td.lease', { hasText: 'off' }).waitFor();
    assert.equal((await api('GET', '/v1/rules/ops-leased')).body.lease, undefined);
   } finally {
    await closeEditor();
   }
  });

  test('the what-if plot overlays the saved rule while editing, and a 10x change asks first', async () => {
   try {
    await page.locator('tr[data-action="ops-post"] button.edit').click();
    await page.locator('#whatif-count-chart path.allowed-area[d^="M"]').waitFor();
    assert.equal(await page.locator('path.saved-line').count(), 0, 'an unchanged rule has nothing to compare');
    await page.fill('#rule-capacity', '100');
    await page.locator('#whatif-count-chart path.saved-line[d^="M"]').waitFor();
    await page.locator('#whatif-level-chart path.saved-line[d^="M"]').waitFor();
    await page.locator('#whatif-level-chart line.saved-capacity-line').waitFor({ state: 'attached' });
    const edited = await page.locator('#whatif-level-chart path.level-line').getAttribute('d');
    const saved = await page.locator('#whatif-level-chart path.saved-line').getAttribute('d');
    assert.notEqual(edited, saved);
    assert.match(await page.locator('#whatif-summary').innerText(), /the saved rule: allowed \d+ of \d+/);
    // Both rules answer the same traffic (issue 24: it was "of 166" against "of 76").
    const [, editedOf, savedOf] = (await page.locator('#whatif-summary').innerText())
      .match(/allowed \d+ of (\d+)[\s\S]*the saved rule: allowed \d+ of (\d+)/);
    assert.equal(editedOf, savedOf);
    await page.click('#save-rule');
    const confirm = page.locator('#confirm-change');
    await confirm.waitFor();
    assert.equal(await confirm.locator('li.big-change').innerText(), 'capacity 5 → 100: 20× looser');
    await shot('21-editor-overlay-confirm');
    assert.equal((await api('GET', '/v1/rules/ops-post')).body.capacity, 5, 'nothing saved before the answer');
    // The safe answer has the focus: Enter (twice) keeps editing, never saves a 20x change.
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'keep-editing');
    await page.keyboard.press('Enter');
    await confirm.waitFor({ state: 'hidden' });
    await page.keyboard.press('Enter');
    assert.equal((await api('GET', '/v1/rules/ops-post')).body.capacity, 5, 'Enter twice saved nothing');
    // A change within 10× saves at once.
    await page.fill('#rule-capacity', '50');
    await page.click('#save-rule');
    await page.locator('tr[data-action="ops-post"] td.num', { hasText: '50' }).waitFor();
    assert.equal((await api('GET', '/v1/rules/ops-post')).body.capacity, 50);
    // Tighter by more than 10× asks too; "Save anyway" saves.
    await page.locator('tr[data-action="ops-post"] button.edit').click();
    await page.fill('#rule-capacity', '5');
    await page.fill('#rule-rate-period', '1m');
    await page.click('#save-rule');
    await confirm.waitFor();
    const changes = await confirm.locator('li.big-change').allInnerTexts();
    // Capacity 50 → 5 is exactly 10× (no question); the rate drops 60×.
    assert.deepEqual(changes, ['rate 1/s → 0.02/s: 60× tighter']);
    await page.click('#confirm-save');
    await page.locator('tr[data-action="ops-post"] td', { hasText: '1 per 1m' }).waitFor();
    const after = (await api('GET', '/v1/rules/ops-post')).body;
    assert.equal(after.capacity, 5);
    assert.deepEqual(after.rate, { count: 1, period: '1m' });
   } finally {
    await closeEditor();
   }
  });

  test('traffic, cached denials and failed callouts show in the history; quiet rules are marked', async () => {
    // Capacity 5, one more a minute (as the test before leaves it; set again in case it failed).
    const put = await api('PUT', '/v1/rules/ops-post', {
      action: 'ops-post', algorithm: 'gcra', capacity: 5, rate: { count: 1, period: '1m' },
    });
    assert.equal(put.status, 200, put.text);
    // Decisions through the real decision API: 5 allowed per key and the rest denied.
    const keys = ['alice', SCRIPT_KEY, QUOTE_KEY, LONG_KEY];
    let allowed = 0;
    let denied = 0;
    for (const key of keys) {
      for (let i = 0; i < 8; i++) {
        const a = await throttle(stack, 'ops-post', key);
        assert.equal(a.status, 200);
        if (a.body.allowed) allowed += 1; else denied += 1;
      }
    }
    // alice twice as often: the most denied key.
    for (let i = 0; i < 8; i++) if (!(await throttle(stack, 'ops-post', 'alice')).body.allowed) denied += 1;
    assert.equal(allowed, 20);
    // What only a filter knows, through the filter's own report endpoint.
    const report = await fetch(`${stack.decision}/v1/report`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ actions: [{ action: 'ops-post', leased: 6, cached_denied: 7, failed_timeout: 3, failed_error: 1, passed_unchecked: 4 }] }),
    });
    assert.equal(report.status, 204, await report.text());

    await page.click('#tab-history');
    const card = page.locator('article.history-card[data-action="ops-post"]');
    await waitFor('the history to count the traffic and the report', async () =>
      (await card.getAttribute('data-allowed')) === String(allowed)
      && (await card.getAttribute('data-denied')) === String(denied)
      && (await card.getAttribute('data-leased')) === '6'
      && (await card.getAttribute('data-cached-denied')) === '7'
      && (await card.getAttribute('data-passed-unchecked')) === '4', { timeout: 15000 });
    // The warning panel names the action and the counts; the tab carries the mark from anywhere.
    const item = page.locator('#unchecked-panel li.unchecked-item[data-action="ops-post"]');
    await item.waitFor();
    // With its time range (issue 24: "since when").
    assert.match(await item.innerText(), /^ops-post: 4 passed unchecked of 4 failed callouts, \d\d:\d\d:\d\d–\d\d:\d\d:\d\d UTC$/);
    assert.ok(await page.locator('#tab-history .tab-warning').isVisible());
    // Drawn: every outcome that happened, and nothing for an action that saw none.
    for (const cls of ['h-allowed', 'h-leased', 'h-denied', 'h-cached', 'h-unchecked']) {
      assert.match(await card.locator(`path.layer.${cls}`).getAttribute('d'), /^M[\d. LMZ-]+Z$/);
    }
    assert.equal(await page.locator('article.history-card[data-action="ops-quiet"] path.layer').count(), 0);
    // Hover values: the last step's column names its time and counts.
    assert.equal(await card.locator('rect.column').count(), 30, '5 min of 10 s steps');
    assert.match(await card.locator('.readout').innerText(), new RegExp(`^last 5m: allowed ${allowed} · leased 6 · denied ${denied} · cached denied 7 · passed unchecked 4$`));
    const columns = card.locator('rect.column');
    let hovered = '';
    for (let i = 29; i >= 0 && !/allowed [1-9]/.test(hovered); i--) {
      await columns.nth(i).hover();
      hovered = await card.locator('.readout').innerText();
    }
    assert.match(hovered, /^\d\d:\d\d:\d\d–\d\d:\d\d:\d\d UTC: allowed [1-9]\d* · leased \d+ · denied \d+/);
    // The keyboard reaches the same values: End is the newest step, Home the oldest, Escape the totals.
    await page.mouse.move(0, 0);
    await card.locator('svg.history-chart').focus();
    await page.keyboard.press('End');
    assert.match(await card.locator('.readout').innerText(), /^\d\d:\d\d:\d\d–\d\d:\d\d:\d\d UTC: allowed \d+/);
    await page.keyboard.press('Home');
    assert.match(await card.locator('.readout').innerText(), /UTC: allowed 0 · leased 0 · denied 0 · cached denied 0 · passed unchecked 0$/);
    await page.keyboard.press('Escape');
    assert.match(await card.locator('.readout').innerText(), /^last 5m: /);
    await columns.nth(29).hover();
    await shot('22-history');
    // A rule whose action saw nothing is marked, in the history and in the rules table.
    const quiet = page.locator('article.history-card[data-action="ops-quiet"] .quiet-mark');
    await quiet.waitFor();
    assert.equal(await quiet.innerText(), 'no traffic in 24 h: likely no route');
    assert.ok(await card.locator('.quiet-mark').isHidden());
    // One hour: 360 steps, the same totals.
    await page.click('#range-1h');
    assert.equal(await page.locator('#range-1h').getAttribute('aria-pressed'), 'true');
    await waitFor('the 1 h range', async () => (await card.locator('rect.column').count()) === 360);
    assert.equal(await card.getAttribute('data-allowed'), String(allowed));
    await shot('23-history-1h');
    await page.click('#range-5m');
    await waitFor('the 5 min range', async () => (await card.locator('rect.column').count()) === 30);
    await page.click('#tab-rules');
    await page.locator('tr[data-action="ops-quiet"] .quiet-mark', { hasText: 'likely no route' }).waitFor();
    assert.ok(await page.locator('tr[data-action="ops-post"] .quiet-mark').isHidden());
    await shot('24-rules-quiet-lease');
  });

  test('the most denied keys lead to one key on every action, as text, consuming nothing', async () => {
    await page.click('#tab-keys');
    const list = page.locator('article.top-card[data-action="ops-post"] li.top-key');
    await waitFor('the top denied keys', async () => (await list.count()) === 4);
    const shown = await list.locator('button.key-link').evaluateAll((els) => els.map((e) => {
      if (e.children.length !== 0) throw new Error(`a key holds elements: ${e.innerHTML}`);
      return e.textContent;
    }));
    assert.equal(shown[0], 'alice', 'most denied first');
    assert.deepEqual([...shown].sort(), ['alice', SCRIPT_KEY, QUOTE_KEY, LONG_KEY].sort());
    assert.equal(await list.first().getAttribute('data-denied'), '11');
    // A link opens that key's view.
    await list.locator('button.key-link', { hasText: QUOTE_KEY }).click();
    const result = page.locator('#key-result');
    await page.locator('#shown-key').filter({ hasText: QUOTE_KEY }).waitFor();
    assert.equal(await page.locator('#shown-key').evaluate((e) => e.textContent), QUOTE_KEY);
    const post = result.locator('tr.key-state[data-action="ops-post"]');
    await post.waitFor();
    assert.equal(await post.getAttribute('data-remaining'), '0');
    assert.notEqual(await post.locator('.retry-after').innerText(), 'now');
    assert.match(await post.locator('.last-seen').innerText(), /ago|just now/);
    assert.equal(await result.locator('tr.key-state[data-action="ops-quiet"] .retry-after').innerText(), 'now');
    assert.equal(await result.locator('tr.key-state[data-action="ops-quiet"] .last-seen').innerText(), 'not recently');
    // The long key and the script key, searched by hand.
    for (const key of [LONG_KEY, SCRIPT_KEY]) {
      await page.fill('#key-search', key);
      await page.click('#key-search-button');
      await waitFor('the key view to follow the search', async () =>
        (await page.locator('#shown-key').evaluate((e) => e.textContent)) === key);
    }
    assert.equal(await page.evaluate(() => window.__pwned), undefined, 'no key ran as script');
    assert.equal(await page.locator('img').count(), 0, 'no key became an element');
    assert.ok(await fits(page), 'a 400-character key does not widen the page');
    await shot('25-keys');
    // Looking consumes nothing: a fresh key, looked up over several refreshes, is still full.
    await page.fill('#key-search', 'carol');
    await page.click('#key-search-button');
    const carol = result.locator('tr.key-state[data-action="ops-post"]');
    await waitFor('carol\'s view', async () =>
      (await page.locator('#shown-key').innerText()) === 'carol' && (await carol.count()) === 1);
    assert.equal(await carol.getAttribute('data-remaining'), '5');
    await page.waitForTimeout(4500); // at least one refresh of the view
    assert.equal(await carol.getAttribute('data-remaining'), '5');
    const first = await throttle(stack, 'ops-post', 'carol');
    assert.ok(first.body.allowed);
    assert.equal(first.body.remaining, 4, 'the first real request still finds the whole capacity');
    assert.deepEqual(dialogs, []);
  });

  test('390 wide: history, keys and the editor fit, with screenshots', async () => {
    const phone = await context.newPage();
    watch(phone);
    await phone.setViewportSize({ width: 390, height: 844 });
    await phone.goto(stack.admin + '/');
    await phone.locator('#new-rule').waitFor();
    await phone.locator('tr[data-action="ops-quiet"] .quiet-mark:visible').waitFor();
    assert.ok(await fits(phone), 'rules fit');
    await shot('26-phone-rules', phone);
    await phone.locator('tr[data-action="ops-post"] button.edit').click();
    await phone.fill('#rule-capacity', '500');
    await phone.locator('#whatif-count-chart path.saved-line[d^="M"]').waitFor();
    await phone.click('#save-rule');
    await phone.locator('#confirm-change').waitFor();
    assert.ok(await fits(phone), 'editor fits');
    await shot('27-phone-editor-confirm', phone);
    await phone.click('#cancel-edit');
    await phone.click('#tab-history');
    await phone.locator('#unchecked-panel li.unchecked-item').waitFor();
    await phone.locator('article.history-card[data-action="ops-post"] path.layer').first().waitFor();
    assert.ok(await fits(phone), 'history fits');
    await shot('28-phone-history', phone);
    await phone.click('#tab-keys');
    await phone.fill('#key-search', LONG_KEY);
    await phone.click('#key-search-button');
    await phone.locator('#key-result tr.key-state').first().waitFor();
    await phone.locator('article.top-card li.top-key').first().waitFor();
    assert.ok(await fits(phone), 'keys fit, the long key included');
    await shot('29-phone-keys', phone);
    await phone.close();
  });

  test('no console errors, script errors or dialogs in these views', () => {
    assert.deepEqual(consoleErrors, []);
    assert.deepEqual(dialogs, []);
  });
});
