// Sign-in: a wrong token is refused, the right one leads to the hooks list, a page visited
// without a session redirects to sign-in, and the form works with the keyboard alone.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  TOKEN,
  URL_BASE,
  checkFrame,
  checkPage,
  clickAndWait,
  launch,
  pathOf,
  signIn,
  visit,
  withPage,
} from './lib.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(() => browser?.close());

test('a wrong token: the sign-in page again, 401, with an alert', () =>
  withPage(browser, async (page) => {
    const response = await signIn(page, `${TOKEN}-wrong`);
    assert.equal(response.status(), 401);
    assert.equal(new URL(page.url()).pathname, '/ui/sign-in');
    const alert = page.locator('p[role="alert"]#sign-in-error');
    await alert.waitFor();
    assert.notEqual((await alert.textContent()).trim(), '');
    await checkPage(page, 'sign-in-error');
  }));

test('the right token: the hooks list, with a session cookie for /ui only', () =>
  withPage(browser, async (page) => {
    await visit(page, '/ui/sign-in');
    await checkPage(page, 'sign-in');
    const response = await signIn(page, TOKEN);
    assert.equal(response.status(), 200);
    assert.equal(new URL(page.url()).pathname, '/ui/hooks');
    await page.getByTestId('hooks').waitFor();
    await checkFrame(page);
    const cookie = (await page.context().cookies()).find((c) => c.name === 'agenthooks_console');
    assert.ok(cookie, 'cookie agenthooks_console');
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, 'Strict');
    assert.equal(cookie.path, '/ui');
  }));

test('without a session: 303 to sign-in, which says why', async () => {
  for (const path of ['/ui/', '/ui/hooks']) {
    const r = await fetch(`${URL_BASE}${path}`, { redirect: 'manual' });
    assert.equal(r.status, 303, `GET ${path}`);
    assert.match(r.headers.get('location'), /^(https?:\/\/[^/]+)?\/ui\/sign-in\b/, `GET ${path}`);
  }
  await withPage(browser, async (page) => {
    await visit(page, '/ui/hooks/new');
    assert.equal(new URL(page.url()).pathname, '/ui/sign-in');
    assert.equal(new URL(page.url()).searchParams.get('next'), '/ui/hooks/new');
    const reason = page.locator('p[role="status"]#sign-in-reason');
    await reason.waitFor();
    assert.notEqual((await reason.textContent()).trim(), '');
    await checkPage(page, 'sign-in-redirected');
  });
});

test('signing out ends the session', () =>
  withPage(browser, async (page) => {
    await signIn(page, TOKEN);
    await clickAndWait(page, page.locator('form[action="/ui/sign-out"]').getByRole('button', { name: 'Sign out' }));
    await visit(page, '/ui/hooks');
    assert.equal(new URL(page.url()).pathname, '/ui/sign-in', pathOf(page));
  }));

test('the sign-in form with the keyboard alone', () =>
  withPage(browser, async (page) => {
    await visit(page, '/ui/sign-in');
    const focused = () => page.evaluate(() => document.activeElement?.id || document.activeElement?.tagName);
    // Tab from the top of the page to the token field (skip link and other links first).
    for (let i = 0; i < 10 && (await focused()) !== 'token'; i++) await page.keyboard.press('Tab');
    assert.equal(await focused(), 'token', 'Tab reaches the token field');
    await page.keyboard.type(TOKEN);
    await page.keyboard.press('Tab');
    const onButton = await page.evaluate(
      () => document.activeElement?.matches('button[type="submit"]') && document.activeElement.textContent.trim(),
    );
    assert.equal(onButton, 'Sign in', 'Tab from the field reaches the Sign in button');
    await Promise.all([page.waitForURL((u) => u.pathname === '/ui/hooks'), page.keyboard.press('Enter')]);
  }));
