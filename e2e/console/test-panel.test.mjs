// The Test tab: a dry run of a served hook on a sample event, shown as decision, output and,
// for a rewrite, a diff.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { checkPage, clickAndWait, env, launch, visit, withSignedIn } from './lib.mjs';

// A command hook that blocks (`echo REASON >&2; exit 2`) shell calls whose command holds
// CONSOLE_BLOCK_COMMAND, and one that rewrites those holding CONSOLE_REWRITE_COMMAND.
const BLOCK = env('CONSOLE_HOOK_BLOCK');
const BLOCK_COMMAND = env('CONSOLE_BLOCK_COMMAND');
const BLOCK_REASON = env('CONSOLE_BLOCK_REASON');
const REWRITE = env('CONSOLE_HOOK_REWRITE');
const REWRITE_COMMAND = env('CONSOLE_REWRITE_COMMAND');
const REWRITTEN_COMMAND = env('CONSOLE_REWRITTEN_COMMAND');

let browser;
before(async () => {
  browser = await launch();
});
after(() => browser?.close());

/** Opens the hook's Test tab, puts `event` (or the pre-filled one) in, runs it. */
async function runTest(page, hook, event) {
  const response = await visit(page, `/ui/hooks/${hook}/test`);
  assert.equal(response.status(), 200);
  const tabs = page.locator('nav[aria-label="Hook"]');
  assert.equal((await tabs.locator('[aria-current="page"]').textContent()).trim(), 'Test');
  const form = page.locator(`form[method="post"][action="/ui/hooks/${hook}/test"]`);
  const sample = form.getByLabel('Sample event (JSON)');
  const prefilled = await sample.inputValue();
  assert.doesNotThrow(() => JSON.parse(prefilled), `pre-filled sample is JSON: ${prefilled}`);
  if (event !== undefined) await sample.fill(typeof event === 'string' ? event : JSON.stringify(event, null, 2));
  assert.equal(await form.locator('input[type="checkbox"][name="force"]#force').count(), 1);
  return clickAndWait(page, form.getByRole('button', { name: 'Run test' }));
}

const shell = (command) => ({ event: 'pre_tool_use', tool_name: 'Bash', tool_input: { command } });
const text = async (page, id) => (await page.getByTestId(id).textContent()).trim();

test('a command hook that blocks: decision block, its stderr shown', () =>
  withSignedIn(browser, async (page) => {
    const response = await runTest(page, BLOCK, shell(`${BLOCK_COMMAND} now`));
    assert.equal(response.status(), 200);
    const result = page.getByTestId('test-result');
    await result.waitFor();
    assert.equal(await text(page, 'decision'), 'block');
    assert.match(await text(page, 'stderr'), new RegExp(BLOCK_REASON));
    for (const id of ['verdict', 'duration', 'reason', 'stdout', 'status-code', 'matcher', 'cel']) {
      assert.equal(await result.getByTestId(id).count(), 1, `data-testid=${id}`);
    }
    await checkPage(page, 'test-block');
  }));

test('a command hook that rewrites: the diff, old lines .del, new lines .add', () =>
  withSignedIn(browser, async (page) => {
    const response = await runTest(page, REWRITE, shell(`${REWRITE_COMMAND} now`));
    assert.equal(response.status(), 200);
    assert.equal(await text(page, 'decision'), 'allow');
    const diff = page.locator('div[data-testid="diff"]');
    await diff.waitFor();
    const dels = await diff.locator('pre[data-testid="diff-before"] span.del').allTextContents();
    const adds = await diff.locator('pre[data-testid="diff-after"] span.add').allTextContents();
    assert.ok(dels.some((l) => l.includes(`${REWRITE_COMMAND} now`)), `removed lines ${JSON.stringify(dels)}`);
    assert.ok(adds.some((l) => l.includes(REWRITTEN_COMMAND)), `added lines ${JSON.stringify(adds)}`);
    await checkPage(page, 'test-rewrite');
  }));

test('a sample that is not JSON: 400, an alert naming the event field', () =>
  withSignedIn(browser, async (page) => {
    const response = await runTest(page, BLOCK, '{"event": "pre_tool_use",');
    assert.equal(response.status(), 400);
    assert.equal(await page.locator('p[role="alert"][data-field^="event"]').count(), 1);
    await checkPage(page, 'test-invalid');
  }));
