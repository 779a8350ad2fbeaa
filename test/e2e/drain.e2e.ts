import { after, before, describe, it } from 'node:test';
import { once } from 'node:events';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { fixtureEntry as fixture, startStack, type TestStack } from '@cortex/testing';

// `docker stop`, a Kubernetes rollout or Ctrl-C send SIGTERM: the worker takes no new work and
// finishes what it runs (for up to drain_timeout_ms, 10 s by default) before it exits. Its streams must reach their clients whole,
// even when they last longer than the silence after which routers declare a worker down.

const user = [{ role: 'user' as const, content: 'Go!' }];

/** One worker serving cortex-loop (250 ms heartbeats: a worker silent for 2 s is down), with `config` added. */
async function loopStack(config: Record<string, unknown> = {}): Promise<{ stack: TestStack; client: OpenAI }> {
  const stack = await startStack({
    services: ['router', 'translator', 'worker', 'gateway'],
    models: [fixture('cortex-loop', { context_size: 16_384, pinned: true })],
    config: { ...config, worker: { id: 'w1', heartbeat_ms: 250 } },
  });
  return { stack, client: new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 }) };
}

/** `max_tokens` for a stream of about `ms` of this machine's non-streamed decoding, at least `least`; a fast machine is held to what the context leaves after the prompt. */
async function sizedMaxTokens(client: OpenAI, ms: number, least: number): Promise<number> {
  const started = performance.now();
  await client.chat.completions.create({ model: 'cortex-loop', messages: user, max_tokens: 100 });
  return Math.min(16_000, Math.max(least, Math.round((ms * 100) / (performance.now() - started))));
}

describe('worker drain e2e', () => {
  let stack: TestStack;
  let client: OpenAI;

  before(async () => {
    ({ stack, client } = await loopStack());
  });

  after(async () => {
    await stack?.stop();
  });

  it('worker drain e2e - a worker sent SIGTERM mid-stream finishes the stream whole, then exits 0', async () => {
    // Size the stream to about 5 s of this machine's decoding: past the 2 s of silence that means
    // down, inside the 10 s drain.
    const maxTokens = await sizedMaxTokens(client, 5_000, 100);

    const worker = stack.processes.get('worker') ?? assert.fail('no worker process');
    const exited = once(worker, 'exit');
    const stream = await client.chat.completions.create({
      model: 'cortex-loop',
      messages: user,
      stream: true,
      max_tokens: maxTokens,
      stream_options: { include_usage: true },
    });
    let signalled = false;
    let finish: string | null = null;
    let tokens = 0;
    for await (const chunk of stream) {
      if (!signalled && chunk.choices[0]?.delta?.content) {
        worker.kill('SIGTERM');
        signalled = true;
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
      tokens = chunk.usage?.completion_tokens ?? tokens;
    }
    assert.ok(signalled, 'the stream carried no content before it ended');
    assert.equal(finish, 'length');
    assert.equal(tokens, maxTokens);
    const [code] = await exited;
    assert.equal(code, 0, 'the worker exits cleanly once drained');
    stack.processes.delete('worker');
  });
});

// drain_timeout_ms bounds the drain: past it the worker cancels what still runs and exits, so a
// Kubernetes grace period sized to it (k8s/) is never cut short by a SIGKILL.
describe('worker drain e2e - drain_timeout_ms', () => {
  let stack: TestStack;
  let client: OpenAI;

  before(async () => {
    ({ stack, client } = await loopStack({ drain_timeout_ms: 1_000 }));
  });

  after(async () => {
    await stack?.stop();
  });

  it('worker drain e2e - with drain_timeout_ms 1000 a stream longer than that is cancelled, then the worker exits 0', async () => {
    // A stream sized to about 20 s of this machine's non-streamed decoding (streams run faster): far past
    // the 1 s drain; with the default 10 s drain it would end whole.
    const maxTokens = await sizedMaxTokens(client, 20_000, 200);

    const worker = stack.processes.get('worker') ?? assert.fail('no worker process');
    const exited = once(worker, 'exit');
    const stream = await client.chat.completions.create({
      model: 'cortex-loop',
      messages: user,
      stream: true,
      max_tokens: maxTokens,
      stream_options: { include_usage: true },
    });
    let signalled = false;
    let tokens = 0;
    let finish: string | null = null;
    let failure: Error | null = null;
    try {
      for await (const chunk of stream) {
        if (!signalled && chunk.choices[0]?.delta?.content) {
          worker.kill('SIGTERM');
          signalled = true;
        }
        finish = chunk.choices[0]?.finish_reason ?? finish;
        tokens = chunk.usage?.completion_tokens ?? tokens;
      }
    } catch (error) {
      failure = error as Error;
    }
    assert.ok(signalled, 'the stream carried no content before it ended');
    assert.notEqual(
      finish,
      'length',
      `the stream ran to max_tokens (${maxTokens}) instead of being cancelled after drain_timeout_ms`,
    );
    assert.ok(failure !== null || finish !== null, 'the stream ended without saying how');
    // Chunks carry several tokens each: the usage (when the stream ended with one) is what counts.
    assert.ok(tokens < maxTokens, `${tokens} of ${maxTokens} tokens were generated`);
    const [code] = await exited;
    assert.equal(code, 0, 'the worker exits cleanly after cancelling');
    stack.processes.delete('worker');
  });
});
