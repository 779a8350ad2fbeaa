import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { KeyStore } from '@cortex/bus';
import { parseKeyCreate, Subjects, WORKER_ID_TOKEN, type GenerateCommand } from '@cortex/contracts';
import { startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';

const user = [{ role: 'user' as const, content: 'Go.' }];

/**
 * One worker, one model with one slot: while a long stream holds the slot, requests queue on the
 * worker, and the order in which they are admitted is the order their streams send their first
 * frame (each runs alone on the slot). Separate processes on a real NATS. No keys in the config
 * (the loopback development mode): stored keys are still identified, and a request without one runs
 * at tier 0.
 */
describe('priority and fair queueing e2e', () => {
  let stack: TestStack;

  before(async () => {
    stack = await startStack({
      models: [{ id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 4096, slots: 1, pinned: true }],
      config: { worker: { heartbeat_ms: 100 }, gateway: { stall_timeout_ms: 60_000 } },
    });
  });

  after(async () => {
    await stack?.stop();
  });

  const queued = async (): Promise<number> =>
    (await stack.fleet())?.workers[0]?.models.find((m) => m.id === 'cortex-loop')?.queued ?? -1;

  /** `key` null: no key at all. */
  const post = (
    key: string | null,
    maxTokens: number,
    signal?: AbortSignal,
    headers: Record<string, string> = {},
    model = 'cortex-loop',
  ): Promise<Response> =>
    fetch(`${stack.baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...(key && { authorization: `Bearer ${key}` }), 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model, messages: user, stream: true, max_tokens: maxTokens }),
      signal,
    });

  /** A stored key, written to the keys bucket as `cortex keys create` does; resolves once the gateway knows it. */
  const storeKey = async (name: string, account: string, tier: number): Promise<{ id: string; secret: string }> => {
    const store = await KeyStore.open(stack.nc);
    const { key, secret } = await store.create(
      parseKeyCreate({ name, account, tier, models: ['cortex-loop'] }, Date.now()),
      Date.now(),
    );
    // Here an unknown key passes as no key, so the gateway's watch is seen to have brought this one
    // when another model is refused for it (403), not looked up (404).
    await waitFor(
      async () => {
        const response = await post(secret, 1, undefined, {}, 'not-its-model');
        await response.body?.cancel();
        return response.status === 403;
      },
      5_000,
      20,
    );
    return { id: key.id, secret };
  };
  const createKey = async (name: string, account: string, tier: number): Promise<string> =>
    (await storeKey(name, account, tier)).secret;

  /** A long stream that holds the slot until stopped; resolves once it runs. */
  const hold = async (key: string): Promise<() => void> => {
    const abort = new AbortController();
    const response = await post(key, 4000, abort.signal);
    assert.equal(response.status, 200);
    const reader = response.body!.getReader();
    await reader.read();
    void (async () => {
      try {
        while (!(await reader.read()).done);
      } catch {
        // stopped
      }
    })();
    return () => abort.abort();
  };

  /**
   * Sends each request in turn, each once the worker shows the one before it queued (so their
   * arrival order is known), then frees the slot: the names in the order the worker admitted them.
   */
  const admissionOrder = async (
    holder: string,
    requests: { name: string; key: string | null; headers?: Record<string, string> }[],
  ): Promise<string[]> => {
    const stop = await hold(holder);
    const order: string[] = [];
    const done: Promise<void>[] = [];
    for (const [i, { name, key, headers }] of requests.entries()) {
      done.push(
        (async () => {
          const response = await post(key, 3, undefined, headers);
          assert.equal(response.status, 200, name);
          let text = '';
          const decoder = new TextDecoder();
          const reader = response.body!.getReader();
          for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
            text += decoder.decode(chunk.value, { stream: true });
            // Keep-alive comments come while it waits; its first data frame comes once it runs.
            if (!order.includes(name) && /^data: /m.test(text)) order.push(name);
          }
          assert.match(text, /data: \[DONE\]/, name);
        })(),
      );
      await waitFor(async () => (await queued()) === i + 1, 10_000, 50);
    }
    stop();
    await Promise.all(done);
    return order;
  };

  it('fairness - with the slot taken by account A and more of A queued, account B’s later request is admitted before A’s', async () => {
    const a = await createKey('a', 'team-a', 5);
    const b = await createKey('b', 'team-b', 5);
    const order = await admissionOrder(a, [
      { name: 'a2', key: a },
      { name: 'a3', key: a },
      { name: 'a4', key: a },
      { name: 'b1', key: b },
    ]);
    // A owes for the long stream it ran; B owes nothing. First come first served would be a2, a3, a4, b1.
    assert.deepEqual(order, ['b1', 'a2', 'a3', 'a4']);
  });

  it('fairness - a higher tier is admitted first; the priority header lowers a tier but cannot raise one', async () => {
    const holder = await createKey('holder', 'team-h', 5);
    const eight = await createKey('eight', 'team-8', 8);
    const lowered = await createKey('lowered', 'team-l', 8);
    const two = await createKey('two', 'team-2', 2);
    const five = await createKey('five', 'team-5', 5);
    const order = await admissionOrder(holder, [
      { name: 'tier 8 asking for 1', key: lowered, headers: { 'x-cortex-priority': '1' } },
      { name: 'tier 2 asking for 9', key: two, headers: { 'x-cortex-priority': '9' } },
      { name: 'tier 5', key: five },
      { name: 'tier 8', key: eight },
    ]);
    assert.deepEqual(order, ['tier 8', 'tier 5', 'tier 2 asking for 9', 'tier 8 asking for 1']);
  });

  it('fairness - requests without a key come after every keyed tier, whatever they ask for', async () => {
    const holder = await createKey('holder-0', 'team-h0', 5);
    const one = await createKey('one', 'team-1', 1);
    const order = await admissionOrder(holder, [
      { name: 'no key', key: null },
      { name: 'no key asking for 9', key: null, headers: { 'x-cortex-priority': '9' } },
      { name: 'tier 1', key: one },
    ]);
    assert.deepEqual(order, ['tier 1', 'no key', 'no key asking for 9']);
  });

  it('fairness - a priority header that is not a tier is a 400 naming the header, in the route’s dialect', async () => {
    const key = await createKey('bad-header', 'team-x', 5);
    const openai = await post(key, 3, undefined, { 'x-cortex-priority': 'urgent' });
    assert.equal(openai.status, 400);
    const body = (await openai.json()) as { error: { type: string; param: string; message: string } };
    assert.deepEqual([body.error.type, body.error.param], ['invalid_request_error', 'x-cortex-priority']);
    assert.match(
      body.error.message,
      /x-cortex-priority header must be a whole number from 1 \(lowest priority\) to 9, got "urgent"/,
    );
    const anthropic = await fetch(`${stack.baseUrl}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json', 'x-cortex-priority': '0' },
      body: JSON.stringify({ model: 'cortex-loop', max_tokens: 3, messages: user }),
    });
    assert.equal(anthropic.status, 400);
    const error = (await anthropic.json()) as { type: string; error: { type: string; message: string } };
    assert.deepEqual([error.type, error.error.type], ['error', 'invalid_request_error']);
    assert.match(error.error.message, /x-cortex-priority/);
  });

  it("fairness - a Responses WebSocket's turns run at its key's tier as it is at each turn, not as it was at the upgrade", async () => {
    const key = await storeKey('socket', 'team-ws', 5);
    const secret = key.secret;
    const generates = await watchBus<GenerateCommand>(stack.nc, Subjects.workerGenerate.replace(WORKER_ID_TOKEN, '*'));
    const ws = new WebSocket(`${stack.baseUrl.replace(/^http/, 'ws')}/v1/responses`, {
      headers: { authorization: `Bearer ${secret}` },
    });
    const events: Array<{ type: string }> = [];
    ws.on('message', (data: Buffer) => void events.push(JSON.parse(data.toString()) as { type: string }));
    await new Promise((opened, failed) => ws.once('open', opened).once('error', failed));
    /** One turn to its end; the tier its generate command carried. */
    const turn = async (): Promise<number | undefined> => {
      const from = events.length;
      const sent = generates.messages.length;
      ws.send(
        JSON.stringify({
          type: 'response.create',
          model: 'cortex-loop',
          input: 'Go.',
          max_output_tokens: 2,
          store: false,
        }),
      );
      await waitFor(
        () => events.slice(from).some((event) => /^response\.(completed|incomplete|failed)$|^error$/.test(event.type)),
        10_000,
        20,
      ).catch((error: Error) => {
        throw new Error(`${error.message}; the turn's events: ${JSON.stringify(events.slice(from))}`);
      });
      assert.equal(events.at(-1)?.type, 'response.incomplete', 'the turn ran to its max_output_tokens');
      await waitFor(() => generates.messages.length > sent, 5_000, 10);
      return generates.messages.at(-1)?.priority?.tier;
    };
    try {
      assert.equal(await turn(), 5);
      assert.equal(generates.messages.at(-1)?.priority?.account, 'team-ws');
      await (await KeyStore.open(stack.nc)).update(key.id, { tier: 8 });
      // Each turn is another request at the key's tier as the gateway knows it: its watch brings the change within moments.
      await waitFor(async () => (await turn()) === 8, 5_000, 50);
    } finally {
      ws.close();
      await generates.stop();
    }
  });

  it('fairness - queue wait is exported by the tier each request ran at', async () => {
    await waitFor(
      async () => {
        const text = await (await fetch(`${stack.metricsUrl}/metrics`)).text();
        return ['8', '5', '2', '1', '0'].every((tier) =>
          new RegExp(
            `^cortex_request_queue_tier_seconds_count\\{model="cortex-loop",tier="${tier}"\\} [1-9]`,
            'm',
          ).test(text),
        );
      },
      10_000,
      200,
    );
  });
});
