import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError, type KeyRecord } from '@cortex/contracts';
import type { Identification, KeyDirectory } from '../../keys/key-directory.js';
import type { AdmissionAsk, KeyAdmission, KeyAdmissionResult } from '../../limits/key-admission.js';
import { RequestContext } from '../../http/request-context.js';
import { TurnAdmission } from './turn-admission.js';

const KEY: KeyRecord = {
  id: 'key_1',
  name: 'ci',
  account: 'team-a',
  limits: { requests_per_minute: 2 },
  models: ['cortex-chat'],
  expires_at: null,
  tier: 5,
  created_at: '2026-11-01T00:00:00Z',
  updated_at: '2026-11-01T00:00:00Z',
  revoked_at: null,
  secrets: [],
};

/** A directory that answers `identity` for the hash `sha`, and an admission that answers `result`, recording what it was asked. */
function gate(
  identity: Identification,
  result: KeyAdmissionResult = { kind: 'admit', requests: null, tokens: null, done: () => undefined },
  header?: string,
) {
  const asked: AdmissionAsk[] = [];
  const directory = {
    identifyHash: (sha256: string) => (sha256 === 'sha' ? identity : { kind: 'unknown' }),
  } as unknown as KeyDirectory;
  const admission = {
    admit: (ask: AdmissionAsk) => Promise.resolve(asked.push(ask) && result),
  } as unknown as KeyAdmission;
  return { turns: new TurnAdmission('sha', directory, admission, header), asked };
}

/** A WebSocket turn's context, as its connection makes it. */
const turnOf = (id: string): RequestContext => new RequestContext(id, 0, {});

const refusedWith = (code: string, message: RegExp) => (error: unknown) =>
  error instanceof CortexError && error.code === code && message.test(error.message);

describe('websocket turn admission', () => {
  it(
    'turn admission - a turn of a usable key is asked of the key ' +
      'admission as a POST /v1/responses, and its done is returned',
    async () => {
      let ended = 0;
      const { turns, asked } = gate(
        { kind: 'key', principal: { key: KEY } },
        { kind: 'admit', requests: null, tokens: null, done: () => void ended++ },
      );
      const turn = turnOf('req.1');
      const meter = turn.meter;
      const done = await turns.admit(turn, { model: 'cortex-chat', input: 'hi' }, 42, true);
      assert.deepEqual(asked, [
        {
          key: KEY,
          requestId: 'req.1',
          meter,
          path: '/v1/responses',
          body: { model: 'cortex-chat', input: 'hi' },
          bytes: 42,
          background: false,
        },
      ]);
      done();
      assert.equal(ended, 1);
    },
  );

  it(
    "turn admission - each turn runs at the key's tier and account as " +
      "they are at that turn, lowered by the upgrade's priority header",
    async () => {
      const identity = { kind: 'key' as const, principal: { key: KEY } };
      const { turns } = gate(identity);
      const first = turnOf('conn.1');
      (await turns.admit(first, { model: 'cortex-chat' }, 10, true))();
      assert.deepEqual(first.priority, { tier: 5, account: 'team-a', keyId: 'key_1' });
      // An operator moves the key to another tier and account while its socket is open.
      identity.principal = { key: { ...KEY, tier: 8, account: 'team-b' } };
      const second = turnOf('conn.2');
      await turns.admit(second, { model: 'cortex-chat' }, 10, true);
      assert.deepEqual(second.priority, { tier: 8, account: 'team-b', keyId: 'key_1' });
      assert.deepEqual(
        first.priority,
        { tier: 5, account: 'team-a', keyId: 'key_1' },
        'an earlier turn keeps the tier it ran at',
      );

      const lowered = gate({ kind: 'key', principal: { key: KEY } }, undefined, '2');
      const loweredTurn = turnOf('conn.1');
      await lowered.turns.admit(loweredTurn, { model: 'cortex-chat' }, 10, true);
      assert.equal(loweredTurn.priority?.tier, 2);
      const warmUp = gate({ kind: 'key', principal: { key: KEY } });
      const warmUpTurn = turnOf('conn.1');
      await warmUp.turns.admit(warmUpTurn, { model: 'cortex-chat' }, 10, false);
      assert.equal(warmUpTurn.priority, undefined, 'a warm-up runs nothing, so it is given no tier');
    },
  );

  it("turn admission - a refusal of the key's limits is thrown as it came", async () => {
    const error = new CortexError('rate_limit_exceeded', 'rate limit reached (requests per minute)');
    const { turns } = gate(
      { kind: 'key', principal: { key: KEY } },
      { kind: 'refuse', requests: null, tokens: null, error, retryAfterMs: 1_000 },
    );
    await assert.rejects(
      turns.admit(turnOf('req.3'), { model: 'cortex-chat' }, 10, true),
      (thrown) => thrown === error,
    );
  });

  it('turn admission - a key revoked, expired or gone since the upgrade is refused before any limit is counted', async () => {
    const revoked = new CortexError('key_revoked', 'the API key key_1 ("ci") was revoked at 2026-11-25T00:00:00Z');
    const first = gate({ kind: 'refused', error: revoked });
    await assert.rejects(
      first.turns.admit(turnOf('req.1'), { model: 'cortex-chat' }, 10, true),
      (thrown) => thrown === revoked,
    );
    const gone = gate({ kind: 'unknown' });
    await assert.rejects(
      gone.turns.admit(turnOf('req.1'), { model: 'cortex-chat' }, 10, true),
      refusedWith('unauthorized', /no longer valid: open a new connection/),
    );
    assert.deepEqual([...first.asked, ...gone.asked], []);
  });

  it('turn admission - a model the key may not use is a 403 naming the field, counted nowhere', async () => {
    const { turns, asked } = gate({ kind: 'key', principal: { key: KEY } });
    await assert.rejects(
      turns.admit(turnOf('req.1'), { model: 'cortex-loop' }, 10, true),
      (error: unknown) =>
        refusedWith('permission_denied', /may not use the model 'cortex-loop'; it may use: cortex-chat/)(error) &&
        (error as CortexError).extra.param === 'model',
    );
    assert.deepEqual(asked, []);
  });

  it('turn admission - a warm-up (generate: false) has its key and model checked but counts against no limit', async () => {
    const { turns, asked } = gate({ kind: 'key', principal: { key: KEY } });
    (await turns.admit(turnOf('req.1'), { model: 'cortex-chat' }, 10, false))();
    assert.deepEqual(asked, []);
    await assert.rejects(
      turns.admit(turnOf('req.2'), { model: 'cortex-loop' }, 10, false),
      refusedWith('permission_denied', /cortex-loop/),
    );
  });
});
