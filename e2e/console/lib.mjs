// What every console test shares: the inputs (environment), the browser, signing in, and the
// checks run on every page (axe, requests to other origins, screenshots). See README.md.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';

/** An input the driver must give; a missing one fails at once, naming it. */
export function env(name, fallback) {
  const v = process.env[name] || fallback;
  assert.ok(v, `${name} is not set (e2e/console/README.md lists the inputs)`);
  return v;
}

export const URL_BASE = env('CONSOLE_URL').replace(/\/$/, '');
export const ORIGIN = new URL(URL_BASE).origin;
export const TOKEN = env('CONSOLE_TOKEN');
// The token the tests read `GET /v1/executions` with. Standalone: the admin token. In a
// cluster the console's token is for the API server's audience, which the dispatcher's own
// routes refuse: the driver gives one of the same person for the dispatcher's audience.
export const API_TOKEN = env('CONSOLE_API_TOKEN', TOKEN);
export const SCREENSHOT_DIR = env('SCREENSHOT_DIR');
const CHROMIUM = env('CHROMIUM', '/usr/bin/chromium');

// playwright-core and @axe-core/playwright come from the prefix `scripts/install-deps.sh
// browser` installs into (ES modules ignore NODE_PATH, so they are required from there).
function toolsDir() {
  if (process.env.BROWSER_TOOLS_DIR) return process.env.BROWSER_TOOLS_DIR;
  const script = readFileSync(new URL('../../scripts/install-deps.sh', import.meta.url), 'utf8');
  const version = script.match(/^PLAYWRIGHT_VERSION=(\S+)$/m)[1];
  const root = process.env.AGENTHOOKS_TOOLS_DIR || join(homedir(), '.cache/agenthooks/tools');
  return join(root, `browser-${version}`);
}
const require = createRequire(join(toolsDir(), 'package.json'));
const { chromium } = require('playwright-core');
const AxeBuilder = require('@axe-core/playwright').default;

/** Debian's chromium, headless, as root, with nothing fetched in the background. */
export function launch() {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
  });
}

/**
 * Runs `fn(page)` in a fresh browser context (no cookies: not signed in), then fails if the
 * page asked any origin but the console's (`origin`, default CONSOLE_URL's), threw, or broke
 * the Content-Security-Policy.
 */
export async function withPage(browser, fn, contextOptions = {}, origin = ORIGIN) {
  const context = await browser.newContext(contextOptions);
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  const problems = [];
  page.on('request', (r) => {
    const url = r.url();
    if (url !== 'about:blank' && !url.startsWith(`${origin}/`)) problems.push(`request to ${url}`);
  });
  page.on('pageerror', (e) => problems.push(`script error: ${e.message}`));
  page.on('console', (m) => {
    if (/Content[- ]Security[- ]Policy/i.test(m.text())) problems.push(`CSP: ${m.text()}`);
  });
  try {
    await fn(page);
  } finally {
    await context.close();
  }
  assert.deepEqual(problems, [], 'the console stays on its own origin, without errors');
}

/**
 * Same as `withPage`, signed in with `token` (default: CONSOLE_TOKEN) first, on the console
 * at `base` (default: CONSOLE_URL).
 */
export function withSignedIn(browser, fn, contextOptions = {}, token = TOKEN, base = URL_BASE) {
  return withPage(
    browser,
    async (page) => {
      const response = await signIn(page, token, base);
      assert.equal(response.status(), 200, `signed in at ${base}`);
      await fn(page);
    },
    contextOptions,
    new URL(base).origin,
  );
}

/** Signs in through the form (of the console at `base`); returns the response of the page it leads to. */
export async function signIn(page, token, base = URL_BASE) {
  await page.goto(`${base}/ui/sign-in`);
  await page.locator('textarea#token').fill(token);
  return clickAndWait(page, page.getByRole('button', { name: 'Sign in' }));
}

/** Navigates to `path` (under CONSOLE_URL); returns the response. */
export function visit(page, path) {
  return page.goto(`${URL_BASE}${path}`);
}

/**
 * Clicks `locator` (a link or a submit button) and waits for the page it leads to; returns
 * that page's response (after redirects). waitForNavigation is deprecated as racy, which it
 * is not when the wait starts before the click, as here.
 */
export async function clickAndWait(page, locator) {
  const [response] = await Promise.all([page.waitForNavigation(), locator.click()]);
  return response;
}

/** The path (and query) the page is at. */
export function pathOf(page) {
  const u = new URL(page.url());
  return u.pathname + u.search;
}

/** axe on the page as it is: fails on any serious or critical violation, listing them. */
export async function checkAxe(page, what) {
  const { violations } = await new AxeBuilder({ page }).analyze();
  const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(
    bad.map((v) => `${v.impact} ${v.id}: ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`),
    [],
    `axe on ${what}`,
  );
}

/** The whole page into SCREENSHOT_DIR/<name>.png. */
export function screenshot(page, name) {
  return page.screenshot({ path: join(SCREENSHOT_DIR, `${name}.png`), fullPage: true });
}

/** The axe check and the screenshot every page gets. */
export async function checkPage(page, name) {
  await checkAxe(page, name);
  await screenshot(page, name);
}

/** Every signed-in page: header with whoami and sign-out, nav, main, h1, skip link. */
export async function checkFrame(page) {
  await page.locator('header [data-testid="whoami"]').waitFor();
  assert.notEqual((await page.getByTestId('whoami').textContent()).trim(), '');
  assert.equal(await page.locator('form[action="/ui/sign-out"]').count(), 1);
  assert.equal(await page.locator('a[href="/ui/hooks"]').count() > 0, true, 'nav link Hooks');
  assert.equal(await page.locator('a[href="/ui/hooks/new"]').count() > 0, true, 'nav link New hook');
  assert.equal(await page.locator('nav a[href="/ui/approvals"]').count(), 1, 'nav link Approvals');
  assert.equal(await page.locator('main#main').count(), 1);
  assert.equal(await page.locator('h1').count() > 0, true);
  assert.equal(await page.locator('a[href="#main"]').count(), 1, 'skip link');
}

/** `POST /v1/dispatch` with the caller token (CONSOLE_CALLER_TOKEN); returns the JSON body. */
export async function dispatch(event) {
  const r = await fetch(`${URL_BASE}/v1/dispatch`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${env('CONSOLE_CALLER_TOKEN')}`,
      'content-type': 'application/json',
    },
    body: JSON.stringify(event),
  });
  const body = await r.text();
  assert.equal(r.status, 200, `POST /v1/dispatch: ${body}`);
  return JSON.parse(body);
}

/** A shell call (`pre_tool_use`, `Bash`) running `command`, in `session`. */
export function shellEvent(command, session) {
  return { event: 'pre_tool_use', session_id: session, tool_name: 'Bash', tool_input: { command } };
}

/**
 * Every audit row of `hook` (NS/NAME), newest first, through `GET /v1/executions` with
 * API_TOKEN, following `nextCursor`.
 */
export async function executions(hook) {
  const rows = [];
  let cursor = '';
  do {
    const q = new URLSearchParams({ hook, limit: '500' });
    if (cursor) q.set('cursor', cursor);
    const r = await fetch(`${URL_BASE}/v1/executions?${q}`, {
      headers: { authorization: `Bearer ${API_TOKEN}` },
    });
    const body = await r.text();
    assert.equal(r.status, 200, `GET /v1/executions: ${body}`);
    const page = JSON.parse(body);
    rows.push(...page.executions);
    cursor = page.nextCursor || '';
  } while (cursor);
  return rows;
}

/** Waits (10 s at most) until `hook` has at least `n` audit rows (written behind the answer). */
export async function waitRows(hook, n) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const rows = await executions(hook);
    if (rows.length >= n || Date.now() > deadline) {
      assert.ok(rows.length >= n, `${hook} has ${rows.length} audit rows, not ${n}`);
      return rows;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
