import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { PullProgress } from './pull-progress.js';

const MIB = 2 ** 20;

function run(isTTY: boolean, json: boolean): string {
  let text = '';
  let now = 1_000;
  const progress = new PullProgress({ isTTY, write: (chunk) => (text += chunk) }, json, () => now);
  progress.update('hf:o/r/m.gguf', 10 * MIB, 50 * MIB);
  now += 2_000;
  progress.update('hf:o/r/m.gguf', 30 * MIB, 50 * MIB);
  now += 2_000;
  progress.update('hf:o/r/m.gguf', 50 * MIB, 50 * MIB);
  progress.done();
  return text;
}

describe('pull progress', () => {
  it('pull progress - a terminal gets one line rewritten in place with bytes, speed from this run and time left', () => {
    assert.equal(
      run(true, false),
      '\r\x1b[2Khf:o/r/m.gguf  10.0 MiB of 50.0 MiB  20%  0.0 MiB/s  --:-- left' +
        '\r\x1b[2Khf:o/r/m.gguf  30.0 MiB of 50.0 MiB  60%  10.0 MiB/s  0:02 left' +
        '\r\x1b[2Khf:o/r/m.gguf  50.0 MiB of 50.0 MiB  100%  10.0 MiB/s  0:00 left\n',
    );
  });

  it('pull progress - a pipe gets plain lines, one per tenth; --json one object per update', () => {
    assert.equal(run(false, false).split('\n').filter(Boolean).length, 3);
    const lines = run(false, true)
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    assert.deepEqual(lines[1], {
      source: 'hf:o/r/m.gguf',
      bytes: 30 * MIB,
      totalBytes: 50 * MIB,
      bytesPerSecond: 10 * MIB,
      secondsLeft: 2,
    });
  });
});
