import { NO_USAGE, type FinishReason, type StreamEvent, type TokenLogprob, type Usage } from '@cortex/contracts';
import { addUsage, chatFinishReason, speculativeDetails } from './chat.encoder.js';

export interface CompletionEncoderOptions {
  id: string;
  model: string;
  created: number;
  includeUsage: boolean;
  /** Choices in the response (one per prompt); the usage frame follows the last one's finish. */
  choices: number;
  /** The request asked for logprobs: each choice's text comes with its tokens' (this API's shape). */
  logprobs?: boolean;
}

/**
 * This API's logprobs of some tokens: `text_offset` is each token's place in the choice's text; an echoed prompt's
 * first token has null.
 */
interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: Array<number | null>;
  top_logprobs: Array<Record<string, number> | null>;
  text_offset: number[];
}

/** The logprobs of a text event whose text starts at `offset` of its choice's text. */
function completionLogprobs(entries: readonly TokenLogprob[], offset: number): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for (const entry of entries) {
    out.tokens.push(entry.token);
    out.token_logprobs.push(entry.logprob);
    out.top_logprobs.push(
      entry.logprob === null ? null : Object.fromEntries(entry.top.map((t) => [t.token, t.logprob])),
    );
    out.text_offset.push(offset);
    offset += entry.token.length;
  }
  return out;
}

type Chunk = Record<string, unknown>;

/**
 * Canonical stream events of one or more prompts → OpenAI `text_completion` stream objects. Each
 * event names its choice (the prompt's index); usage adds up over the choices.
 */
export class CompletionChunkEncoder {
  private finished = 0;
  private usage: Usage = NO_USAGE;
  /** Each choice's text so far, in characters (for `text_offset`). */
  private readonly lengths = new Map<number, number>();

  constructor(private readonly options: CompletionEncoderOptions) {}

  encode(event: StreamEvent, index = 0): Chunk[] {
    switch (event.type) {
      case 'text': {
        const offset = this.lengths.get(index) ?? 0;
        this.lengths.set(index, offset + event.text.length);
        return [
          this.chunk(
            index,
            event.text,
            null,
            this.options.logprobs ? completionLogprobs(event.logprobs ?? [], offset) : null,
          ),
        ];
      }
      case 'finish': {
        this.usage = addUsage(this.usage, event.usage);
        const chunks = [this.chunk(index, '', chatFinishReason(event.reason))];
        if (++this.finished === this.options.choices && this.options.includeUsage) {
          chunks.push({ ...this.base(), choices: [], usage: completionUsage(this.usage) });
        }
        return chunks;
      }
      // A raw completion has no reasoning or tool calls: the model's markers are plain text here.
      default:
        return [];
    }
  }

  private chunk(
    index: number,
    text: string,
    finishReason: string | null,
    logprobs: CompletionLogprobs | null = null,
  ): Chunk {
    return {
      ...this.base(),
      choices: [{ index, text, logprobs, finish_reason: finishReason }],
      ...(this.options.includeUsage ? { usage: null } : {}),
    };
  }

  private base(): Chunk {
    return {
      id: this.options.id,
      object: 'text_completion',
      created: this.options.created,
      model: this.options.model,
      system_fingerprint: null,
    };
  }
}

/** Collects the events of every choice into one `text_completion` body (non-streaming requests). */
export class CompletionAggregator {
  private readonly texts: string[];
  private readonly logprobs: CompletionLogprobs[];
  private readonly reasons: Array<FinishReason | null>;
  private usage: Usage = NO_USAGE;

  constructor(private readonly options: Omit<CompletionEncoderOptions, 'includeUsage'>) {
    this.texts = Array.from({ length: options.choices }, () => '');
    this.reasons = Array.from({ length: options.choices }, () => null);
    this.logprobs = Array.from({ length: options.choices }, () => ({
      tokens: [],
      token_logprobs: [],
      top_logprobs: [],
      text_offset: [],
    }));
  }

  add(event: StreamEvent, index = 0): void {
    if (event.type === 'text') {
      const some = completionLogprobs(event.logprobs ?? [], this.texts[index]?.length ?? 0);
      const all = this.logprobs[index];
      if (all)
        for (const key of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'] as const)
          (all[key] as unknown[]).push(...some[key]);
      this.texts[index] += event.text;
    }
    if (event.type === 'finish') {
      this.reasons[index] = event.reason;
      this.usage = addUsage(this.usage, event.usage);
    }
  }

  body(): Record<string, unknown> {
    return {
      id: this.options.id,
      object: 'text_completion',
      created: this.options.created,
      model: this.options.model,
      system_fingerprint: null,
      choices: this.texts.map((text, index) => ({
        index,
        text,
        logprobs: this.options.logprobs ? this.logprobs[index] : null,
        finish_reason: chatFinishReason(this.reasons[index] ?? 'stop'),
      })),
      usage: completionUsage(this.usage),
    };
  }
}

/** OpenAI's completion usage, with the speculative decoding counts where the model drafts. */
function completionUsage(usage: Usage): Record<string, unknown> {
  return {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    total_tokens: usage.promptTokens + usage.completionTokens,
    ...speculativeUsage(usage),
  };
}

function speculativeUsage(usage: Usage): Record<string, unknown> {
  const details = speculativeDetails(usage);
  return details ? { completion_tokens_details: details } : {};
}
