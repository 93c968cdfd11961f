// Browser tests of issue 13's dashboard side: per-key overrides listed and edited under their rule,
// resetting a key from the live view and from the key view, and the audit page.
//
// Against a stack of its own (real redis-server and sluice), in a browser of its own (the session
// cookie belongs to 127.0.0.1 whatever the port), signed in through the API so the page never
// meets a 401. Whether an override or a reset took effect is asked of the real decision API
// (`POST /v1/throttle`) and of a real Envoy running the sluice filter, never of the page. Screenshots at 1280 and 390 wide. Every console error
// fails the run. dashboard.test.mjs imports this file; it also runs alone:
// `node --test overrides.test.mjs`.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startStack, adminApi, throttle, waitFor } from './stack.mjs';
import { startEnvoy, viaEnvoy } from './envoy.mjs';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const bin = process.env.SLUICE_BIN ?? join(repo, 'target', 'debug', 'sluice');
const dashboardDir = process.env.SLUICE_DASHBOARD_DIR ?? join(repo, 'dashboard', 'dist');
const artifacts = process.env.SLUICE_ARTIFACTS ?? join(repo, 'artifacts');
const shots = join(artifacts, 'screenshots');

const ACTION = 'ov-reply';
// The rule: 2 requests, then one a minute. The override: 10 a minute in a fixed window, its own
// algorithm, so the key's state under the rule is untouched while the override holds.
const RULE = { algorithm: 'gcra', capacity: 2, rate: { count: 1, period: '60s' } };
// Keys an operator may have to name: a slash, a percent sign that already looks encoded, spaces,
// both quotes, non-ASCII; and others with the query and fragment characters, dots and markup.
const VIP = `vip/ü %2F "q" 'é'`;
const ODD_KEYS = ['a?b#c&d=e+f', '...', '<b>bold</b> 🦀'];
const LIMITED = 'limited user/ü';
const LIVE_KEY = 'live "key"';
// The Envoy route `/limited/` (envoy/e2e.yaml) is action e2e_limited, keyed by the x-user header.
const ENVOY_ACTION = 'e2e_limited';
const ENVOY_USER = 'envoy user/%2F "q"';
// The key the backend sees: the filter keeps a header's UTF-8 but writes `%` as `%25`, so that
// keys are injective (docs/filter.md, "Header values are bytes"). The operator takes it from the
// page (the most denied keys), as the test does.
const ENVOY_KEY = ENVOY_USER.replaceAll('%', '%25');

/** The path segment of a key, as encodeURIComponent makes it (and the backend decodes it). */
const seg = (key) => encodeURIComponent(key);

describe('overrides, resets and the audit trail', () => {
  let stack, api, browser, context, page, envoy;
  const consoleErrors = [];
  const dialogs = [];
  // What this file changed, in order, as the audit trail must show it: [kind, key, who], who being
  // 'token' (the API) or 'session' (this page).
  const changes = [];
  let editAt = -1;

  const watch = (p) => {
    p.on('pageerror', (e) => consoleErrors.push(`pageerror: ${e}`));
    p.on('console', (m) => { if (m.type() === 'error' || m.text().includes('panicked')) consoleErrors.push(m.text()); });
    p.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  };
  const shot = (name, target = page) => target.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  const fits = (target) => target.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
  const decide = async (key) => (await throttle(stack, ACTION, key)).body;
  const overrideKeys = async () => {
    const list = await api('GET', `/v1/rules/${ACTION}/overrides`);
    assert.equal(list.status, 200, list.text);
    return list.body.overrides.map((o) => o.key);
  };
  const overrideItem = (key) => page.locator(`tr.overrides-row[data-overrides-of="${ACTION}"] li.override`)
    .filter({ has: page.locator('.override-key', { hasText: key }) });

  before(async () => {
    mkdirSync(shots, { recursive: true });
    stack = await startStack({
      bin, dashboardDir, logDir: join(artifacts, 'browser-logs'), name: 'overrides', sluiceArgs: ['--redis-timeout-ms', '1000'],
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
    const put = await api('PUT', `/v1/rules/${ACTION}`, { action: ACTION, ...RULE });
    assert.equal(put.status, 200, put.text);
    changes.push(['rule_put', null, 'token']);
    const limited = await api('PUT', `/v1/rules/${ENVOY_ACTION}`, { action: ENVOY_ACTION, ...RULE });
    assert.equal(limited.status, 200, limited.text);
    changes.push(['rule_put', null, 'token']);
    envoy = await startEnvoy({ repo, decisionPort: Number(new URL(stack.decision).port), logDir: join(artifacts, 'browser-logs'), name: 'overrides-envoy' });
    const session = await context.request.post(`${stack.admin}/v1/session`, { data: { token: stack.token } });
    assert.ok(session.ok(), `sign-in: ${session.status()}`);
    await page.goto(stack.admin + '/');
    await page.locator('#new-rule').waitFor();
  });

  after(async () => {
    await browser?.close();
    envoy?.stop();
    stack?.stop();
  });

  /** Leaves the editor if a failed test left it open, so later tests start from the table. */
  const closeEditor = async () => {
    const cancel = page.locator('#cancel-edit');
    if (await cancel.count()) await cancel.click();
  };

  test('an override added in the editor gives its key more room, and deleting it gives the rule back', async () => {
   try {
    // Under the rule, the key has 2 and is then denied.
    assert.deepEqual([(await decide(VIP)).allowed, (await decide(VIP)).allowed, (await decide(VIP)).allowed],
      [true, true, false]);
    await page.locator(`tr[data-action="${ACTION}"] button.add-override`).click();
    await page.locator('#editor-title', { hasText: `New override on “${ACTION}”` }).waitFor();
    assert.equal(await page.inputValue('#rule-action'), ACTION);
    assert.ok(await page.locator('#rule-action').getAttribute('readonly') !== null, 'the action is the rule’s');
    // The editor starts from the rule; three mistakes (no key, capacity 0, a bad window) show at
    // once after one save, and nothing is sent.
    await page.selectOption('#rule-algorithm', 'fixed_window');
    await page.fill('#rule-capacity', '0');
    await page.fill('#rule-window', 'soon');
    await page.click('#save-rule');
    await page.locator('#override-key-error', { hasText: 'must not be empty' }).waitFor();
    await page.locator('#rule-capacity-error', { hasText: 'must be at least 1' }).waitFor();
    await page.locator('#rule-window-error', { hasText: 'whole number followed by a unit' }).waitFor();
    await page.locator('#rule-form-error', { hasText: '3 fields need a fix' }).waitFor();
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'override-key', 'focus on the first');
    // A key over 128 bytes is refused by core's own check, before anything is sent.
    await page.fill('#override-key', 'k'.repeat(129));
    await page.locator('#override-key-error', { hasText: '129 bytes' }).waitFor();
    assert.deepEqual(await overrideKeys(), [], 'nothing was written');
    await shot('40-override-editor-errors');
    await page.fill('#override-key', VIP);
    await page.fill('#rule-capacity', '10');
    await page.fill('#rule-window', '60s');
    await page.fill('#rule-description', 'VIP customer');
    // A new override is drawn against the rule it replaces for the key.
    await page.locator('#whatif-count-chart path.saved-line[d^="M"]').waitFor();
    await page.click('#save-rule');
    await overrideItem(VIP).waitFor();
    changes.push(['override_put', VIP, 'session']);
    // Stored under the key exactly as typed, and in force for it at once.
    assert.deepEqual(await overrideKeys(), [VIP]);
    const stored = await api('GET', `/v1/rules/${ACTION}/overrides/${seg(VIP)}`);
    assert.equal(stored.status, 200, stored.text);
    assert.equal(stored.body.capacity, 10);
    assert.equal(stored.body.algorithm, 'fixed_window');
    for (let i = 0; i < 8; i++) {
      const d = await decide(VIP);
      assert.ok(d.allowed, `request ${i + 1} under the override`);
      assert.equal(d.capacity, 10);
    }
    // Every other key keeps the rule.
    const other = await decide('someone-else');
    assert.equal(other.capacity, 2);
    // The line under the rule, the key as text.
    const item = overrideItem(VIP);
    assert.equal(await item.locator('.override-key').innerText(), VIP);
    assert.equal(await item.getAttribute('data-key'), VIP);
    assert.equal(await item.locator('.override-summary').innerText(), 'fixed_window · capacity 10 · 1m window · enforce');
    await shot('41-rules-with-override');
    assert.ok(await fits(page), 'the table with its overrides fits 1280 wide');

    // Edited: same validation; the key is fixed.
    await item.locator('button.edit-override').click();
    await page.locator('#editor-title', { hasText: 'Edit override of' }).waitFor();
    assert.equal(await page.inputValue('#override-key'), VIP);
    assert.ok(await page.locator('#override-key').getAttribute('readonly') !== null, 'the key is fixed while editing');
    await page.fill('#rule-capacity', 'lots');
    await page.click('#save-rule');
    await page.locator('#rule-capacity-error', { hasText: 'whole number' }).waitFor();
    await page.fill('#rule-capacity', '12');
    await page.click('#save-rule');
    await item.locator('.override-summary', { hasText: 'capacity 12' }).waitFor();
    editAt = changes.length;
    changes.push(['override_put', VIP, 'session']);
    assert.equal((await api('GET', `/v1/rules/${ACTION}/overrides/${seg(VIP)}`)).body.capacity, 12);

    // Deleted, after a confirmation ("Keep" keeps it).
    await item.locator('button.delete-override').click();
    await item.locator('.confirm-text', { hasText: 'Delete this override?' }).waitFor();
    await item.locator('button', { hasText: 'Keep' }).click();
    await item.locator('button.delete-override').waitFor();
    assert.deepEqual(await overrideKeys(), [VIP], 'Keep deleted nothing');
    await item.locator('button.delete-override').click();
    await item.locator('button.confirm-delete-override').click();
    await item.waitFor({ state: 'detached' });
    changes.push(['override_delete', VIP, 'session']);
    assert.deepEqual(await overrideKeys(), []);
    // The key is under the rule again, with the rule's state as it left it: denied.
    const back = await decide(VIP);
    assert.equal(back.capacity, 2);
    assert.equal(back.allowed, false);
    assert.equal(await page.locator(`tr.overrides-row[data-overrides-of="${ACTION}"]`).isVisible(), false,
      'no overrides: no overrides line');
   } finally {
    await closeEditor();
   }
  });

  test('any key is one path segment: odd keys are stored exactly as typed, shown as text and deleted', async () => {
   try {
    for (const key of ODD_KEYS) {
      await page.locator(`tr[data-action="${ACTION}"] button.add-override`).click();
      await page.fill('#override-key', key);
      await page.fill('#rule-capacity', '3');
      await page.click('#save-rule');
      await overrideItem(key).waitFor();
      changes.push(['override_put', key, 'session']);
    }
    assert.deepEqual((await overrideKeys()).sort(), [...ODD_KEYS].sort());
    // The rule's delete question counts what goes with it ("Keep" keeps everything).
    const ruleRow = page.locator(`tr[data-action="${ACTION}"]`);
    await ruleRow.locator('button.delete').click();
    await ruleRow.locator('.confirm-text', { hasText: 'Delete, with its 3 overrides?' }).waitFor();
    await ruleRow.locator('button', { hasText: 'Keep' }).click();
    // An override made elsewhere (the API) appears under its rule without a reload, and goes.
    const elsewhere = await api('PUT', `/v1/rules/${ACTION}/overrides/${seg('from-the-api')}`, { ...RULE, capacity: 7 });
    assert.equal(elsewhere.status, 200, elsewhere.text);
    changes.push(['override_put', 'from-the-api', 'token']);
    await overrideItem('from-the-api').locator('.override-summary', { hasText: 'capacity 7' }).waitFor();
    assert.equal((await api('DELETE', `/v1/rules/${ACTION}/overrides/${seg('from-the-api')}`)).status, 204);
    changes.push(['override_delete', 'from-the-api', 'token']);
    await overrideItem('from-the-api').waitFor({ state: 'detached' });
    for (const key of ODD_KEYS) {
      const one = await api('GET', `/v1/rules/${ACTION}/overrides/${seg(key)}`);
      assert.equal(one.status, 200, `${key}: ${one.text}`);
      assert.equal(one.body.capacity, 3);
    }
    // Markup in a key is text: no <b> element was made.
    assert.equal(await page.locator('.override-key b').count(), 0);
    assert.equal(await overrideItem('<b>bold</b>').locator('.override-key').innerText(), ODD_KEYS[2]);
    // A taken key is refused in the editor (edit it instead).
    await page.locator(`tr[data-action="${ACTION}"] button.add-override`).click();
    await page.fill('#override-key', '...');
    await page.locator('#override-key-error', { hasText: 'already has an override' }).waitFor();
    // `..` (and `.`) would be resolved away by the URL parser before the request left: refused.
    await page.fill('#override-key', '..');
    await page.locator('#override-key-error', { hasText: 'cannot be named in a URL path' }).waitFor();
    await page.click('#cancel-edit');
    for (const key of ODD_KEYS) {
      const item = overrideItem(key);
      await item.locator('button.delete-override').click();
      await waitFor('the question to have the focus', () => item.locator('button.confirm-delete-override').evaluate((b) => b === document.activeElement), { timeout: 2000 });
      await page.keyboard.press('Enter');
      await item.waitFor({ state: 'detached' });
      changes.push(['override_delete', key, 'session']);
    }
    assert.deepEqual(await overrideKeys(), []);
   } finally {
    await closeEditor();
   }
  });

  test('reset from the key view frees a limited key and says what it removed', async () => {
    for (let i = 0; i < 3; i++) await decide(LIMITED);
    assert.equal((await decide(LIMITED)).allowed, false, 'limited');
    await page.click('#tab-keys');
    await page.fill('#key-search', LIMITED);
    await page.click('#key-search-button');
    const row = page.locator(`#key-result tr.key-state[data-action="${ACTION}"]`);
    await row.locator('td.remaining', { hasText: /^0$/ }).waitFor();
    await row.locator('button.reset-key').click();
    await row.locator('.confirm-text', { hasText: 'Reset this key?' }).waitFor();
    // The confirmation survives the view's next refresh (every 4 s), and "Keep" resets nothing.
    await page.waitForResponse((r) => r.url().includes('/v1/keys?key='), { timeout: 10000 });
    await row.locator('button.confirm-reset').waitFor();
    await row.locator('button.keep-key').click();
    assert.equal((await decide(LIMITED)).allowed, false, 'Keep reset nothing');
    await row.locator('button.reset-key').click();
    await shot('42-keys-reset-confirm');
    await row.locator('button.confirm-reset').click();
    await page.locator('#key-reset-result', { hasText: `Reset “${LIMITED}” on ${ACTION}: removed its gcra state.` }).waitFor();
    changes.push(['key_reset', LIMITED, 'session']);
    // Free again through the real decision API, with the rule's whole capacity.
    const freed = await decide(LIMITED);
    assert.equal(freed.allowed, true);
    assert.equal(freed.remaining, 1);
    await shot('43-keys-reset-done');
  });

  test('reset from the live view frees a limited key', async () => {
    await page.click('#tab-live');
    for (let i = 0; i < 3; i++) await decide(LIVE_KEY);
    assert.equal((await decide(LIVE_KEY)).allowed, false, 'limited');
    const card = page.locator(`article.action-card[data-action="${ACTION}"]`);
    const funnel = card.locator(`li.funnel-item[data-key='${LIVE_KEY}']`);
    await funnel.waitFor();
    // By keyboard: the question takes the focus, Enter answers it.
    await funnel.locator('button.reset-key').focus();
    await page.keyboard.press('Enter');
    await funnel.locator('button.confirm-reset').waitFor();
    await waitFor('the question to have the focus', () => funnel.locator('button.confirm-reset').evaluate((b) => b === document.activeElement), { timeout: 2000 });
    await page.keyboard.press('Enter');
    await card.locator('.reset-result', { hasText: `Reset “${LIVE_KEY}” on ${ACTION}: removed its gcra state.` }).waitFor();
    changes.push(['key_reset', LIVE_KEY, 'session']);
    assert.equal((await decide(LIVE_KEY)).allowed, true, 'free again');
    await shot('44-live-reset');
  });

  test('through a real Envoy: an override made here applies within a second, so does its deletion, and a reset frees the user', async () => {
   try {
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push(await viaEnvoy(envoy.url, ENVOY_USER));
    assert.deepEqual(statuses, [200, 200, 429], 'limited by the rule through the proxy');
    // The key as the backend sees it, from the most denied keys in the Keys view.
    await page.click('#tab-keys');
    const link = page.locator(`article.top-card[data-action="${ENVOY_ACTION}"] button.key-link`);
    await link.waitFor();
    const key = await link.innerText();
    assert.equal(key, ENVOY_KEY);
    await page.click('#tab-rules');
    await page.locator(`tr[data-action="${ENVOY_ACTION}"] button.add-override`).click();
    await page.fill('#override-key', key);
    await page.selectOption('#rule-algorithm', 'fixed_window');
    await page.fill('#rule-capacity', '10');
    await page.fill('#rule-window', '60s');
    await page.click('#save-rule');
    const item = page.locator(`tr.overrides-row[data-overrides-of="${ENVOY_ACTION}"] li.override`);
    await item.waitFor();
    changes.push(['override_put', ENVOY_KEY, 'session']);
    // From the moment the page shows it saved, Envoy lets the user through within a second (a
    // denial the filter cached is held at most 600 ms by this config).
    let saved = Date.now();
    await waitFor('the override to let the user through Envoy', async () => (await viaEnvoy(envoy.url, ENVOY_USER)) === 200,
      { timeout: 1000, every: 50 });
    const applied = Date.now() - saved;
    for (let i = 0; i < 5; i++) assert.equal(await viaEnvoy(envoy.url, ENVOY_USER), 200, `request ${i + 1} under the override`);
    // Deleted here: the rule (whose state the user left exhausted) denies again within a second.
    await item.locator('button.delete-override').click();
    await item.locator('button.confirm-delete-override').click();
    await item.waitFor({ state: 'detached' });
    changes.push(['override_delete', ENVOY_KEY, 'session']);
    saved = Date.now();
    await waitFor('the rule to deny the user through Envoy again', async () => (await viaEnvoy(envoy.url, ENVOY_USER)) === 429,
      { timeout: 1000, every: 50 });
    const removed = Date.now() - saved;
    // Reset from the key view (opened from the most denied list): free through Envoy within a second.
    await page.click('#tab-keys');
    await link.click();
    await page.locator('#shown-key', { hasText: ENVOY_KEY }).waitFor();
    const row = page.locator(`#key-result tr.key-state[data-action="${ENVOY_ACTION}"]`);
    await row.locator('td.remaining', { hasText: /^0$/ }).waitFor();
    assert.equal(await viaEnvoy(envoy.url, ENVOY_USER), 429, 'still limited before the reset');
    await row.locator('button.reset-key').click();
    await row.locator('button.confirm-reset').click();
    await page.locator('#key-reset-result', { hasText: `Reset “${ENVOY_KEY}” on ${ENVOY_ACTION}: removed its` }).waitFor();
    changes.push(['key_reset', ENVOY_KEY, 'session']);
    saved = Date.now();
    await waitFor('the reset user to pass Envoy', async () => (await viaEnvoy(envoy.url, ENVOY_USER)) === 200,
      { timeout: 1000, every: 50 });
    const freed = Date.now() - saved;
    console.log(`# through Envoy: override applied after ${applied} ms, its deletion after ${removed} ms, the reset after ${freed} ms`);
   } finally {
    await closeEditor();
   }
  });

  test('the audit page shows each change in order, with who and what changed', async () => {
    await page.click('#tab-audit');
    const entries = page.locator('#audit-list li.audit-entry');
    await waitFor('every change on the audit page', async () => (await entries.count()) === changes.length);
    // Newest first: the reverse of what this file did, kind and key.
    const shown = await entries.evaluateAll((els) => els.map((e) => [e.dataset.kind, e.querySelector('.audit-key')?.textContent ?? null]));
    assert.deepEqual(shown, changes.map(([kind, key]) => [kind, key]).reverse());
    // The same as the API's own answer, in the same order.
    const trail = await api('GET', '/v1/audit?limit=100');
    assert.deepEqual(trail.body.entries.map((e) => [e.kind, e.key ?? null]), shown);
    // Who: the rules came with the token, everything else from this page's session (one login).
    const who = await entries.locator('.audit-who').allInnerTexts();
    const sessions = new Set();
    who.forEach((w, i) => {
      const expected = changes[changes.length - 1 - i][2];
      // The stack's one --admin-token is the identity "admin".
      if (expected === 'token') assert.equal(w, 'by admin');
      else { assert.match(w, /^by admin \(session [0-9a-f]{12}\)$/); sessions.add(w); }
    });
    assert.equal(sessions.size, 1, 'one login, one session id');
    // The edit of the VIP override lists what changed, and only that.
    const edit = entries.nth(changes.length - 1 - editAt);
    assert.equal(await edit.locator('.audit-what').innerText(), 'override changed');
    assert.deepEqual(await edit.locator('li.change').evaluateAll((els) => els.map((e) => [
      e.dataset.field, e.querySelector('.change-before').textContent, e.querySelector('.change-after').textContent])),
    [['capacity', '10', '12']]);
    // A reset says what it removed.
    const liveReset = entries.filter({ has: page.locator('.audit-key', { hasText: LIVE_KEY }) });
    assert.equal(await liveReset.locator('.audit-note').innerText(), 'removed gcra state');
    // Markup in a key stayed text here too.
    assert.equal(await page.locator('.audit-key b').count(), 0);
    await shot('45-audit');
    // A change made elsewhere appears at the top without a reload.
    const put = await api('PUT', `/v1/rules/${ACTION}`, { action: ACTION, ...RULE, capacity: 3 });
    assert.equal(put.status, 200, put.text);
    await waitFor('the new entry on top', async () => (await entries.count()) === changes.length + 1, { timeout: 10000 });
    const top = entries.first();
    assert.equal(await top.getAttribute('data-kind'), 'rule_put');
    assert.equal(await top.locator('.audit-what').innerText(), 'rule changed');
    assert.equal(await top.locator('li.change[data-field="capacity"] .change-after').innerText(), '3');
  });

  test('390 wide: overrides, the key view with its reset and the audit page fit', async () => {
    const put = await api('PUT', `/v1/rules/${ACTION}/overrides/${seg(VIP)}`, { ...RULE, capacity: 20, description: 'VIP customer' });
    assert.equal(put.status, 200, put.text);
    const phone = await context.newPage();
    watch(phone);
    await phone.setViewportSize({ width: 390, height: 844 });
    await phone.goto(stack.admin + '/');
    await phone.locator(`tr.overrides-row[data-overrides-of="${ACTION}"] li.override`).first().waitFor();
    assert.ok(await fits(phone), 'rules and overrides fit');
    await shot('46-phone-overrides', phone);
    await phone.click('#tab-keys');
    await phone.fill('#key-search', LIMITED);
    await phone.click('#key-search-button');
    const row = phone.locator(`#key-result tr.key-state[data-action="${ACTION}"]`);
    await row.locator('button.reset-key').click();
    await row.locator('button.confirm-reset').waitFor();
    assert.ok(await fits(phone), 'the key view with a reset being confirmed fits');
    await shot('47-phone-keys-reset', phone);
    await row.locator('button.keep-key').click();
    await phone.click('#tab-audit');
    await phone.locator('#audit-list li.audit-entry').first().waitFor();
    assert.ok(await fits(phone), 'audit fits');
    await shot('48-phone-audit', phone);
    await phone.close();
  });

  test('no console errors, script errors or dialogs in these views', () => {
    assert.deepEqual(consoleErrors, []);
    assert.deepEqual(dialogs, []);
  });
});
