import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '@cortex/contracts';
import { responsesStateOf } from './responses.state.js';

describe('responses state of a decoded request', () => {
  it("responses state - a good state is read; a bad one is the translator's fault (internal), naming the field", () => {
    const state = { responseId: 'resp_1', createdAt: 1, echo: {}, store: false, input: [], chain: [] };
    assert.deepEqual(responsesStateOf(state), state);
    assert.throws(
      () => responsesStateOf({ ...state, input: [{ role: 'user' }] }),
      (error: Error) =>
        error instanceof CortexError &&
        error.code === 'internal' &&
        /llm\.translator\.v1\.decode sent a malformed reply: state\.input\[0\]\.type: must be a string/.test(
          error.message,
        ),
    );
    assert.throws(
      () => responsesStateOf(undefined),
      (error: Error) =>
        error instanceof CortexError &&
        error.code === 'internal' &&
        /: state: must be an object, got undefined/.test(error.message),
    );
  });
});
