import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ModelView, WorkerState } from '../fleet/fleet-state.js';
import { decide, idleExpired, RECENT_USE_MS, type Decision, type ModelPolicy, type PlaceQuestion, type PlanContext } from './planner.js';

const MiB = 2 ** 20;
const NOW = 1_000_000;

const m = (id: string, over: Partial<ModelView> = {}): ModelView => ({ id, state: 'ready', inFlight: 0, queued: 0, slots: 1, lastUsedAt: 0, sizeBytes: MiB, ...over });
const w = (workerId: string, freeMiB: number, models: ModelView[] = []): WorkerState => ({ workerId, draining: false, freeBytes: freeMiB * MiB, models });

interface Case {
  title: string;
  fleet: WorkerState[];
  question?: Partial<PlaceQuestion> & { id?: string; priority?: number; workers?: string[] };
  context?: Partial<PlanContext> & { policies?: Record<string, Partial<ModelPolicy>> };
  /** The decision's kind and the fields to check (victims by id). */
  expect: { kind?: Decision['kind']; workerId?: string; sole?: boolean; victims?: string[]; closeUntil?: number };
}

function run(c: Case): Decision {
  const { id = 'new', priority = 0, workers, ...question } = c.question ?? {};
  const { policies = {}, ...context } = c.context ?? {};
  return decide(
    c.fleet,
    { model: { id, priority, ...(workers && { workers }) }, exclude: [], needed: MiB, ...question },
    {
      now: NOW,
      strategy: 'lru',
      loading: new Set(),
      turn: 0,
      swapHoldMs: 2_000,
      policy: (model) => ({ pinned: false, priority: 0, ...policies[model] }),
      ...context,
    },
  );
}

function check(c: Case): void {
  const decision = run(c);
  const { victims, ...rest } = c.expect;
  for (const [key, value] of Object.entries(rest)) assert.deepEqual((decision as Record<string, unknown>)[key], value, `${c.title}: ${key}`);
  if (victims) assert.deepEqual('victims' in decision ? decision.victims.map((v) => v.id) : null, victims, `${c.title}: victims`);
}

const cases: Case[] = [
  // Serving: ready somewhere → least loaded; ties take turns.
  { title: 'ready - the least loaded worker serves', fleet: [w('a', 0, [m('new', { inFlight: 2 })]), w('b', 0, [m('new', { queued: 1 })])], expect: { kind: 'serve', workerId: 'b' } },
  { title: 'ready - equally loaded workers take turns (turn 0)', fleet: [w('a', 0, [m('new')]), w('b', 0, [m('new')])], expect: { kind: 'serve', workerId: 'a' } },
  { title: 'ready - equally loaded workers take turns (turn 1)', fleet: [w('a', 0, [m('new')]), w('b', 0, [m('new')])], context: { turn: 1 }, expect: { kind: 'serve', workerId: 'b' } },
  // Sole: the only worker that could serve the model, whatever the request; its answer may be reused.
  { title: 'sole - one worker with the model ready, others without it', fleet: [w('a', 0, [m('new', { inFlight: 3 })]), w('b', 10, [m('other')])], expect: { kind: 'serve', workerId: 'a', sole: true } },
  { title: 'sole - not when two workers have it ready', fleet: [w('a', 0, [m('new')]), w('b', 0, [m('new', { inFlight: 1 })])], expect: { kind: 'serve', workerId: 'a', sole: false } },
  { title: 'sole - not while another copy loads', fleet: [w('a', 0, [m('new')]), w('b', 10, [m('new', { state: 'loading' })])], expect: { kind: 'serve', workerId: 'a', sole: false } },
  { title: 'sole - not in a swap hold', fleet: [w('a', 0, [m('new', { closingUntil: NOW + 1 })])], expect: { kind: 'serve', workerId: 'a', sole: false } },
  { title: 'sole - not on a retry that excludes workers', fleet: [w('a', 0, [m('new')]), w('b', 0)], question: { exclude: ['b'] }, expect: { kind: 'serve', workerId: 'a', sole: false } },
  { title: 'sole - the conversation’s worker, when it is the only one', fleet: [w('a', 0, [m('new', { inFlight: 1 })])], question: { affineWorker: 'a' }, expect: { kind: 'serve', workerId: 'a', sole: true } },
  { title: 'ready - an excluded worker is not used again', fleet: [w('a', 0, [m('new')]), w('b', 0, [m('new', { inFlight: 3 })])], question: { exclude: ['a'] }, expect: { kind: 'serve', workerId: 'b' } },
  // Affinity.
  { title: 'affinity - the conversation’s worker wins over a less loaded one', fleet: [w('a', 0, [m('new', { inFlight: 1 })]), w('b', 0, [m('new')])], question: { affineWorker: 'a' }, expect: { kind: 'serve', workerId: 'a' } },
  { title: 'affinity - skipped when requests are queued for the model there', fleet: [w('a', 0, [m('new', { queued: 1 })]), w('b', 0, [m('new')])], question: { affineWorker: 'a' }, expect: { kind: 'serve', workerId: 'b' } },
  { title: 'affinity - skipped when the worker lost the model', fleet: [w('a', 0, []), w('b', 0, [m('new')])], question: { affineWorker: 'a' }, expect: { kind: 'serve', workerId: 'b' } },
  { title: 'affinity - skipped when the worker is down (not in the fleet)', fleet: [w('b', 0, [m('new')])], question: { affineWorker: 'a' }, expect: { kind: 'serve', workerId: 'b' } },
  { title: 'affinity - ignored on a retry that excludes workers', fleet: [w('a', 0, [m('new')]), w('b', 0, [m('new', { inFlight: 1 })])], question: { affineWorker: 'a', exclude: ['c'] }, expect: { kind: 'serve', workerId: 'a' } },
  { title: 'affinity - skipped when the model there is closed', fleet: [w('a', 0, [m('new', { closingUntil: NOW })]), w('b', 0, [m('new', { inFlight: 2 })])], question: { affineWorker: 'a' }, expect: { kind: 'serve', workerId: 'b' } },
  // Batching by model: a closing model serves during its hold, not after.
  { title: 'batching - a model in its swap hold still takes requests', fleet: [w('a', 0, [m('new', { closingUntil: NOW + 1 })])], expect: { kind: 'serve', workerId: 'a' } },
  { title: 'batching - a closed model takes no new requests; its room is not planned with twice', fleet: [w('a', 0, [m('new', { closingUntil: NOW })])], expect: { kind: 'wait' } },
  // Loading somewhere → join it.
  { title: 'join - a load under way is joined, not repeated', fleet: [w('a', 10, [m('new', { state: 'loading' })]), w('b', 10)], expect: { kind: 'join', workerId: 'a' } },
  { title: 'no worker - every worker excluded', fleet: [w('a', 10)], question: { exclude: ['a'] }, expect: { kind: 'no_worker' } },
  { title: 'no worker - an empty fleet', fleet: [], expect: { kind: 'no_worker' } },
  { title: 'estimate - a load is planned only once the model is sized', fleet: [w('a', 10)], question: { needed: undefined }, expect: { kind: 'estimate' } },
  // Fits now.
  { title: 'fits - on the worker with the most free memory, evicting nothing', fleet: [w('a', 2), w('b', 5)], expect: { kind: 'load', workerId: 'b', victims: [], closeUntil: NOW } },
  // LRU.
  { title: 'lru - the least recently used idle model goes', fleet: [w('a', 0, [m('x', { lastUsedAt: 30 }), m('y', { lastUsedAt: 10 })])], expect: { kind: 'load', workerId: 'a', victims: ['y'], closeUntil: NOW } },
  { title: 'lru - fewest bytes evicted wins across workers', fleet: [w('a', 0, [m('big', { sizeBytes: 4 * MiB })]), w('b', 0, [m('small')])], expect: { kind: 'load', workerId: 'b', victims: ['small'] } },
  { title: 'lru - a model a worker has not sized counts at its estimate', fleet: [w('a', 0, [m('x', { sizeBytes: undefined })])], context: { policies: { x: { estimate: MiB } } }, expect: { kind: 'load', victims: ['x'] } },
  // Priority.
  {
    title: 'priority - a model of higher priority is not evicted for a lower one',
    fleet: [w('a', 0, [m('x')])],
    question: { priority: 1 },
    context: { strategy: 'priority', policies: { x: { priority: 5 } } },
    expect: { kind: 'no_room' },
  },
  {
    title: 'priority - the lowest priority goes first, whatever its last use',
    fleet: [w('a', 0, [m('low', { lastUsedAt: 50 }), m('mid', { lastUsedAt: 1 })])],
    question: { priority: 5 },
    context: { strategy: 'priority', policies: { low: { priority: 1 }, mid: { priority: 3 } } },
    expect: { kind: 'load', victims: ['low'] },
  },
  // Pins.
  { title: 'pins - a pinned model is never evicted', fleet: [w('a', 0, [m('x')])], context: { policies: { x: { pinned: true } } }, expect: { kind: 'no_room' } },
  { title: 'pins - the unpinned model goes instead', fleet: [w('a', 0, [m('x', { lastUsedAt: 1 }), m('y', { lastUsedAt: 9 })])], context: { policies: { x: { pinned: true } } }, expect: { kind: 'load', victims: ['y'] } },
  // Busy victims.
  { title: 'busy - idle models go before busy ones', fleet: [w('a', 0, [m('busy', { inFlight: 1, lastUsedAt: 1 }), m('idle', { lastUsedAt: 9 })])], expect: { kind: 'load', victims: ['idle'], closeUntil: NOW } },
  { title: 'busy - a serving victim keeps taking requests for the swap hold', fleet: [w('a', 0, [m('busy', { inFlight: 1 })])], expect: { kind: 'load', victims: ['busy'], closeUntil: NOW + 2_000 } },
  { title: 'busy - a model placed on moments ago counts as busy', fleet: [w('a', 0, [m('x', { lastUsedAt: NOW - RECENT_USE_MS + 1 })])], expect: { kind: 'load', victims: ['x'], closeUntil: NOW + 2_000 } },
  { title: 'busy - a model this router is loading counts as busy', fleet: [w('a', 0, [m('x')])], context: { loading: new Set(['x']) }, expect: { kind: 'load', victims: ['x'], closeUntil: NOW + 2_000 } },
  // Preferred workers.
  { title: 'preferred - the model’s own workers first, in their order, even if that evicts more', fleet: [w('a', 5), w('b', 0, [m('x')]), w('c', 0, [m('y')])], question: { workers: ['c', 'b'] }, expect: { kind: 'load', workerId: 'c', victims: ['y'] } },
  { title: 'preferred - other workers when the own ones cannot make room', fleet: [w('a', 5), w('b', 0, [m('x')])], question: { workers: ['b'] }, context: { policies: { x: { pinned: true } } }, expect: { kind: 'load', workerId: 'a', victims: [] } },
  // Settling.
  { title: 'wait - a model still loading will become evictable', fleet: [w('a', 0, [m('x', { state: 'loading' })])], expect: { kind: 'wait' } },
  { title: 'wait - a model unloading frees its room soon', fleet: [w('a', 0, [m('x', { state: 'unloading' })])], expect: { kind: 'wait' } },
  { title: 'no room - not even once everything settles', fleet: [w('a', 0, [m('x', { state: 'loading' })])], question: { needed: 3 * MiB }, expect: { kind: 'no_room' } },
];

describe('placement planner', () => {
  for (const c of cases) it(`placement planner - ${c.title}`, () => check(c));

  it('placement planner - no room names the worker with the most free memory', () => {
    const decision = run({ title: '', fleet: [w('a', 0.5, [m('x')]), w('b', 0.75, [m('y')])], context: { policies: { x: { pinned: true }, y: { pinned: true } } }, expect: {} });
    assert.equal(decision.kind === 'no_room' && decision.roomiest.workerId, 'b');
  });
});

describe('idle sweep', () => {
  const context = (policies: Record<string, Partial<ModelPolicy>> = {}): PlanContext => ({
    now: NOW,
    strategy: 'lru',
    loading: new Set(),
    turn: 0,
    swapHoldMs: 0,
    policy: (id) => ({ pinned: false, priority: 0, ...policies[id] }),
  });
  const fleet = [w('a', 0, [m('old', { lastUsedAt: NOW - 60_000 }), m('fresh', { lastUsedAt: NOW - 1_000 }), m('busy', { lastUsedAt: 0, inFlight: 1 }), m('pin', { lastUsedAt: 0 }), m('loading', { state: 'loading', lastUsedAt: 0 })])];

  it('idle sweep - only ready, idle, unpinned models unused past their TTL go', () => {
    assert.deepEqual(idleExpired(fleet, () => 30, context({ pin: { pinned: true } })), [{ workerId: 'a', model: 'old' }]);
  });

  it('idle sweep - a TTL of 0 keeps a model for ever', () => {
    assert.deepEqual(idleExpired(fleet, (id) => (id === 'old' ? 0 : 30), context({ pin: { pinned: true } })), []);
  });
});
