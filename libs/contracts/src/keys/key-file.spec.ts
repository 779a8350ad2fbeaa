import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '../errors/error-codes.js';
import {
  accountPatch,
  changedFields,
  configKeyId,
  declaredKeys,
  declaredRecord,
  parseKeyFile,
  planKeyApply,
  type DeclaredKey,
} from './key-file.js';
import { hashSecret, secretOf, type KeyRecord } from './key.record.js';

const NOW = Date.parse('2026-11-25T12:00:00Z');
const SECRET = 'sk-declared-0123456789abcdef';
const env = {
  CI_KEY: SECRET,
  SHORT: 'sk-short',
  PREFIXED: 'sk-cortex-0123456789abcdef',
  NEWLINE: `${SECRET}\n`,
  INNER_SPACE: 'sk-ci-secret 0123456789abcdef',
  CONTROL: 'sk-ci\u0007-0123456789abcdefgh',
};

const stored = (fields: Partial<KeyRecord> & Pick<KeyRecord, 'id' | 'name'>): KeyRecord => ({
  account: 'default',
  limits: {},
  models: null,
  expires_at: null,
  tier: 5,
  created_at: '2026-11-01T00:00:00.000Z',
  updated_at: '2026-11-01T00:00:00.000Z',
  revoked_at: null,
  secrets: [secretOf(`sk-cortex-${fields.id}`, null)],
  ...fields,
});

const refused = (content: unknown, message: RegExp, param: string) =>
  assert.throws(
    () => parseKeyFile(content, env),
    (error: unknown) =>
      error instanceof CortexError &&
      error.code === 'invalid_request' &&
      message.test(error.message) &&
      error.extra.param === param,
  );

describe('key file', () => {
  it('key file - keys take the admin API defaults; a secret comes from its variable or its hash, never from the file', () => {
    const file = parseKeyFile(
      {
        accounts: { 'team-a': { limits: { requests_per_minute: 600 } }, quiet: null },
        keys: [
          { name: 'ci', account: 'team-a', tier: 7, limits: { concurrent_requests: 2 }, secret_env: 'CI_KEY' },
          { name: 'hashed', secret_sha256: 'AB'.repeat(32) },
          { name: 'plain' },
        ],
      },
      env,
    );
    assert.deepEqual(file.accounts, [
      { name: 'team-a', limits: { requests_per_minute: 600 } },
      { name: 'quiet', limits: {} },
    ]);
    assert.deepEqual(file.keys[0]?.input, {
      name: 'ci',
      account: 'team-a',
      limits: { concurrent_requests: 2 },
      models: null,
      mcp_servers: null,
      expires_at: null,
      tier: 7,
    });
    assert.equal(file.keys[0]?.secret?.sha256, hashSecret(SECRET));
    assert.equal(
      file.keys[0]?.secret?.prefix,
      'sk-…',
      'a secret not made by cortex shows no more than its first three characters',
    );
    assert.deepEqual(file.keys[1]?.secret, { sha256: 'ab'.repeat(32), prefix: 'sha256:abababab…', valid_until: null });
    assert.equal(file.keys[2]?.secret, null);
    assert.deepEqual(parseKeyFile({ keys: [] }, env), { accounts: [], keys: [] }, 'keys: [] declares no keys');
    const expired = parseKeyFile({ keys: [{ name: 'old', expires_at: '2020-01-01' }] }, env);
    assert.equal(
      expired.keys[0]?.input.expires_at,
      '2020-01-01T00:00:00.000Z',
      'a key that has expired may stay declared: the file stays valid',
    );
  });

  it('key file - a bad field is refused naming it from the top of the file', () => {
    refused(
      { keys: [{ name: 'a' }, { name: 'b', limits: { requests_per_minute: 'lots' } }] },
      /^keys\[1\]\.limits\.requests_per_minute: must be a whole number/,
      'keys[1].limits.requests_per_minute',
    );
    refused({ keys: [{ name: 'a', colour: 'red' }] }, /^keys\[0\]\.colour: is not a known field/, 'keys[0].colour');
    refused(
      { accounts: { team: { limits: { money_budget: { amount: 0, window: 'month' } } } } },
      /^accounts\.team\.limits\.money_budget\.amount: must be an amount of billing\.currency above 0/,
      'accounts.team.limits.money_budget.amount',
    );
    refused(
      { keys: [{ name: 'a', limits: { money_budget: { amount: 5, window: 'week' } } }] },
      /^keys\[0\]\.limits\.money_budget\.window: must be one of balance, day, month/,
      'keys[0].limits.money_budget.window',
    );
    refused({ keys: [{ account: 'x' }] }, /^keys\[0\]\.name: is required/, 'keys[0].name');
    refused(
      { keys: [{ name: 'a', secret_env: 'MISSING' }] },
      /MISSING is not set in this environment/,
      'keys[0].secret_env',
    );
    refused(
      { keys: [{ name: 'a', secret_env: 'SHORT' }] },
      /SHORT holds 8 secret characters; a secret needs at least 20/,
      'keys[0].secret_env',
    );
    refused(
      { keys: [{ name: 'a', secret_env: 'NEWLINE' }] },
      /NEWLINE has white space \(a newline\?\) around the secret, which no client sends/,
      'keys[0].secret_env',
    );
    refused(
      { keys: [{ name: 'a', secret_env: 'INNER_SPACE' }] },
      /INNER_SPACE holds white space at position 13, which no client can send in an Authorization or x-api-key header/,
      'keys[0].secret_env',
    );
    refused(
      { keys: [{ name: 'a', secret_env: 'CONTROL' }] },
      /CONTROL holds a control character at position 6/,
      'keys[0].secret_env',
    );
    refused(
      { keys: [{ name: 'a', secret_sha256: 'sk-pasted-by-mistake' }] },
      /64 hexadecimal digits[^]*this one is not \(20 characters\)$/,
      'keys[0].secret_sha256',
    );
    assert.throws(
      () => parseKeyFile({ keys: [{ name: 'a', secret_sha256: 'sk-pasted-by-mistake' }] }, env),
      (error: Error) => !error.message.includes('pasted'),
      'the value is not echoed',
    );
    refused(null, /^file: is empty/, 'file');
    refused(
      { keys: [{ name: 'a', secret_env: 'PREFIXED' }] },
      /PREFIXED holds 16 secret characters after sk-cortex-; a secret needs at least 20/,
      'keys[0].secret_env',
    );
    refused(
      { keys: [{ name: 'a', secret_sha256: 'ab'.repeat(32), secret_env: 'CI_KEY' }] },
      /keep one/,
      'keys[0].secret_sha256',
    );
    refused({ keys: [{ name: 'a' }, { name: 'a' }] }, /"a" is declared twice \(also keys\[0\]\)/, 'keys[1].name');
    refused(
      {
        keys: [
          { name: 'a', secret_env: 'CI_KEY' },
          { name: 'b', secret_sha256: hashSecret(SECRET) },
        ],
      },
      /is the secret of keys\[0\] too/,
      'keys[1].secret',
    );
    refused(
      { accounts: { 'bad name': {} } },
      /^accounts\.bad name\.account: must be 1-64 letters/,
      'accounts.bad name.account',
    );
    refused({ keys: { name: 'a' } }, /^keys: must be a list/, 'keys');
    refused({ keys: ['ci'] }, /^keys\[0\]: must be an object/, 'keys[0]');
    refused({ users: [] }, /^users: is not a known field/, 'users');
  });

  it('key file - the plan creates, changes or leaves each key by name, and lists stored keys the file leaves out', () => {
    const file = parseKeyFile(
      {
        accounts: { same: { limits: { requests_per_minute: 5 } }, other: { limits: { requests_per_minute: 9 } } },
        keys: [
          { name: 'new' },
          { name: 'kept', limits: { concurrent_requests: 2, requests_per_minute: 10 } },
          { name: 'moved', account: 'other', secret_env: 'CI_KEY' },
          { name: 'tooled', mcp_servers: ['docs'] },
        ],
      },
      env,
    );
    const keys = [
      // The same limits written in another order are the same limits.
      stored({ id: 'key_kept', name: 'kept', limits: { requests_per_minute: 10, concurrent_requests: 2 } }),
      stored({ id: 'key_moved', name: 'moved' }),
      // Keys stored before keys had MCP servers have none written: the same as null (`kept` is unchanged).
      stored({ id: 'key_tooled', name: 'tooled' }),
      stored({ id: 'key_old', name: 'old' }),
      stored({ id: 'key_gone', name: 'new', revoked_at: '2026-11-02T00:00:00.000Z' }),
    ];
    const plan = planKeyApply(file, keys, [
      { name: 'same', limits: { requests_per_minute: 5 }, updated_at: '' },
      { name: 'other', limits: {}, updated_at: '' },
    ]);
    assert.deepEqual(
      plan.keys.map((k) => [k.action, k.name, k.action === 'update' ? k.fields : null]),
      [
        ['create', 'new', null],
        ['unchanged', 'kept', null],
        ['update', 'moved', ['account', 'secret']],
        ['update', 'tooled', ['mcp_servers']],
      ],
    );
    assert.deepEqual(
      plan.notInFile,
      [{ id: 'key_old', name: 'old' }],
      'a revoked key of a declared name is neither matched nor listed',
    );
    assert.deepEqual(
      plan.accounts.map((a) => [a.name, a.action]),
      [
        ['same', 'unchanged'],
        ['other', 'set'],
      ],
    );
  });

  it('key file - two live keys of one name, or a declared secret another key holds, stop the plan before anything is written', () => {
    const file = parseKeyFile({ keys: [{ name: 'twice' }] }, env);
    assert.throws(
      () => planKeyApply(file, [stored({ id: 'key_a', name: 'twice' }), stored({ id: 'key_b', name: 'twice' })], []),
      /2 stored keys are named "twice" \(key_a, key_b\): revoke all but one/,
    );
    const taken = parseKeyFile({ keys: [{ name: 'mine', secret_env: 'CI_KEY' }] }, env);
    assert.throws(
      () => planKeyApply(taken, [stored({ id: 'key_theirs', name: 'theirs', secrets: [secretOf(SECRET, null)] })], []),
      /is already a secret of key key_theirs \("theirs"\)/,
    );
    assert.equal(
      planKeyApply(taken, [stored({ id: 'key_mine', name: 'mine', secrets: [secretOf(SECRET, null)] })], []).keys[0]
        ?.action,
      'unchanged',
      'its own secret is no conflict',
    );
    const revokedHolder = stored({
      id: 'key_gone',
      name: 'gone',
      revoked_at: '2026-11-02T00:00:00.000Z',
      secrets: [secretOf(SECRET, null)],
    });
    assert.throws(
      () => planKeyApply(taken, [revokedHolder], []),
      /is already a secret of key key_gone/,
      "a revoked key's secret is taken too: one hash, one key",
    );
  });

  it("key file - a declared secret replaces every secret, a rotation's previous one too; no declared secret keeps them", () => {
    const rotating = stored({
      id: 'key_r',
      name: 'r',
      secrets: [secretOf(SECRET, null), secretOf('sk-cortex-previous', '2026-11-26T00:00:00.000Z')],
    });
    const withSecret: DeclaredKey = parseKeyFile({ keys: [{ name: 'r', secret_env: 'CI_KEY' }] }, env).keys[0]!;
    assert.deepEqual(
      changedFields(rotating, withSecret),
      ['secret'],
      'the previous secret still works: the file says only this one should',
    );
    const record = declaredRecord(rotating, withSecret, NOW);
    assert.deepEqual(
      record.secrets.map((s) => s.sha256),
      [hashSecret(SECRET)],
    );
    assert.equal(record.updated_at, new Date(NOW).toISOString());
    assert.equal(record.created_at, rotating.created_at);
    const without: DeclaredKey = parseKeyFile({ keys: [{ name: 'r', tier: 9 }] }, env).keys[0]!;
    assert.deepEqual(changedFields(rotating, without), ['tier']);
    assert.equal(declaredRecord(rotating, without, NOW).secrets, rotating.secrets);
  });

  it('key file - an account is set to exactly its declared limits: every other limit is removed', () => {
    assert.deepEqual(accountPatch({ requests_per_minute: 5 }), {
      requests_per_minute: 5,
      tokens_per_minute: null,
      concurrent_requests: null,
      token_budget: null,
      money_budget: null,
    });
  });

  it('key file - keys declared in the config: records with an id made from the name, each with its secret', () => {
    const file = parseKeyFile(
      {
        accounts: { gitops: { limits: { concurrent_requests: 4 } } },
        keys: [
          {
            name: 'ci runner',
            account: 'gitops',
            tier: 3,
            limits: { requests_per_minute: 2, money_budget: { amount: 12.5, window: 'month' } },
            secret_env: 'CI_KEY',
          },
        ],
      },
      env,
    );
    const { keys, accounts } = declaredKeys(file, NOW);
    assert.equal(keys.length, 1);
    const [key] = keys as [KeyRecord];
    assert.equal(key.id, configKeyId('ci runner'));
    assert.match(key.id, /^config_[0-9a-f]{16}$/, 'a KV token: limits are counted under it');
    assert.deepEqual(
      { account: key.account, tier: key.tier, limits: key.limits, secrets: key.secrets.map((s) => s.sha256) },
      {
        account: 'gitops',
        tier: 3,
        limits: { requests_per_minute: 2, money_budget: { amount: 12.5, window: 'month' } },
        secrets: [hashSecret(SECRET)],
      },
    );
    assert.deepEqual(accounts, [
      { name: 'gitops', limits: { concurrent_requests: 4 }, updated_at: '2026-11-25T12:00:00.000Z' },
    ]);
    assert.notEqual(configKeyId('ci runner'), configKeyId('ci-runner'));
    assert.throws(
      () => declaredKeys(parseKeyFile({ keys: [{ name: 'no secret' }] }, env), NOW),
      (error: unknown) => error instanceof CortexError && error.extra.param === 'keys[0].secret_env',
    );
  });
});
