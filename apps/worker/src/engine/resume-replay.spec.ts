import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError, type FinishReason } from '@cortex/contracts';
import { ResumeReplay } from './resume-replay.js';
import { TokenRelease } from './token-release.js';
import type { EngineEvent } from './engine.types.js';

const limits = { vocabularySize: 100, contextSize: 16, promptTokens: 5 };

function refused(make: () => unknown, param: string): void {
  assert.throws(
    make,
    (error: unknown) => error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === param,
  );
}

describe('resume replay', () => {
  it('resume replay - the context is the prompt, then the delivered tokens', () => {
    const replay = new ResumeReplay({ tokens: [7, 8], toolCallIds: [] }, limits);
    assert.deepEqual(replay.context([1, 2, 3, 4, 5]), [1, 2, 3, 4, 5, 7, 8]);
  });

  it('resume replay - a token outside the vocabulary, or more tokens than the context holds, is refused naming the field', () => {
    refused(() => new ResumeReplay({ tokens: [1, 100], toolCallIds: [] }, limits), 'resume.tokens[1]');
    refused(
      () => new ResumeReplay({ tokens: Array.from({ length: 11 }, () => 1), toolCallIds: [] }, limits),
      'resume.tokens',
    );
    assert.doesNotThrow(
      () => new ResumeReplay({ tokens: Array.from({ length: 10 }, () => 1), toolCallIds: [] }, limits),
    );
    assert.doesNotThrow(
      () => new ResumeReplay({ tokens: [5000], toolCallIds: [] }, { ...limits, vocabularySize: null }),
    );
  });

  it('resume replay - each delivered token is handled again with the stream muted, in order', () => {
    const sent: EngineEvent[] = [];
    const replayed: EngineEvent[] = [];
    const release = new TokenRelease(
      (e) => sent.push(e),
      (e) => replayed.push(e),
    );
    const handled: number[] = [];
    const finish = new ResumeReplay({ tokens: [3, 4, 5], toolCallIds: [] }, limits).replay(release, (token) => {
      handled.push(token);
      release.emit({ type: 'text', text: String(token) });
      return null;
    });
    assert.equal(finish, null);
    assert.deepEqual(handled, [3, 4, 5]);
    assert.deepEqual(sent, []);
    assert.equal(replayed.length, 3);
    assert.equal(release.replaying, false, 'the stream is live again after the replay');
  });

  it('resume replay - a delivered token that ended the output ends the replay with its reason', () => {
    const release = new TokenRelease(() => undefined);
    const handled: number[] = [];
    const finish = new ResumeReplay({ tokens: [3, 4, 5], toolCallIds: [] }, limits).replay(
      release,
      (token): FinishReason | null => {
        handled.push(token);
        return token === 4 ? 'length' : null;
      },
    );
    assert.equal(finish, 'length');
    assert.deepEqual(handled, [3, 4]);
  });

  it("resume replay - a replay may start past tokens the decode has handled itself (a forced call's marker)", () => {
    const handled: number[] = [];
    new ResumeReplay({ tokens: [3, 4, 5], toolCallIds: [] }, limits).replay(
      new TokenRelease(() => undefined),
      (token) => {
        handled.push(token);
        return null;
      },
      1,
    );
    assert.deepEqual(handled, [4, 5]);
  });
});
