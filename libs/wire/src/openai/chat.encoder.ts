import type { ErrorBody, FinishReason, StreamEvent, Usage } from '@cortex/contracts';
import { ErrorCodes } from '@cortex/contracts';

export interface ChatEncoderOptions {
  id: string;
  model: string;
  created: number;
  includeUsage: boolean;
  /** Reasoning goes into `content` as `<think>…</think>` instead of `reasoning_content` (x-include-thinking). */
  inlineReasoning?: boolean;
}

type Chunk = Record<string, unknown>;

/** Canonical stream events → OpenAI `chat.completion.chunk` objects, in order. */
export class ChatChunkEncoder {
  private started = false;
  private thinking = false;

  constructor(private readonly options: ChatEncoderOptions) {}

  /** Chunks to send for one event (none for keep-alives). */
  encode(event: StreamEvent): Chunk[] {
    switch (event.type) {
      case 'start':
        return [];
      case 'text':
        return [this.delta({ content: this.closeThinking() + event.text })];
      case 'reasoning':
        if (!this.options.inlineReasoning) return [this.delta({ reasoning_content: event.text })];
        return [this.delta({ content: this.openThinking() + event.text })];
      case 'tool_call':
        return [
          ...this.closeThinkingChunk(),
          this.delta({
            tool_calls: [{ index: event.index, id: event.id, type: 'function', function: { name: event.name, arguments: '' } }],
          }),
        ];
      case 'tool_args':
        return [this.delta({ tool_calls: [{ index: event.index, function: { arguments: event.delta } }] })];
      case 'keepalive':
      case 'error':
        return [];
      case 'finish': {
        const chunks = [...this.closeThinkingChunk(), this.delta({}, chatFinishReason(event.reason))];
        if (this.options.includeUsage) chunks.push({ ...this.base(), choices: [], usage: chatUsage(event.usage) });
        return chunks;
      }
    }
  }

  private openThinking(): string {
    if (this.thinking) return '';
    this.thinking = true;
    return '<think>';
  }

  private closeThinking(): string {
    if (!this.thinking) return '';
    this.thinking = false;
    return '</think>';
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
      choices: [{ index: 0, delta: first ? { role: 'assistant', content: '', ...delta } : delta, logprobs: null, finish_reason: finishReason }],
      ...(this.options.includeUsage ? { usage: null } : {}),
    };
  }

  private base(): Chunk {
    return { id: this.options.id, object: 'chat.completion.chunk', created: this.options.created, model: this.options.model, system_fingerprint: null };
  }
}

/** Collects a whole stream into one `chat.completion` body (non-streaming requests). */
export class ChatCompletionAggregator {
  private content = '';
  private reasoning = '';
  private readonly toolCalls: Array<{ id: string; type: 'function'; function: { name: string; arguments: string } }> = [];
  private finishReason: FinishReason | null = null;
  private usage: Usage | null = null;

  constructor(private readonly options: Omit<ChatEncoderOptions, 'includeUsage'>) {}


  add(event: StreamEvent): void {
    switch (event.type) {
      case 'text':
        this.content += event.text;
        break;
      case 'reasoning':
        this.reasoning += event.text;
        break;
      case 'tool_call':
        this.toolCalls[event.index] = { id: event.id, type: 'function', function: { name: event.name, arguments: '' } };
        break;
      case 'tool_args': {
        const call = this.toolCalls[event.index];
        if (call) call.function.arguments += event.delta;
        break;
      }
      case 'finish':
        this.finishReason = event.reason;
        this.usage = event.usage;
        break;
      default:
        break;
    }
  }

  body(): Record<string, unknown> {
    const inline = this.options.inlineReasoning && this.reasoning;
    const content = inline ? `<think>${this.reasoning}</think>${this.content}` : this.content;
    const message: Record<string, unknown> = { role: 'assistant', content: content || (this.toolCalls.length ? null : ''), refusal: null };
    if (this.reasoning && !inline) message.reasoning_content = this.reasoning;
    if (this.toolCalls.length) message.tool_calls = this.toolCalls.filter(Boolean);
    return {
      id: this.options.id,
      object: 'chat.completion',
      created: this.options.created,
      model: this.options.model,
      system_fingerprint: null,
      choices: [{ index: 0, message, logprobs: null, finish_reason: chatFinishReason(this.finishReason ?? 'stop') }],
      usage: chatUsage(this.usage ?? { promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 }),
    };
  }
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
    completion_tokens_details: { reasoning_tokens: usage.reasoningTokens },
  };
}

/** OpenAI's error body: `{error: {message, type, param, code}}`. */
export function openAiError(error: ErrorBody): Record<string, unknown> {
  return { error: { message: error.message, type: ErrorCodes[error.code].type, param: error.param ?? null, code: error.code } };
}
