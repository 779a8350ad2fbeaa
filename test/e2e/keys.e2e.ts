import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { KeyStore } from '@cortex/bus';
import { DEFAULT_TIER } from '@cortex/contracts';
import { fixtureModel } from '@cortex/fixtures';
import { postJson, runCli, startStack, waitFor, type TestStack } from '@cortex/testing';

const ADMIN = 'sk-admin-e2e';
const STATIC = 'sk-static-e2e';
const user = [{ role: 'user' as const, content: 'Hi.' }];
const HELLO = fixtureModel('cortex-chat').expected.text;

interface KeyAnswer {
  id: string;
  name: string;
  account: string;
  state: string;
  prefix: string;
  secret?: string;
  limits: Record<string, unknown>;
  models: string[] | null;
  previous_secret_valid_until: string | null;
}

describe('stored keys e2e (two gateways)', () => {
  let stack: TestStack;
  let gateways: string[];

  before(async () => {
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true, slots: 2 },
        { id: 'cortex-reasoning', file: 'fixture:cortex-reasoning', context_size: 512 },
      ],
      config: { auth: { api_keys: [STATIC], admin_keys: [ADMIN] } },
    });
    gateways = [stack.baseUrl, await stack.spawnGateway()];
  });

  after(async () => {
    await stack?.stop();
  });

  const admin = async (
    method: string,
    path: string,
    body?: unknown,
    key = ADMIN,
  ): Promise<{ status: number; body: Record<string, unknown> }> => {
    const response = await fetch(`${gateways[0]}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
      ...(body !== undefined && { body: JSON.stringify(body) }),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  const createKey = async (body: Record<string, unknown>): Promise<KeyAnswer & { secret: string }> => {
    const { status, body: answer } = await admin('POST', '/admin/keys', body);
    assert.equal(status, 200, JSON.stringify(answer));
    return answer as unknown as KeyAnswer & { secret: string };
  };
  const chat = (base: string, key: string, model = 'cortex-chat') =>
    postJson(`${base}/v1/chat/completions`, { model, messages: user }, { authorization: `Bearer ${key}` });
  const cli = (...args: string[]) => runCli(stack, ...args);

  it('keys - a key created through the admin API works on both gateways; its secret is shown once', async () => {
    const created = await createKey({ name: 'ci', account: 'team-a', limits: { requests_per_minute: 100 } });
    assert.match(created.secret, /^sk-cortex-/);
    assert.match(created.id, /^key_[0-9a-f]{16}$/);
    assert.equal(created.state, 'active');
    for (const base of gateways) {
      const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: created.secret, maxRetries: 0 });
      const reply = await openai.chat.completions.create({ model: 'cortex-chat', messages: user });
      assert.equal(reply.choices[0]?.message.content, HELLO);
    }
    const listed = await admin('GET', '/admin/keys');
    assert.equal(listed.status, 200);
    assert.equal(JSON.stringify(listed.body).includes(created.secret), false, 'the list never shows a secret');
    const shown = await admin('GET', `/admin/keys/${created.id}`);
    assert.equal(shown.body.name, 'ci');
    assert.equal(JSON.stringify(shown.body).includes(created.secret), false, 'show never shows the secret');
    assert.deepEqual(shown.body.limits, { requests_per_minute: 100 });
    // Config-file keys stay valid next to stored ones.
    assert.equal((await chat(gateways[1]!, STATIC)).status, 200);
  });

  it('keys - a key used on a gateway the moment it is stored is served, not refused; an unknown secret is still a 401', async () => {
    const models = (base: string, key: string) =>
      fetch(`${base}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    // Stored as `cortex keys create` does, on a connection of its own: no gateway has seen the write yet.
    const store = await KeyStore.open(stack.nc);
    for (let i = 0; i < 20; i++) {
      const { secret } = await store.create({
        name: `at-once-${i}`,
        account: 'default',
        limits: {},
        models: null,
        expires_at: null,
        tier: DEFAULT_TIER,
      });
      const answers = await Promise.all(gateways.map((base) => models(base, secret)));
      for (const [at, answer] of answers.entries()) {
        const text = await answer.text();
        assert.equal(answer.status, 200, `key ${i} on gateway ${at}: ${text}`);
      }
    }
    const unknown = await models(gateways[1]!, 'sk-cortex-not-a-key-of-this-fleet');
    assert.equal(unknown.status, 401);
    assert.match(((await unknown.json()) as { error: { message: string } }).error.message, /the API key is not valid/);
  });

  it('keys - revoked on one gateway, refused with a 401 saying so on both within a second', async () => {
    const created = await createKey({ name: 'leaked' });
    for (const base of gateways) assert.equal((await chat(base, created.secret)).status, 200);
    const revokedAt = Date.now();
    const revoked = await admin('POST', `/admin/keys/${created.id}/revoke`);
    assert.equal(revoked.status, 200);
    assert.equal(revoked.body.state, 'revoked');
    const refusedWithin: number[] = [];
    await Promise.all(
      gateways.map(async (base) => {
        await waitFor(async () => (await chat(base, created.secret)).status === 401, 1_000, 20);
        refusedWithin.push(Date.now() - revokedAt);
      }),
    );
    const refused = await chat(gateways[1]!, created.secret);
    const body = (await refused.json()) as { error: { code: string; message: string; type: string } };
    assert.equal(body.error.code, 'key_revoked');
    assert.equal(body.error.type, 'authentication_error');
    assert.match(body.error.message, new RegExp(`the API key ${created.id} \\("leaked"\\) was revoked at `));
    const anthropic = new Anthropic({ baseURL: gateways[0]!, apiKey: created.secret, maxRetries: 0 });
    await assert.rejects(
      anthropic.messages.create({ model: 'cortex-chat', max_tokens: 8, messages: user }),
      (error: unknown) => error instanceof Anthropic.AuthenticationError && /was revoked at/.test(error.message),
    );
    console.log(`revocation refused on both gateways after ${refusedWithin.map((ms) => `${ms} ms`).join(' and ')}`);
  });

  it('keys - a key limited to some models: 403 in each dialect for others, /v1/models lists only its own', async () => {
    const created = await createKey({ name: 'chat-only', models: ['cortex-chat'] });
    const refused = await chat(gateways[1]!, created.secret, 'cortex-reasoning');
    assert.equal(refused.status, 403);
    const body = (await refused.json()) as { error: { code: string; type: string; param: string; message: string } };
    assert.deepEqual(
      [body.error.code, body.error.type, body.error.param],
      ['permission_denied', 'permission_error', 'model'],
    );
    assert.match(body.error.message, /may not use the model 'cortex-reasoning'; it may use: cortex-chat/);
    const anthropic = new Anthropic({ baseURL: gateways[0]!, apiKey: created.secret, maxRetries: 0 });
    await assert.rejects(
      anthropic.messages.create({ model: 'cortex-reasoning', max_tokens: 8, messages: user }),
      (error: unknown) => error instanceof Anthropic.PermissionDeniedError,
    );
    const openai = new OpenAI({ baseURL: `${gateways[0]}/v1`, apiKey: created.secret, maxRetries: 0 });
    assert.deepEqual(
      (await openai.models.list()).data.map((m) => m.id),
      ['cortex-chat'],
    );
    assert.equal((await chat(gateways[0]!, created.secret, 'cortex-chat')).status, 200);
    // The static key still sees the whole catalogue.
    const all = await new OpenAI({ baseURL: `${gateways[0]}/v1`, apiKey: STATIC, maxRetries: 0 }).models.list();
    assert.deepEqual(all.data.map((m) => m.id).sort(), ['cortex-chat', 'cortex-reasoning']);
  });

  it('keys - rotation: the old secret works for its grace period, then a 401 says it was rotated', async () => {
    const created = await createKey({ name: 'rotating' });
    const rotated = await admin('POST', `/admin/keys/${created.id}/rotate`, { grace_s: 2 });
    assert.equal(rotated.status, 200);
    const next = rotated.body.secret as string;
    assert.notEqual(next, created.secret);
    await waitFor(async () => (await chat(gateways[1]!, next)).status === 200, 1_000, 20);
    assert.equal(
      (await chat(gateways[1]!, created.secret)).status,
      200,
      'the old secret works during the grace period',
    );
    await waitFor(async () => (await chat(gateways[1]!, created.secret)).status === 401, 4_000, 100);
    const body = (await (await chat(gateways[0]!, created.secret)).json()) as {
      error: { code: string; message: string };
    };
    assert.equal(body.error.code, 'key_expired');
    assert.match(body.error.message, /was rotated; its previous secret stopped working at /);
    assert.equal((await chat(gateways[0]!, next)).status, 200);
  });

  it('keys - an expired key is a 401 saying when it expired', async () => {
    const created = await createKey({ name: 'short-lived', expires_at: new Date(Date.now() + 1_500).toISOString() });
    assert.equal((await chat(gateways[0]!, created.secret)).status, 200);
    await waitFor(async () => (await chat(gateways[0]!, created.secret)).status === 401, 3_000, 100);
    const body = (await (await chat(gateways[1]!, created.secret)).json()) as {
      error: { code: string; message: string };
    };
    assert.equal(body.error.code, 'key_expired');
    assert.match(body.error.message, /\("short-lived"\) expired at 20/);
  });

  it('keys - the admin API refuses bad bodies naming the field, unknown keys with a 404, and non-admin keys', async () => {
    const bad = await admin('POST', '/admin/keys', { name: 'x', limits: { requests_per_minute: 0 } });
    assert.equal(bad.status, 400);
    assert.deepEqual((bad.body.error as { param: string }).param, 'limits.requests_per_minute');
    const unknownField = await admin('POST', '/admin/keys', { name: 'x', rpm: 5 });
    assert.match((unknownField.body.error as { message: string }).message, /^rpm: is not a known field/);
    const missing = await admin('GET', '/admin/keys/key_0000000000000000');
    assert.equal(missing.status, 404);
    assert.match((missing.body.error as { message: string }).message, /no key key_0000000000000000/);
    const created = await createKey({ name: 'not-admin' });
    assert.equal((await admin('GET', '/admin/keys', undefined, created.secret)).status, 401);
    assert.equal((await admin('GET', '/admin/keys', undefined, STATIC)).status, 401);
    // The router decodes a path before matching it; the access check must see it decoded too.
    for (const path of ['/%61dmin/keys', '/admin/%6beys', '/%63onsole']) {
      assert.equal((await admin('GET', path, undefined, created.secret)).status, 401, path);
      assert.equal((await admin('GET', path, undefined, STATIC)).status, 401, path);
    }
    const revoke = await admin('POST', `/admin/keys/${created.id}/revoke`);
    assert.equal(revoke.status, 200);
    const update = await admin('PATCH', `/admin/keys/${created.id}`, { name: 'again' });
    assert.equal(update.status, 400);
    assert.match((update.body.error as { message: string }).message, /is revoked and cannot change/);
  });

  it("keys - cortex keys apply: a file's keys and accounts are made so, on both gateways; applying it again changes nothing", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cortex-keys-apply-'));
    const file = join(dir, 'keys.yaml');
    const hashed = 'sk-team-notebook-0123456789abcdef';
    const yaml = (secretEnv: string, limits: string) => `accounts:
  team-apply:
    limits: { requests_per_minute: 100 }
keys:
  - name: apply-ci
    account: team-apply
    tier: 8
    models: [cortex-chat]
${limits}    secret_env: ${secretEnv}
  - name: apply-notebook
    secret_sha256: ${createHash('sha256').update(hashed).digest('hex')}
`;
    process.env.APPLY_E2E_FIRST = 'sk-apply-first-0123456789abcdef';
    process.env.APPLY_E2E_SECOND = 'sk-apply-second-0123456789abcdef';
    try {
      writeFileSync(file, yaml('APPLY_E2E_FIRST', '    limits: { concurrent_requests: 3 }\n'));
      const dry = cli('keys', 'apply', file, '--dry-run');
      assert.equal(dry.status, 0, dry.stderr);
      assert.match(
        dry.stdout,
        /Key "apply-ci": would be created with its declared secret\.\n[^]*Nothing was written \(--dry-run\)\./,
      );
      assert.equal(
        JSON.stringify((await admin('GET', '/admin/keys')).body).includes('apply-ci'),
        false,
        'a dry run writes nothing',
      );

      const applied = cli('keys', 'apply', file, '--json');
      assert.equal(applied.status, 0, applied.stderr);
      const answer = JSON.parse(applied.stdout) as {
        keys: Array<{ action: string; name: string; id: string }>;
        accounts: Array<{ action: string }>;
      };
      assert.deepEqual(
        answer.keys.map((k) => [k.action, k.name]),
        [
          ['create', 'apply-ci'],
          ['create', 'apply-notebook'],
        ],
      );
      assert.deepEqual(
        answer.accounts.map((a) => a.action),
        ['set'],
      );
      for (const base of gateways) {
        assert.equal((await chat(base, process.env.APPLY_E2E_FIRST)).status, 200, `the declared secret on ${base}`);
        assert.equal((await chat(base, hashed)).status, 200, `the hashed secret on ${base}`);
      }
      const ci = (await admin('GET', `/admin/keys/${answer.keys[0]!.id}`)).body as unknown as KeyAnswer & {
        tier: number;
      };
      assert.deepEqual(
        [ci.account, ci.tier, ci.models, ci.limits],
        ['team-apply', 8, ['cortex-chat'], { concurrent_requests: 3 }],
      );
      const accounts = cli('accounts', 'list', '--json');
      assert.deepEqual(
        (JSON.parse(accounts.stdout) as { data: Array<{ name: string; limits: unknown }> }).data.find(
          (a) => a.name === 'team-apply',
        )?.limits,
        { requests_per_minute: 100 },
      );

      const again = cli('keys', 'apply', file);
      assert.equal(again.status, 0, again.stderr);
      assert.match(
        again.stdout,
        /^Account team-apply: unchanged\.\nKey key_\w+ "apply-ci": unchanged\.\nKey key_\w+ "apply-notebook": unchanged\.\n/,
      );

      // The file now declares another secret and no limits: the old secret stops at once, the limits go.
      writeFileSync(file, yaml('APPLY_E2E_SECOND', ''));
      const changed = cli('keys', 'apply', file, '--json');
      assert.equal(changed.status, 0, changed.stderr);
      assert.deepEqual((JSON.parse(changed.stdout) as { keys: Array<{ fields?: string[] }> }).keys[0]?.fields, [
        'limits',
        'secret',
      ]);
      for (const base of gateways) {
        await waitFor(async () => (await chat(base, process.env.APPLY_E2E_FIRST!)).status === 401, 1_000, 20);
        assert.equal((await chat(base, process.env.APPLY_E2E_SECOND)).status, 200);
      }

      // --prune: the stored keys the file does not name are revoked (a dry run only says so).
      const outside = await createKey({ name: 'apply-outside' });
      const pruneDry = cli('keys', 'apply', file, '--prune', '--dry-run');
      assert.equal(pruneDry.status, 0, pruneDry.stderr);
      assert.match(
        pruneDry.stdout,
        new RegExp(`Key ${outside.id} "apply-outside": not in the file, would be revoked\\.`),
      );
      assert.equal((await chat(gateways[1]!, outside.secret)).status, 200, 'a dry run revokes nothing');
      const pruned = cli('keys', 'apply', file, '--prune', '--json');
      assert.equal(pruned.status, 0, pruned.stderr);
      assert.deepEqual(
        (JSON.parse(pruned.stdout) as { not_in_file: Array<{ id: string; action: string }> }).not_in_file.find(
          (k) => k.id === outside.id,
        ),
        { id: outside.id, name: 'apply-outside', action: 'revoke' },
      );
      for (const base of gateways) {
        await waitFor(async () => (await chat(base, outside.secret)).status === 401, 1_000, 20);
        assert.equal((await chat(base, process.env.APPLY_E2E_SECOND!)).status, 200, "the file's keys stay");
      }

      writeFileSync(file, 'keys:\n  - name: apply-bad\n    limits: { requests_per_minute: lots }\n');
      const bad = cli('keys', 'apply', file);
      assert.equal(bad.status, 1);
      assert.match(
        bad.stderr,
        /keys\[0\]\.limits\.requests_per_minute: must be a whole number of at least 1 \(got "lots"\)/,
      );
    } finally {
      delete process.env.APPLY_E2E_FIRST;
      delete process.env.APPLY_E2E_SECOND;
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('keys - cortex keys create|list|show|update|rotate|revoke: sentences on a terminal, --json for scripts', async () => {
    const made = cli(
      'keys',
      'create',
      '--name',
      'from-cli',
      '--account',
      'team-b',
      '--rpm',
      '30',
      '--concurrency',
      '2',
      '--model',
      'cortex-chat',
      '--json',
    );
    assert.equal(made.status, 0, made.stderr);
    const created = JSON.parse(made.stdout) as KeyAnswer & { secret: string };
    assert.deepEqual(created.limits, { requests_per_minute: 30, concurrent_requests: 2 });
    await waitFor(async () => (await chat(gateways[1]!, created.secret)).status === 200, 1_000, 20);

    const sentence = cli('keys', 'create', '--name', 'people');
    assert.equal(sentence.status, 0, sentence.stderr);
    assert.match(
      sentence.stdout,
      /^Created key key_[0-9a-f]{16} "people" in account default: no limits; every model; tier 5\.\nIts secret, shown this once \(store it now\):\n\n {2}sk-cortex-\S+\n/,
    );

    const list = cli('keys', 'list', '--account', 'team-b');
    assert.equal(list.status, 0, list.stderr);
    assert.match(
      list.stdout,
      new RegExp(
        `${created.id}\\s+from-cli\\s+team-b\\s+active\\s+sk-cortex-\\S+\\s+30 requests/min, 2 at once\\s+cortex-chat`,
      ),
    );
    assert.equal(list.stdout.includes(created.secret), false);

    const update = cli('keys', 'update', created.id, '--rpm', 'none', '--model', 'none');
    assert.equal(update.status, 0, update.stderr);
    assert.match(update.stdout, /: 2 at once; every model; tier 5\. Every gateway applies it within a second\./);

    const money = cli('keys', 'update', created.id, '--money-budget', '12.5', '--money-window', 'month');
    assert.equal(money.status, 0, money.stderr);
    assert.match(money.stdout, /: 2 at once, 12\.5 USD a month; every model; tier 5\./);
    const noMoney = cli('keys', 'update', created.id, '--money-budget', '0');
    assert.equal(noMoney.status, 1);
    assert.match(noMoney.stderr, /limits\.money_budget\.amount: must be an amount of billing\.currency above 0/);
    const notMoney = cli('keys', 'update', created.id, '--money-budget', 'lots');
    assert.equal(notMoney.status, 2);
    assert.match(notMoney.stderr, /--money-budget must be an amount such as 50 or 0\.25, or "none" to remove it/);

    const show = cli('keys', 'show', created.id, '--json');
    assert.deepEqual((JSON.parse(show.stdout) as KeyAnswer).limits, {
      concurrent_requests: 2,
      money_budget: { amount: 12.5, window: 'month' },
    });
    const cleared = cli('keys', 'update', created.id, '--money-budget', 'none', '--json');
    assert.deepEqual((JSON.parse(cleared.stdout) as KeyAnswer).limits, { concurrent_requests: 2 });

    const rotate = cli('keys', 'rotate', created.id, '--grace', '60');
    assert.equal(rotate.status, 0, rotate.stderr);
    assert.match(rotate.stdout, /the old secret keeps working until 20\S+\. The new secret, shown this once/);

    const revoke = cli('keys', 'revoke', created.id);
    assert.equal(revoke.stdout, `Key ${created.id} "from-cli" is revoked: every gateway refuses it within a second.\n`);
    await waitFor(async () => (await chat(gateways[0]!, created.secret)).status === 401, 1_000, 20);

    const account = cli('accounts', 'set', 'team-b', '--concurrency', '1');
    assert.equal(
      account.stdout,
      'Account team-b: 1 at once. Its keys get the tighter of their own limits and these.\n',
    );

    const bad = cli('keys', 'create', '--name', 'x', '--rpm', 'lots');
    assert.equal(bad.status, 2);
    assert.equal(
      bad.stderr,
      'cortex keys create: --rpm must be a whole number of at least 1 (got "lots"); run "cortex keys create --help" to see its usage\n',
    );
    const unknown = cli('keys', 'show', 'key_0000000000000000');
    assert.equal(unknown.status, 1);
    assert.match(unknown.stderr, /no key key_0000000000000000/);
  });
});
