import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { BusClient, EventPublisher } from '@cortex/bus';
import { startStack, waitFor, type TestStack, scrapeMetrics } from '@cortex/testing';
import { Subjects, workerSubject } from '@cortex/contracts';

const user = [{ role: 'user' as const, content: 'Hi.' }];

const scrape = (stack: TestStack): Promise<Map<string, number>> => scrapeMetrics(stack.metricsUrl);

function sum(values: Map<string, number>, prefix: string, labels: Record<string, string> = {}): number {
  let total = 0;
  for (const [key, value] of values) {
    if (!key.startsWith(`${prefix}{`) && key !== prefix) continue;
    if (Object.entries(labels).every(([k, v]) => key.includes(`${k}="${v}"`))) total += value;
  }
  return total;
}

describe('metrics e2e', () => {
  let stack: TestStack;
  let client: OpenAI;

  before(async () => {
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true },
        { id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 32768, slots: 2 },
      ],
      // Every placement asks a router, so the route histogram counts each request (a reused placement is not a route).
      config: { worker: { id: 'w1', heartbeat_ms: 100 }, router: { placement_reuse_ms: 0 }, log_level: 'info' },
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  it('metrics - a known set of requests gives exact counters and histogram counts', async () => {
    await client.chat.completions.create({ model: 'cortex-chat', messages: user });
    await client.chat.completions.create({ model: 'cortex-chat', messages: user });
    await client.chat.completions
      .stream({ model: 'cortex-chat', messages: user, stream_options: { include_usage: true } })
      .finalChatCompletion();
    await assert.rejects(client.chat.completions.create({ model: 'no-such-model', messages: user }));
    await client.chat.completions.create({ model: 'cortex-loop', messages: user, max_tokens: 5 }); // cold load
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { model: 'cortex-loop', messages: user, stream: true, max_tokens: 30_000 },
      { signal: controller.signal },
    );
    let chunks = 0;
    for await (const _chunk of stream) {
      if (++chunks === 3) {
        controller.abort();
        break;
      }
    }
    await new BusClient(stack.nc, 10_000).request(workerSubject(Subjects.workerUnload, 'w1'), {
      model: 'cortex-loop',
      reason: 'admin',
    });

    let m = new Map<string, number>();
    await waitFor(async () => {
      m = await scrape(stack);
      // Services report their bus every 5 s; the first report may precede the metrics subscription.
      return (
        sum(m, 'cortex_requests_total') === 6 &&
        sum(m, 'cortex_evictions_total') === 1 &&
        sum(m, 'cortex_bus_connected') >= 5
      );
    }, 15_000);
    assert.equal(
      sum(m, 'cortex_requests_total', { model: 'cortex-chat', worker: 'w1', api: 'openai.chat', status: '200' }),
      3,
    );
    assert.equal(sum(m, 'cortex_requests_total', { model: 'no-such-model', worker: 'none', status: '404' }), 1);
    assert.equal(sum(m, 'cortex_requests_total', { model: 'cortex-loop', worker: 'w1', status: '200' }), 2);
    assert.equal(sum(m, 'cortex_request_errors_total', { code: 'model_not_found' }), 1);
    assert.equal(sum(m, 'cortex_request_errors_total'), 1);
    assert.equal(sum(m, 'cortex_requests_cancelled_total', { model: 'cortex-loop' }), 1);
    assert.equal(sum(m, 'cortex_cold_starts_total', { model: 'cortex-loop' }), 1);
    assert.equal(sum(m, 'cortex_cold_starts_total'), 1);
    assert.equal(sum(m, 'cortex_evictions_total', { model: 'cortex-loop', worker: 'w1', reason: 'admin' }), 1);
    assert.equal(sum(m, 'cortex_completion_tokens_total', { model: 'cortex-chat' }), 12);
    assert.equal(
      sum(m, 'cortex_completion_tokens_total', { model: 'cortex-chat', api: 'openai.chat' }),
      12,
      'counted under the API that asked',
    );
    assert.ok(sum(m, 'cortex_prompt_tokens_total', { model: 'cortex-chat' }) > 0);
    assert.equal(sum(m, 'cortex_request_duration_seconds_count'), 6);
    assert.equal(sum(m, 'cortex_time_to_first_token_seconds_count', { model: 'cortex-chat' }), 3);
    assert.equal(sum(m, 'cortex_tokens_per_second_count', { model: 'cortex-chat' }), 3);
    assert.equal(sum(m, 'cortex_inter_token_latency_seconds_count', { model: 'cortex-chat' }), 3);
    assert.equal(sum(m, 'cortex_request_queue_seconds_count', { model: 'cortex-chat' }), 3);
    assert.equal(sum(m, 'cortex_prompt_eval_seconds_count', { model: 'cortex-chat' }), 3);
    assert.ok(sum(m, 'cortex_prompt_eval_seconds_sum', { model: 'cortex-chat' }) > 0, 'prompt evaluation takes time');
    assert.equal(sum(m, 'cortex_model_load_seconds_count', { model: 'cortex-loop', worker: 'w1' }), 1);
    assert.equal(sum(m, 'cortex_bus_route_seconds_count'), 5, 'every placed request timed its route');
    assert.equal(sum(m, 'cortex_worker_up', { worker: 'w1' }), 1);
    assert.equal(sum(m, 'cortex_model_loaded', { model: 'cortex-chat', worker: 'w1' }), 1);
    assert.ok(sum(m, 'cortex_device_memory_free_bytes', { worker: 'w1' }) > 0);
    for (const service of ['gateway', 'router', 'translator', 'metrics', 'worker']) {
      assert.equal(sum(m, 'cortex_bus_connected', { service }), 1, `${service} reports its bus`);
    }
  });

  it('metrics - restarting the metrics service mid-burst still counts every request exactly once', async () => {
    const before = sum(await scrape(stack), 'cortex_requests_total', { model: 'cortex-chat' });
    const burst = Array.from({ length: 12 }, (_, i) =>
      new Promise((done) => setTimeout(done, i * 40)).then(() =>
        client.chat.completions.create({ model: 'cortex-chat', messages: user }),
      ),
    );
    await new Promise((done) => setTimeout(done, 150));
    const metrics = stack.processes.get('metrics');
    assert.ok(metrics);
    const exited = new Promise((done) => metrics.once('exit', done));
    metrics.kill('SIGKILL');
    await exited;
    stack.processes.delete('metrics');
    await Promise.all(burst);
    stack.spawnService('metrics');
    await waitFor(async () => (await fetch(`${stack.metricsUrl}/readyz`).catch(() => null))?.status === 200, 20_000);
    const after = await scrape(stack);
    assert.equal(sum(after, 'cortex_requests_total', { model: 'cortex-chat' }), before + 12);
    assert.equal(sum(after, 'cortex_requests_total'), 6 + 12);
  });

  it('metrics - one request id follows the request through every service log', async () => {
    const requestId = `trace-${Date.now()}`;
    // A Responses request that continues a stored one: the translator decodes it and a router places it.
    const first = await client.responses.create({ model: 'cortex-chat', input: 'Hi.' });
    await client.responses.create(
      { model: 'cortex-chat', previous_response_id: first.id, input: 'Hi again.', prompt_cache_key: requestId },
      { headers: { 'x-request-id': requestId } },
    );
    await waitFor(
      () =>
        stack
          .logs()
          .split('\n')
          .filter((line) => line.includes(requestId)).length >= 5,
      5_000,
    ).catch((error: Error) => {
      throw new Error(
        `${error.message}: ${stack
          .logs()
          .split('\n')
          .filter((line) => line.includes(requestId))
          .join('\n')}`,
        { cause: error },
      );
    });
    const lines = stack
      .logs()
      .split('\n')
      .filter((line) => line.includes(requestId))
      .map((line) => JSON.parse(line) as { service: string; requestId: string });
    const services = new Set(lines.map((line) => line.service));
    for (const service of ['gateway', 'translator', 'router', 'worker'])
      assert.ok(services.has(service), `${service} logged ${requestId}`);
    assert.ok(lines.every((line) => line.requestId === requestId));
  });

  it('metrics - a malformed stored event is logged and skipped; the events after it still count', async () => {
    const events = new EventPublisher(stack.nc);
    const finished = (model: string) => ({
      requestId: `req-${model}`,
      model,
      workerId: 'w1',
      dialect: 'openai.chat',
      stream: false,
      status: 200,
      errorCode: null,
      finishReason: 'stop',
      usage: null,
      timings: null,
      durationMs: 5,
      coldStart: false,
      placeMs: null,
      finishedAt: Date.now(),
    });
    await events.publish(Subjects.requestFinished, { ...finished('evt-bad'), status: 'oops' }, `bad-${Date.now()}`);
    await events.publish(Subjects.requestFinished, finished('evt-good'), `good-${Date.now()}`);
    let m = new Map<string, number>();
    await waitFor(
      async () => sum((m = await scrape(stack)), 'cortex_requests_total', { model: 'evt-good' }) === 1,
      10_000,
    );
    assert.equal(sum(m, 'cortex_requests_total', { model: 'evt-bad' }), 0, 'the malformed event is not counted');
    assert.match(stack.logs(), /skipped event \d+ on llm\.evt\.v1\.request\.finished: status: must be a number/);
  });
});
