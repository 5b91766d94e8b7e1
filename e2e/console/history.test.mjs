// The History tab: pages of audit rows, newest first, that neither repeat nor skip a row when
// new rows arrive between two page loads; a row leads to its execution.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import {
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

// A hook that runs (and allows) on every shell call: one audit row per dispatch.
const HISTORY = env('CONSOLE_HOOK_HISTORY');
// More than a page of the console's history (its page size is the console's choice).
const EVENTS = Number(env('CONSOLE_HISTORY_EVENTS', '120'));
const SESSION = `console-history-${randomUUID()}`;

let browser;
before(async () => {
  browser = await launch();
});
after(() => browser?.close());

/** Sends `n` shell calls and waits for their rows. */
async function sendEvents(n, label) {
  const had = (await executions(HISTORY)).length;
  for (let i = 0; i < n; i++) await dispatch(shellEvent(`echo ${label} ${i}`, SESSION));
  return waitRows(HISTORY, had + n);
}

/** The `data-execution` ids of the history table, in page order. */
function rowIds(page) {
  return page.locator('table[data-testid="history"] tr[data-execution]').evaluateAll((trs) =>
    trs.map((tr) => tr.dataset.execution),
  );
}

test('pages neither repeat nor skip rows while new rows arrive', () =>
  withSignedIn(browser, async (page) => {
    await sendEvents(EVENTS, 'history');
    const response = await visit(page, `/ui/hooks/${HISTORY}/history`);
    assert.equal(response.status(), 200);
    await checkFrame(page);
    const tabs = page.locator('nav[aria-label="Hook"]');
    assert.equal((await tabs.locator('[aria-current="page"]').textContent()).trim(), 'History');
    const first = await rowIds(page);
    assert.ok(first.length > 0, 'page 1 has rows');
    const next = page.locator('a[rel="next"][data-testid="next-page"]');
    assert.equal(await next.count(), 1, `a next page after ${first.length} of ${EVENTS}+ rows`);
    await checkPage(page, 'history');

    // New rows between the two page loads.
    await sendEvents(5, 'between');
    const r2 = await clickAndWait(page, next);
    assert.equal(r2.status(), 200);
    const second = await rowIds(page);
    assert.ok(second.length > 0, 'page 2 has rows');
    assert.deepEqual(first.filter((id) => second.includes(id)), [], 'page 2 repeats none of page 1');
    await checkPage(page, 'history-page-2');

    // Against every row of the hook, newest first (the API): each page is a run of
    // consecutive rows, and page 2 starts right after page 1 ends.
    const all = (await executions(HISTORY)).map((r) => String(r.id));
    const at = (id) => all.indexOf(id);
    const start = at(first[0]);
    assert.ok(start >= 0, `page 1's first row ${first[0]} is an audit row of ${HISTORY}`);
    assert.deepEqual(first, all.slice(start, start + first.length), 'page 1: consecutive rows, newest first');
    assert.deepEqual(
      second,
      all.slice(start + first.length, start + first.length + second.length),
      'page 2: the rows right after page 1, none skipped',
    );
  }));

test('a row leads to its execution', () =>
  withSignedIn(browser, async (page) => {
    await sendEvents(1, 'detail');
    await visit(page, `/ui/hooks/${HISTORY}/history`);
    const [id] = await rowIds(page);
    const link = page.locator(`tr[data-execution="${id}"] a[href="/ui/executions/${id}"]`).first();
    const response = await clickAndWait(page, link);
    assert.equal(response.status(), 200);
    await page.locator('dl[data-testid="execution"]').waitFor();
    await checkFrame(page);
    await checkPage(page, 'execution');
  }));
