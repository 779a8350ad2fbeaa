import 'reflect-metadata';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '../errors/error-codes.js';
import {
  decodeBusStatus,
  decodeDefrag,
  decodeLoadFailed,
  decodeReplicaEvent,
  decodeLoadProgress,
  decodeRequestFinished,
  decodeStreamEvent,
  decodeWorkerLifecycle,
} from './event-decoders.js';

function rejects(read: () => unknown, param: string): void {
  assert.throws(
    read,
    (error: Error) => error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === param,
    param,
  );
}

const finished = {
  requestId: 'r1',
  model: 'm',
  workerId: 'w1',
  dialect: 'openai.chat',
  stream: true,
  status: 200,
  errorCode: null,
  finishReason: 'stop',
  usage: { promptTokens: 3, cachedPromptTokens: 0, completionTokens: 4, reasoningTokens: 0 },
  timings: { ttftMs: 1, promptMs: 1, decodeTokensPerSecond: 10, durationMs: 5, queueMs: 0 },
  durationMs: 6,
  coldStart: false,
  placeMs: 1,
  finishedAt: 1,
  hops: { parseMs: 0.1, decodeMs: 0.5, generateMs: 0.3, firstEventMs: 2, writeMs: 0.1 },
  tier: 5,
};

describe('event decoders', () => {
  it('event decoders - a request-finished event comes back whole; absent optional fields read as null', () => {
    assert.deepEqual(decodeRequestFinished(finished), finished);
    const { placeMs: _placeMs, hops: _hops, tier: _tier, ...older } = finished;
    assert.equal(decodeRequestFinished(older).placeMs, null);
    assert.equal(decodeRequestFinished(older).hops, null);
    assert.equal(decodeRequestFinished(older).tier, undefined);
  });

  it('event decoders - a bad request-finished field is named by its path', () => {
    rejects(() => decodeRequestFinished({ ...finished, status: '200' }), 'status');
    rejects(() => decodeRequestFinished({ ...finished, dialect: 'smoke-signals' }), 'dialect');
    rejects(() => decodeRequestFinished({ ...finished, errorCode: 'made_up' }), 'errorCode');
    rejects(
      () => decodeRequestFinished({ ...finished, usage: { ...finished.usage, completionTokens: -1 } }),
      'usage.completionTokens',
    );
    rejects(
      () => decodeRequestFinished({ ...finished, timings: { ...finished.timings, ttftMs: 'fast' } }),
      'timings.ttftMs',
    );
    rejects(() => decodeRequestFinished({ ...finished, hops: { ...finished.hops, writeMs: 'soon' } }), 'hops.writeMs');
    rejects(() => decodeRequestFinished({ ...finished, tier: 'gold' }), 'tier');
    rejects(() => decodeRequestFinished([]), 'event');
  });

  it('event decoders - lifecycle and bus events name the field at fault', () => {
    assert.deepEqual(decodeDefrag({ workerId: 'w1', at: 1, cycles: 3, dropped: ['m'] }), {
      workerId: 'w1',
      at: 1,
      cycles: 3,
      dropped: ['m'],
    });
    rejects(() => decodeDefrag({ workerId: 'w1', at: 1, cycles: 3, dropped: [7] }), 'dropped[0]');
    rejects(() => decodeLoadFailed({ workerId: 'w1', at: 1, model: 'm' }), 'error');
    assert.deepEqual(decodeReplicaEvent({ model: 'm', workerId: 'w2', reason: 'queue_wait', at: 1 }, 'added'), {
      model: 'm',
      workerId: 'w2',
      reason: 'queue_wait',
      at: 1,
    });
    assert.deepEqual(decodeReplicaEvent({ model: 'm', reason: 'no_room', at: 1 }, 'blocked'), {
      model: 'm',
      reason: 'no_room',
      at: 1,
    });
    rejects(() => decodeReplicaEvent({ model: 'm', workerId: 'w2', reason: 'no_room', at: 1 }, 'retired'), 'reason');
    rejects(() => decodeReplicaEvent({ model: 'm', reason: 'idle', at: 1 }, 'retired'), 'workerId');
    assert.deepEqual(decodeLoadProgress({ workerId: 'w1', model: 'm', fraction: 0.5 }), {
      workerId: 'w1',
      model: 'm',
      fraction: 0.5,
    });
    rejects(() => decodeLoadProgress({ workerId: 'w1', model: 'm', fraction: 2 }), 'fraction');
    assert.deepEqual(
      decodeLoadProgress({ workerId: 'w1', model: 'm', fraction: 0.1, phase: 'downloading', trigger: 'console' }),
      { workerId: 'w1', model: 'm', fraction: 0.1, phase: 'downloading', trigger: 'console' },
    );
    rejects(() => decodeLoadProgress({ workerId: 'w1', model: 'm', fraction: 0, phase: 'copy' }), 'phase');
    assert.equal(decodeLoadFailed({ workerId: 'w1', at: 1, model: 'm', error: 'x', cancelled: true }).cancelled, true);
    assert.equal('cancelled' in decodeLoadFailed({ workerId: 'w1', at: 1, model: 'm', error: 'x' }), false);
    rejects(() => decodeLoadFailed({ workerId: 'w1', at: 1, model: 'm', error: 'x', cancelled: 'yes' }), 'cancelled');
    rejects(() => decodeLoadProgress({ workerId: 'w1', model: 'm', fraction: 0, trigger: 'cron' }), 'trigger');
    rejects(
      () => decodeBusStatus({ service: 's', instance: 'i', connected: true, reconnects: 0, intervalMs: 0 }),
      'intervalMs',
    );
    assert.deepEqual(decodeWorkerLifecycle({ workerId: 'w1', at: 1, extra: true }), { workerId: 'w1', at: 1 });
    rejects(() => decodeWorkerLifecycle({ workerId: 7, at: 1 }), 'workerId');
  });

  it('event decoders - stream events: each type checks its own fields', () => {
    const finish = { seq: 3, type: 'finish', reason: 'stop', usage: finished.usage, timings: finished.timings };
    assert.deepEqual(decodeStreamEvent(finish), finish);
    assert.deepEqual(decodeStreamEvent({ seq: 0, type: 'keepalive' }), { seq: 0, type: 'keepalive' });
    const error = { seq: 1, type: 'error', error: { code: 'busy', message: 'full', retryAfter: 1.5 } };
    assert.deepEqual(decodeStreamEvent(error), error);
    rejects(() => decodeStreamEvent({ seq: -1, type: 'text', text: 'a' }), 'seq');
    rejects(() => decodeStreamEvent({ seq: 0, type: 'shout' }), 'type');
    rejects(() => decodeStreamEvent({ seq: 0, type: 'text' }), 'text');
    rejects(() => decodeStreamEvent({ seq: 0, type: 'tool_args', index: 0 }), 'delta');
    rejects(() => decodeStreamEvent({ ...finish, reason: 'bored' }), 'reason');
    rejects(() => decodeStreamEvent({ ...finish, timings: { ...finished.timings, queueMs: null } }), 'timings.queueMs');
    rejects(() => decodeStreamEvent({ seq: 1, type: 'error', error: { message: 'no code' } }), 'error.code');
  });
});
