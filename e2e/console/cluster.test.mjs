// The console in a cluster (`--kubernetes-callers`; driven by e2e/tests/console_cluster.rs):
// people sign in with ServiceAccount tokens and see, test and change exactly what their RBAC
// lets them, with their own token. What the API server holds is read with kubectl (the
// harness's admin kubeconfig) to compare.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createSign, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import {
  API_TOKEN,
  checkFrame,
  checkPage,
  clickAndWait,
  dispatch,
  env,
  executions,
  launch,
  pathOf,
  signIn,
  visit,
  waitRows,
  withPage,
  withSignedIn,
} from './lib.mjs';

const MASTER = env('CONSOLE_NAMESPACE');
const TENANT_NS = env('CONSOLE_TENANT_NS');
// The tenant of TENANT_NS: its label agenthooks.io/tenant.
const TENANT = env('CONSOLE_TENANT');
const OTHER_NS = env('CONSOLE_OTHER_NS');
const NAMESPACES = [MASTER, TENANT_NS, OTHER_NS];
const USER = env('CONSOLE_USER');
const FLAKY = env('CONSOLE_HOOK_FLAKY');
const TENANT_HOOK = env('CONSOLE_HOOK_TENANT');
const OTHER_HOOK = env('CONSOLE_HOOK_OTHER');
const TENANT_TOKEN = env('CONSOLE_TENANT_TOKEN');
const TENANT_USER = env('CONSOLE_TENANT_USER');
const HOOK_SECRET = env('CONSOLE_HOOK_SECRET');
const REVOKE_TOKEN = env('CONSOLE_REVOKE_TOKEN');
const REVOKE_SA = env('CONSOLE_REVOKE_SA');
const STANDARD_URL = env('CONSOLE_STANDARD_URL').replace(/\/$/, '');
const EXPIRING_SA = env('CONSOLE_EXPIRING_SA');
// The control plane's ServiceAccount signing key ('' on an external cluster).
const SIGNING_KEY = process.env.CONSOLE_SIGNING_KEY ?? '';
const KUBECTL = env('CONSOLE_KUBECTL');
const KUBECONFIG = env('CONSOLE_KUBECONFIG');
// A pending HookApproval (`ns/id`) of APPROVAL_HOOK in TENANT_NS, made by APPROVAL_EVENT
// (sent with CONSOLE_CALLER_TOKEN); TENANT_TOKEN's person may approve it, the
// non-approver may read and patch it but not approve.
const APPROVAL = env('CONSOLE_APPROVAL');
const APPROVAL_HOOK = env('CONSOLE_APPROVAL_HOOK');
const APPROVAL_EVENT = JSON.parse(env('CONSOLE_APPROVAL_EVENT'));
const APPROVAL_REASON = env('CONSOLE_APPROVAL_REASON');
const NON_APPROVER_TOKEN = env('CONSOLE_NON_APPROVER_TOKEN');
const NON_APPROVER_USER = env('CONSOLE_NON_APPROVER_USER');

let browser;
before(async () => {
  browser = await launch();
});
after(() => browser?.close());

/** `kubectl ARGS -o json` as the harness's admin. */
function kubectl(...args) {
  return JSON.parse(execFileSync(KUBECTL, ['--kubeconfig', KUBECONFIG, ...args, '-o', 'json'], { encoding: 'utf8' }));
}

/** The AgentHooks of `ns` as the API server holds them. */
const agentHooks = (ns) => kubectl('get', 'agenthooks.agenthooks.io', '-n', ns).items;
const condition = (obj, type) => (obj.status?.conditions ?? []).find((c) => c.type === type);
const keyOf = (h) => `${h.metadata.namespace}/${h.metadata.name}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * A token of ServiceAccount EXPIRING_SA (`ns/name/uid`) signed with SIGNING_KEY as the API
 * server signs them (issuer and audience those of CONSOLE_TOKEN, a `kubectl create token`),
 * expiring `seconds` from now: the API server's own TokenRequest gives 10 minutes at least.
 */
function expiringToken(seconds) {
  const [ns, name, uid] = EXPIRING_SA.split('/');
  const part = (s) => JSON.parse(Buffer.from(s, 'base64url').toString());
  const like = part(env('CONSOLE_TOKEN').split('.')[1]);
  const now = Math.floor(Date.now() / 1000);
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const input = `${b64({ alg: 'RS256', typ: 'JWT' })}.${b64({
    aud: like.aud,
    iss: like.iss,
    exp: now + seconds,
    iat: now - 5,
    nbf: now - 5,
    sub: `system:serviceaccount:${ns}:${name}`,
    'kubernetes.io': { namespace: ns, serviceaccount: { name, uid } },
  })}`;
  const signature = createSign('RSA-SHA256').update(input).sign(readFileSync(SIGNING_KEY)).toString('base64url');
  return { token: `${input}.${signature}`, exp: now + seconds };
}

/** The `data-hook` of every row of the hooks table, sorted. */
async function listed(page) {
  const rows = page.locator('table[data-testid="hooks"] tr[data-hook]');
  return (await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.hook))).sort();
}

/** Of `keys`, those in this test's namespaces (the shared API server holds other tests' hooks). */
const ours = (keys) => keys.filter((k) => NAMESPACES.includes(k.split('/')[0])).sort();

/** Sets the filter form's selects (others to "" = all) and submits it. */
async function filter(page, values) {
  const form = page.getByTestId('filters');
  for (const name of ['namespace', 'event', 'handler', 'state']) {
    await form.locator(`select[name="${name}"]`).selectOption(values[name] ?? '');
  }
  const response = await clickAndWait(page, form.getByRole('button', { name: 'Filter' }));
  assert.equal(response.status(), 200);
}

/** Sets each named field of the new-hook form, whatever its control. */
async function fill(page, values) {
  const form = page.locator('form:has(button[name="action"][value="validate"])');
  for (const [name, value] of Object.entries(values)) {
    const first = form.locator(`[name="${name}"]`).first();
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

/** An http hook of `ns` on `stop` (never runs for the other tests' events). */
const httpHook = (ns, name, extra = {}) => ({
  namespace: ns,
  name,
  event: 'stop',
  scope: 'tenant',
  priority: '3',
  timeoutMs: '2000',
  handler: 'http',
  httpUrl: 'https://policy.example/console-cluster',
  ...extra,
});

/** The badge of `col` in the row of `key`: {status, text, title}. */
async function badge(page, key, col) {
  const b = page.locator(`tr[data-hook="${key}"] [data-col="${col}"] span.badge`);
  return {
    status: await b.getAttribute('data-status'),
    text: (await b.textContent()).trim(),
    title: await b.getAttribute('title'),
  };
}

test('the platform person: every hook, Accepted and Ready as the operator set them, and the budgets', () =>
  withSignedIn(browser, async (page) => {
    const response = await visit(page, '/ui/hooks');
    assert.equal(response.status(), 200);
    await checkFrame(page);
    assert.equal((await page.getByTestId('whoami').textContent()).trim(), USER);
    const hooks = NAMESPACES.flatMap(agentHooks);
    assert.ok(hooks.length >= 8, `the driver's hooks: ${hooks.map(keyOf)}`);
    assert.deepEqual(ours(await listed(page)), hooks.map(keyOf).sort(), 'exactly the hooks of the API server');
    for (const h of hooks) {
      for (const [col, type] of [['accepted', 'Accepted'], ['ready', 'Ready']]) {
        const c = condition(h, type);
        assert.ok(c, `${keyOf(h)} has ${type}`);
        const shown = await badge(page, keyOf(h), col);
        assert.equal(shown.status, c.status, `${keyOf(h)} ${type}`);
        assert.ok(shown.text.startsWith(c.reason), `${keyOf(h)} ${type}: ${shown.text} is ${c.reason}`);
        assert.equal(shown.title, c.message ?? '', `${keyOf(h)} ${type} message`);
      }
      assert.equal((await badge(page, keyOf(h), 'accepted')).status, 'True', `${keyOf(h)} accepted`);
    }
    // Budgets: both tenants' (A's by its label, B's by its name), with the state the
    // operator set.
    for (const [ns, tenant] of [[TENANT_NS, TENANT], [OTHER_NS, OTHER_NS]]) {
      for (const b of kubectl('get', 'tenanthookbudgets', '-n', ns).items) {
        const row = page.locator(`tr[data-budget="${ns}/${b.metadata.name}"]`);
        assert.equal(await row.count(), 1, `budget ${ns}/${b.metadata.name}`);
        assert.equal((await row.locator('[data-col="tenant"]').textContent()).trim(), tenant, `budget ${ns}/${b.metadata.name}`);
        assert.equal((await row.locator('[data-col="state"]').textContent()).trim(), b.status.state);
      }
    }
    await checkPage(page, 'cluster-hooks');
  }));

test('filters: by namespace, event, handler and state', () =>
  withSignedIn(browser, async (page) => {
    await visit(page, '/ui/hooks');
    const hooks = NAMESPACES.flatMap(agentHooks);
    const want = (pred) => hooks.filter(pred).map(keyOf).sort();
    await filter(page, { namespace: TENANT_NS });
    assert.deepEqual(await listed(page), want((h) => h.metadata.namespace === TENANT_NS), 'namespace');
    await filter(page, { event: 'post_tool_use' });
    assert.deepEqual(ours(await listed(page)), want((h) => h.spec.event === 'post_tool_use'), 'event');
    await filter(page, { handler: 'command' });
    assert.deepEqual(ours(await listed(page)), want((h) => h.spec.handler.type === 'command'), 'handler');
    await filter(page, { namespace: MASTER, handler: 'http', event: 'pre_tool_use' });
    assert.deepEqual(
      await listed(page),
      want((h) => h.metadata.namespace === MASTER && h.spec.handler.type === 'http' && h.spec.event === 'pre_tool_use'),
      'namespace, handler and event at once',
    );
    await filter(page, { state: 'circuit-open' });
    assert.deepEqual(
      ours(await listed(page)),
      want((h) => condition(h, 'CircuitOpen')?.status === 'True'),
      'state=circuit-open',
    );
    assert.ok((await listed(page)).includes(FLAKY), 'the failing hook is circuit-open');
    // Not ready: the command hooks, which the Standard dispatcher cannot load (HookUnavailable).
    await filter(page, { state: 'not-ready' });
    const notReady = want((h) => condition(h, 'Ready')?.status !== 'True');
    assert.deepEqual(ours(await listed(page)), notReady, 'state=not-ready');
    assert.ok(notReady.length > 0, 'some hooks are not ready');
    await checkPage(page, 'cluster-hooks-filtered');
  }));

test('an open breaker: Open with its tenant on the list, its reason on the overview', () =>
  withSignedIn(browser, async (page) => {
    const [ns, name] = FLAKY.split('/');
    const h = kubectl('get', 'agenthooks.agenthooks.io', name, '-n', ns);
    const open = condition(h, 'CircuitOpen');
    assert.equal(open?.status, 'True', JSON.stringify(h.status));
    const tenants = h.status.breaker.open.map((o) => o.tenant);
    assert.ok(tenants.includes(TENANT), `open for ${tenants}`);

    await visit(page, '/ui/hooks');
    const cell = page.locator(`tr[data-hook="${FLAKY}"] [data-col="circuit"]`);
    const text = (await cell.textContent()).replace(/\s+/g, ' ');
    assert.match(text, /Open/);
    assert.ok(text.includes(TENANT), `the tenant in ${text}`);
    assert.ok(text.includes(open.message), `the condition's message in ${text}`);
    assert.equal(await cell.locator('span.badge').getAttribute('title'), open.message);
    // Other hooks stay closed.
    assert.match(await page.locator(`tr[data-hook="${TENANT_HOOK}"] [data-col="circuit"]`).textContent(), /Closed/);

    const response = await visit(page, `/ui/hooks/${FLAKY}`);
    assert.equal(response.status(), 200);
    await checkFrame(page);
    const breaker = (await page.getByTestId('breaker').textContent()).replace(/\s+/g, ' ');
    assert.ok(breaker.includes(`Open for tenant ${TENANT}`), breaker);
    const reason = h.status.breaker.open.find((o) => o.tenant === TENANT).reason ?? h.status.breaker.reason;
    assert.ok(reason, `a reason in ${JSON.stringify(h.status.breaker)}`);
    assert.ok(breaker.includes(reason), `the reason "${reason}" in ${breaker}`);
    await checkPage(page, 'cluster-breaker-overview');
  }));

test('a hook made in the form is applied as the person, and the operator accepts it', () =>
  withSignedIn(browser, async (page) => {
    const name = `form-${randomUUID().slice(0, 8)}`;
    const response = await visit(page, `/ui/hooks/new?namespace=${TENANT_NS}`);
    assert.equal(response.status(), 200);
    await checkFrame(page);
    // The namespace's hook Secrets the person may list are offered for a header.
    const secrets = await page.locator('select[name="httpHeaderSecret"] option').allTextContents();
    assert.ok(secrets.includes(HOOK_SECRET), `Secrets offered: ${secrets}`);
    await checkPage(page, 'cluster-new-hook');
    const values = httpHook(TENANT_NS, name, { httpHeaderName: 'Authorization', httpHeaderSecret: HOOK_SECRET });

    // Validate: a server-side dry run as the person writes nothing.
    let form = await fill(page, values);
    const validated = await press(page, form, 'validate');
    assert.equal(validated.status(), 200);
    assert.match(await page.getByTestId('form-status').textContent(), /dry run/);
    assert.match(await page.getByTestId('yaml').textContent(), new RegExp(`name: ${name}`));
    assert.ok(!agentHooks(TENANT_NS).some((h) => h.metadata.name === name), 'a dry run writes nothing');

    form = await fill(page, values);
    const applied = await press(page, form, 'apply');
    assert.equal(applied.status(), 200);
    assert.equal(new URL(page.url()).pathname, `/ui/hooks/${TENANT_NS}/${name}`);
    const stored = kubectl('get', 'agenthooks.agenthooks.io', name, '-n', TENANT_NS, '--show-managed-fields');
    assert.ok(
      stored.metadata.managedFields.some((f) => f.manager === 'agenthooks-console' && f.operation === 'Apply'),
      `applied by agenthooks-console: ${JSON.stringify(stored.metadata.managedFields)}`,
    );
    assert.deepEqual(stored.spec.handler.http.headers, [
      { name: 'Authorization', valueFrom: { secretKeyRef: { name: 'policy-token', key: 'token' } } },
    ]);

    // The operator reconciles it: reload the overview until Accepted is True.
    const accepted = page.locator('dl[data-testid="overview"] dt:text-is("Accepted") + dd span.badge');
    const deadline = Date.now() + 30_000;
    while ((await accepted.getAttribute('data-status')) !== 'True') {
      assert.ok(Date.now() < deadline, `Accepted is ${await accepted.getAttribute('data-status')} after 30 s`);
      await sleep(500);
      await page.reload();
    }
    assert.equal(condition(kubectl('get', 'agenthooks.agenthooks.io', name, '-n', TENANT_NS), 'Accepted').status, 'True');
    await checkPage(page, 'cluster-new-hook-accepted');
    await visit(page, `/ui/hooks?namespace=${TENANT_NS}`);
    assert.equal((await badge(page, `${TENANT_NS}/${name}`, 'accepted')).status, 'True');
  }));

test('invalid forms: refused next to the field at fault, by the shared checks and by the API server', () =>
  withSignedIn(browser, async (page) => {
    await visit(page, '/ui/hooks/new');
    let form = await fill(page, httpHook(MASTER, `bad-${randomUUID().slice(0, 8)}`, { timeoutMs: '20000' }));
    let refused = await press(page, form, 'validate');
    assert.equal(refused.status(), 400);
    assert.equal(await page.locator('p[role="alert"].field-error[data-field="spec.timeoutMs"]').count(), 1);
    assert.equal(await page.locator('[name="timeoutMs"]').getAttribute('aria-invalid'), 'true');
    await checkPage(page, 'cluster-new-hook-invalid');

    // A global hook outside the master namespace.
    form = await fill(page, httpHook(TENANT_NS, `bad-${randomUUID().slice(0, 8)}`, { scope: 'global' }));
    refused = await press(page, form, 'validate');
    assert.equal(refused.status(), 400);
    assert.equal(await page.locator('p[role="alert"].field-error[data-field="spec.scope"]').count(), 1);

    // A name that is not a DNS subdomain: the shared checks refuse it as the API server
    // would. Then what only the API server refuses (its dry run as the person): a
    // namespace that does not exist.
    form = await fill(page, httpHook(TENANT_NS, `Bad_Name-${randomUUID().slice(0, 8)}`));
    refused = await press(page, form, 'validate');
    assert.equal(refused.status(), 400);
    assert.equal(await page.locator('p[role="alert"].field-error[data-field="metadata.name"]').count(), 1);
    assert.equal(await page.locator('[name="name"]').getAttribute('aria-invalid'), 'true');
    await checkPage(page, 'cluster-new-hook-api-refused');
    form = await fill(page, httpHook(`no-such-ns-${randomUUID().slice(0, 8)}`, `x-${randomUUID().slice(0, 8)}`));
    refused = await press(page, form, 'validate');
    assert.ok(refused.status() >= 400, `status ${refused.status()}`);
    assert.equal(await page.locator('p[role="alert"].field-error[data-field="metadata.namespace"]').count(), 1);
    assert.equal(await page.locator('[name="namespace"]').getAttribute('aria-invalid'), 'true');

    // The name of a hook made elsewhere (kubectl here): refused, the hook left as it was,
    // never merged with the form's fields.
    const [ns, name] = FLAKY.split('/');
    const before = kubectl('get', 'agenthooks.agenthooks.io', name, '-n', ns);
    for (const action of ['validate', 'apply']) {
      form = await fill(page, httpHook(ns, name, { scope: 'global', priority: '5', timeoutMs: '3000' }));
      refused = await press(page, form, action);
      assert.equal(refused.status(), 409, action);
      assert.equal(await page.locator('p[role="alert"].field-error[data-field="metadata.name"]').count(), 1, action);
    }
    const now = kubectl('get', 'agenthooks.agenthooks.io', name, '-n', ns);
    assert.deepEqual(now.spec, before.spec);
    assert.equal(now.metadata.generation, before.metadata.generation);
  }));

test('Standard edition: the command handler is greyed out with the reason, and refused if forced', () =>
  withSignedIn(
    browser,
    async (page) => {
      const response = await page.goto(`${STANDARD_URL}/ui/hooks/new`);
      assert.equal(response.status(), 200);
      await checkFrame(page);
      const radio = page.locator('input[type="radio"][name="handler"][value="command"]');
      assert.equal(await radio.isDisabled(), true, 'the command radio is disabled');
      assert.match(await page.getByTestId('command-note').textContent(), /Standard edition/);
      assert.equal(await radio.getAttribute('aria-describedby'), 'command-note');
      await checkPage(page, 'cluster-standard-new-hook');

      // A form sent with the radio (and its fieldset) enabled anyway: refused by the
      // edition's rule.
      for (const el of [radio, page.locator('fieldset[data-handler="command"]')]) {
        await el.evaluate((e) => {
          e.disabled = false;
        });
      }
      const form = await fill(page, {
        namespace: MASTER,
        name: `cmd-${randomUUID().slice(0, 8)}`,
        event: 'stop',
        scope: 'global',
        handler: 'command',
        command: 'exit 0',
      });
      const refused = await press(page, form, 'validate');
      assert.equal(refused.status(), 400);
      const error = page.locator('p[role="alert"].field-error[data-field="spec.handler.type"]');
      assert.equal(await error.count(), 1);
      assert.match(await error.textContent(), /EditionForbidsCommand|Standard/);
      await checkPage(page, 'cluster-standard-refused');
    },
    {},
    undefined,
    STANDARD_URL,
  ));

test('the tenant person: their namespace only; none of namespace B, not even its name', () =>
  withSignedIn(
    browser,
    async (page) => {
      // A row of B's hook, to ask for by id (the driver sent B's runtime's event).
      const otherRows = await waitRows(OTHER_HOOK, 1);
      const ownRows = await waitRows(TENANT_HOOK, 1);

      let response = await visit(page, '/ui/hooks');
      assert.equal(response.status(), 200);
      await checkFrame(page);
      assert.equal((await page.getByTestId('whoami').textContent()).trim(), TENANT_USER);
      const shown = await listed(page);
      assert.deepEqual(shown, agentHooks(TENANT_NS).map(keyOf).sort(), 'exactly the hooks of namespace A');
      const options = await page.locator('select[name="namespace"] option').evaluateAll((os) => os.map((o) => o.value));
      assert.deepEqual(options, ['', TENANT_NS]);
      const budgets = await page.locator('tr[data-budget]').evaluateAll((trs) => trs.map((tr) => tr.dataset.budget));
      assert.deepEqual(budgets, kubectl('get', 'tenanthookbudgets', '-n', TENANT_NS).items.map((b) => `${TENANT_NS}/${b.metadata.name}`));
      assert.ok(!(await page.content()).includes(OTHER_NS), 'namespace B is never named');
      assert.equal(
        (await page.getByTestId('denied').textContent()).trim(),
        'You may not list AgentHooks cluster-wide: showing the namespaces you may list.',
      );
      await checkPage(page, 'cluster-tenant-hooks');

      // B's pages: the same 404 as a hook that does not exist.
      for (const path of [`/ui/hooks/${OTHER_HOOK}`, `/ui/hooks/${OTHER_HOOK}/test`, `/ui/hooks/${OTHER_HOOK}/history`,
        `/ui/hooks/${OTHER_NS}/no-such-hook`]) {
        response = await visit(page, path);
        assert.equal(response.status(), 404, path);
        assert.equal(await page.locator('p[role="alert"][data-field="hook"]').count(), 1, path);
        assert.equal(await page.locator('tr[data-execution]').count(), 0, `${path}: no rows`);
      }
      await checkPage(page, 'cluster-tenant-other-404');
      response = await visit(page, `/ui/executions/${otherRows[0].id}`);
      assert.equal(response.status(), 404, "B's execution");
      assert.equal(await page.locator('dl[data-testid="execution"]').count(), 0);

      // Their own: overview, history, an execution, and a dry run.
      response = await visit(page, `/ui/hooks/${TENANT_HOOK}/history`);
      assert.equal(response.status(), 200);
      const ids = await page.locator('tr[data-execution]').evaluateAll((trs) => trs.map((tr) => tr.dataset.execution));
      assert.ok(ids.includes(String(ownRows[0].id)), `own rows ${ids}`);
      assert.ok(!ids.includes(String(otherRows[0].id)));
      await checkPage(page, 'cluster-tenant-history');
      response = await visit(page, `/ui/executions/${ownRows[0].id}`);
      assert.equal(response.status(), 200);
      await page.locator('dl[data-testid="execution"]').waitFor();
      response = await visit(page, `/ui/hooks/${TENANT_HOOK}/test`);
      assert.equal(response.status(), 200);
      const form = page.locator(`form[method="post"][action="/ui/hooks/${TENANT_HOOK}/test"]`);
      // The pre-filled sample names the hook's tenant; the hook selects tool a-only.
      const sample = form.getByLabel('Sample event (JSON)');
      const event = JSON.parse(await sample.inputValue());
      assert.equal(event.tenant_id, TENANT, 'the sample is of the namespace\'s tenant (its label)');
      await sample.fill(JSON.stringify({ ...event, tool_name: 'a-only', tool_input: { cmd: 'x' } }, null, 2));
      response = await clickAndWait(page, form.getByRole('button', { name: 'Run test' }));
      assert.equal(response.status(), 200);
      assert.equal((await page.getByTestId('decision').textContent()).trim(), 'allow');
      await checkPage(page, 'cluster-tenant-test');

      // Creating in B: refused by the API server (RBAC), next to the namespace.
      await visit(page, `/ui/hooks/new?namespace=${TENANT_NS}`);
      const name = `mine-${randomUUID().slice(0, 8)}`;
      const newForm = await fill(page, httpHook(OTHER_NS, name));
      response = await press(page, newForm, 'validate');
      assert.equal(response.status(), 403);
      assert.equal(await page.locator('p[role="alert"].field-error[data-field="metadata.namespace"]').count(), 1);
      assert.equal(await page.locator('[name="namespace"]').getAttribute('aria-invalid'), 'true');
      await checkPage(page, 'cluster-tenant-refused');
      assert.ok(!agentHooks(OTHER_NS).some((h) => h.metadata.name === name));
    },
    {},
    TENANT_TOKEN,
  ));

test('approvals: refused for a person without approve (it stays Pending), approved in the browser by an approver', async () => {
  const [ns, id] = APPROVAL.split('/');
  const held = () => kubectl('get', 'hookapprovals.agenthooks.io', id, '-n', ns).spec;
  assert.equal(held().decision, undefined, 'pending before the browser');
  const text = async (locator) => (await locator.textContent()).replace(/\s+/g, ' ').trim();

  // The non-approver: sees it in the list, opens it, clicks Approve, and is refused by
  // the API server's admission policy in its own words.
  await withSignedIn(
    browser,
    async (page) => {
      let response = await visit(page, '/ui/approvals');
      assert.equal(response.status(), 200);
      await checkFrame(page);
      assert.equal((await page.getByTestId('whoami').textContent()).trim(), NON_APPROVER_USER);
      const row = page.locator(`tr[data-approval="${APPROVAL}"]`);
      assert.equal(await row.count(), 1, 'the pending approval is listed (Pending is the default filter)');
      const cell = (col) => text(row.locator(`[data-col="${col}"]`));
      assert.equal(await cell('hook'), APPROVAL_HOOK);
      assert.equal(await cell('namespace'), ns);
      assert.equal(await cell('tenant'), TENANT);
      assert.equal(await cell('session'), APPROVAL_EVENT.session_id);
      assert.equal(await cell('tool'), APPROVAL_EVENT.tool_name);
      assert.equal(await cell('reason'), APPROVAL_REASON);
      assert.equal(await cell('state'), 'Pending');
      assert.equal(await cell('decided-by'), '—');
      assert.equal(await cell('expires'), held().request.expiresAt);
      assert.equal(
        await text(page.getByTestId('denied')),
        'You may not list HookApprovals cluster-wide: showing the namespaces you may list.',
      );
      await checkPage(page, 'cluster-approvals');

      response = await clickAndWait(page, row.getByRole('link', { name: id }));
      assert.equal(response.status(), 200);
      assert.equal(pathOf(page), `/ui/approvals/${APPROVAL}`);
      const request = held().request;
      for (const [field, want] of [['hook', request.hook], ['tenant', request.tenant], ['sessionId', request.sessionId],
        ['toolName', request.toolName], ['inputHash', request.inputHash], ['reason', request.reason],
        ['hookGeneration', String(request.hookGeneration)], ['expiresAt', request.expiresAt]]) {
        assert.equal(await text(page.locator(`dl[data-testid="request"] dd[data-field="${field}"]`)), want, field);
      }
      assert.equal(await text(page.getByTestId('answer-as')), NON_APPROVER_USER);
      await page.getByLabel('Note for the agent (optional)').fill('from the non-approver');
      response = await clickAndWait(page, page.getByRole('button', { name: 'Approve' }));
      assert.equal(response.status(), 403);
      const refusal = page.locator('p[role="alert"][data-testid="decide-error"]');
      assert.equal(await refusal.count(), 1);
      const said = await text(refusal);
      assert.ok(said.includes(`spec.decision: ${NON_APPROVER_USER} may not approve calls in ${ns}`), said);
      assert.equal(await text(page.getByTestId('state')), 'Pending');
      assert.equal(await page.getByLabel('Note for the agent (optional)').inputValue(), 'from the non-approver');
      assert.equal(await page.getByRole('button', { name: 'Approve' }).count(), 1, 'still answerable');
      await checkPage(page, 'cluster-approval-refused');
      const spec = held();
      assert.deepEqual([spec.decision, spec.decidedBy, spec.note], [undefined, undefined, undefined], 'still pending');
    },
    {},
    NON_APPROVER_TOKEN,
  );

  // The approver: from the hook's overview to its pending approvals, then Approve.
  await withSignedIn(
    browser,
    async (page) => {
      let response = await visit(page, `/ui/hooks/${APPROVAL_HOOK}`);
      assert.equal(response.status(), 200);
      assert.match(await text(page.getByTestId('approval')), /answerable for 3600 s/);
      await checkPage(page, 'cluster-approval-hook-overview');
      response = await clickAndWait(page, page.getByTestId('approval').getByRole('link', { name: 'its pending approvals' }));
      assert.equal(response.status(), 200);
      const rows = await page.locator('tr[data-approval]').evaluateAll((trs) => trs.map((tr) => tr.dataset.approval));
      assert.deepEqual(rows, [APPROVAL], "the hook's pending approvals");
      response = await clickAndWait(page, page.locator(`tr[data-approval="${APPROVAL}"]`).getByRole('link', { name: id }));
      assert.equal(response.status(), 200);
      await checkPage(page, 'cluster-approval-pending');
      await page.getByLabel('Note for the agent (optional)').fill('approved in the console');
      response = await clickAndWait(page, page.getByRole('button', { name: 'Approve' }));
      assert.equal(response.status(), 200);
      assert.equal(pathOf(page), `/ui/approvals/${APPROVAL}`);
      assert.equal(await text(page.getByTestId('state')), 'Approved');
      assert.equal(await text(page.getByTestId('decided-by')), TENANT_USER);
      assert.equal(await text(page.getByTestId('note')), 'approved in the console');
      assert.equal(await page.locator('form[data-testid="decide"]').count(), 0, 'no buttons once decided');
      await checkPage(page, 'cluster-approval-approved');
      const spec = held();
      assert.deepEqual([spec.decision, spec.decidedBy, spec.note], ['Approve', TENANT_USER, 'approved in the console']);

      // The list: no longer pending; approved, by them.
      await visit(page, '/ui/approvals');
      assert.equal(await page.locator(`tr[data-approval="${APPROVAL}"]`).count(), 0, 'not pending any more');
      await visit(page, '/ui/approvals?state=approved');
      const row = page.locator(`tr[data-approval="${APPROVAL}"]`);
      assert.equal(await text(row.locator('[data-col="decided-by"]')), TENANT_USER);
      assert.equal(await text(row.locator('[data-col="state"]')), 'Approved');
      // The same call now goes through.
      const answer = await dispatch(APPROVAL_EVENT);
      assert.equal(answer.decision, 'allow', JSON.stringify(answer));
    },
    {},
    TENANT_TOKEN,
  );
});

test('a revoked token: once its ServiceAccount is deleted, the next page is sign-in', () =>
  withPage(browser, async (page) => {
    // A page that reads only audit history (RBAC on the person's name, which outlives the
    // ServiceAccount), and the list (the API server, with the person's token).
    const [row] = await waitRows(TENANT_HOOK, 1);
    const pages = [`/ui/executions/${row.id}`, '/ui/hooks'];
    const response = await signIn(page, REVOKE_TOKEN);
    assert.equal(response.status(), 200);
    assert.equal(new URL(page.url()).pathname, '/ui/hooks');
    for (const path of pages) assert.equal((await visit(page, path)).status(), 200, path);
    const [ns, sa] = REVOKE_SA.split('/');
    execFileSync(KUBECTL, ['--kubeconfig', KUBECONFIG, 'delete', 'serviceaccount', sa, '-n', ns]);
    // The API server may keep a token it authenticated for a few seconds.
    const deadline = Date.now() + 30_000;
    for (;;) {
      await visit(page, pages[0]);
      if (new URL(page.url()).pathname === '/ui/sign-in') break;
      assert.ok(Date.now() < deadline, `still at ${pathOf(page)} 30 s after the ServiceAccount went`);
      await sleep(1000);
    }
    assert.equal(new URL(page.url()).searchParams.get('reason'), 'expired');
    assert.equal(new URL(page.url()).searchParams.get('next'), pages[0]);
    assert.match(await page.locator('p[role="status"]#sign-in-reason').textContent(), /refused|expired/);
    await checkPage(page, 'cluster-revoked');
    await visit(page, pages[1]);
    assert.equal(new URL(page.url()).pathname, '/ui/sign-in', 'the session ended');
    const again = await signIn(page, REVOKE_TOKEN);
    assert.equal(again.status(), 401);
    assert.equal(await page.locator('p[role="alert"]#sign-in-error').count(), 1);
  }));

test('an expired token: the session ends with it, and it signs in no more', { skip: !SIGNING_KEY && 'no signing key (an external cluster)' }, () =>
  withPage(browser, async (page) => {
    const { token, exp } = expiringToken(8);
    const response = await signIn(page, token);
    assert.equal(response.status(), 200, 'the API server accepts it while valid');
    await page.getByTestId('hooks').waitFor();
    await sleep(Math.max(0, exp * 1000 - Date.now()) + 500);
    await visit(page, '/ui/hooks');
    assert.equal(new URL(page.url()).pathname, '/ui/sign-in', pathOf(page));
    assert.equal(new URL(page.url()).searchParams.get('reason'), 'ended');
    assert.match(await page.locator('p[role="status"]#sign-in-reason').textContent(), /token you signed in with expired/);
    await checkPage(page, 'cluster-expired');
    const again = await signIn(page, token);
    assert.equal(again.status(), 401);
    assert.equal(await page.locator('p[role="alert"]#sign-in-error').count(), 1);
  }));

test("a token for another audience than the API server's (the dispatcher's own) does not sign in", () =>
  withPage(browser, async (page) => {
    const response = await signIn(page, API_TOKEN);
    assert.equal(response.status(), 401);
    assert.match(await page.locator('p[role="alert"]#sign-in-error').textContent(), /another audience/);
  }));
