import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import {
  BusClient,
  connectBus,
  natsServerOnPath,
  startNatsServer,
  StreamPublisher,
  type LocalNatsServer,
} from '@cortex/bus';
import { parseConfig, type CortexConfig } from '@cortex/config';
import {
  Subjects,
  workerSubject,
  type RequestFinishedEvent,
  type StreamEvent,
  type StreamEventBody,
  type Usage,
  type UsageOwner,
} from '@cortex/contracts';
import { ResponsesAssembly } from '@cortex/wire';
import { PendingRuns } from '../console/pending-runs.js';
import { RequestContext } from '../http/request-context.js';
import { InferenceRun } from './inference-run.js';
import { PlacementClient } from './placement-client.js';
import type { RunServices } from './run-services.js';
import { WorkerEvents } from './worker-events.js';

const USAGE: Usage = { promptTokens: 9, completionTokens: 2, cachedPromptTokens: 0, reasoningTokens: 0 };
const TIMINGS = { ttftMs: 1, promptMs: 1, decodeTokensPerSecond: 100, durationMs: 5, queueMs: 0 };
const BODY = { model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true };

/** How a scripted worker answers a generate command: its events, and what it does when told to cancel. */
type Script = {
  events: StreamEventBody[];
  /** Published when a cancel for the run comes (a worker's own count of what it generated). */
  onCancel?: StreamEventBody;
};

const start = (workerId: string, runId: string): StreamEventBody => ({
  type: 'start',
  runId,
  workerId,
  model: 'm',
  promptTokens: USAGE.promptTokens,
});
const text = (t: string, token: number): StreamEventBody => ({ type: 'text', text: t, tokens: [token] });
const finish = (usage: Usage = USAGE): StreamEventBody => ({ type: 'finish', reason: 'stop', usage, timings: TIMINGS });

/**
 * The run's collaborators as InferenceService gives them, over a real NATS: the real placement
 * client and worker events; a router that places on the first worker not excluded; what the run
 * records is kept for the test to read.
 */
class Harness implements RunServices {
  /** Steps a run took that its phase did not allow (see InferenceRun.step): each is a bug. */
  readonly refusedSteps: string[] = [];
  readonly logger = {
    log: () => undefined,
    warn: (message: unknown) => {
      const text = typeof message === 'string' ? message : String((message as { msg?: unknown }).msg);
      if (text.includes('may not happen')) this.refusedSteps.push(text);
    },
  };
  readonly responses = new ResponsesAssembly('test-reasoning-key');
  readonly pending = new PendingRuns();
  readonly placer: PlacementClient;
  readonly workerEvents: WorkerEvents;
  readonly recorded: Array<{ event: RequestFinishedEvent; payer: UsageOwner | null }> = [];
  readonly places: Array<{ exclude: string[] }> = [];
  readonly cancels: string[] = [];
  readonly watched = new Set<string>();
  private readonly subscriptions: Subscription[] = [];

  constructor(
    readonly bus: BusClient,
    readonly config: CortexConfig,
    workers: string[],
  ) {
    this.workerEvents = new WorkerEvents(bus, this.logger);
    this.placer = new PlacementClient(bus, config.gateway, this.workerEvents, { watch: () => () => undefined });
    this.subscriptions.push(
      bus.nc.subscribe(Subjects.routerPlace, {
        callback: (_error, msg) => {
          const ask = msg.json<{ model: string; exclude?: string[] }>();
          this.places.push({ exclude: ask.exclude ?? [] });
          const workerId = workers.find((w) => !(ask.exclude ?? []).includes(w));
          msg.respond(
            JSON.stringify(
              workerId
                ? { ok: true, data: { model: ask.model, workerId, coldStart: false } }
                : { ok: false, error: { code: 'no_worker', message: 'every worker was excluded' } },
            ),
          );
        },
      }),
    );
  }

  /** `workerId` takes generate commands and plays `script` on the command's stream subject. */
  worker(workerId: string, script: Script): void {
    const nc = this.bus.nc;
    this.subscriptions.push(
      nc.subscribe(workerSubject(Subjects.workerGenerate, workerId), {
        callback: (_error, msg) => {
          const command = msg.json<{ runId: string; streamSubject: string }>();
          msg.respond(JSON.stringify({ ok: true, data: { runId: command.runId, workerId, queuePosition: 0 } }));
          const stream = new StreamPublisher(nc, command.streamSubject);
          for (const event of script.events)
            stream.emit(event.type === 'start' ? start(workerId, command.runId) : event);
          if (!script.onCancel) return;
          const cancel = nc.subscribe(workerSubject(Subjects.workerCancel, workerId), {
            callback: (_e, m) => {
              const { runId } = m.json<{ runId: string }>();
              if (runId !== command.runId) return;
              this.cancels.push(`${workerId} ${runId}`);
              stream.emit(script.onCancel as StreamEventBody);
              cancel.unsubscribe();
            },
          });
          this.subscriptions.push(cancel);
        },
      }),
    );
  }

  readonly streams = {
    watch: (runId: string): void => void this.watched.add(runId),
    unwatch: (runId: string): void => void this.watched.delete(runId),
  };

  readonly recorder = {
    record: (event: RequestFinishedEvent, _runId: string, payer: UsageOwner | null): void =>
      void this.recorded.push({ event, payer }),
  };

  readonly catalogue = { find: (): undefined => undefined };

  async close(): Promise<void> {
    for (const subscription of this.subscriptions) subscription.unsubscribe();
    this.workerEvents.close();
    await this.bus.nc.flush();
  }
}

/** Reads `events` until it ends, or until `stopAfter` events were read. */
async function read(events: AsyncIterable<StreamEvent>, stopAfter = Infinity): Promise<StreamEvent[]> {
  const seen: StreamEvent[] = [];
  for await (const event of events) {
    seen.push(event);
    if (seen.length >= stopAfter) break;
  }
  return seen;
}

/** Resolves once `check` holds, polling; fails past `ms`. */
async function until(check: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((done) => setTimeout(done, 10));
  }
}

describe('inference run - on a real NATS', { skip: !natsServerOnPath() && 'nats-server is not installed' }, () => {
  let server: LocalNatsServer;
  let nc: NatsConnection;
  let harness: Harness | null = null;
  const config = parseConfig({});
  const storeDir = mkdtempSync(join(tmpdir(), 'cortex-run-'));

  before(async () => {
    server = await startNatsServer({ storeDir });
    nc = await connectBus({ url: server.url, name: 'inference-run-spec' });
  });

  afterEach(async () => {
    assert.deepEqual(harness?.refusedSteps ?? [], [], 'every step the run took was one its phase allows');
    await harness?.close();
    harness = null;
  });

  after(async () => {
    await nc?.close();
    await server?.stop();
    rmSync(storeDir, { recursive: true, force: true });
  });

  /** A run of a streamed chat request, decoded, with its context and its meter's reported total. */
  async function decodedRun(workers: string[]): Promise<{ run: InferenceRun; context: RequestContext; h: Harness }> {
    harness = new Harness(new BusClient(nc), config, workers);
    const context = RequestContext.of({ 'x-request-id': 'req-spec' });
    context.meter.bill({ account: 'team-a', keyId: 'key_1' });
    const run = new InferenceRun(harness, 'openai.chat', context, undefined, context.meter);
    await run.decode(BODY, undefined, undefined, false);
    return { run, context, h: harness };
  }

  it(
    'inference run - a stream to its end: its events in order, one ' +
      'request-finished event with the usage, the meter told once',
    async () => {
      const { run, context, h } = await decodedRun(['w1']);
      h.worker('w1', { events: [start('', ''), text('Hel', 1), text('lo', 2), finish()] });
      const events = await read(await run.start());
      assert.deepEqual(
        events.map((e) => e.type),
        ['start', 'text', 'text', 'finish'],
      );
      assert.equal(run.placement?.workerId, 'w1');
      run.finish();
      run.finish();
      assert.equal(h.recorded.length, 1, 'recorded once, however often finish is called');
      const [{ event, payer }] = h.recorded as [{ event: RequestFinishedEvent; payer: UsageOwner | null }];
      assert.deepEqual(
        { status: event.status, reason: event.finishReason, usage: event.usage, worker: event.workerId },
        { status: 200, reason: 'stop', usage: USAGE, worker: 'w1' },
      );
      assert.deepEqual(payer, { account: 'team-a', keyId: 'key_1' });
      context.meter.close();
      assert.equal(await context.meter.settled, USAGE.promptTokens + USAGE.completionTokens);
      assert.equal(h.watched.size, 0, 'the stream is no longer watched');
    },
  );

  it(
    'inference run - a worker that takes no generate command costs ' +
      'the client nothing: the request is placed again, without it',
    async () => {
      // w1 is placed on but nothing answers its subject (a worker gone between heartbeats).
      const { run, h } = await decodedRun(['w1', 'w2']);
      h.worker('w2', { events: [start('', ''), text('ok', 1), finish()] });
      const events = await read(await run.start());
      assert.equal(events.at(-1)?.type, 'finish');
      assert.equal(run.placement?.workerId, 'w2');
      assert.deepEqual(
        h.places.map((p) => p.exclude),
        [[], ['w1']],
      );
      run.finish();
      assert.equal(h.recorded[0]?.event.workerId, 'w2');
    },
  );

  it(
    'inference run - a client that leaves mid-answer: the worker ' +
      "is told to stop, and the request pays the worker's own count",
    async () => {
      const { run, context, h } = await decodedRun(['w1']);
      const stopped: Usage = { ...USAGE, completionTokens: 5 };
      h.worker('w1', {
        events: [start('', ''), text('a', 1), text('b', 2)],
        onCancel: { type: 'finish', reason: 'cancelled', usage: stopped, timings: TIMINGS },
      });
      const seen = await read(await run.start(), 2);
      assert.deepEqual(
        seen.map((e) => e.type),
        ['start', 'text'],
      );
      run.cancel('client disconnected');
      run.finish();
      context.meter.close();
      assert.equal(await context.meter.settled, stopped.promptTokens + stopped.completionTokens);
      assert.equal(h.cancels.length, 1);
      assert.equal(h.recorded[0]?.event.finishReason, 'cancelled');
      assert.deepEqual(h.recorded[0]?.event.usage, stopped);
    },
  );

  it(
    'inference run - a client that leaves mid-answer from a worker ' +
      'that says nothing more pays the prompt and the tokens it was sent',
    async () => {
      const { run, context, h } = await decodedRun(['w1']);
      h.worker('w1', { events: [start('', ''), text('a', 1), text('b', 2), text('c', 3)] });
      const iterator = (await run.start())[Symbol.asyncIterator]();
      // Read what the client was sent: start and two texts.
      for (let i = 0; i < 3; i++) await iterator.next();
      run.cancel('client disconnected');
      run.finish();
      context.meter.close();
      // The run waits up to TAIL_MS for the worker's last event before it charges what it delivered.
      const used = await context.meter.settled;
      assert.equal(used, USAGE.promptTokens + 2);
      await until(() => h.recorded.length === 1);
    },
  );

  it(
    'inference run - cancelled while placed: nothing is ' + 'generated, and the request is recorded as cancelled',
    async () => {
      const { run, h } = await decodedRun([]);
      // No worker to place on: the router answers no_worker and the placement waits for one to join.
      const started = run.start();
      await until(() => h.places.length > 0);
      run.cancel('client disconnected');
      await assert.rejects(started, (error: unknown) => (error as { code?: string }).code === 'cancelled');
      run.finish();
      assert.equal(h.recorded[0]?.event.finishReason, 'cancelled');
      assert.equal(h.recorded[0]?.event.usage, null);
    },
  );
});
