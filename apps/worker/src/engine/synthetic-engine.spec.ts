import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

import { SYNTHETIC_TOKEN, SyntheticEngine } from './synthetic-engine.js';
import type { EngineEvent } from './engine.types.js';

const spec = { id: 'synthetic', path: 'synthetic', contextSize: 4096, slots: 2, maxQueue: 4 };
const request = (maxTokens: number) => ({
  model: 'synthetic',
  messages: [{ role: 'user' as const, content: 'hello there' }],
  sampling: { maxTokens },
  stream: true,
});

async function run(maxTokens: number, abortAfter?: number): Promise<EngineEvent[]> {
  const model = await new SyntheticEngine(5_000).load(spec);
  const events: EngineEvent[] = [];
  const controller = new AbortController();
  if (abortAfter !== undefined) setTimeout(() => controller.abort(), abortAfter);
  await model.generate({
    request: request(maxTokens),
    receivedAt: performance.now(),
    signal: controller.signal,
    emit: (event) => events.push(event),
  });
  return events;
}

describe('synthetic engine', () => {
  it('synthetic engine - emits start, exactly max_tokens words and one finish with their usage', async () => {
    const events = await run(40);
    assert.equal(events[0]?.type, 'start');
    const text = events.flatMap((e) => (e.type === 'text' ? [e.text] : [])).join('');
    assert.equal(text, SYNTHETIC_TOKEN.repeat(40));
    const finish = events.at(-1);
    assert.ok(finish?.type === 'finish');
    assert.equal(finish.reason, 'length');
    assert.equal(finish.usage.completionTokens, 40);
    assert.equal(events.filter((e) => e.type === 'finish').length, 1);
  });

  it('synthetic engine - a cancelled stream ends with reason cancelled and counts what it sent', async () => {
    const events = await run(1_000_000, 30);
    const finish = events.at(-1);
    assert.ok(finish?.type === 'finish');
    assert.equal(finish.reason, 'cancelled');
    const words = events.flatMap((e) => (e.type === 'text' ? [e.text] : [])).join('').length / SYNTHETIC_TOKEN.length;
    assert.equal(finish.usage.completionTokens, words);
    assert.ok(words < 1_000_000);
  });
});
