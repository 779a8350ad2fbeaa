import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TextStreamer } from './text-streamer.js';

function run(stops: string[], pieces: string[]): { sent: string[]; stopped: boolean; rest: string } {
  const streamer = new TextStreamer(stops);
  const sent: string[] = [];
  for (const piece of pieces) {
    const { text, stopped } = streamer.push(piece);
    if (text) sent.push(text);
    if (stopped) return { sent, stopped, rest: '' };
  }
  return { sent, stopped: false, rest: streamer.flush() };
}

describe('text streamer', () => {
  it('text streamer - passes pieces through when there are no stops', () => {
    assert.deepEqual(run([], ['a', 'b']).sent, ['a', 'b']);
  });

  it('text streamer - holds back a partial stop and never leaks it', () => {
    const result = run(['END'], ['Hello E', 'N', 'D more']);
    assert.deepEqual(result.sent, ['Hello ']);
    assert.equal(result.stopped, true);
  });

  it('text streamer - releases held text once it can no longer match', () => {
    const result = run(['END'], ['Hello E', 'Nx']);
    assert.deepEqual(result.sent, ['Hello ', 'ENx']);
    assert.equal(result.stopped, false);
  });

  it('text streamer - picks the earliest of several stops inside one piece', () => {
    const result = run(['b', 'xyz'], ['axyzb']);
    assert.deepEqual(result.sent, ['a']);
    assert.equal(result.stopped, true);
  });

  it('text streamer - flush returns what was held at the end', () => {
    const result = run(['STOP'], ['abc ST']);
    assert.deepEqual(result.sent, ['abc ']);
    assert.equal(result.rest, 'ST');
  });
});
