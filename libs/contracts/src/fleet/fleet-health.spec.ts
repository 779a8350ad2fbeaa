import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { fleetHealth, workerCapacity, type FleetHealthInput, type HealthVerdict } from './fleet-health.js';
import type { CatalogueEntry, FleetView, WorkerView } from './fleet.messages.js';

const worker = (workerId: string, over: Partial<WorkerView> = {}): WorkerView => ({
  workerId,
  host: 'h',
  pid: 1,
  up: true,
  lastSeenMs: 500,
  draining: false,
  memory: { budgetBytes: 0, usedBytes: 0, freeBytes: 0 },
  device: { name: 'cpu', kind: 'cpu', totalBytes: 0, freeBytes: 0 },
  models: [],
  ...over,
});
const model = (id: string, readyOn: string[] = []): CatalogueEntry => ({
  id,
  ownedBy: 'cortex',
  created: 0,
  contextSize: 512,
  pinned: false,
  priority: 0,
  loaded: readyOn.length > 0,
  locations: readyOn.map((workerId) => ({ workerId, state: 'ready', inFlight: 0, queued: 0 })),
  capabilities: null,
});
const MIB = 2 ** 20;
/** A worker that can hold `budgetMib` on a device of `deviceMib` (0: unknown). */
const sized = (workerId: string, budgetMib: number, deviceMib = 16_384, over: Partial<WorkerView> = {}): WorkerView =>
  worker(workerId, {
    memory: { budgetBytes: budgetMib * MIB, usedBytes: 0, freeBytes: budgetMib * MIB },
    device: { name: 'cpu', kind: 'cpu', totalBytes: deviceMib * MIB, freeBytes: deviceMib * MIB },
    ...over,
  });
/** A catalogue model whose estimate is known (from the catalogue's facts). */
const needs = (id: string, needMib: number, readyOn: string[] = []): CatalogueEntry => ({
  ...model(id, readyOn),
  memoryBytes: needMib * MIB,
});
const fleet = (workers: WorkerView[], catalogue: CatalogueEntry[]): FleetView => ({
  routerId: 'r',
  workers,
  catalogue,
});
const healthy = { bus: true, jetstreamError: null };

describe('fleet health', () => {
  const cases: Array<[string, FleetHealthInput, HealthVerdict, string[], RegExp | null]> = [
    [
      'every worker up',
      { ...healthy, fleet: fleet([worker('w1'), worker('w2')], [model('a', ['w1']), model('b')]) },
      'ok',
      [],
      null,
    ],
    [
      'one worker down, another up: every model can still be loaded',
      { ...healthy, fleet: fleet([worker('w1', { up: false, lastSeenMs: 12_000 }), worker('w2')], [model('a')]) },
      'impaired',
      [],
      /worker w1 is down: it stopped heartbeating without saying goodbye \(last seen 12 s ago\)/,
    ],
    [
      'a worker down says when routers forget it',
      {
        ...healthy,
        fleet: fleet([worker('w1', { up: false, lastSeenMs: 3_000, forgetInMs: 597_000 }), worker('w2')], [model('a')]),
      },
      'impaired',
      [],
      /worker w1 is down: .*\(last seen 3 s ago; forgotten in 597 s unless it heartbeats again\)/,
    ],
    [
      'a worker that left (forgotten by the router) is no reason: the fleet that remains is whole',
      { ...healthy, fleet: fleet([worker('w2')], [model('a', ['w2'])]) },
      'ok',
      [],
      null,
    ],
    [
      'a worker draining',
      { ...healthy, fleet: fleet([worker('w1', { draining: true }), worker('w2')], [model('a')]) },
      'impaired',
      [],
      /worker w1 is draining/,
    ],
    [
      'every worker down: what is not ready anywhere cannot be served',
      { ...healthy, fleet: fleet([worker('w1', { up: false })], [model('a', ['w1']), model('b')]) },
      'degraded',
      ['a', 'b'],
      /no worker takes new models.*2 catalogue models cannot be served: a, b/s,
    ],
    [
      'the only worker draining: its ready models cannot take requests either',
      { ...healthy, fleet: fleet([worker('w1', { draining: true })], [model('a', ['w1'])]) },
      'degraded',
      ['a'],
      /1 catalogue model cannot be served: a/,
    ],
    ['no worker has joined', { ...healthy, fleet: fleet([], [model('a')]) }, 'degraded', ['a'], /no worker has joined/],
    [
      'no router answers',
      { ...healthy, fleet: null, fleetError: 'timed out after 2000 ms' },
      'degraded',
      [],
      /no router answered \(timed out after 2000 ms\)/,
    ],
    [
      'a model larger than every worker could hold, before anyone asked for it',
      { ...healthy, fleet: fleet([sized('w1', 64), sized('w2', 128)], [needs('big', 3_000), needs('small', 20)]) },
      'degraded',
      ['big'],
      /1 catalogue model cannot be served: big.*big needs about 3000 MiB, more than any worker can hold \(the largest, w2, 128 MiB\); raise worker\.memory_budget/s,
    ],
    [
      'a model that fits on one worker of two',
      { ...healthy, fleet: fleet([sized('w1', 64), sized('w2', 4_096)], [needs('big', 3_000)]) },
      'ok',
      [],
      null,
    ],
    [
      'a model whose size is not known yet is not judged',
      { ...healthy, fleet: fleet([sized('w1', 64)], [model('unread')]) },
      'ok',
      [],
      null,
    ],
    [
      'without a budget, the device bounds what a worker can hold',
      { ...healthy, fleet: fleet([sized('w1', 0, 1_024)], [needs('big', 3_000)]) },
      'degraded',
      ['big'],
      /big needs about 3000 MiB, more than any worker can hold \(the largest, w1, 1024 MiB\)/,
    ],
    [
      'a worker whose memory is unknown may hold it',
      { ...healthy, fleet: fleet([sized('w1', 64), sized('w2', 0, 0)], [needs('big', 3_000)]) },
      'ok',
      [],
      null,
    ],
    [
      'a too-large model ready somewhere is served there',
      { ...healthy, fleet: fleet([sized('w1', 64)], [needs('big', 3_000, ['w1'])]) },
      'ok',
      [],
      null,
    ],
    [
      'only a draining worker could hold it',
      {
        ...healthy,
        fleet: fleet([sized('w1', 64), sized('w2', 4_096, 16_384, { draining: true })], [needs('big', 3_000)]),
      },
      'degraded',
      ['big'],
      /big needs about 3000 MiB, more than any worker can hold \(the largest, w1, 64 MiB\).*worker w2 is draining/s,
    ],
    [
      'an upstream that does not answer: its model goes to its fallback',
      {
        ...healthy,
        fleet: fleet(
          [worker('remote-1'), worker('w1')],
          [
            {
              ...model('up-chat'),
              loaded: true,
              locations: [
                {
                  workerId: 'remote-1',
                  state: 'ready',
                  inFlight: 0,
                  queued: 0,
                  unreachable: { since: Date.UTC(2026, 0, 2, 3, 4, 5), error: 'cannot be reached: ECONNREFUSED' },
                },
              ],
            },
            model('local', ['w1']),
          ],
        ),
      },
      'impaired',
      [],
      /^the upstream of up-chat on worker remote-1 is failing \(cannot be reached: ECONNREFUSED\) since 2026-01-02T03:04:05\.000Z: its requests go to another place or its fallback$/,
    ],
    [
      'an upstream that does not answer on a worker that is down: the worker is the reason',
      {
        ...healthy,
        fleet: fleet(
          [worker('remote-1', { up: false, lastSeenMs: 9_000 }), worker('w1')],
          [
            {
              ...model('up-chat'),
              locations: [
                { workerId: 'remote-1', state: 'ready', inFlight: 0, queued: 0, unreachable: { since: 0, error: 'x' } },
              ],
            },
          ],
        ),
      },
      'impaired',
      [],
      /^worker remote-1 is down: [^|]*$/,
    ],
    ['NATS unreachable', { bus: false, jetstreamError: null, fleet: null }, 'degraded', [], /^NATS is unreachable/],
    [
      'JetStream failing',
      { bus: true, jetstreamError: 'insufficient resources', fleet: fleet([worker('w1')], [model('a')]) },
      'degraded',
      [],
      /JetStream does not answer \(insufficient resources\)/,
    ],
  ];
  for (const [name, input, status, unservable, reason] of cases) {
    it(`fleet health - ${name}: ${status}`, () => {
      const health = fleetHealth(input);
      assert.equal(health.status, status);
      assert.deepEqual(health.unservable, unservable);
      if (reason) assert.match(health.reasons.join(' | '), reason);
      else assert.deepEqual(health.reasons, []);
    });
  }

  it('fleet health - a worker can hold its budget, capped by its device, or its device without a budget', () => {
    assert.equal(workerCapacity(sized('w', 64)), 64 * MIB);
    assert.equal(workerCapacity(sized('w', 64, 32)), 32 * MIB);
    assert.equal(workerCapacity(sized('w', 0, 1_024)), 1_024 * MIB);
    assert.equal(workerCapacity(sized('w', 64, 0)), 64 * MIB);
    assert.equal(workerCapacity(sized('w', 0, 0)), 0);
  });

  it('fleet health - counts the workers up, down and draining', () => {
    const health = fleetHealth({
      ...healthy,
      fleet: fleet([worker('w1'), worker('w2', { up: false }), worker('w3', { draining: true })], []),
    });
    assert.deepEqual(health.workers, { up: 2, down: 1, draining: 1 });
  });
});
