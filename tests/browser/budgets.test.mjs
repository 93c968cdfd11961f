// Browser tests of budgets (issue 23), at 1280 and 390 wide, with no console errors: a
// fixed_window rule with a calendar month is one row in the rules table ("per calendar month
// (UTC)"); the editor shows its Calendar and Zone (and no Window), refuses an unknown zone next
// to the Zone input, and saves a named one (Europe/Paris); its what-if plays a cost per request (a range); the key view reads a key's budget: spent, left and when it
// resets, then a reservation held open (reserved in flight) and its commit above the reservation
// (overshoot, carried as debt).
//
// Against a stack of its own (the memory store and sluice), in a browser of its own; traffic goes
// through the real decision API. dashboard.test.mjs imports this file; it also runs alone:
// `node --test budgets.test.mjs`.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startStack, adminApi, throttle, waitFor, signedInPage } from './stack.mjs';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const bin = process.env.SLUICE_BIN ?? join(repo, 'target', 'debug', 'sluice');
const dashboardDir = process.env.SLUICE_DASHBOARD_DIR ?? join(repo, 'dashboard', 'dist');
const artifacts = process.env.SLUICE_ARTIFACTS ?? join(repo, 'artifacts');
const shots = join(artifacts, 'screenshots');

/** POSTs `body` as JSON to the decision listener at `path`. */
async function decisionPost({ decision }, path, body) {
  const response = await fetch(`${decision}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

describe('budgets', () => {
  let stack, api, browser, page, consoleErrors;

  const fits = () => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);

  before(async () => {
    mkdirSync(shots, { recursive: true });
    stack = await startStack({
      bin, dashboardDir, logDir: join(artifacts, 'browser-logs'), name: 'budgets', redis: false,
    });
    api = adminApi(stack);
    ({ browser, page, consoleErrors } = await signedInPage(chromium, stack));
  });

  after(async () => {
    await browser?.close();
    stack?.stop();
  });

  for (const width of [1280, 390]) {
    test(`at ${width} wide: a monthly budget's rule, editor and key view`, async () => {
      await page.setViewportSize({ width, height: width > 500 ? 800 : 844 });
      const action = `tokens-${width}`;
      const put = await api('PUT', `/v1/rules/${action}`, {
        action, algorithm: 'fixed_window', capacity: 1000, calendar: { unit: 'month' },
      });
      assert.equal(put.status, 200, put.text);
      assert.deepEqual(put.body.calendar, { unit: 'month', zone: 'UTC' });

      await page.click('#tab-rules');
      const row = page.locator(`tr[data-action="${action}"]`);
      await row.waitFor();
      assert.match(await row.innerText(), /per calendar month \(UTC\)/);

      // The editor shows the calendar, not the window; a named zone is refused next to Zone.
      await row.locator('button.edit').click();
      assert.equal(await page.inputValue('#rule-calendar'), 'month');
      assert.ok(await page.locator('#rule-zone').isVisible(), 'zone shown');
      assert.ok(!(await page.locator('#rule-window').isVisible()), 'window hidden');
      // The what-if plays a cost distribution: 10 to 200 units per request spend the budget on
      // fewer requests; a bad cost is named next to the plot.
      const summary = page.locator('#whatif-summary');
      await waitFor('a plot', async () => /allowed/.test(await summary.innerText()));
      const oneUnit = await summary.innerText();
      await page.fill('#whatif-cost', '10-200');
      await waitFor('the costed plot', async () => (await summary.innerText()) !== oneUnit);
      await page.fill('#whatif-cost', '0');
      await page.locator('#whatif-cost-error', { hasText: 'Cost: a whole number' }).waitFor();
      await page.fill('#whatif-cost', '');
      await waitFor('one unit again', async () => (await summary.innerText()) === oneUnit);
      // An unknown zone is refused next to Zone (core names the forms); a named zone is saved
      // as the tz database spells it.
      await page.fill('#rule-zone', 'Europe/Pariss');
      await page.click('#save-rule');
      await page.locator('#rule-zone-error', { hasText: 'IANA zone name' }).waitFor();
      await page.fill('#rule-zone', 'europe/paris');
      await page.click('#save-rule');
      await waitFor('the named zone saved', async () =>
        (await api('GET', `/v1/rules/${action}`)).body?.calendar?.zone === 'Europe/Paris');
      await page.locator(`tr[data-action="${action}"]`, { hasText: 'Europe/Paris' }).waitFor();
      assert.ok(await fits(), 'the rules table fits');
      await page.screenshot({ path: join(shots, `60-budget-rules-${width}.png`), fullPage: true });

      // Spend 30 of the month's 1000; the key view reads the budget.
      const key = `tenant-${width}`;
      assert.equal((await throttle(stack, action, key, 30)).body.allowed, true);
      await page.click('#tab-keys');
      await page.fill('#key-search', key);
      await page.click('#key-search-button');
      await page.locator('#shown-key', { hasText: key }).waitFor();
      const budget = page.locator(`#key-result tr.key-state[data-action="${action}"] .budget-text`);
      await waitFor('the budget line', async () => /spent 30 of 1000 · 970 left · resets in \d/.test(await budget.innerText()));
      assert.ok(await fits(), 'the key view fits');
      await page.screenshot({ path: join(shots, `61-budget-key-${width}.png`), fullPage: true });

      // A cost route's reservation (as the filter sends it: with its commit's id) is held open:
      // the key view shows it reserved in flight, inside "spent".
      const reserve = await decisionPost(stack, '/v1/throttle',
        { action, key, quantity: 500, reservation_id: `r-${width}` });
      assert.equal(reserve.body.allowed, true, JSON.stringify(reserve.body));
      const reread = async (pattern) => {
        await page.click('#key-search-button');
        return pattern.test(await budget.innerText());
      };
      await waitFor('the reservation in flight', () =>
        reread(/spent 530 of 1000 · 500 reserved in flight \(1\) · 470 left · resets in \d/));
      await page.screenshot({ path: join(shots, `62-budget-in-flight-${width}.png`), fullPage: true });
      // Committed at 1000: 500 beyond the reservation, of which 30 did not fit (overshoot),
      // carried as debt: 1030 spent, nothing left.
      const commit = await decisionPost(stack, '/v1/commit', {
        action, key, reserved: 500, actual: 1000, id: `r-${width}`, reserved_at_ms: Date.now(),
      });
      assert.equal(commit.body.overshoot, 30, JSON.stringify(commit.body));
      await waitFor('the overshoot', () =>
        reread(/spent 1030 of 1000 · 0 left · 30 in debt · overshoot 30 \(500 beyond reservations\) · resets in \d/));
      assert.ok(await fits(), 'the key view fits with the longer line');
      await page.screenshot({ path: join(shots, `63-budget-overshoot-${width}.png`), fullPage: true });
      assert.deepEqual(consoleErrors, []);
    });
  }
});
