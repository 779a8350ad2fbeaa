import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { soonOrFirst } from './soon-or-first.js';

describe('soonOrFirst', () => {
  it('soon or first - writes on the next turn of the event loop, after the code that scheduled it, and once', async () => {
    const lines: string[] = [];
    soonOrFirst(() => lines.push('generating'));
    lines.push('prompt on its way');
    await Promise.resolve();
    assert.deepEqual(lines, ['prompt on its way'], 'not in the microtasks of the turn that scheduled it');
    await new Promise((done) => setImmediate(done));
    assert.deepEqual(lines, ['prompt on its way', 'generating']);
    await new Promise((done) => setTimeout(done, 5));
    assert.deepEqual(lines, ['prompt on its way', 'generating'], 'written once');
  });

  it('soon or first - called before its turn, writes at once and not again', async () => {
    const lines: string[] = [];
    const started = soonOrFirst(() => lines.push('generating'));
    started();
    lines.push('failed');
    started();
    await new Promise((done) => setTimeout(done, 5));
    assert.deepEqual(lines, ['generating', 'failed']);
  });
});
