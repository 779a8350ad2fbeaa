import { NO_USAGE, type FinishReason, type StreamEvent, type Usage } from '@cortex/contracts';
import { chatFinishReason, speculativeDetails } from './chat.encoder.js';

export interface CompletionEncoderOptions {
  id: string;
  model: string;
  created: number;
  includeUsage: boolean;
  /** Choices in the response (one per prompt); the usage frame follows the last one's finish. */
  choices: number;
}

type Chunk = Record<string, unknown>;


/**
 * Canonical stream events of one or more prompts → OpenAI `text_completion` stream objects. Each
 * event names its choice (the prompt's index); usage adds up over the choices.
 */
export class CompletionChunkEncoder {
  private finished = 0;
  private usage: Usage = NO_USAGE;

  constructor(private readonly options: CompletionEncoderOptions) {}

  encode(event: StreamEvent, index = 0): Chunk[] {
    switch (event.type) {
      case 'text':
        return [this.chunk(index, event.text, null)];
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

  private chunk(index: number, text: string, finishReason: string | null): Chunk {
    return {
      ...this.base(),
      choices: [{ index, text, logprobs: null, finish_reason: finishReason }],
      ...(this.options.includeUsage ? { usage: null } : {}),
    };
  }

  private base(): Chunk {
    return { id: this.options.id, object: 'text_completion', created: this.options.created, model: this.options.model, system_fingerprint: null };
  }
}

/** Collects the events of every choice into one `text_completion` body (non-streaming requests). */
export class CompletionAggregator {
  private readonly texts: string[];
  private readonly reasons: Array<FinishReason | null>;
  private usage: Usage = NO_USAGE;

  constructor(private readonly options: Omit<CompletionEncoderOptions, 'includeUsage'>) {
    this.texts = Array.from({ length: options.choices }, () => '');
    this.reasons = Array.from({ length: options.choices }, () => null);
  }

  add(event: StreamEvent, index = 0): void {
    if (event.type === 'text') this.texts[index] += event.text;
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
      choices: this.texts.map((text, index) => ({ index, text, logprobs: null, finish_reason: chatFinishReason(this.reasons[index] ?? 'stop') })),
      usage: completionUsage(this.usage),
    };
  }
}

function addUsage(a: Usage, b: Usage): Usage {
  const sum: Usage = {
    promptTokens: a.promptTokens + b.promptTokens,
    cachedPromptTokens: a.cachedPromptTokens + b.cachedPromptTokens,
    completionTokens: a.completionTokens + b.completionTokens,
    reasoningTokens: a.reasoningTokens + b.reasoningTokens,
  };
  if (a.draftTokens !== undefined || b.draftTokens !== undefined) {
    sum.draftTokens = (a.draftTokens ?? 0) + (b.draftTokens ?? 0);
    sum.acceptedDraftTokens = (a.acceptedDraftTokens ?? 0) + (b.acceptedDraftTokens ?? 0);
  }
  return sum;
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
