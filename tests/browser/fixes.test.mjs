// Browser tests of issue 24's one-step fixes with names, at 1280 and 390 wide, with no console
// errors: the admin signed in by a named token (--admin-tokens-file) is shown in the header and
// named in the audit; one key is reset on every action with one confirmation whose focus is on
// "Keep" (one audit entry per action); an override that starts its key fresh, and the key view's
// override mark; the audit filtered by action, key and kind.
//
// Against a stack of its own (the memory store and sluice), in a browser of its own; traffic goes
// through the real decision API. dashboard.test.mjs imports this file; it also runs alone:
// `node --test fixes.test.mjs`.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startStack, adminApi, throttle, waitFor, signedInPage } from './stack.mjs';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const bin = process.env.SLUICE_BIN ?? join(repo, 'target', 'debug', 'sluice');
const dashboardDir = process.env.SLUICE_DASHBOARD_DIR ?? join(repo, 'dashboard', 'dist');
const artifacts = process.env.SLUICE_ARTIFACTS ?? join(repo, 'artifacts');
const shots = join(artifacts, 'screenshots');

const ALICE = `alice-${Math.random().toString(36).slice(2)}-token`;
const ACTIONS = ['fx-post', 'fx-reply'];

describe('one-step fixes with names', () => {
  let stack, api, browser, page, consoleErrors;

  const fits = () => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
  const remaining = (action) => page.locator(`#key-result tr.key-state[data-action="${action}"]`).getAttribute('data-remaining');
  const lookUp = async (key) => {
    await page.click('#tab-keys');
    await page.fill('#key-search', key);
    await page.click('#key-search-button');
    await page.locator('#shown-key', { hasText: key }).waitFor();
  };
  const exhaust = async (action, key) => {
    for (let i = 0; i < 3; i++) await throttle(stack, action, key);
    assert.equal((await throttle(stack, action, key)).body.allowed, false, `${key} out of ${action}`);
  };

  before(async () => {
    mkdirSync(shots, { recursive: true });
    const dir = mkdtempSync(join(tmpdir(), 'sluice-fixes-'));
    const tokens = join(dir, 'tokens');
    writeFileSync(tokens, `# name token\nalice ${ALICE}\nbob bob-${Math.random().toString(36).slice(2)}-token\n`);
    stack = await startStack({
      bin, dashboardDir, logDir: join(artifacts, 'browser-logs'), name: 'fixes', redis: false,
      sluiceArgs: ['--admin-tokens-file', tokens],
    });
    api = adminApi(stack);
    for (const action of ACTIONS) {
      const put = await api('PUT', `/v1/rules/${action}`, {
        action, algorithm: 'gcra', capacity: 2, rate: { count: 1, period: '1h' },
      });
      assert.equal(put.status, 200, put.text);
    }
    // Alice signs in with her own token.
    ({ browser, page, consoleErrors } = await signedInPage(chromium, { admin: stack.admin, token: ALICE }));
  });

  after(async () => {
    await browser?.close();
    stack?.stop();
  });

  for (const width of [1280, 390]) {
    test(`at ${width} wide: the name, reset on every action, start fresh, the mark, audit filters`, async () => {
      await page.setViewportSize({ width, height: width > 500 ? 800 : 844 });
      const key = `mallory-${width}`;
      const vip = `vip-${width}`;
      // The header names who this page acts as.
      await page.locator('#signed-in-as', { hasText: 'alice' }).waitFor();

      // Reset on every action: one question, the focus on Keep, one request.
      for (const action of ACTIONS) await exhaust(action, key);
      await lookUp(key);
      for (const action of ACTIONS) await waitFor(`${action} full`, async () => (await remaining(action)) === '0');
      // Since when: the key's own denials per minute, with the clock times.
      const since = page.locator(`#key-result tr.key-state[data-action="fx-post"] .denied-text`);
      await waitFor('the denial times', async () => /^denied \d\d:\d\d–\d\d:\d\d UTC, \d+ in all$/.test(await since.innerText()));
      assert.ok(await page.locator(`#key-result tr.key-state[data-action="fx-post"] .denied-bar`).count() >= 1);
      await page.click('#reset-all');
      await page.locator('#reset-all-question', { hasText: 'all 2 actions' }).waitFor();
      assert.equal(await page.evaluate(() => document.activeElement?.id), 'keep-all', 'the safe answer has the focus');
      assert.ok(await fits(), `sideways scroll at ${width} wide`);
      await page.screenshot({ path: join(shots, `fixes-reset-all-${width}.png`), fullPage: true });
      await page.click('#confirm-reset-all');
      await page.locator('#key-reset-result', { hasText: `Reset “${key}” on 2 actions (fx-post, fx-reply)` }).waitFor();
      for (const action of ACTIONS) {
        await waitFor(`${action} freed`, async () => (await remaining(action)) === '2');
        assert.equal((await throttle(stack, action, key)).body.allowed, true);
      }

      // An override that starts its key fresh: the VIP used its 2, gets capacity 50, all of it.
      await exhaust('fx-post', vip);
      await page.click('#tab-rules');
      await page.locator('tr[data-action="fx-post"] button.add-override').click();
      await page.locator('#editor-title', { hasText: 'New override on “fx-post”' }).waitFor();
      await page.fill('#override-key', vip);
      await page.fill('#rule-capacity', '50');
      await page.check('#override-fresh');
      await page.click('#save-rule');
      // 25 times the rule's capacity: the editor may ask first, with the focus on the safe answer.
      const asked = page.locator('#confirm-change');
      await waitFor('saved, or asked', async () =>
        (await page.locator('#editor-title').count()) === 0 || await asked.isVisible());
      if (await asked.isVisible()) {
        assert.equal(await page.evaluate(() => document.activeElement?.id), 'keep-editing');
        await page.click('#confirm-save');
      }
      await page.locator('#editor-title').waitFor({ state: 'detached' });
      const d = await throttle(stack, 'fx-post', vip, 50);
      assert.equal(d.body.allowed, true, JSON.stringify(d.body));
      // The key view marks the action under the override, and only it.
      await lookUp(vip);
      const post = page.locator('#key-result tr.key-state[data-action="fx-post"]');
      await waitFor('the override mark', async () => (await post.getAttribute('data-overridden')) === 'true');
      assert.ok(await post.locator('.override-mark').isVisible());
      const reply = page.locator('#key-result tr.key-state[data-action="fx-reply"]');
      assert.equal(await reply.getAttribute('data-overridden'), 'false');
      assert.equal(await reply.locator('.override-mark').isVisible(), false);
      assert.ok(await fits(), `sideways scroll at ${width} wide`);
      await page.screenshot({ path: join(shots, `fixes-override-mark-${width}.png`), fullPage: true });

      // The audit: alice's name on what she did; filters by kind, key and action.
      await page.click('#tab-audit');
      await page.locator('#audit-list li.audit-entry').first().waitFor();
      await page.selectOption('#audit-kind', 'key_reset');
      await page.fill('#audit-key', key);
      await page.locator('#audit-key').dispatchEvent('change');
      const entries = page.locator('#audit-list li.audit-entry');
      await waitFor('only the two resets of the key', async () => {
        const shown = await entries.evaluateAll((els) => els.map((e) => [e.dataset.kind, e.dataset.key, e.dataset.action]));
        return shown.length === 2 && shown.every(([kind, k]) => kind === 'key_reset' && k === key);
      });
      for (const who of await entries.locator('.audit-who').allInnerTexts()) {
        assert.match(who, /^by alice \(session [0-9a-f]{12}\)$/);
      }
      await page.selectOption('#audit-action', 'fx-reply');
      await waitFor('only fx-reply', async () => {
        const shown = await entries.evaluateAll((els) => els.map((e) => e.dataset.action));
        return shown.length === 1 && shown[0] === 'fx-reply';
      });
      assert.ok(await fits(), `sideways scroll at ${width} wide`);
      await page.screenshot({ path: join(shots, `fixes-audit-filtered-${width}.png`), fullPage: true });
      // The start-fresh override left an override_put and a key_reset, both alice's.
      await page.click('#audit-clear');
      await page.selectOption('#audit-action', 'fx-post');
      await page.fill('#audit-key', vip);
      await page.locator('#audit-key').dispatchEvent('change');
      await waitFor('the override and its fresh start', async () => {
        const shown = await entries.evaluateAll((els) => els.map((e) => e.dataset.kind));
        return JSON.stringify(shown) === JSON.stringify(['key_reset', 'override_put']);
      });
      await page.click('#audit-clear');

      // History: clock times on the axis, the step still filling marked; Live and Most denied
      // say which denials they count.
      await page.click('#tab-history');
      const ticks = page.locator('svg text.tick');
      await waitFor('clock-time ticks', async () => {
        const labels = await ticks.evaluateAll((els) => els.map((e) => e.textContent));
        return labels.some((l) => /^\d\d:\d\d$/.test(l)) && !labels.includes('now');
      });
      await waitFor('the partial step', async () => (await page.locator('rect.partial-step').count()) > 0, { timeout: 12000 });
      assert.ok(await fits(), `sideways scroll at ${width} wide`);
      await page.screenshot({ path: join(shots, `fixes-history-${width}.png`), fullPage: true });
      await page.click('#tab-live');
      await page.locator('.action-card[data-action="fx-post"] .cached-rate').waitFor();
      assert.ok(await fits(), `live view: sideways scroll at ${width} wide`);
      await page.click('#tab-keys');
      await page.locator('#top-denied-note', { hasText: 'backend' }).waitFor();
      assert.deepEqual(consoleErrors, []);
    });
  }
});
