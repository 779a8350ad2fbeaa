import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  BusClient,
  connectBus,
  natsServerOnPath,
  startNatsServer,
  StreamReader,
  type LocalNatsServer,
} from '@cortex/bus';
import { parseConfig } from '@cortex/config';
import { CortexError, streamSubject, type GenerateCommand, type StreamEvent } from '@cortex/contracts';
import { decodeBody } from '@cortex/wire';
import { SyntheticEngine } from './engine/synthetic-engine.js';
import { WorkerService } from './worker.service.js';

const WORKER = 'w-spec';
const config = parseConfig({ worker: { heartbeat_ms: 250, stream_interval_ms: 0 } });

/** A generate command for `model` on its own stream subject. */
function command(runId: string, maxTokens: number, extra: Partial<GenerateCommand> = {}): GenerateCommand {
  const { request } = decodeBody(
    'openai.chat',
    { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: maxTokens, stream: true },
    undefined,
    {},
  )!;
  return { runId, streamSubject: streamSubject(WORKER, runId), request, ...extra };
}

/**
 * The worker's command handling over a real NATS, with the synthetic engine (tokens at a fixed
 * rate): what a gateway reads on a run's stream subject, and the rules a run ends by.
 */
describe('worker service - on a real NATS', { skip: !natsServerOnPath() && 'nats-server is not installed' }, () => {
  const storeDir = mkdtempSync(join(tmpdir(), 'cortex-worker-service-'));
  let server: LocalNatsServer;
  let nc: NatsConnection;
  let worker: WorkerService;

  before(async () => {
    server = await startNatsServer({ storeDir });
    nc = await connectBus({ url: server.url, name: 'worker-service-spec' });
  });

  afterEach(async () => {
    await worker?.onApplicationShutdown();
  });

  after(async () => {
    await nc?.close();
    await server?.stop();
    rmSync(storeDir, { recursive: true, force: true });
  });

  /** A worker with the model `m` loaded, at `tokensPerSecond`. */
  async function startWorker(tokensPerSecond: number): Promise<WorkerService> {
    worker = new WorkerService(config, new SyntheticEngine(tokensPerSecond), WORKER, new BusClient(nc));
    await worker.load({ model: 'm', source: 'fixture:m', contextSize: 512, slots: 1 });
    return worker;
  }

  /** Every event of the run's stream, read as a gateway reads it, until its finish or error. */
  async function events(runId: string, during?: (seen: StreamEvent[]) => void): Promise<StreamEvent[]> {
    const reader = new StreamReader(nc, streamSubject(WORKER, runId), { idleTimeoutMs: 5_000 });
    reader.arm();
    const seen: StreamEvent[] = [];
    try {
      for await (const event of reader) {
        seen.push(event);
        during?.(seen);
        if (event.type === 'finish' || event.type === 'error') break;
      }
    } finally {
      reader.close();
    }
    return seen;
  }

  it(
    'worker service - a generate command is acknowledged at once; its stream ' +
      "starts with the run's and the worker's ids and ends with one finish",
    async () => {
      const service = await startWorker(2_000);
      const reading = events('run-1');
      const accepted = service.generate(command('run-1', 5));
      assert.deepEqual(accepted, { runId: 'run-1', workerId: WORKER, queuePosition: 0 });
      const seen = await reading;
      const start = seen[0];
      assert.equal(start?.type, 'start');
      assert.deepEqual(
        start?.type === 'start' && { runId: start.runId, workerId: start.workerId, model: start.model },
        { runId: 'run-1', workerId: WORKER, model: 'm' },
        'no placeholder ids',
      );
      const finish = seen.at(-1);
      assert.equal(finish?.type === 'finish' && finish.reason, 'length');
      assert.equal(finish?.type === 'finish' && finish.usage.completionTokens, 5);
      assert.deepEqual(
        seen.map((e) => e.seq),
        seen.map((_, i) => i),
        'numbered without a gap',
      );
    },
  );

  it(
    'worker service - a run id already running is refused; a cancel ' +
      'a gateway asks for ends the stream with a cancelled finish',
    async () => {
      const service = await startWorker(20);
      const reading = events('run-2', (seen) => {
        if (seen.length === 2) assert.equal(service.cancel('run-2', 'client disconnected', true), true);
      });
      service.generate(command('run-2', 1_000));
      assert.throws(
        () => service.generate(command('run-2', 1_000)),
        (error: unknown) => error instanceof CortexError && error.code === 'invalid_request',
      );
      const seen = await reading;
      const last = seen.at(-1);
      assert.equal(last?.type === 'finish' && last.reason, 'cancelled');
      assert.equal(service.cancel('run-2'), false, 'nothing left to cancel');
    },
  );

  it('worker service - a background run the worker stops itself (not asked by a cancel) ends in an error that says so', async () => {
    const service = await startWorker(20);
    const reading = events('run-3', (seen) => {
      if (seen.length === 2) service.cancel('run-3', 'the model is unloaded');
    });
    service.generate(command('run-3', 1_000, { background: true }));
    const last = (await reading).at(-1);
    assert.equal(last?.type, 'error');
    assert.equal(last?.type === 'error' && last.error.code, 'worker_lost');
    assert.match(
      last?.type === 'error' ? last.error.message : '',
      /stopped this background response \(the model is unloaded\)/,
    );
  });
});
