import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { StreamEvent } from '@cortex/contracts';
import { decideResume, EventRing, LiveRuns, LoadBoard, tooFarBehind } from './feed-state.js';

const start = (model = 'm', workerId = 'w1'): StreamEvent => ({
  seq: 0,
  type: 'start',
  runId: 'r',
  workerId,
  model,
  promptTokens: 7,
});
const text = (seq: number): StreamEvent => ({ seq, type: 'text', text: 'x' });
const usage = { promptTokens: 7, cachedPromptTokens: 0, completionTokens: 2, reasoningTokens: 0 };
const timings = { ttftMs: 1, promptMs: 1, decodeTokensPerSecond: 1, durationMs: 1, queueMs: 0 };

describe('console feed state', () => {
  it('console - a run shows prompt after start, generating with a token count, and leaves on finish or error', () => {
    const live = new LiveRuns();
    live.apply('r1', start('cortex-chat'), 1_000);
    let [row] = live.take(1_000) ?? [];
    assert.deepEqual(
      [row?.model, row?.workerId, row?.state, row?.promptTokens, row?.tokens, row?.tokensPerSecond],
      ['cortex-chat', 'w1', 'prompt', 7, 0, null],
    );
    assert.equal(live.take(1_000), null, 'nothing changed since the last take');
    live.apply('r1', text(1), 1_100);
    live.apply('r1', text(2), 1_200);
    live.apply('r1', { seq: 3, type: 'text', text: 'xyz', pieces: 3 }, 1_300);
    [row] = live.take(1_600) ?? [];
    assert.deepEqual([row?.state, row?.tokens, row?.elapsedMs], ['generating', 5, 600]);
    assert.equal(
      row?.tokensPerSecond,
      4 / 0.5,
      'tokens after the first over the time since it; a merged delta counts its pieces',
    );
    live.apply('r1', { seq: 4, type: 'keepalive' }, 1_700);
    assert.equal(live.take(1_700), null, 'a keepalive changes nothing shown');
    live.apply('r1', { seq: 5, type: 'finish', reason: 'stop', usage, timings }, 1_800);
    assert.deepEqual(live.take(1_800), []);
    live.apply('r2', start(), 2_000);
    live.apply('r2', { seq: 1, type: 'error', error: { code: 'cancelled', message: 'stop' } }, 2_100);
    assert.equal(live.size, 0);
  });

  it('console - a request its gateway runs shows queued or loading before its stream, then keeps its key', () => {
    const live = new LiveRuns();
    const run = { requestId: 'q1', runId: 'r1', model: 'm', workerId: null, since: 500 };
    live.pending([run], new Set(), 1_000);
    let [row] = live.take(1_000) ?? [];
    assert.deepEqual(
      [row?.state, row?.model, row?.workerId, row?.elapsedMs, row?.keyId],
      ['queued', 'm', null, 500, null],
    );
    live.pending([{ ...run, keyId: 'key_1', account: 'team' }], new Set(['m']), 1_100);
    [row] = live.take(1_100) ?? [];
    assert.deepEqual(
      [row?.state, row?.keyId, row?.account],
      ['loading', 'key_1', 'team'],
      'its model loads somewhere: it waits on that',
    );
    live.pending([{ ...run, workerId: 'w1', keyId: 'key_1', account: 'team' }], new Set(['m']), 1_200);
    [row] = live.take(1_200) ?? [];
    assert.deepEqual([row?.state, row?.workerId], ['queued', 'w1'], 'placed: it waits for a slot, whatever else loads');
    assert.equal(live.take(1_200), null);
    live.apply('r1', { seq: 0, type: 'keepalive' }, 1_250);
    live.apply('r9', { seq: 0, type: 'keepalive' }, 1_250);
    assert.equal(live.take(1_250), null, 'a keepalive neither starts a queued row nor adds one');
    live.apply('r1', start(), 1_300);
    [row] = live.take(1_300) ?? [];
    assert.deepEqual(
      [row?.state, row?.startedAt, row?.keyId],
      ['prompt', 500, 'key_1'],
      'the stream takes over; elapsed still counts from placement',
    );
    live.pending([], new Set(), 1_400);
    assert.equal(live.size, 1, 'a streaming row stays until its stream ends, listed or not');
    live.pending([{ requestId: 'q2', runId: 'r2', model: 'm', workerId: null, since: 1_400 }], new Set(), 1_500);
    assert.equal(live.size, 2);
    live.pending([{ requestId: 'q2', runId: 'r3', model: 'm', workerId: null, since: 1_400 }], new Set(), 1_600);
    assert.deepEqual(
      live
        .view(1_600)
        .map((r) => r.runId)
        .sort(),
      ['r1', 'r3'],
      'a retry under a new run id replaces the row its gateway no longer lists',
    );
  });

  it('console - a response waiting on an MCP tool between its turns shows the tool, and leaves when the call ends', () => {
    const live = new LiveRuns();
    live.apply('r1', start(), 1_000);
    live.apply('r1', { seq: 1, type: 'finish', reason: 'tool_calls', usage, timings } as StreamEvent, 1_100);
    assert.equal(live.size, 0, 'the turn ended');
    const waiting = { requestId: 'q1', runId: 'r1', model: 'm', workerId: null, since: 1_100, tool: 'docs · search' };
    live.pending([waiting], new Set(['m']), 1_200);
    const [row] = live.take(1_200) ?? [];
    assert.deepEqual([row?.state, row?.tool, row?.model], ['tool', 'docs · search', 'm']);
    live.pending([], new Set(), 1_300);
    assert.equal(live.size, 0, 'the call ended: the next turn is a stream of its own');
  });

  it('console - a stream joined mid-way shows with an unknown model; silent streams are swept', () => {
    const live = new LiveRuns();
    live.apply('r1', text(9), 1_000);
    assert.deepEqual(
      live.view(1_000).map((r) => [r.model, r.state, r.tokens]),
      [[null, 'generating', 1]],
    );
    live.sweep(5_000, 10_000);
    assert.equal(live.size, 1);
    live.sweep(11_001, 10_000);
    assert.equal(live.size, 0);
  });

  it('console - a load shows its fraction, why it started, and a straight-line estimate of the time left in each phase', () => {
    const board = new LoadBoard();
    assert.equal(board.apply({ workerId: 'w1', model: 'm', fraction: 0 }, 1_000).etaMs, null);
    const quarter = board.apply({ workerId: 'w1', model: 'm', fraction: 0.25 }, 2_000);
    assert.deepEqual([quarter.startedAt, quarter.etaMs], [1_000, 3_000]);
    assert.equal(board.apply({ workerId: 'w1', model: 'm', fraction: 1 }, 3_000).etaMs, 0);
    assert.equal(board.view().length, 1);
    assert.equal(board.end('w1', 'm'), true);
    assert.equal(board.end('w1', 'm'), false);
    board.apply({ workerId: 'w3', model: 'm', fraction: 0, trigger: 'console' }, 1_000);
    const downloading = board.apply({ workerId: 'w3', model: 'm', fraction: 0.5, phase: 'downloading' }, 3_000);
    assert.deepEqual(
      [downloading.phase, downloading.trigger, downloading.etaMs],
      ['downloading', 'console', null],
      'a new phase has no estimate until it moves',
    );
    assert.equal(
      board.apply({ workerId: 'w3', model: 'm', fraction: 0.75, phase: 'downloading' }, 4_000).etaMs,
      1_000,
      'a quarter done in 1 s since the phase was first heard at half, so a quarter left takes 1 s more',
    );
    const loading = board.apply({ workerId: 'w3', model: 'm', fraction: 0.5, phase: 'loading' }, 5_000);
    assert.deepEqual(
      [loading.phase, loading.startedAt, loading.phaseStartedAt, loading.trigger],
      ['loading', 1_000, 5_000, 'console'],
    );
    assert.equal(board.end('w3', 'm'), true);
    board.apply({ workerId: 'w2', model: 'm', fraction: 0.5 }, 1_000);
    assert.equal(board.sweep(1_500, 1_000), false);
    assert.equal(board.sweep(2_001, 1_000), true);
    assert.deepEqual(board.view(), []);
  });

  it('console - a download and the load after it each get their own time left', () => {
    const board = new LoadBoard();
    board.apply({ workerId: 'w1', model: 'm', fraction: 0, phase: 'downloading', bytes: 0, totalBytes: 100 }, 1_000);
    const half = board.apply(
      { workerId: 'w1', model: 'm', fraction: 0.5, phase: 'downloading', bytes: 50, totalBytes: 100 },
      3_000,
    );
    assert.deepEqual([half.phase, half.etaMs], ['downloading', 2_000]);
    const loading = board.apply({ workerId: 'w1', model: 'm', fraction: 0.25, phase: 'loading' }, 10_000);
    assert.deepEqual(
      [loading.phase, loading.startedAt, loading.phaseStartedAt, loading.etaMs],
      ['loading', 1_000, 10_000, null],
    );
  });

  it('console - the ring keeps the last events only', () => {
    const ring = new EventRing(3);
    for (const name of ['a', 'b', 'c', 'd']) ring.push(name, '{}');
    assert.deepEqual([ring.oldestSeq, ring.nextSeq], [2, 5]);
    assert.deepEqual(
      ring.after(2).map((e) => e.event),
      ['c', 'd'],
    );
  });

  it('console - a reconnect replays what it missed when the feed still holds it, else resyncs', () => {
    // epoch 'e1' holds seq 5..9 (next is 10)
    const cases: Array<[string | undefined, string]> = [
      [undefined, 'snapshot'],
      ['garbage', 'snapshot'],
      ['e0.7', 'snapshot'],
      ['e1.10', 'snapshot'],
      ['e1.3', 'snapshot'],
      ['e1.4', 'replay'],
      ['e1.9', 'replay'],
    ];
    for (const [id, kind] of cases) assert.equal(decideResume(id, 'e1', 5, 10).kind, kind, String(id));
    assert.deepEqual(decideResume('e1.6', 'e1', 5, 10), { kind: 'replay', after: 6 });
  });

  it('console - a page is dropped only once its socket holds more than the limit', () => {
    assert.equal(tooFarBehind(0, 1024), false);
    assert.equal(tooFarBehind(1024, 1024), false);
    assert.equal(tooFarBehind(1025, 1024), true);
  });
});
