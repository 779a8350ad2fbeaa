import { CortexError, type FinishReason, type Resume } from '@cortex/contracts';
import type { TokenRelease } from './token-release.js';

/** What a resume is checked against: the model's vocabulary (null when its header does not say) and context, the request's prompt. */
export interface ResumeLimits {
  vocabularySize: number | null;
  contextSize: number;
  promptTokens: number;
}

/**
 * A migrated stream's resume point on the worker that goes on with it: the delivered token ids are
 * evaluated after the prompt, then handed one by one to the decode's own token handling with the
 * output muted (`replay`), which rebuilds what died with the lost worker — the mode (reasoning, text,
 * tool call), the tool-call parser with its index and id, the stop-string hold-back, an incomplete
 * character, the penalty history and the token count — exactly as the same tokens built it there.
 *
 * The grammars go past the delivered tokens too (the response format's, and the call grammar inside
 * a call): a JSON document or a call's arguments go on where they were, never start again.
 */
export class ResumeReplay {
  readonly tokens: readonly number[];

  constructor(resume: Resume, limits: ResumeLimits) {
    const { vocabularySize, contextSize, promptTokens } = limits;
    resume.tokens.forEach((token, i) => {
      if (vocabularySize !== null && token >= vocabularySize) {
        throw new CortexError(
          'invalid_request',
          `resume.tokens[${i}]: ${token} is not a token of this model (its vocabulary has ${vocabularySize})`,
          { param: `resume.tokens[${i}]` },
        );
      }
    });
    if (promptTokens + resume.tokens.length >= contextSize) {
      throw new CortexError(
        'invalid_request',
        `resume.tokens: the prompt (${promptTokens}) and the ${resume.tokens.length} ` +
          `tokens to resume after fill the context of ${contextSize}`,
        { param: 'resume.tokens' },
      );
    }
    this.tokens = resume.tokens;
  }

  /** The prompt and the delivered tokens: what the sequence evaluates before sampling the next one. */
  context<T extends number>(prompt: readonly T[]): T[] {
    // Ids checked against the vocabulary in the constructor: they are the model's tokens.
    return [...prompt, ...(this.tokens as readonly T[])];
  }

  /**
   * Hands each delivered token to `step` with the stream muted; a finish reason when one of them
   * ended the output (the finish was lost with the worker: the resumed stream only sends it).
   */
  replay<T extends number>(
    release: TokenRelease,
    step: (token: T) => FinishReason | null,
    from = 0,
  ): FinishReason | null {
    release.replaying = true;
    try {
      for (const token of (this.tokens as readonly T[]).slice(from)) {
        const finish = step(token);
        if (finish) return finish;
      }
      return null;
    } finally {
      release.replaying = false;
    }
  }

  /** A forced call's resume must start with the call's opening marker, which the first worker wrote. */
  notForcedCall(): CortexError {
    return new CortexError(
      'invalid_request',
      "resume.tokens: a forced tool call's resume starts with the call's opening marker",
      { param: 'resume.tokens' },
    );
  }
}
