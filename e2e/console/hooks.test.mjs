// The hooks list (filters, a bad filter, a narrow screen), one hook's overview, and the
// Approvals page, which standalone says approvals need a cluster.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import {
  URL_BASE,
  checkFrame,
  checkPage,
  clickAndWait,
  dispatch,
  env,
  executions,
  launch,
  shellEvent,
  visit,
  waitRows,
  withSignedIn,
} from './lib.mjs';

const HISTORY = env('CONSOLE_HOOK_HISTORY');

let browser;
before(async () => {
  browser = await launch();
});
after(() => browser?.close());

/** What the dispatcher serves (`GET /v1/hooks`, no credential): [{hook, event, handler}]. */
async function served() {
  const r = await fetch(`${URL_BASE}/v1/hooks`);
  assert.equal(r.status, 200);
  return (await r.json()).hooks;
}

/** The `data-hook` of every row of the hooks table, sorted. */
async function listed(page) {
  const rows = page.locator('table[data-testid="hooks"] tr[data-hook]');
  return (await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.hook))).sort();
}

/** Sets the filter form's selects (others to "" = all) and submits it. */
async function filter(page, values) {
  const form = page.getByTestId('filters');
  for (const name of ['namespace', 'event', 'handler', 'state']) {
    await form.locator(`select[name="${name}"]`).selectOption(values[name] ?? '');
  }
  const response = await clickAndWait(page, form.getByRole('button', { name: 'Filter' }));
  assert.equal(response.status(), 200);
}

test('the list shows every served hook, with its cells and badges', () =>
  withSignedIn(browser, async (page) => {
    await visit(page, '/ui/hooks');
    await checkFrame(page);
    const hooks = await served();
    assert.ok(hooks.length >= 2, 'the driver serves hooks');
    const shown = await listed(page);
    for (const h of hooks) assert.ok(shown.includes(h.hook), `row for ${h.hook} in ${shown}`);
    for (const h of hooks) {
      const row = page.locator(`tr[data-hook="${h.hook}"]`);
      for (const col of ['hook', 'event', 'scope', 'handler', 'priority', 'accepted', 'ready', 'circuit', 'executions']) {
        assert.equal(await row.locator(`[data-col="${col}"]`).count(), 1, `${h.hook}: cell ${col}`);
      }
      const [ns, name] = h.hook.split('/');
      assert.equal(await row.locator(`[data-col="hook"] a[href="/ui/hooks/${ns}/${name}"]`).count(), 1);
      for (const col of ['accepted', 'ready', 'circuit']) {
        const status = await row.locator(`[data-col="${col}"] span.badge`).getAttribute('data-status');
        assert.match(status, /^(True|False|Unknown)$/, `${h.hook}: ${col} badge`);
      }
      assert.match(await row.locator('[data-col="circuit"]').textContent(), /Closed/, `${h.hook}: circuit`);
      assert.match(await row.locator('[data-col="event"]').textContent(), new RegExp(h.event));
      assert.match(await row.locator('[data-col="handler"]').textContent(), new RegExp(h.handler));
    }
    await checkPage(page, 'hooks');
  }));

test('filtering by event and by handler narrows the list to the matching hooks', () =>
  withSignedIn(browser, async (page) => {
    await visit(page, '/ui/hooks');
    const hooks = await served();
    const events = [...new Set(hooks.map((h) => h.event))];
    const handlers = [...new Set(hooks.map((h) => h.handler))];
    assert.ok(events.length >= 2 && handlers.length >= 2, 'the driver serves hooks of two events and two handlers');
    for (const event of events) {
      await filter(page, { event });
      assert.equal(new URL(page.url()).searchParams.get('event'), event);
      const want = hooks.filter((h) => h.event === event).map((h) => h.hook).sort();
      assert.deepEqual(await listed(page), want, `event=${event}`);
    }
    for (const handler of handlers) {
      await filter(page, { handler });
      const want = hooks.filter((h) => h.handler === handler).map((h) => h.hook).sort();
      assert.deepEqual(await listed(page), want, `handler=${handler}`);
    }
    await checkPage(page, 'hooks-filtered');
  }));

test('a bad filter value in the URL: 400, an alert naming the field', () =>
  withSignedIn(browser, async (page) => {
    for (const field of ['event', 'handler', 'state']) {
      const response = await visit(page, `/ui/hooks?${field}=no-such-${field}`);
      assert.equal(response.status(), 400, field);
      assert.equal(await page.locator(`p[role="alert"][data-field="${field}"]`).count(), 1, field);
    }
    await checkPage(page, 'hooks-bad-filter');
  }));

test('a narrow screen (375×700): no horizontal scroll on the list', () =>
  withSignedIn(
    browser,
    async (page) => {
      await visit(page, '/ui/hooks');
      await page.getByTestId('hooks').waitFor();
      const { scroll, client } = await page.evaluate(() => ({
        scroll: document.documentElement.scrollWidth,
        client: document.documentElement.clientWidth,
      }));
      assert.ok(scroll <= client, `page is ${scroll}px wide in a ${client}px viewport`);
      await checkPage(page, 'hooks-narrow');
    },
    { viewport: { width: 375, height: 700 } },
  ));

test('overview: the fields, the tabs and the decisions chart with its table', async () => {
  // One row at least for the chart (written behind the answer).
  const before = (await executions(HISTORY)).length;
  await dispatch(shellEvent('echo overview', `console-overview-${randomUUID()}`));
  await waitRows(HISTORY, before + 1);
  await withSignedIn(browser, async (page) => {
    const response = await visit(page, `/ui/hooks/${HISTORY}`);
    assert.equal(response.status(), 200);
    await checkFrame(page);
    const tabs = page.locator('nav[aria-label="Hook"]');
    for (const tab of ['Overview', 'Test', 'History']) {
      assert.equal(await tabs.getByRole('link', { name: tab }).count(), 1, `tab ${tab}`);
    }
    assert.equal((await tabs.locator('[aria-current="page"]').textContent()).trim(), 'Overview');
    const overview = page.locator('dl[data-testid="overview"]');
    const labels = (await overview.locator('dt').allTextContents()).map((t) => t.trim());
    for (const label of ['Event', 'Handler', 'Scope', 'Priority', 'Matcher', 'Tool kinds', 'ifExpr', 'Timeout',
      'On timeout', 'Breaker', 'Last execution']) {
      assert.ok(labels.includes(label), `<dt>${label}</dt> in ${labels}`);
    }
    const hook = (await served()).find((h) => h.hook === HISTORY);
    const event = overview.locator('dt', { hasText: /^\s*Event\s*$/ }).locator('xpath=following-sibling::dd[1]');
    assert.match(await event.textContent(), new RegExp(hook.event));
    const chart = page.locator('svg[data-testid="decisions-chart"][role="img"]');
    await chart.waitFor();
    const labelledBy = await chart.getAttribute('aria-labelledby');
    assert.ok(labelledBy, 'the chart is labelled');
    for (const id of labelledBy.split(/\s+/)) {
      assert.notEqual((await page.locator(`[id="${id}"]`).textContent()).trim(), '', `label #${id}`);
    }
    assert.match(await page.getByTestId('decisions-table').textContent(), /allow/);
    await checkPage(page, 'overview');
  });
});

test('standalone, the Approvals page says approvals need a cluster, without an error', () =>
  withSignedIn(browser, async (page) => {
    await visit(page, '/ui/hooks');
    const response = await clickAndWait(page, page.locator('nav[aria-label="Main"]').getByRole('link', { name: 'Approvals' }));
    assert.equal(response.status(), 200);
    await checkFrame(page);
    const note = page.getByTestId('approvals-need-a-cluster');
    assert.match(await note.textContent(), /Approvals need a cluster/);
    assert.match(await note.textContent(), /docs\/approvals\.md/);
    assert.equal(await page.getByRole('alert').count(), 0, 'no error');
    await checkPage(page, 'approvals-standalone');
  }));
