// Browser tests of issue 24's page on a bad day: the header's badge says when the numbers are
// stale. The backend serving the page is stopped in place (SIGSTOP: a hung process closes no
// connection and sends no error, only silence); the badge must leave green within 5 s and come
// back once the process resumes. At 1280 and 390 wide, with no console errors: while the process
// is stopped the page's reads wait (none fails), so Chromium logs nothing.
// dashboard.test.mjs imports this file; it also runs alone: `node --test incident.test.mjs`.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startStack, waitFor, signedInPage } from './stack.mjs';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const bin = process.env.SLUICE_BIN ?? join(repo, 'target', 'debug', 'sluice');
const dashboardDir = process.env.SLUICE_DASHBOARD_DIR ?? join(repo, 'dashboard', 'dist');
const artifacts = process.env.SLUICE_ARTIFACTS ?? join(repo, 'artifacts');
const shots = join(artifacts, 'screenshots');

describe('the page says when it is stale', () => {
  let stack, browser, page, consoleErrors;
  let stopped = false;

  const badgeClass = () => page.locator('#link-badge').getAttribute('class');
  const fits = () => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);

  before(async () => {
    mkdirSync(shots, { recursive: true });
    stack = await startStack({
      bin, dashboardDir, logDir: join(artifacts, 'browser-logs'), name: 'incident', redis: false,
    });
    ({ browser, page, consoleErrors } = await signedInPage(chromium, stack));
  });

  after(async () => {
    if (stopped) process.kill(stack.sluicePid, 'SIGCONT');
    await browser?.close();
    stack?.stop();
  });

  for (const width of [1280, 390]) {
    test(`at ${width} wide the badge leaves green within 5 s of the backend stopping, and comes back`, async () => {
      await page.setViewportSize({ width, height: width > 500 ? 800 : 844 });
      await waitFor('the badge to be live', async () => (await badgeClass()).includes('link-live'), { timeout: 10000 });
      assert.match(await page.locator('#link-badge').textContent(), /^live · updated \d+ s ago$/);
      process.kill(stack.sluicePid, 'SIGSTOP');
      stopped = true;
      const t0 = Date.now();
      try {
        await waitFor('the badge to leave green', async () => !(await badgeClass()).includes('link-live'),
          { timeout: 5000, every: 100 });
        const took = Date.now() - t0;
        assert.ok(took < 5000, `left green after ${took} ms`);
        assert.match(await badgeClass(), /link-late/);
        assert.match(await page.locator('#link-badge').textContent(), /^late · updated [3-5] s ago$/);
        assert.ok(await fits(), `sideways scroll at ${width} wide with the badge amber`);
        await page.screenshot({ path: join(shots, `incident-stale-${width}.png`) });
        console.log(`badge amber ${took} ms after SIGSTOP at ${width} wide`);
      } finally {
        process.kill(stack.sluicePid, 'SIGCONT');
        stopped = false;
      }
      await waitFor('the badge to be live again', async () => (await badgeClass()).includes('link-live'), { timeout: 10000 });
      assert.deepEqual(consoleErrors, []);
    });
  }

  test('ten seconds of silence turn the badge red', async () => {
    await page.setViewportSize({ width: 1280, height: 800 });
    process.kill(stack.sluicePid, 'SIGSTOP');
    stopped = true;
    try {
      await waitFor('the badge to turn red', async () => (await badgeClass()).includes('link-offline'),
        { timeout: 13000, every: 200 });
      assert.match(await page.locator('#link-badge').textContent(), /^stale · updated 1\d s ago$/);
    } finally {
      process.kill(stack.sluicePid, 'SIGCONT');
      stopped = false;
    }
    await waitFor('the badge to be live again', async () => (await badgeClass()).includes('link-live'), { timeout: 10000 });
    assert.deepEqual(consoleErrors, []);
  });
});
