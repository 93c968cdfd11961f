// Browser tests of the store line and the store's warning banner at the top of the live view,
// each against a stack of its own (a memory store with a small key bound; Redis with settings
// that do or do not let a key spray switch limiting off), in a browser of its own (the session
// cookie belongs to 127.0.0.1 whatever the port, so stacks must not share a cookie jar).
// dashboard.test.mjs imports this file so that the suite's one `node --test` runs it; it also
// runs alone: `node --test store.test.mjs` with the same environment.
import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startStack, adminApi, throttle, waitFor, redisCommand } from './stack.mjs';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const bin = process.env.SLUICE_BIN ?? join(repo, 'target', 'debug', 'sluice');
const dashboardDir = process.env.SLUICE_DASHBOARD_DIR ?? join(repo, 'dashboard', 'dist');
const artifacts = process.env.SLUICE_ARTIFACTS ?? join(repo, 'artifacts');
const shots = join(artifacts, 'screenshots');
const logDir = join(artifacts, 'browser-logs');
const MAX_KEYS = 64;
const SPRAY = 300;

/** The banner's items as the page shows them, checking each is one plain text node. */
async function bannerItems(page) {
  return page.locator('#store-warnings li').evaluateAll((items) => items.map((li) => {
    if (li.children.length !== 0) throw new Error(`a warning holds elements: ${li.innerHTML}`);
    return li.textContent;
  }));
}

/** Waits until the banner lists exactly the warnings the backend reports now (`read()`). */
async function bannerMatches(page, read) {
  return waitFor('the banner to list the backend\'s warnings', async () => {
    const [shown, sent] = [await bannerItems(page), await read()];
    return sent.length > 0 && JSON.stringify(shown) === JSON.stringify(sent) ? shown : null;
  }, { timeout: 5000 });
}

/** The store line's numbers, as the page shows them (data attributes of #store-line). */
async function storeLine(page) {
  // One read of the whole line: snapshots arrive about twice a second, and reading attribute by
  // attribute could mix two of them (keys from the one before a spray, evictions from the one
  // after it).
  return page.locator('#store-line').evaluate((line) => {
    const number = (name) => {
      const value = line.getAttribute(name);
      return value === null || value === '' ? null : Number(value);
    };
    return {
      kind: line.getAttribute('data-kind'),
      keys: number('data-keys'),
      maxKeys: number('data-max-keys'),
      evictions: number('data-evictions'),
      rate: line.querySelector('.store-eviction-rate')?.innerText ?? '',
      text: line.innerText,
    };
  });
}

describe('the store in the live view', () => {
  let browser;
  const pageErrors = [];
  const dialogs = [];

  /** A fresh page in a fresh context, signed in to `stack`, showing the live view. */
  async function livePage(stack) {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    context.setDefaultTimeout(15000);
    const page = await context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    page.on('console', (m) => { if (m.text().includes('panicked')) pageErrors.push(m.text()); });
    page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
    await page.goto(stack.admin + '/');
    await page.fill('#token', stack.token);
    await page.click('button[type=submit]');
    await page.locator('#new-rule').waitFor();
    await page.click('#tab-live');
    await page.locator('#store-line:not([hidden])').waitFor();
    return page;
  }

  before(async () => {
    mkdirSync(shots, { recursive: true });
    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
  });

  after(async () => {
    await browser?.close();
  });

  test(`a memory store bounded at ${MAX_KEYS} keys shows its fill and counts evictions under a spray of ${SPRAY} keys`, async () => {
    const stack = await startStack({
      bin, dashboardDir, logDir, name: 'memory', redis: false, sluiceArgs: ['--max-keys', String(MAX_KEYS)],
    });
    try {
      const api = adminApi(stack);
      // A long window: no sprayed key is fresh again before the spray ends, so every key past
      // the bound costs an eviction.
      const put = await api('PUT', '/v1/rules/spray', {
        action: 'spray', algorithm: 'sliding_window', capacity: 10, window: '1h',
      });
      assert.equal(put.status, 200, put.text);
      const page = await livePage(stack);
      const start = await storeLine(page);
      assert.equal(start.kind, 'memory');
      assert.equal(start.maxKeys, MAX_KEYS);
      assert.equal(start.evictions, 0);
      assert.match(start.text, /Store\s+memory/);
      assert.ok(await page.locator('#store-warnings').isHidden(), 'no warning before the spray');

      // The spray: distinct keys through the decision API, 20 at a time. A full table never
      // refuses and never fails open: every new key is decided (and allowed: it has room).
      for (let i = 0; i < SPRAY; i += 20) {
        const batch = [];
        for (let j = i; j < Math.min(i + 20, SPRAY); j++) batch.push(throttle(stack, 'spray', `sprayed-${j}`));
        for (const answer of await Promise.all(batch)) {
          assert.equal(answer.status, 200, JSON.stringify(answer.body));
          assert.equal(answer.body.allowed, true);
        }
      }

      // What the backend counts once the spray is over: every key past the bound held state (a
      // one-hour window), so each cost an eviction; the table never held more than its bound.
      const levels = await api('GET', '/v1/levels');
      assert.equal(levels.status, 200, levels.text);
      const counted = levels.body.store;
      assert.equal(counted.max_keys, MAX_KEYS);
      assert.ok(counted.keys <= MAX_KEYS, `keys held ${counted.keys} ≤ ${MAX_KEYS}`);
      assert.ok(counted.evictions >= SPRAY - MAX_KEYS, `${counted.evictions} evictions for ${SPRAY} keys in ${MAX_KEYS} places`);

      // The page catches up within a snapshot or two, with a rate from successive snapshots.
      const line = await waitFor('the page to show the evictions and a rate', async () => {
        const now = await storeLine(page);
        return now.evictions >= counted.evictions && /^[\d.]+[kM]?\/s$/.test(now.rate) && now.rate !== '0/s' ? now : null;
      }, { timeout: 5000 });
      assert.ok(line.keys > 0 && line.keys <= MAX_KEYS, `the page shows ${line.keys} keys held, at most ${MAX_KEYS}`);
      assert.equal(line.maxKeys, MAX_KEYS);
      assert.match(line.text, new RegExp(`${line.keys} / ${MAX_KEYS} keys`));
      assert.match(line.text, new RegExp(`${line.evictions} evicted`));
      assert.ok(await page.locator('#store-line .store-fill[role=meter]').isVisible(), 'a fill bar');
      // Keys that still held state were evicted: the backend warns, and the page says it as sent.
      const shown = await bannerMatches(page, async () => (await api('GET', '/v1/levels')).body.store.warnings);
      assert.match(shown.join('\n'), new RegExp(`memory store at its bound of ${MAX_KEYS} keys`));
      await page.click('#tab-rules');
      await page.locator('#tab-live .tab-warning').waitFor();
      await page.click('#tab-live');
      await shot(page, '12-live-store-memory-evicting');

      // Once the spray is over the rate falls back to nothing, the count stays.
      const quiet = await waitFor('the eviction rate to fall to 0/s', async () => {
        const now = await storeLine(page);
        return now.rate === '0/s' ? now : null;
      }, { timeout: 10000 });
      assert.ok(quiet.evictions >= line.evictions);
      await page.context().close();
    } finally {
      stack.stop();
    }
  });

  test('Redis with noeviction: the banner says so as the backend does, and goes once Redis is fixed', async () => {
    const stack = await startStack({
      bin, dashboardDir, logDir, name: 'noeviction', redis: ['--maxmemory', '20mb', '--maxmemory-policy', 'noeviction'],
    });
    try {
      const api = adminApi(stack);
      const page = await livePage(stack);
      const line = await storeLine(page);
      assert.equal(line.kind, 'redis');
      assert.equal(line.keys, null, 'Redis has no key bound of sluice\'s');
      assert.ok(await page.locator('#store-line .store-keys').isHidden());
      const readyz = async () => (await api('GET', '/readyz')).body.warnings;
      const shown = await bannerMatches(page, readyz);
      assert.ok(shown.some((w) => /maxmemory-policy is noeviction/.test(w)), shown.join('\n'));
      // Seen from the rules view too.
      await page.click('#tab-rules');
      await page.locator('#tab-live .tab-warning').waitFor();
      await shot(page, '13-rules-store-warning');
      await page.click('#tab-live');
      await shot(page, '14-live-store-warning-noeviction');
      const phone = await page.context().newPage();
      await phone.setViewportSize({ width: 390, height: 844 });
      await phone.goto(stack.admin + '/');
      await phone.click('#tab-live');
      await phone.locator('#store-warnings').waitFor();
      assert.ok(await phone.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'the banner fits 390 wide');
      await shot(phone, '15-phone-live-store-warning');
      await phone.close();

      // The operator applies the recommended policy: the backend reads it again (every 10 s) and
      // the banner and the tab's mark go, without a reload.
      assert.equal(await redisCommand(stack.redisPort, 'CONFIG', 'SET', 'maxmemory-policy', 'volatile-lfu'), '+OK');
      await page.locator('#store-warnings').waitFor({ state: 'hidden', timeout: 20000 });
      assert.deepEqual(await readyz(), []);
      assert.ok(await page.locator('#tab-live .tab-warning').isHidden());
      await page.context().close();
    } finally {
      stack.stop();
    }
  });

  test('no page errors or dialogs in the store tests', () => {
    assert.deepEqual(pageErrors, []);
    assert.deepEqual(dialogs, []);
  });
});

async function shot(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}
