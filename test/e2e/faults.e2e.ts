import { after, before, describe, it, type TestContext } from 'node:test';
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { request as httpRequest } from 'node:http';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { BusClient } from '@cortex/bus';
import { streamSubject, Subjects, workerSubject, type CortexError, type StreamEvent } from '@cortex/contracts';
import {
  fixtureEntry as fixture,
  OpenResponsesSchema,
  postJson,
  startStack,
  streamSse,
  waitFor,
  watchBus,
  type TestStack,
} from '@cortex/testing';

// Each case kills or freezes a real service process at a moment chosen by an event (a token, a
// process exit), then reports what the client saw and how long it took. The table is printed at the
// end (`npm run test:faults`).

const user = [{ role: 'user' as const, content: 'Hi.' }];

/**
 * Posts a body whose Content-Length is over the gateway's limit, sending only its first 64 KiB: the
 * gateway answers 413 from the header alone, before the body has arrived, and this client hangs up
 * once it has read the answer (a client that sends it all is tested in access.e2e.ts).
 */
function postOverLimit(url: string, body: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const bytes = Buffer.from(body);
    const req = httpRequest(
      url,
      { method: 'POST', headers: { 'content-type': 'application/json', 'content-length': bytes.length } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          req.destroy();
          resolve({ status: res.statusCode ?? 0, body: text });
        });
      },
    );
    const timer = setTimeout(() => req.destroy(new Error('no answer within 10 s to a body over the limit')), 10_000);
    req.on('close', () => clearTimeout(timer));
    req.on('error', reject);
    req.write(bytes.subarray(0, 64 * 1024));
  });
}
const rows: string[] = [];

function report(t: TestContext, fault: string, saw: string, ms: number): void {
  const line = `| ${fault} | ${saw} | ${Math.round(ms)} ms |`;
  rows.push(line);
  t.diagnostic(line);
}

// The table of every case, once all suites are done.
after(() => console.log(['| fault | what the client saw | time |', '|---|---|---|', ...rows].join('\n')));

describe('faults e2e', () => {
  let stack: TestStack;
  let client: OpenAI;
  const schema = new OpenResponsesSchema();

  before(async () => {
    stack = await startStack({
      services: ['router', 'translator', 'worker', 'gateway'],
      models: [fixture('cortex-chat', { pinned: true }), fixture('cortex-loop', { context_size: 32768, pinned: true })],
      // The shipped defaults for liveness and idle timeout, so the times below are what operators get.
      config: {
        worker: { id: 'w1', heartbeat_ms: 1_000 },
        gateway: { stream_idle_timeout_ms: 10_000 },
        log_level: 'info',
      },
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  const processOf = (name: string): ChildProcess => stack.processes.get(name) ?? assert.fail(`no ${name} process`);

  /** Replaces a killed service with a fresh process under the same name. */
  const respawn = (name: string): void => {
    stack.processes.delete(name);
    stack.spawnService(name);
  };

  const MiB = 2 ** 20;

  it('faults - a 3 MiB body (over NATS max_payload, under the HTTP limit) is carried through the bus and answered', async (t) => {
    // A Responses body that continues a stored response goes to the translator whole (other bodies
    // decode in the gateway); the padding is a field the decoder ignores.
    const first = (await (
      await postJson(`${stack.baseUrl}/v1/responses`, { model: 'cortex-chat', input: 'Hi.' })
    ).json()) as { id: string };
    const started = performance.now();
    const response = await postJson(`${stack.baseUrl}/v1/responses`, {
      model: 'cortex-chat',
      previous_response_id: first.id,
      input: 'Say hello.',
      user: 'x'.repeat(3 * MiB),
    });
    const body = (await response.json()) as { output?: Array<{ content?: Array<{ text?: string }> }> };
    const text = body.output
      ?.flatMap((item) => item.content ?? [])
      .map((part) => part.text ?? '')
      .join('');
    report(
      t,
      '3 MiB Responses body, 1 MiB max_payload',
      `${response.status} ${text ?? JSON.stringify(body)}`,
      performance.now() - started,
    );
    assert.equal(response.status, 200, JSON.stringify(body).slice(0, 500));
    assert.equal(text, 'Hello from a tiny model.');
  });

  it('faults - a 2 MiB prompt reaches the worker whole: the answer is the context error, not a bus error', async (t) => {
    const started = performance.now();
    const response = await postJson(`${stack.baseUrl}/v1/chat/completions`, {
      model: 'cortex-chat',
      messages: [{ role: 'user', content: 'Hi. '.repeat(MiB / 2) }],
    });
    const body = (await response.json()) as { error?: { type: string; message: string } };
    report(t, '2 MiB prompt', `${response.status} ${body.error?.message.slice(0, 60)}`, performance.now() - started);
    assert.equal(response.status, 400, JSON.stringify(body));
    assert.equal(body.error?.type, 'invalid_request_error');
    assert.match(
      body.error?.message ?? '',
      /the prompt is (at least )?\d+ tokens but cortex-chat has a context of 512/,
    );
  });

  it('faults - 1.5 MB of one repeated character is refused at once and the worker stays up', async (t) => {
    // Tokenized whole, such a run costs minutes of the worker's event loop (the tokenizer is quadratic on it).
    const downs = await watchBus<{ workerId: string }>(stack.nc, Subjects.workerDown);
    const started = performance.now();
    const response = await postJson(`${stack.baseUrl}/v1/chat/completions`, {
      model: 'cortex-chat',
      messages: [{ role: 'user', content: 'x'.repeat(1_500_000) }],
    });
    const body = (await response.json()) as { error?: { type: string; message: string } };
    report(
      t,
      '1.5 MB run of one character',
      `${response.status} ${body.error?.message.slice(0, 60)}`,
      performance.now() - started,
    );
    await downs.stop();
    assert.equal(response.status, 400, JSON.stringify(body));
    assert.match(body.error?.message ?? '', /the prompt is at least \d+ tokens but cortex-chat has a context of 512/);
    assert.deepEqual(downs.messages, [], 'no worker was declared down meanwhile');
  });

  it('faults - count_tokens on 1.5 MB of one repeated character answers at once with at least the context', async (t) => {
    const downs = await watchBus<{ workerId: string }>(stack.nc, Subjects.workerDown);
    const started = performance.now();
    const response = await postJson(`${stack.baseUrl}/v1/messages/count_tokens`, {
      model: 'cortex-chat',
      messages: [{ role: 'user', content: 'x'.repeat(1_500_000) }],
    });
    const body = (await response.json()) as { input_tokens?: number };
    report(
      t,
      'count_tokens, 1.5 MB run of one character',
      `${response.status} input_tokens ${body.input_tokens}`,
      performance.now() - started,
    );
    await downs.stop();
    assert.equal(response.status, 200, JSON.stringify(body));
    assert.ok((body.input_tokens ?? 0) >= 512, `input_tokens ${body.input_tokens} is at least the context`);
    assert.deepEqual(downs.messages, [], 'no worker was declared down meanwhile');
  });

  it('faults - /v1/responses with 10,000 input items: the decoded request (over max_payload) reaches the worker', async (t) => {
    const input = Array.from({ length: 10_000 }, (_, i) => ({
      role: i % 2 ? 'assistant' : 'user',
      content: `Turn ${i}.`,
    }));
    const started = performance.now();
    const response = await postJson(`${stack.baseUrl}/v1/responses`, { model: 'cortex-chat', input, store: false });
    const body = (await response.json()) as { error?: { type: string; message: string } };
    report(
      t,
      '/v1/responses, 10,000 input items',
      `${response.status} ${body.error?.message.slice(0, 60)}`,
      performance.now() - started,
    );
    assert.equal(response.status, 400, JSON.stringify(body));
    assert.match(
      body.error?.message ?? '',
      /the prompt is (at least )?\d+ tokens but cortex-chat has a context of 512/,
    );
  });

  it('faults - a response too large for a KV value is payload_too_large, saying what to do, not internal', async (t) => {
    const id = 'resp_faults_large';
    const input = [
      { type: 'message', id: 'msg_in', role: 'user', content: [{ type: 'input_text', text: 'x'.repeat(2 * MiB) }] },
    ];
    const state = { responseId: id, createdAt: 0, echo: {}, store: true, input, chain: [] };
    const resource = {
      id,
      object: 'response',
      created_at: 0,
      completed_at: 0,
      status: 'completed',
      incomplete_details: null,
      output: [],
      error: null,
      usage: null,
    };
    const started = performance.now();
    const error = await new BusClient(stack.nc, 10_000).request(Subjects.responsesStore, { state, resource }).then(
      () => null,
      (thrown: CortexError) => thrown,
    );
    report(
      t,
      'storing a 2 MiB response (KV value over max_payload)',
      `${error?.code}: ${error?.message.slice(0, 70)}`,
      performance.now() - started,
    );
    assert.equal(error?.code, 'payload_too_large');
    assert.match(error?.message ?? '', /over the NATS server's max_payload \(1048576\); send "store": false/);
  });

  it('faults - a body over body_limit_bytes is 413 in the dialect shape', async (t) => {
    const started = performance.now();
    const response = await postOverLimit(
      `${stack.baseUrl}/v1/messages`,
      JSON.stringify({
        model: 'cortex-chat',
        max_tokens: 5,
        messages: [{ role: 'user', content: 'x'.repeat(9 * MiB) }],
      }),
    );
    const body = JSON.parse(response.body) as { type?: string; error?: { type: string; message: string } };
    report(
      t,
      '9 MiB body (limit 8 MiB), /v1/messages',
      `${response.status} ${body.error?.type}`,
      performance.now() - started,
    );
    assert.equal(response.status, 413);
    assert.equal(body.type, 'error');
    assert.equal(body.error?.type, 'request_too_large');
  });

  for (const [path, shape] of [
    ['/v1/chat/completions', 'openai'],
    ['/v1/messages', 'anthropic'],
    ['/v1/responses', 'openai'],
  ] as const) {
    it(`faults - JSON nested 5,000 deep on ${path} is 400 in the dialect shape, naming the field`, async (t) => {
      const deep = `${'['.repeat(5_000)}${']'.repeat(5_000)}`;
      const started = performance.now();
      const response = await postJson(
        `${stack.baseUrl}${path}`,
        `{"model":"cortex-chat","max_tokens":5,"messages":${deep},"input":${deep}}`,
      );
      const body = (await response.json()) as {
        type?: string;
        error?: { type: string; message: string; param?: string };
      };
      report(
        t,
        `JSON nested 5,000 deep, ${path}`,
        `${response.status} ${body.error?.message}`,
        performance.now() - started,
      );
      assert.equal(response.status, 400, JSON.stringify(body));
      assert.equal(body.error?.type, 'invalid_request_error');
      assert.match(body.error?.message ?? '', /field `(messages|input)` nests deeper than 128 levels/);
      if (shape === 'anthropic') assert.equal(body.type, 'error');
    });
  }

  it('faults - translator killed during a /v1/responses stream: error and response.failed, then the stream ends', async (t) => {
    const worker = processOf('worker');
    const translator = processOf('translator');
    const seen: string[] = [];
    const frames: Array<{ type: string; sequence_number: number }> = [];
    let killedAt = 0;
    let stopped = false;
    try {
      for await (const message of streamSse(`${stack.baseUrl}/v1/responses`, {
        model: 'cortex-loop',
        input: 'Hi.',
        stream: true,
        max_output_tokens: 40,
      })) {
        seen.push(message.event ?? message.data);
        if (message.event) frames.push(JSON.parse(message.data) as { type: string; sequence_number: number });
        if (message.event === 'response.output_text.delta' && !killedAt) {
          // Freeze the worker so the stream cannot finish before the translator is gone.
          worker.kill('SIGSTOP');
          stopped = true;
          killedAt = performance.now();
          translator.kill('SIGKILL');
          await once(translator, 'exit');
          worker.kill('SIGCONT');
          stopped = false;
        }
      }
    } finally {
      if (stopped) worker.kill('SIGCONT');
      if (killedAt) respawn('translator');
    }
    const ms = performance.now() - killedAt;
    assert.ok(killedAt > 0, `a text delta came: ${seen.join(', ')}`);
    report(t, 'translator SIGKILL during a /v1/responses stream', seen.slice(-3).join(', '), ms);
    assert.deepEqual(seen.slice(-3), ['error', 'response.failed', '[DONE]'], seen.join(', '));
    assert.ok(!seen.includes('response.completed'), 'a response that was not stored is not reported completed');
    // The replacement frames are valid events of the spec and keep the numbering unbroken.
    for (const frame of frames.slice(-2)) assert.equal(schema.checkEvent(frame), null, frame.type);
    assert.deepEqual(
      frames.map((f) => f.sequence_number),
      frames.map((_, i) => i),
    );
    await waitFor(
      async () =>
        (await client.chat.completions.create({ model: 'cortex-chat', messages: user }).catch(() => null)) !== null,
      30_000,
    );
  });

  // A frozen process still holds its subjects, so it is not taken for dead: the stream idle timeout ends it.
  it('faults - a worker frozen mid-stream: the stream ends at the idle timeout with an error and the worker is told to stop', async (t) => {
    const worker = processOf('worker');
    const cancels = await watchBus<{ runId: string; reason: string }>(
      stack.nc,
      workerSubject(Subjects.workerCancel, 'w1'),
    );
    const stream = await client.chat.completions.create({
      model: 'cortex-loop',
      messages: user,
      stream: true,
      max_tokens: 30_000,
    });
    let frozenAt = 0;
    let error: Error | null = null;
    try {
      for await (const _chunk of stream) {
        if (!frozenAt) {
          worker.kill('SIGSTOP');
          frozenAt = performance.now();
        }
      }
    } catch (thrown) {
      error = thrown as Error;
    }
    const ms = performance.now() - frozenAt;
    try {
      assert.match(error?.message ?? 'no error', /no event from the worker/);
      await waitFor(() => cancels.messages.length > 0, 5_000);
      const runId = cancels.messages[0]?.runId ?? '';
      // Once it runs again, the worker reads the cancel and ends the generation: the slot is free.
      const events = await watchBus<StreamEvent>(stack.nc, streamSubject('w1', runId));
      worker.kill('SIGCONT');
      await waitFor(() => events.messages.some((e) => e.type === 'finish' && e.reason === 'cancelled'), 10_000);
      await events.stop();
      report(t, 'worker SIGSTOP after the first token', `${error?.message}; worker cancelled`, ms);
    } finally {
      await cancels.stop();
      worker.kill('SIGCONT');
    }
  });

  it('faults - gateway killed mid-stream: the client sees the connection drop, the worker stops the orphaned stream', async (t) => {
    const gateway = processOf('gateway');
    const streams = await watchBus<StreamEvent>(stack.nc, Subjects.streamsAll);
    let killedAt = 0;
    let error: Error | null = null;
    try {
      for await (const message of streamSse(`${stack.baseUrl}/v1/chat/completions`, {
        model: 'cortex-loop',
        messages: user,
        stream: true,
        max_tokens: 30_000,
      })) {
        if (!killedAt && message.data.includes('Round')) {
          gateway.kill('SIGKILL');
          killedAt = performance.now();
        }
      }
    } catch (thrown) {
      error = thrown as Error;
    }
    const dropMs = performance.now() - killedAt;
    respawn('gateway');
    try {
      assert.ok(error, 'the client saw the connection fail');
      const finished = (): boolean => streams.messages.some((e) => e.type === 'finish' && e.reason === 'cancelled');
      const answers = async (): Promise<boolean> =>
        (await fetch(`${stack.baseUrl}/v1/models`).catch(() => null))?.ok === true;
      const [stopMs, backMs] = await Promise.all([
        waitFor(finished, 15_000).then(() => performance.now() - killedAt),
        waitFor(answers, 30_000).then(() => performance.now() - killedAt),
      ]);
      report(
        t,
        'gateway SIGKILL mid-stream',
        `client: ${error.message} after ${Math.round(dropMs)} ms; worker stopped the stream after ${Math.round(stopMs)} ms; a new gateway answered after ${Math.round(backMs)} ms`,
        stopMs,
      );
    } finally {
      await streams.stop();
    }
  });

  it('faults - router killed: placement fails with 503 until a router is back, then requests work', async (t) => {
    const router = processOf('router');
    router.kill('SIGKILL');
    await once(router, 'exit');
    const started = performance.now();
    const response = await postJson(`${stack.baseUrl}/v1/chat/completions`, { model: 'cortex-chat', messages: user });
    const body = (await response.json()) as { error?: { message: string } };
    const failMs = performance.now() - started;
    respawn('router');
    await waitFor(
      async () =>
        (await client.chat.completions.create({ model: 'cortex-chat', messages: user }).catch(() => null)) !== null,
      30_000,
    );
    report(
      t,
      'router SIGKILL, then a request',
      `${response.status} ${body.error?.message} after ${Math.round(failMs)} ms; requests work again ${Math.round(performance.now() - started)} ms after the restart began`,
      failMs,
    );
    assert.equal(response.status, 503);
  });

  it('faults - NATS killed mid-stream, then restarted: what clients see, and when requests work again', async (t) => {
    const nats = stack.nats;
    if (!nats.kill || !nats.restart) return t.skip('needs a local nats-server (not a container)');
    const stream = await client.chat.completions.create({
      model: 'cortex-loop',
      messages: user,
      stream: true,
      max_tokens: 30_000,
    });
    let killedAt = 0;
    let during: Promise<string> | null = null;
    let error: Error | null = null;
    try {
      for await (const _chunk of stream) {
        if (!killedAt) {
          await nats.kill();
          killedAt = performance.now();
          // A new request while the bus is down.
          during = postJson(`${stack.baseUrl}/v1/chat/completions`, { model: 'cortex-chat', messages: user }).then(
            async (response) =>
              `${response.status} ${((await response.json()) as { error?: { message: string } }).error?.message} after ${Math.round(performance.now() - killedAt)} ms`,
          );
        }
      }
    } catch (thrown) {
      error = thrown as Error;
    }
    const streamMs = performance.now() - killedAt;
    const duringSaw = await during;
    const restartedAt = performance.now();
    await nats.restart();
    await waitFor(
      async () =>
        (await client.chat.completions.create({ model: 'cortex-chat', messages: user }).catch(() => null)) !== null,
      60_000,
      250,
    );
    const backMs = performance.now() - restartedAt;
    report(
      t,
      'NATS SIGKILL mid-stream',
      `stream: ${error?.message ?? 'ended without error'} after ${Math.round(streamMs)} ms; a new request: ${duringSaw}`,
      streamMs,
    );
    report(t, 'NATS restarted', `requests work again after ${Math.round(backMs)} ms`, backMs);
    assert.ok(error, 'the stream ended with an error');
    // Not a wait for the placement timeout: the gateway knows its bus is gone after one unanswered try.
    assert.match(duringSaw ?? '', /^503 the gateway has lost its NATS connection/);
  });

  it('faults - worker killed after the first token: the stream ends with worker_lost, not at the idle timeout', async (t) => {
    const worker = processOf('worker');
    const stream = await client.chat.completions.create({
      model: 'cortex-loop',
      messages: user,
      stream: true,
      max_tokens: 30_000,
    });
    let killedAt = 0;
    await assert.rejects(async () => {
      for await (const _chunk of stream) {
        if (!killedAt) {
          worker.kill('SIGKILL');
          killedAt = performance.now();
        }
      }
    }, /w1 is down/);
    const ms = performance.now() - killedAt;
    report(t, 'worker SIGKILL after the first token', 'error chunk: worker w1 is down', ms);
    respawn('worker');
    await stack.workersUp(1);
  });
});

describe('faults e2e - before the first worker', () => {
  let stack: TestStack;

  before(async () => {
    stack = await startStack({ services: ['router', 'translator', 'gateway'], models: [fixture('cortex-chat')] });
  });

  after(async () => {
    await stack?.stop();
  });

  it('faults - a stream that arrives before any worker has joined waits for the first one instead of 503', async (t) => {
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const places = await watchBus<unknown>(stack.nc, Subjects.routerPlace);
    const started = performance.now();
    const stream = client.chat.completions.create({ model: 'cortex-chat', messages: user, stream: true });
    // The router has answered "no worker" at least once: only now does the first worker start.
    await waitFor(() => places.messages.length > 0, 10_000);
    await places.stop();
    stack.spawnService('worker');
    let text = '';
    for await (const chunk of await stream) text += chunk.choices[0]?.delta.content ?? '';
    report(t, 'stream sent before any worker joined', `200, "${text}"`, performance.now() - started);
    assert.equal(text, 'Hello from a tiny model.');
  });
});
