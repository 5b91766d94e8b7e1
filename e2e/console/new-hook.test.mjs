// The New hook form: validation errors next to their inputs, the YAML of a valid hook, and
// apply (standalone: written into the hooks directory and served at once).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { URL_BASE, checkFrame, checkPage, clickAndWait, env, launch, pathOf, visit, withSignedIn } from './lib.mjs';

// The master namespace: the one where a hook may be global.
const NAMESPACE = env('CONSOLE_NAMESPACE', 'agenthooks-system');

let browser;
before(async () => {
  browser = await launch();
});
after(() => browser?.close());

/** A command hook at `stop` (so it runs for none of the other tests' events). */
const hook = (name, timeoutMs) => ({
  namespace: NAMESPACE,
  name,
  event: 'stop',
  scope: 'global',
  priority: '10',
  timeoutMs: String(timeoutMs),
  handler: 'command',
  command: 'cat >/dev/null; exit 0',
});

/** Sets each named field, whatever its control: select, radio, checkbox or text. */
async function fill(page, values) {
  const form = page.locator('form:has(button[name="action"][value="validate"])');
  for (const [name, value] of Object.entries(values)) {
    const control = form.locator(`[name="${name}"]`);
    const first = control.first();
    const tag = await first.evaluate((el) => el.tagName.toLowerCase());
    const type = await first.getAttribute('type');
    if (tag === 'select') await first.selectOption(value);
    else if (type === 'radio') await form.locator(`input[type="radio"][name="${name}"][value="${value}"]`).check();
    else if (type === 'checkbox') await first.setChecked(Boolean(value));
    else await first.fill(value);
  }
  return form;
}

const press = (page, form, action) => clickAndWait(page, form.locator(`button[name="action"][value="${action}"]`));

test('an invalid value is refused next to its input', () =>
  withSignedIn(browser, async (page) => {
    const response = await visit(page, '/ui/hooks/new');
    assert.equal(response.status(), 200);
    await checkFrame(page);
    for (const action of ['validate', 'apply', 'download']) {
      assert.equal(await page.locator(`button[name="action"][value="${action}"]`).count(), 1, action);
    }
    // The Lite edition runs command hooks: the command handler is offered.
    assert.equal(await page.locator('input[type="radio"][name="handler"][value="command"]').isDisabled(), false);
    await checkPage(page, 'new-hook');
    const form = await fill(page, hook(`console-bad-${randomUUID().slice(0, 8)}`, 20000));
    const refused = await press(page, form, 'validate');
    assert.equal(refused.status(), 400);
    const error = page.locator('p[role="alert"].field-error[data-field="spec.timeoutMs"]');
    assert.equal(await error.count(), 1);
    assert.notEqual((await error.textContent()).trim(), '');
    assert.equal(await page.locator('[name="timeoutMs"]').getAttribute('aria-invalid'), 'true');
    await checkPage(page, 'new-hook-invalid');
  }));

test('a valid hook validates to its YAML, and apply serves it', () =>
  withSignedIn(browser, async (page) => {
    const name = `console-new-${randomUUID().slice(0, 8)}`;
    await visit(page, '/ui/hooks/new');
    const form = await fill(page, hook(name, 2000));
    const validated = await press(page, form, 'validate');
    assert.equal(validated.status(), 200);
    const yaml = await page.locator('pre[data-testid="yaml"]').textContent();
    for (const line of [/kind: AgentHook/, new RegExp(`name: ${name}`), /timeoutMs: 2000/]) {
      assert.match(yaml, line);
    }
    assert.equal(await page.locator('p.field-error').count(), 0);
    await checkPage(page, 'new-hook-valid');

    const again = await fill(page, hook(name, 2000));
    const applied = await press(page, again, 'apply');
    assert.equal(applied.status(), 200);
    assert.equal(new URL(page.url()).pathname, `/ui/hooks/${NAMESPACE}/${name}`);
    const served = (await (await fetch(`${URL_BASE}/v1/hooks`)).json()).hooks.map((h) => h.hook);
    assert.ok(served.includes(`${NAMESPACE}/${name}`), `served at once: ${served}`);
  }));

test('live validation: a bad value is named while the form is filled in, before any submit', () =>
  withSignedIn(browser, async (page) => {
    await visit(page, '/ui/hooks/new');
    await fill(page, hook(`console-live-${randomUUID().slice(0, 8)}`, 20000));
    const live = page.locator('#live-validation p.error[data-field="spec.timeoutMs"]');
    await live.waitFor();
    assert.match(await live.textContent(), /10000/);
    await page.locator('form.hook-form [name="timeoutMs"]').fill('3000');
    await page.locator('#live-validation p.ok').waitFor();
    assert.equal(pathOf(page), '/ui/hooks/new', 'nothing was submitted');
    await checkPage(page, 'new-hook-live');
  }));
