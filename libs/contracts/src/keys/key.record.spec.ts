import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  hashSecret,
  judgeSecret,
  keyView,
  mcpServerAllowed,
  modelAllowed,
  newKeyIdentity,
  rotateKey,
  secretOf,
  type KeyRecord,
} from './key.record.js';

const NOW = Date.parse('2026-06-01T00:00:00Z');
const key = (over: Partial<KeyRecord> = {}): KeyRecord => ({
  id: 'key_0123456789abcdef',
  name: 'ci',
  account: 'default',
  limits: {},
  models: null,
  expires_at: null,
  tier: 5,
  created_at: '2026-01-01T00:00:00.000Z',
  updated_at: '2026-01-01T00:00:00.000Z',
  revoked_at: null,
  secrets: [secretOf('sk-cortex-current', null)],
  ...over,
});

describe('keys record', () => {
  it('keys - a new identity: a key id and a secret with the cortex prefix, different each time', () => {
    const a = newKeyIdentity();
    const b = newKeyIdentity();
    assert.match(a.id, /^key_[0-9a-f]{16}$/);
    assert.match(a.secret, /^sk-cortex-[A-Za-z0-9_-]{43}$/);
    assert.notEqual(a.secret, b.secret);
    assert.equal(hashSecret('abc'), 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  });

  const verdicts: Array<[string, KeyRecord, string, ReturnType<typeof judgeSecret>]> = [
    ['an active key', key(), 'sk-cortex-current', { kind: 'ok' }],
    [
      'a revoked key',
      key({ revoked_at: '2026-05-01T00:00:00.000Z' }),
      'sk-cortex-current',
      { kind: 'revoked', at: '2026-05-01T00:00:00.000Z' },
    ],
    [
      'an expired key',
      key({ expires_at: '2026-05-31T00:00:00.000Z' }),
      'sk-cortex-current',
      { kind: 'expired', at: '2026-05-31T00:00:00.000Z', rotated: false },
    ],
    ['a key expiring later', key({ expires_at: '2026-06-02T00:00:00.000Z' }), 'sk-cortex-current', { kind: 'ok' }],
    [
      'an old secret within its grace',
      key({ secrets: [secretOf('sk-cortex-new', null), secretOf('sk-cortex-old', '2026-06-01T00:00:01.000Z')] }),
      'sk-cortex-old',
      { kind: 'ok' },
    ],
    [
      'an old secret past its grace',
      key({ secrets: [secretOf('sk-cortex-new', null), secretOf('sk-cortex-old', '2026-06-01T00:00:00.000Z')] }),
      'sk-cortex-old',
      { kind: 'expired', at: '2026-06-01T00:00:00.000Z', rotated: true },
    ],
    // Revocation wins over everything, the grace period included.
    [
      'a revoked key, old secret in grace',
      key({
        revoked_at: '2026-05-01T00:00:00.000Z',
        secrets: [secretOf('sk-cortex-new', null), secretOf('sk-cortex-old', '2027-01-01T00:00:00.000Z')],
      }),
      'sk-cortex-old',
      { kind: 'revoked', at: '2026-05-01T00:00:00.000Z' },
    ],
  ];
  for (const [what, record, secret, expected] of verdicts) {
    it(`keys - ${what}: ${expected.kind}`, () =>
      assert.deepEqual(judgeSecret(record, hashSecret(secret), NOW), expected));
  }

  it('keys - rotation keeps the old secret for the grace period, or drops it with none', () => {
    const withGrace = rotateKey(key(), 'sk-cortex-next', 60, NOW);
    assert.deepEqual(
      withGrace.secrets.map((s) => [s.sha256, s.valid_until]),
      [
        [hashSecret('sk-cortex-next'), null],
        [hashSecret('sk-cortex-current'), '2026-06-01T00:01:00.000Z'],
      ],
    );
    assert.equal(withGrace.updated_at, '2026-06-01T00:00:00.000Z');
    // A second rotation ends the first one's grace: only the secret current until now carries over.
    const twice = rotateKey(withGrace, 'sk-cortex-third', 60, NOW + 1_000);
    assert.deepEqual(
      twice.secrets.map((s) => s.sha256),
      [hashSecret('sk-cortex-third'), hashSecret('sk-cortex-next')],
    );
    assert.deepEqual(
      rotateKey(key(), 'sk-cortex-next', 0, NOW).secrets.map((s) => s.sha256),
      [hashSecret('sk-cortex-next')],
    );
  });

  it('keys - the view hides hashes, shows the prefix, the state and a running grace period', () => {
    const rotated = rotateKey(key(), 'sk-cortex-nextsecret', 60, NOW);
    const view = keyView(rotated, NOW + 1_000);
    assert.equal('secrets' in view, false);
    assert.equal(view.prefix, 'sk-cortex-next…');
    assert.equal(view.previous_secret_valid_until, '2026-06-01T00:01:00.000Z');
    assert.equal(view.state, 'active');
    assert.equal(keyView(rotated, NOW + 61_000).previous_secret_valid_until, null);
    assert.equal(keyView(key({ revoked_at: '2026-01-02T00:00:00.000Z' }), NOW).state, 'revoked');
    assert.equal(JSON.stringify(view).includes(hashSecret('sk-cortex-nextsecret')), false);
  });

  it('keys - models: null allows every model, a list only its own', () => {
    assert.equal(modelAllowed({ models: null }, 'anything'), true);
    assert.equal(modelAllowed({ models: ['a', 'b'] }, 'b'), true);
    assert.equal(modelAllowed({ models: ['a', 'b'] }, 'c'), false);
  });

  it('keys - mcp_servers: null or absent (a key stored before the field) allows every server, a list only its own', () => {
    assert.equal(mcpServerAllowed({ mcp_servers: null }, 'docs'), true);
    assert.equal(mcpServerAllowed({}, 'docs'), true);
    assert.equal(mcpServerAllowed({ mcp_servers: ['docs'] }, 'docs'), true);
    assert.equal(mcpServerAllowed({ mcp_servers: ['docs'] }, 'fs'), false);
    assert.equal(keyView(key(), NOW).mcp_servers, null, 'the view shows an absent list as null');
  });
});
