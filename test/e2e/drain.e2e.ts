import { after, before, describe, it } from 'node:test';
import { once } from 'node:events';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { fixtureEntry as fixture, startStack, type TestStack } from '@cortex/testing';

// `docker stop`, a Kubernetes rollout or Ctrl-C send SIGTERM: the worker takes no new work and
// finishes what it runs (for up to 10 s) before it exits. Its streams must reach their clients whole,
// even when they last longer than the silence after which routers declare a worker down.

const user = [{ role: 'user' as const, content: 'Go!' }];

describe('worker drain e2e', () => {
  let stack: TestStack;
  let client: OpenAI;

  before(async () => {
    stack = await startStack({
      services: ['router', 'translator', 'worker', 'gateway'],
      models: [fixture('cortex-loop', { context_size: 16_384, pinned: true })],
      // 250 ms heartbeats: a worker silent for 2 s is down.
      config: { worker: { id: 'w1', heartbeat_ms: 250 } },
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  it('worker drain e2e - a worker sent SIGTERM mid-stream finishes the stream whole, then exits 0', async () => {
    // Size the stream to about 5 s of this machine's decoding: past the 2 s of silence that means
    // down, inside the 10 s drain; a fast machine is held to what the context leaves after the prompt.
    const started = performance.now();
    await client.chat.completions.create({ model: 'cortex-loop', messages: user, max_tokens: 100 });
    const maxTokens = Math.min(16_000, Math.max(100, Math.round((5_000 * 100) / (performance.now() - started))));

    const worker = stack.processes.get('worker') ?? assert.fail('no worker process');
    const exited = once(worker, 'exit');
    const stream = await client.chat.completions.create({ model: 'cortex-loop', messages: user, stream: true, max_tokens: maxTokens, stream_options: { include_usage: true } });
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
