import type { ErrorBody, FinishReason, StreamEvent, Usage } from '@cortex/contracts';
import { openAiLogprob } from '../logprobs.js';
import { ErrorCodes, NO_USAGE } from '@cortex/contracts';

export interface ChatEncoderOptions {
  id: string;
  model: string;
  created: number;
  includeUsage: boolean;
  /**
   * Reasoning goes into `content` between the model's own reasoning markers (`<think>…</think>`
   * unless its start event names others) instead of `reasoning_content` (x-include-thinking).
   */
  inlineReasoning?: boolean;
  /** The request asked for logprobs: text chunks carry theirs (`logprobs.content`), the body all of them. */
  logprobs?: boolean;
  /** One choice of several (`n`, see ChatChoicesEncoder): its index, and no usage chunk of its own. */
  choice?: number;
}

type Chunk = Record<string, unknown>;

/** Canonical stream events → OpenAI `chat.completion.chunk` objects, in order. */
export class ChatChunkEncoder {
  private started = false;
  private thinking = false;
  /** The model's reasoning markers, as its start event names them. */
  private markers: readonly [string, string] = ['<think>', '</think>'];

  constructor(private readonly options: ChatEncoderOptions) {}

  /** Chunks to send for one event (none for keep-alives). */
  encode(event: StreamEvent): Chunk[] {
    switch (event.type) {
      case 'start':
        if (event.reasoningMarkers) this.markers = event.reasoningMarkers;
        return [];
      case 'text': {
        const chunk = this.delta({ content: this.closeThinking() + event.text });
        if (this.options.logprobs)
          (chunk.choices as Array<Record<string, unknown>>)[0]!.logprobs = {
            content: (event.logprobs ?? []).map(openAiLogprob),
            refusal: null,
          };
        return [chunk];
      }
      case 'reasoning':
        if (!this.options.inlineReasoning) return [this.delta({ reasoning_content: event.text })];
        return [this.delta({ content: this.openThinking() + event.text })];
      case 'tool_call':
        return [
          ...this.closeThinkingChunk(),
          this.delta({
            tool_calls: [
              { index: event.index, id: event.id, type: 'function', function: { name: event.name, arguments: '' } },
            ],
          }),
        ];
      case 'tool_args':
        return [this.delta({ tool_calls: [{ index: event.index, function: { arguments: event.delta } }] })];
      // MCP tools run server-side are a Responses and Messages feature: Chat Completions has no items for them.
      case 'keepalive':
      case 'error':
      case 'mcp_list_tools':
      case 'mcp_call':
      case 'mcp_approval_request':
        return [];
      case 'finish': {
        const chunks = [...this.closeThinkingChunk(), this.delta({}, chatFinishReason(event.reason))];
        if (this.options.includeUsage && this.options.choice === undefined)
          chunks.push({ ...this.base(), choices: [], usage: chatUsage(event.usage) });
        return chunks;
      }
    }
  }

  private openThinking(): string {
    if (this.thinking) return '';
    this.thinking = true;
    return this.markers[0];
  }

  private closeThinking(): string {
    if (!this.thinking) return '';
    this.thinking = false;
    return this.markers[1];
  }

  private closeThinkingChunk(): Chunk[] {
    const close = this.closeThinking();
    return close ? [this.delta({ content: close })] : [];
  }

  private delta(delta: Record<string, unknown>, finishReason: string | null = null): Chunk {
    // Clients (openai's ChatCompletionStream) expect the role on the first delta.
    const first = !this.started;
    this.started = true;
    return {
      ...this.base(),
      choices: [
        {
          index: this.options.choice ?? 0,
          delta: first ? { role: 'assistant', content: '', ...delta } : delta,
          logprobs: null,
          finish_reason: finishReason,
        },
      ],
      ...(this.options.includeUsage ? { usage: null } : {}),
    };
  }

  private base(): Chunk {
    return chunkBase(this.options);
  }
}

/** What every chunk of one completion repeats. */
function chunkBase(options: ChatEncoderOptions): Chunk {
  return {
    id: options.id,
    object: 'chat.completion.chunk',
    created: options.created,
    model: options.model,
    system_fingerprint: null,
  };
}

/**
 * The chunks of a chat completion with several choices (`n`): each choice's events through an
 * encoder of its own (its index on every chunk), and one usage chunk, the choices' added up, after
 * the last of them finishes.
 */
export class ChatChoicesEncoder {
  private readonly encoders: ChatChunkEncoder[];
  private finished = 0;
  private usage: Usage = NO_USAGE;

  constructor(private readonly options: ChatEncoderOptions & { choices: number }) {
    this.encoders = Array.from(
      { length: options.choices },
      (_, choice) => new ChatChunkEncoder({ ...options, choice }),
    );
  }

  encode(event: StreamEvent, choice: number): Chunk[] {
    const chunks = this.encoders[choice]?.encode(event) ?? [];
    if (event.type !== 'finish') return chunks;
    this.usage = addUsage(this.usage, event.usage);
    if (++this.finished === this.options.choices && this.options.includeUsage) {
      chunks.push({ ...chunkBase(this.options), choices: [], usage: chatUsage(this.usage) });
    }
    return chunks;
  }
}

/** One `chat.completion` body with several choices (`n`): each choice aggregated alone, their usage added up. */
export class ChatChoicesAggregator {
  private readonly choices: ChatCompletionAggregator[];
  private usage: Usage = NO_USAGE;

  constructor(options: Omit<ChatEncoderOptions, 'includeUsage'> & { choices: number }) {
    this.choices = Array.from({ length: options.choices }, () => new ChatCompletionAggregator(options));
  }

  add(event: StreamEvent, choice: number): void {
    this.choices[choice]?.add(event);
    if (event.type === 'finish') this.usage = addUsage(this.usage, event.usage);
  }

  body(): Record<string, unknown> {
    const bodies = this.choices.map((choice) => choice.body());
    const choices = bodies.map((body, index) => ({ ...(body.choices as Array<Record<string, unknown>>)[0], index }));
    return { ...bodies[0], choices, usage: chatUsage(this.usage) };
  }
}

interface ChunkDelta {
  content?: string;
  reasoning_content?: string;
  tool_calls?: Array<{ index: number; id?: string; function: { name?: string; arguments: string } }>;
}

/**
 * Collects a whole stream into one `chat.completion` body (non-streaming requests) by adding up the
 * chunks the stream encoder makes, so a body reads exactly like the stream it replaces (reasoning
 * inlined as `<think>` where it occurred, tool calls in order).
 */
export class ChatCompletionAggregator {
  private readonly encoder: ChatChunkEncoder;
  private content = '';
  private reasoning = '';
  private readonly toolCalls: Array<{ id: string; type: 'function'; function: { name: string; arguments: string } }> =
    [];
  private readonly logprobs: unknown[] = [];
  private finishReason: FinishReason | null = null;
  private usage: Usage | null = null;

  constructor(private readonly options: Omit<ChatEncoderOptions, 'includeUsage'>) {
    this.encoder = new ChatChunkEncoder({ ...options, includeUsage: false });
  }

  add(event: StreamEvent): void {
    for (const chunk of this.encoder.encode(event)) {
      const choice = (chunk.choices as Array<{ delta: ChunkDelta; logprobs: { content: unknown[] } | null }>)[0];
      const delta = choice?.delta ?? {};
      if (choice?.logprobs) this.logprobs.push(...choice.logprobs.content);
      this.content += delta.content ?? '';
      this.reasoning += delta.reasoning_content ?? '';
      for (const call of delta.tool_calls ?? []) {
        const known = this.toolCalls[call.index];
        if (known) known.function.arguments += call.function.arguments;
        else if (call.id)
          this.toolCalls[call.index] = {
            id: call.id,
            type: 'function',
            function: { name: call.function.name ?? '', arguments: call.function.arguments },
          };
      }
    }
    if (event.type === 'finish') {
      this.finishReason = event.reason;
      this.usage = event.usage;
    }
  }

  body(): Record<string, unknown> {
    const content = this.content;
    const message: Record<string, unknown> = {
      role: 'assistant',
      content: content || (this.toolCalls.length ? null : ''),
      refusal: null,
    };
    if (this.reasoning) message.reasoning_content = this.reasoning;
    if (this.toolCalls.length) message.tool_calls = this.toolCalls.filter(Boolean);
    return {
      id: this.options.id,
      object: 'chat.completion',
      created: this.options.created,
      model: this.options.model,
      system_fingerprint: null,
      choices: [
        {
          index: 0,
          message,
          logprobs: this.options.logprobs ? { content: this.logprobs, refusal: null } : null,
          finish_reason: chatFinishReason(this.finishReason ?? 'stop'),
        },
      ],
      usage: chatUsage(this.usage ?? NO_USAGE),
    };
  }
}

/** Two usages added up (the choices of one response). */
export function addUsage(a: Usage, b: Usage): Usage {
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

export function chatFinishReason(reason: FinishReason): string {
  switch (reason) {
    case 'length':
      return 'length';
    case 'tool_calls':
      return 'tool_calls';
    default:
      return 'stop';
  }
}

export function chatUsage(usage: Usage): Record<string, unknown> {
  return {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    total_tokens: usage.promptTokens + usage.completionTokens,
    prompt_tokens_details: { cached_tokens: usage.cachedPromptTokens },
    completion_tokens_details: { reasoning_tokens: usage.reasoningTokens, ...(speculativeDetails(usage) ?? {}) },
  };
}

/**
 * Speculative decoding counts, under the names OpenAI gives predicted-output tokens:
 * `accepted_prediction_tokens` (draft tokens the model kept) and `rejected_prediction_tokens`
 * (drafted, then refused), for `completion_tokens_details`. Null for a model without a draft.
 */
export function speculativeDetails(usage: Usage): Record<string, number> | null {
  if (usage.draftTokens === undefined) return null;
  const accepted = usage.acceptedDraftTokens ?? 0;
  return { accepted_prediction_tokens: accepted, rejected_prediction_tokens: usage.draftTokens - accepted };
}

/** OpenAI's error body: `{error: {message, type, param, code}}`. */
export function openAiError(error: ErrorBody): Record<string, unknown> {
  return {
    error: { message: error.message, type: ErrorCodes[error.code].type, param: error.param ?? null, code: error.code },
  };
}
