import { CortexError, type CanonicalRequest, type FinishReason, type Resume } from '@cortex/contracts';
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
 * A grammar's state is not rebuilt (llama.cpp offers no public way to advance one over given
 * tokens), so a request whose output a grammar holds from the start is refused (`refusal`), and so is
 * a stream lost inside a tool call that the call grammar holds (`grammarHeld`).
 */
export class ResumeReplay {
  readonly tokens: readonly number[];

  constructor(resume: Resume, limits: ResumeLimits) {
    const { vocabularySize, contextSize, promptTokens } = limits;
    resume.tokens.forEach((token, i) => {
      if (vocabularySize !== null && token >= vocabularySize) {
        throw new CortexError('invalid_request', `resume.tokens[${i}]: ${token} is not a token of this model (its vocabulary has ${vocabularySize})`, { param: `resume.tokens[${i}]` });
      }
    });
    if (promptTokens + resume.tokens.length >= contextSize) {
      throw new CortexError('invalid_request', `resume.tokens: the prompt (${promptTokens}) and the ${resume.tokens.length} tokens to resume after fill the context of ${contextSize}`, { param: 'resume.tokens' });
    }
    this.tokens = resume.tokens;
  }

  /** Why a request cannot be resumed exactly (null when it can): its whole output is held by a grammar. */
  static refusal(request: CanonicalRequest, forcedToolCall: boolean): string | null {
    const format = request.responseFormat?.type;
    if (format === 'json_object' || format === 'json_schema') return `a ${format} response format is held by a grammar, whose state is not carried to another worker`;
    if (forcedToolCall) return `a forced tool call (tool_choice ${request.toolChoice}) is held by a grammar, whose state is not carried to another worker`;
    return null;
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
  replay<T extends number>(release: TokenRelease, step: (token: T) => FinishReason | null): FinishReason | null {
    release.replaying = true;
    try {
      for (const token of this.tokens as readonly T[]) {
        const finish = step(token);
        if (finish) return finish;
      }
      return null;
    } finally {
      release.replaying = false;
    }
  }

  /** The replay ended inside a tool call held by the call grammar: going on would sample it unconstrained. */
  static grammarHeld(): CortexError {
    return new CortexError('worker_lost', "the stream's worker was lost inside a tool call, whose grammar state is not carried to another worker: it could not be resumed exactly");
  }
}
