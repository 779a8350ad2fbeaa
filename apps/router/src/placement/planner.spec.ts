import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ModelView, WorkerState } from '../fleet/fleet-state.js';
import {
  decide,
  idleExpired,
  RECENT_USE_MS,
  type Decision,
  type ModelPolicy,
  type PlaceQuestion,
  type PlanContext,
} from './planner.js';
import {
  demand,
  planReplicas,
  pressure,
  PressureClock,
  type ReplicaDecision,
  type ReplicaPolicy,
  type ReplicaQuestion,
  type ReplicaSettings,
} from './replica.planner.js';

const MiB = 2 ** 20;
const NOW = 1_000_000;

const m = (id: string, over: Partial<ModelView> = {}): ModelView => ({
  id,
  state: 'ready',
  inFlight: 0,
  queued: 0,
  slots: 1,
  lastUsedAt: 0,
  sizeBytes: MiB,
  ...over,
});
const w = (workerId: string, freeMiB: number, models: ModelView[] = [], remote = false): WorkerState => ({
  workerId,
  draining: false,
  remote,
  freeBytes: freeMiB * MiB,
  models,
});

interface Case {
  title: string;
  fleet: WorkerState[];
  question?: Partial<PlaceQuestion> & { id?: string; priority?: number; workers?: string[]; upstream?: boolean };
  context?: Partial<PlanContext> & { policies?: Record<string, Partial<ModelPolicy>> };
  /** The decision's kind and the fields to check (victims by id). */
  expect: {
    kind?: Decision['kind'];
    workerId?: string;
    sole?: boolean;
    victims?: string[];
    closeUntil?: number;
    remote?: boolean;
  };
}

function run(c: Case): Decision {
  const { id = 'new', priority = 0, workers, upstream, ...question } = c.question ?? {};
  const { policies = {}, ...context } = c.context ?? {};
  return decide(
    c.fleet,
    {
      model: { id, priority, ...(workers && { workers }), ...(upstream && { upstream: { api: 'chat' } }) },
      exclude: [],
      needed: MiB,
      ...question,
    },
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
  for (const [key, value] of Object.entries(rest))
    assert.deepEqual((decision as Record<string, unknown>)[key], value, `${c.title}: ${key}`);
  if (victims)
    assert.deepEqual('victims' in decision ? decision.victims.map((v) => v.id) : null, victims, `${c.title}: victims`);
}

const cases: Case[] = [
  // Serving: ready somewhere → least loaded; ties take turns.
  {
    title: 'ready - the least loaded worker serves',
    fleet: [w('a', 0, [m('new', { inFlight: 2 })]), w('b', 0, [m('new', { queued: 1 })])],
    expect: { kind: 'serve', workerId: 'b' },
  },
  {
    title: 'ready - equally loaded workers take turns (turn 0)',
    fleet: [w('a', 0, [m('new')]), w('b', 0, [m('new')])],
    expect: { kind: 'serve', workerId: 'a' },
  },
  {
    title: 'ready - equally loaded workers take turns (turn 1)',
    fleet: [w('a', 0, [m('new')]), w('b', 0, [m('new')])],
    context: { turn: 1 },
    expect: { kind: 'serve', workerId: 'b' },
  },
  {
    title: 'ready - a copy whose upstream does not answer comes after a busier one that does',
    fleet: [
      w('r1', 0, [m('new', { unreachable: { since: 0, error: 'cannot be reached: ECONNREFUSED' } })], true),
      w('r2', 0, [m('new', { inFlight: 5, queued: 3 })], true),
    ],
    question: { upstream: true },
    expect: { kind: 'serve', workerId: 'r2' },
  },
  {
    title:
      'ready - with only copies whose upstream does not answer, the least loaded of them serves (it fails fast, to the fallback)',
    fleet: [
      w('r1', 0, [m('new', { inFlight: 1, unreachable: { since: 0, error: 'x' } })], true),
      w('r2', 0, [m('new', { unreachable: { since: 0, error: 'x' } })], true),
    ],
    question: { upstream: true },
    expect: { kind: 'serve', workerId: 'r2' },
  },
  // Sole: the only worker that could serve the model, whatever the request; its answer may be reused.
  {
    title: 'sole - one worker with the model ready, others without it',
    fleet: [w('a', 0, [m('new', { inFlight: 3 })]), w('b', 10, [m('other')])],
    expect: { kind: 'serve', workerId: 'a', sole: true },
  },
  {
    title: 'sole - not when two workers have it ready',
    fleet: [w('a', 0, [m('new')]), w('b', 0, [m('new', { inFlight: 1 })])],
    expect: { kind: 'serve', workerId: 'a', sole: false },
  },
  {
    title: 'sole - not while another copy loads',
    fleet: [w('a', 0, [m('new')]), w('b', 10, [m('new', { state: 'loading' })])],
    expect: { kind: 'serve', workerId: 'a', sole: false },
  },
  {
    title: 'sole - not in a swap hold',
    fleet: [w('a', 0, [m('new', { closingUntil: NOW + 1 })])],
    expect: { kind: 'serve', workerId: 'a', sole: false },
  },
  {
    title: 'sole - not on a retry that excludes workers',
    fleet: [w('a', 0, [m('new')]), w('b', 0)],
    question: { exclude: ['b'] },
    expect: { kind: 'serve', workerId: 'a', sole: false },
  },
  {
    title: 'sole - the conversation’s worker, when it is the only one',
    fleet: [w('a', 0, [m('new', { inFlight: 1 })])],
    question: { affineWorker: 'a' },
    expect: { kind: 'serve', workerId: 'a', sole: true },
  },
  {
    title: 'ready - an excluded worker is not used again',
    fleet: [w('a', 0, [m('new')]), w('b', 0, [m('new', { inFlight: 3 })])],
    question: { exclude: ['a'] },
    expect: { kind: 'serve', workerId: 'b' },
  },
  // Affinity.
  {
    title: 'affinity - the conversation’s worker wins over a less loaded one',
    fleet: [w('a', 0, [m('new', { inFlight: 1 })]), w('b', 0, [m('new')])],
    question: { affineWorker: 'a' },
    expect: { kind: 'serve', workerId: 'a' },
  },
  {
    title: 'affinity - skipped when requests are queued for the model there',
    fleet: [w('a', 0, [m('new', { queued: 1 })]), w('b', 0, [m('new')])],
    question: { affineWorker: 'a' },
    expect: { kind: 'serve', workerId: 'b' },
  },
  {
    title: 'affinity - skipped when the worker lost the model',
    fleet: [w('a', 0, []), w('b', 0, [m('new')])],
    question: { affineWorker: 'a' },
    expect: { kind: 'serve', workerId: 'b' },
  },
  {
    title: 'affinity - skipped when the worker is down (not in the fleet)',
    fleet: [w('b', 0, [m('new')])],
    question: { affineWorker: 'a' },
    expect: { kind: 'serve', workerId: 'b' },
  },
  {
    title: 'affinity - ignored on a retry that excludes workers',
    fleet: [w('a', 0, [m('new')]), w('b', 0, [m('new', { inFlight: 1 })])],
    question: { affineWorker: 'a', exclude: ['c'] },
    expect: { kind: 'serve', workerId: 'a' },
  },
  {
    title: 'affinity - skipped when the model there is closed',
    fleet: [w('a', 0, [m('new', { closingUntil: NOW })]), w('b', 0, [m('new', { inFlight: 2 })])],
    question: { affineWorker: 'a' },
    expect: { kind: 'serve', workerId: 'b' },
  },
  // Batching by model: a closing model serves during its hold, not after.
  {
    title: 'batching - a model in its swap hold still takes requests',
    fleet: [w('a', 0, [m('new', { closingUntil: NOW + 1 })])],
    expect: { kind: 'serve', workerId: 'a' },
  },
  {
    title: 'batching - a closed model takes no new requests; its room is not planned with twice',
    fleet: [w('a', 0, [m('new', { closingUntil: NOW })])],
    expect: { kind: 'wait' },
  },
  // Loading somewhere → join it.
  {
    title: 'join - a load under way is joined, not repeated',
    fleet: [w('a', 10, [m('new', { state: 'loading' })]), w('b', 10)],
    expect: { kind: 'join', workerId: 'a' },
  },
  {
    title: 'no worker - every worker excluded',
    fleet: [w('a', 10)],
    question: { exclude: ['a'] },
    expect: { kind: 'no_worker' },
  },
  { title: 'no worker - an empty fleet', fleet: [], expect: { kind: 'no_worker', remote: false } },
  // Remote workers serve upstream models, local workers GGUFs: neither loads the other's.
  {
    title: 'upstream - loaded on the remote worker, however roomy the local one',
    fleet: [w('gpu', 100), w('remote', 0, [], true)],
    question: { upstream: true, needed: 0 },
    expect: { kind: 'load', workerId: 'remote', victims: [] },
  },
  {
    title: 'upstream - no remote worker up: no worker, saying a remote one is needed',
    fleet: [w('gpu', 100)],
    question: { upstream: true, needed: 0 },
    expect: { kind: 'no_worker', remote: true },
  },
  {
    title: 'local - a GGUF is never loaded on a remote worker',
    fleet: [w('remote', 100, [], true), w('gpu', 10)],
    expect: { kind: 'load', workerId: 'gpu' },
  },
  {
    title: 'local - only remote workers up: no worker',
    fleet: [w('remote', 100, [], true)],
    expect: { kind: 'no_worker', remote: false },
  },
  {
    title: 'estimate - a load is planned only once the model is sized',
    fleet: [w('a', 10)],
    question: { needed: undefined },
    expect: { kind: 'estimate' },
  },
  // Fits now.
  {
    title: 'fits - on the worker with the most free memory, evicting nothing',
    fleet: [w('a', 2), w('b', 5)],
    expect: { kind: 'load', workerId: 'b', victims: [], closeUntil: NOW },
  },
  // LRU.
  {
    title: 'lru - the least recently used idle model goes',
    fleet: [w('a', 0, [m('x', { lastUsedAt: 30 }), m('y', { lastUsedAt: 10 })])],
    expect: { kind: 'load', workerId: 'a', victims: ['y'], closeUntil: NOW },
  },
  {
    title: 'lru - fewest bytes evicted wins across workers',
    fleet: [w('a', 0, [m('big', { sizeBytes: 4 * MiB })]), w('b', 0, [m('small')])],
    expect: { kind: 'load', workerId: 'b', victims: ['small'] },
  },
  {
    title: 'lru - a model a worker has not sized counts at its estimate',
    fleet: [w('a', 0, [m('x', { sizeBytes: undefined })])],
    context: { policies: { x: { estimate: MiB } } },
    expect: { kind: 'load', victims: ['x'] },
  },
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
  {
    title: 'pins - a pinned model is never evicted',
    fleet: [w('a', 0, [m('x')])],
    context: { policies: { x: { pinned: true } } },
    expect: { kind: 'no_room' },
  },
  {
    title: 'pins - the unpinned model goes instead',
    fleet: [w('a', 0, [m('x', { lastUsedAt: 1 }), m('y', { lastUsedAt: 9 })])],
    context: { policies: { x: { pinned: true } } },
    expect: { kind: 'load', victims: ['y'] },
  },
  // Busy victims.
  {
    title: 'busy - idle models go before busy ones',
    fleet: [w('a', 0, [m('busy', { inFlight: 1, lastUsedAt: 1 }), m('idle', { lastUsedAt: 9 })])],
    expect: { kind: 'load', victims: ['idle'], closeUntil: NOW },
  },
  {
    title: 'busy - a serving victim keeps taking requests for the swap hold',
    fleet: [w('a', 0, [m('busy', { inFlight: 1 })])],
    expect: { kind: 'load', victims: ['busy'], closeUntil: NOW + 2_000 },
  },
  {
    title: 'busy - a model placed on moments ago counts as busy',
    fleet: [w('a', 0, [m('x', { lastUsedAt: NOW - RECENT_USE_MS + 1 })])],
    expect: { kind: 'load', victims: ['x'], closeUntil: NOW + 2_000 },
  },
  {
    title: 'busy - a model this router is loading counts as busy',
    fleet: [w('a', 0, [m('x')])],
    context: { loading: new Set(['x']) },
    expect: { kind: 'load', victims: ['x'], closeUntil: NOW + 2_000 },
  },
  // Preferred workers.
  {
    title: 'preferred - the model’s own workers first, in their order, even if that evicts more',
    fleet: [w('a', 5), w('b', 0, [m('x')]), w('c', 0, [m('y')])],
    question: { workers: ['c', 'b'] },
    expect: { kind: 'load', workerId: 'c', victims: ['y'] },
  },
  {
    title: 'preferred - other workers when the own ones cannot make room',
    fleet: [w('a', 5), w('b', 0, [m('x')])],
    question: { workers: ['b'] },
    context: { policies: { x: { pinned: true } } },
    expect: { kind: 'load', workerId: 'a', victims: [] },
  },
  // Settling.
  {
    title: 'wait - a model still loading will become evictable',
    fleet: [w('a', 0, [m('x', { state: 'loading' })])],
    expect: { kind: 'wait' },
  },
  {
    title: 'wait - a model unloading frees its room soon',
    fleet: [w('a', 0, [m('x', { state: 'unloading' })])],
    expect: { kind: 'wait' },
  },
  // Copies: a pin holds one copy; spare copies go first.
  {
    title: 'copies - a pinned model’s spare copy may be evicted; the pin holds the first worker’s copy',
    fleet: [w('a', 0, [m('x', { lastUsedAt: 1 })]), w('b', 0, [m('x', { lastUsedAt: 1 })])],
    context: { policies: { x: { pinned: true } } },
    expect: { kind: 'load', workerId: 'b', victims: ['x'] },
  },
  {
    title: 'copies - a spare copy goes before another model’s only copy, however recently used',
    fleet: [
      w('a', 0, [m('only', { lastUsedAt: 1 }), m('x', { lastUsedAt: 90 })]),
      w('b', 0, [m('x', { inFlight: 1 })]),
    ],
    question: { needed: MiB },
    expect: { kind: 'load', workerId: 'a', victims: ['x'] },
  },
  {
    title: 'no room - not even once everything settles',
    fleet: [w('a', 0, [m('x', { state: 'loading' })])],
    question: { needed: 3 * MiB },
    expect: { kind: 'no_room' },
  },
];

describe('placement planner', () => {
  for (const c of cases) it(`placement planner - ${c.title}`, () => check(c));

  it('placement planner - no room names the worker with the most free memory', () => {
    const decision = run({
      title: '',
      fleet: [w('a', 0.5, [m('x')]), w('b', 0.75, [m('y')])],
      context: { policies: { x: { pinned: true }, y: { pinned: true } } },
      expect: {},
    });
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
  const fleet = [
    w('a', 0, [
      m('old', { lastUsedAt: NOW - 60_000 }),
      m('fresh', { lastUsedAt: NOW - 1_000 }),
      m('busy', { lastUsedAt: 0, inFlight: 1 }),
      m('pin', { lastUsedAt: 0 }),
      m('loading', { state: 'loading', lastUsedAt: 0 }),
    ]),
  ];

  it('idle sweep - only ready, idle, unpinned models unused past their TTL go', () => {
    assert.deepEqual(
      idleExpired(fleet, () => 30, context({ pin: { pinned: true } })),
      [{ workerId: 'a', model: 'old' }],
    );
  });

  it('idle sweep - a model idle as a whole goes; otherwise its spare copies go, longest unused first, down to min_replicas', () => {
    const copies = (...lastUsed: number[]) =>
      lastUsed.map((ago, i) => w(`w${i + 1}`, 0, [m('x', { lastUsedAt: NOW - ago * 1_000 })]));
    const cases: Array<[string, WorkerState[], number, string[]]> = [
      ['min 2, three copies, all idle: the model goes', copies(60, 90, 120), 2, ['w1', 'w2', 'w3']],
      ['min 2, three copies, two idle: one goes, the longest unused', copies(60, 5, 120), 2, ['w3']],
      ['min 2, two copies, one idle: none goes', copies(60, 5), 2, []],
      ['min 3, three copies, two idle: none goes', copies(60, 5, 90), 3, []],
      ['min 1, three copies, two idle: both go', copies(60, 5, 90), 1, ['w1', 'w3']],
    ];
    for (const [title, fleet, minReplicas, gone] of cases) {
      const expired = idleExpired(fleet, () => 30, context({ x: { minReplicas } }));
      assert.deepEqual(expired.map((e) => e.workerId).sort(), gone, title);
    }
  });

  it('idle sweep - a TTL of 0 keeps a model for ever', () => {
    assert.deepEqual(
      idleExpired(fleet, (id) => (id === 'old' ? 0 : 30), context({ pin: { pinned: true } })),
      [],
    );
  });
});

describe('replication planner', () => {
  const settings: ReplicaSettings = { queuePerSlot: 1, sustainMs: 3_000, retireAfterMs: 30_000, retireBelow: 0.5 };
  const base: ReplicaPolicy = { id: 'x', priority: 0, minReplicas: 1, maxReplicas: 0 };

  interface ReplicaCase {
    title: string;
    fleet: WorkerState[];
    model?: Partial<ReplicaPolicy>;
    /** Left out: as the fleet shows it now. */
    pressure?: ReplicaQuestion['pressure'];
    forMs?: number;
    needed?: number | null;
    context?: Partial<PlanContext> & { policies?: Record<string, Partial<ModelPolicy>> };
    expect: Partial<Record<'kind' | 'workerId' | 'reason', string>> & { victims?: string[] };
  }

  const plan = (c: ReplicaCase): ReplicaDecision => {
    const { policies = {}, ...context } = c.context ?? {};
    const full: PlanContext = {
      now: NOW,
      strategy: 'lru',
      loading: new Set(),
      turn: 0,
      swapHoldMs: 0,
      policy: (id) => ({ pinned: false, priority: 0, ...policies[id] }),
      ...context,
    };
    return planReplicas(
      c.fleet,
      {
        model: { ...base, ...c.model },
        pressure: c.pressure ?? pressure(demand(c.fleet, 'x', NOW), settings),
        forMs: c.forMs ?? 60_000,
        ...(c.needed !== null && { needed: c.needed ?? MiB }),
      },
      full,
      settings,
    );
  };

  // Demand on one copy of 4 slots: 4 in flight, 4 queued → pressured (queue_per_slot 1).
  const hot = (over: Partial<ModelView> = {}): ModelView => m('x', { slots: 4, inFlight: 4, queued: 4, ...over });
  const cases: ReplicaCase[] = [
    {
      title: 'replicate - sustained waits copy the model onto a worker with room',
      fleet: [w('a', 0, [hot()]), w('b', 5)],
      expect: { kind: 'replicate', workerId: 'b', reason: 'queue_wait', victims: [] },
    },
    {
      title: 'replicate - not for a burst shorter than the sustain window',
      fleet: [w('a', 0, [hot()]), w('b', 5)],
      forMs: 2_999,
      expect: { kind: 'hold', reason: 'too_short' },
    },
    {
      title: 'replicate - not for a burst shorter than the model’s measured load time',
      fleet: [w('a', 0, [hot()]), w('b', 5)],
      model: { loadMs: 8_000 },
      forMs: 7_999,
      expect: { kind: 'hold', reason: 'too_short' },
    },
    {
      title: 'replicate - once the wait has lasted as long as a load takes',
      fleet: [w('a', 0, [hot()]), w('b', 5)],
      model: { loadMs: 8_000 },
      forMs: 8_000,
      expect: { kind: 'replicate', workerId: 'b' },
    },
    {
      title: 'replicate - waits below queue_per_slot are steady',
      fleet: [w('a', 0, [hot({ queued: 3 })]), w('b', 5)],
      expect: { kind: 'hold', reason: 'steady' },
    },
    {
      title: 'replicate - one copy at a time: nothing while a copy loads',
      fleet: [w('a', 0, [hot()]), w('b', 5, [m('x', { state: 'loading' })]), w('c', 5)],
      expect: { kind: 'hold', reason: 'loading' },
    },
    {
      title: 'replicate - never onto a worker that already holds the model',
      fleet: [w('a', 5, [hot()])],
      expect: { kind: 'blocked', reason: 'no_room' },
    },
    {
      title: 'replicate - max_replicas 1 keeps one copy (today’s behaviour)',
      fleet: [w('a', 0, [hot()]), w('b', 5)],
      model: { maxReplicas: 1 },
      expect: { kind: 'blocked', reason: 'max_replicas' },
    },
    {
      title: 'replicate - max_replicas counts copies across workers',
      fleet: [w('a', 0, [hot()]), w('b', 0, [hot()]), w('c', 5)],
      model: { maxReplicas: 2 },
      expect: { kind: 'blocked', reason: 'max_replicas' },
    },
    {
      title: 'replicate - the model’s own workers first',
      fleet: [w('a', 0, [hot()]), w('b', 9), w('c', 2)],
      model: { workers: ['c'] },
      expect: { kind: 'replicate', workerId: 'c' },
    },
    {
      title: 'replicate - the most free memory when nothing is evicted',
      fleet: [w('a', 0, [hot()]), w('b', 2), w('c', 9)],
      expect: { kind: 'replicate', workerId: 'c' },
    },
    {
      title: 'replicate - a model not yet sized waits to be',
      fleet: [w('a', 0, [hot()]), w('b', 5)],
      needed: null,
      expect: { kind: 'hold', reason: 'unsized' },
    },
    {
      title: 'replicate - nothing to copy when the model is loaded nowhere',
      fleet: [w('a', 5)],
      pressure: 'pressured',
      expect: { kind: 'hold', reason: 'not_loaded' },
    },
    // Eviction for a copy: idle, lower priority (or an idle spare copy), never busy, never pinned.
    {
      title: 'evict - an idle model of lower priority makes room',
      fleet: [w('a', 0, [hot()]), w('b', 0, [m('low', { lastUsedAt: 1 })])],
      model: { priority: 5 },
      context: { policies: { low: { priority: 1 } } },
      expect: { kind: 'replicate', workerId: 'b', victims: ['low'] },
    },
    {
      title: 'evict - a busy model is never evicted for a copy, whatever its priority',
      fleet: [w('a', 0, [hot()]), w('b', 0, [m('low', { inFlight: 1 })])],
      model: { priority: 5 },
      context: { policies: { low: { priority: 1 } } },
      expect: { kind: 'blocked', reason: 'no_room' },
    },
    {
      title: 'evict - a model placed on moments ago counts as busy',
      fleet: [w('a', 0, [hot()]), w('b', 0, [m('low', { lastUsedAt: NOW - 10 })])],
      model: { priority: 5 },
      context: { policies: { low: { priority: 1 } } },
      expect: { kind: 'blocked', reason: 'no_room' },
    },
    {
      title: 'evict - an idle model of the same priority stays (a copy is not worth a model someone uses)',
      fleet: [w('a', 0, [hot()]), w('b', 0, [m('other', { lastUsedAt: 1 })])],
      expect: { kind: 'blocked', reason: 'no_room' },
    },
    {
      title: 'evict - an idle spare copy of another model of the same priority may go',
      fleet: [w('a', 0, [hot(), m('y')]), w('b', 0, [m('y', { lastUsedAt: 1 })])],
      expect: { kind: 'replicate', workerId: 'b', victims: ['y'] },
    },
    {
      title: 'evict - a pinned lower-priority model stays',
      fleet: [w('a', 0, [hot()]), w('b', 0, [m('low', { lastUsedAt: 1 })])],
      model: { priority: 5 },
      context: { policies: { low: { priority: 1, pinned: true } } },
      expect: { kind: 'blocked', reason: 'no_room' },
    },
    // Minimum copies.
    {
      title: 'min replicas - a loaded model is topped up at once, without pressure',
      fleet: [w('a', 0, [m('x')]), w('b', 5)],
      model: { minReplicas: 2 },
      expect: { kind: 'replicate', workerId: 'b', reason: 'min_replicas' },
    },
    {
      title: 'min replicas - never above max_replicas',
      fleet: [w('a', 0, [m('x')]), w('b', 5)],
      model: { minReplicas: 2, maxReplicas: 1 },
      expect: { kind: 'hold', reason: 'steady' },
    },
    // Retirement after a sustained calm, keeping min_replicas.
    {
      title: 'retire - a spare copy goes after the calm has lasted retire_after_s',
      fleet: [w('a', 0, [m('x', { slots: 4 })]), w('b', 0, [m('x', { slots: 4 })])],
      expect: { kind: 'retire', workerId: 'b', reason: 'idle' },
    },
    {
      title: 'retire - not before',
      fleet: [w('a', 0, [m('x', { slots: 4 })]), w('b', 0, [m('x', { slots: 4 })])],
      forMs: 29_999,
      expect: { kind: 'hold', reason: 'too_short' },
    },
    {
      title: 'retire - the least loaded copy goes',
      fleet: [w('a', 0, [m('x', { slots: 4 })]), w('b', 0, [m('x', { slots: 4, inFlight: 1 })])],
      expect: { kind: 'retire', workerId: 'a' },
    },
    {
      title: 'retire - the pinned copy stays; the other goes',
      fleet: [w('a', 0, [m('x', { slots: 4, inFlight: 1 })]), w('b', 0, [m('x', { slots: 4 })])],
      context: { policies: { x: { pinned: true } } },
      expect: { kind: 'retire', workerId: 'b' },
    },
    {
      title: 'retire - pinned: the first worker keeps the pin even when its copy is the idle one',
      fleet: [w('a', 0, [m('x', { slots: 4 })]), w('b', 0, [m('x', { slots: 4, inFlight: 1 })])],
      context: { policies: { x: { pinned: true } } },
      expect: { kind: 'retire', workerId: 'b' },
    },
    {
      title: 'retire - a copy off the model’s own workers first',
      fleet: [w('a', 0, [m('x', { slots: 4 })]), w('b', 0, [m('x', { slots: 4 })])],
      model: { workers: ['b'] },
      expect: { kind: 'retire', workerId: 'a' },
    },
    {
      title: 'retire - min_replicas copies are kept',
      fleet: [w('a', 0, [m('x', { slots: 4 })]), w('b', 0, [m('x', { slots: 4 })])],
      model: { minReplicas: 2 },
      expect: { kind: 'hold', reason: 'steady' },
    },
    {
      title: 'retire - a lowered max_replicas retires the extra copy at once',
      fleet: [w('a', 0, [hot()]), w('b', 0, [hot()])],
      model: { maxReplicas: 1 },
      forMs: 0,
      expect: { kind: 'retire', reason: 'max_replicas' },
    },
    // Hysteresis: the demand that made a copy does not retire it; a demand in between changes nothing.
    {
      title: 'hysteresis - two copies with half their slots busy are steady, not calm',
      fleet: [w('a', 0, [m('x', { slots: 4, inFlight: 2 })]), w('b', 0, [m('x', { slots: 4, inFlight: 2 })])],
      expect: { kind: 'hold', reason: 'steady' },
    },
    {
      title: 'hysteresis - two copies with all slots busy and nothing queued are steady',
      fleet: [w('a', 0, [m('x', { slots: 4, inFlight: 4 })]), w('b', 0, [m('x', { slots: 4, inFlight: 4 })])],
      expect: { kind: 'hold', reason: 'steady' },
    },
    {
      title: 'hysteresis - calm once the requests would fit in half of the slots left',
      fleet: [w('a', 0, [m('x', { slots: 4, inFlight: 1 })]), w('b', 0, [m('x', { slots: 4, inFlight: 1 })])],
      expect: { kind: 'retire', reason: 'idle' },
    },
  ];
  for (const c of cases) {
    it(`replication planner - ${c.title}`, () => {
      const decision = plan(c) as Record<string, unknown> & ReplicaDecision;
      const { victims, ...rest } = c.expect;
      for (const [key, value] of Object.entries(rest))
        assert.equal(decision[key], value, `${c.title}: ${key} (${JSON.stringify(decision)})`);
      if (victims)
        assert.deepEqual(
          decision.kind === 'replicate' ? decision.victims.map((v) => v.id) : null,
          victims,
          `${c.title}: victims`,
        );
    });
  }

  it('replication planner - hysteresis: no demand both replicates with n copies and retires with n + 1', () => {
    // Every demand of a 4-slot model, from idle to 4 queued per slot: pressured on one copy never means calm on two.
    for (let total = 0; total <= 20; total++) {
      const one = demand(
        [w('a', 0, [m('x', { slots: 4, inFlight: Math.min(4, total), queued: Math.max(0, total - 4) })])],
        'x',
        NOW,
      );
      const split = (n: number): ModelView =>
        m('x', { slots: 4, inFlight: Math.min(4, n), queued: Math.max(0, n - 4) });
      const two = demand(
        [w('a', 0, [split(Math.ceil(total / 2))]), w('b', 0, [split(Math.floor(total / 2))])],
        'x',
        NOW,
      );
      if (pressure(one, settings) === 'pressured')
        assert.notEqual(pressure(two, settings), 'calm', `${total} requests`);
    }
  });

  it('replication planner - a pressure clock counts only an unbroken pressure, and restarts after a change', () => {
    const clock = new PressureClock();
    assert.equal(clock.observe('x', 'pressured', 1, 1_000), 0);
    assert.equal(clock.observe('x', 'pressured', 1, 4_000), 3_000);
    assert.equal(clock.observe('x', 'steady', 1, 4_500), 0, 'a break');
    assert.equal(clock.observe('x', 'pressured', 1, 5_000), 0);
    assert.equal(clock.observe('x', 'pressured', 1, 6_000), 1_000);
    clock.restart('x');
    assert.equal(clock.observe('x', 'pressured', 1, 7_000), 0, 'after this router added a copy');
    assert.equal(clock.observe('x', 'pressured', 1, 8_000), 1_000);
    assert.equal(
      clock.observe('x', 'pressured', 2, 9_000),
      0,
      'another router added a copy: the heartbeats show two, and the window starts again',
    );
    assert.equal(clock.observe('x', 'pressured', 2, 12_000), 3_000);
  });
});
