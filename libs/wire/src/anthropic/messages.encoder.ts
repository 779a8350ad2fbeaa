import {
  ErrorCodes,
  NO_USAGE,
  type ErrorBody,
  type ErrorCode,
  type FinishReason,
  type StreamEvent,
  type Usage,
} from '@cortex/contracts';
import type {
  AnthropicContentBlock,
  AnthropicDelta,
  AnthropicErrorBody,
  AnthropicErrorType,
  AnthropicFrame,
  AnthropicMessage,
  AnthropicStopReason,
  AnthropicStreamEvent,
  AnthropicUsage,
} from './messages.types.js';

export interface MessagesEncoderOptions {
  /** The message id, `msg_…`. */
  id: string;
  /** The model name the client asked for. */
  model: string;
  /** The request enabled extended thinking: only then are reasoning events sent, as `thinking` blocks. */
  thinking: boolean;
}

/**
 * The signature sent on every thinking block. Anthropic signs thinking so it can verify blocks sent back
 * in history; cortex never verifies them (the decoder reads the text and ignores signatures), so a fixed
 * marker is enough, and clients that require a non-empty signature to echo a block back get one.
 */
export const THINKING_SIGNATURE = 'cortex-unsigned';

type BlockKind = AnthropicContentBlock['type'];

/**
 * Canonical stream events → Anthropic SSE frames in the order `messages.stream()` accumulates them:
 * `message_start`, then per content block `content_block_start` / `_delta`s / `_stop` with indexes 0, 1, …,
 * then `message_delta` and `message_stop`. A block closes when a block of another kind starts, or at finish.
 */
export class MessagesStreamEncoder {
  private started = false;
  private ended = false;
  private open: { kind: BlockKind; index: number } | null = null;
  private nextIndex = 0;
  /** Canonical tool-call index → content block index. */
  private readonly toolBlocks = new Map<number, number>();

  constructor(private readonly options: MessagesEncoderOptions) {}

  /** A `finish` or `error` event was encoded; later events encode to nothing. */
  get isEnded(): boolean {
    return this.ended;
  }

  /** Frames to send for one event. */
  encode(event: StreamEvent): AnthropicFrame[] {
    if (this.ended) return [];
    switch (event.type) {
      case 'start':
        return this.ensureStarted(event.promptTokens, event.cachedPromptTokens);
      case 'keepalive':
        return [frame({ type: 'ping' })];
      // Anthropic's MCP connector shows no listing, and asks no approval.
      case 'mcp_list_tools':
      case 'mcp_approval_request':
        return [];
      case 'mcp_call':
        return [...this.ensureStarted(), ...this.closeBlock(), ...this.mcpBlock(event)];
      case 'text':
        if (!event.text) return [];
        return [
          ...this.ensureStarted(),
          ...this.openBlock('text'),
          this.delta({ type: 'text_delta', text: event.text }),
        ];
      case 'reasoning':
        // A client that did not enable thinking may not handle thinking blocks: drop the reasoning.
        if (!this.options.thinking || !event.text) return [];
        return [
          ...this.ensureStarted(),
          ...this.openBlock('thinking'),
          this.delta({ type: 'thinking_delta', thinking: event.text }),
        ];
      case 'tool_call': {
        const frames = [...this.ensureStarted(), ...this.closeBlock()];
        const index = this.nextIndex++;
        this.open = { kind: 'tool_use', index };
        this.toolBlocks.set(event.index, index);
        frames.push(
          frame({
            type: 'content_block_start',
            index,
            content_block: { type: 'tool_use', id: event.id, name: event.name, input: {} },
          }),
        );
        return frames;
      }
      case 'tool_args': {
        const index = this.toolBlocks.get(event.index);
        if (index === undefined || !event.delta) return [];
        // Workers send a call's arguments right after it; should they ever interleave, the delta still
        // names its own block, which the SDK's accumulator (it indexes by `index`) handles.
        return [
          frame({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: event.delta } }),
        ];
      }
      case 'finish': {
        const frames = [...this.ensureStarted(), ...this.closeBlock()];
        this.ended = true;
        const stopReason = anthropicStopReason(event.reason, event.stopSequence);
        frames.push(
          frame({
            type: 'message_delta',
            delta: {
              stop_reason: stopReason,
              stop_sequence: stopReason === 'stop_sequence' ? (event.stopSequence ?? null) : null,
              stop_details: null,
            },
            // The SDK overwrites the message_start usage with these totals, now that the cache split is known.
            usage: anthropicUsage(event.usage),
          }),
          frame({ type: 'message_stop' }),
        );
        return frames;
      }
      case 'error':
        // Anthropic ends a failed stream with a bare `error` event; the SDK throws it as an APIError.
        this.ended = true;
        return [frame(anthropicError(event.error))];
    }
  }

  /** `message_start`, once, before anything else of the message (a worker's `start` normally brings it). */
  private ensureStarted(promptTokens = 0, cachedPromptTokens = 0): AnthropicFrame[] {
    if (this.started) return [];
    this.started = true;
    // As in the final usage: `input_tokens` excludes what was read from the prompt cache.
    const usage: AnthropicUsage = {
      input_tokens: Math.max(0, promptTokens - cachedPromptTokens),
      output_tokens: 0,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: cachedPromptTokens,
    };
    return [frame({ type: 'message_start', message: emptyMessage(this.options, usage) })];
  }

  /**
   * An MCP call the gateway ran, as Anthropic's connector streams it: when it begins, its
   * `mcp_tool_use` block (the arguments as one `input_json_delta`); when it ends, its
   * `mcp_tool_result`. Each block opens and closes at once.
   */
  private mcpBlock(event: Extract<StreamEvent, { type: 'mcp_call' }>): AnthropicFrame[] {
    const index = this.nextIndex++;
    if (event.phase === 'begun')
      return [
        frame({
          type: 'content_block_start',
          index,
          content_block: {
            type: 'mcp_tool_use',
            id: event.id,
            name: event.name,
            server_name: event.serverLabel,
            input: {},
          },
        }),
        ...(event.arguments
          ? [
              frame({
                type: 'content_block_delta',
                index,
                delta: { type: 'input_json_delta', partial_json: event.arguments },
              }),
            ]
          : []),
        frame({ type: 'content_block_stop', index }),
      ];
    return [
      frame({
        type: 'content_block_start',
        index,
        content_block: {
          type: 'mcp_tool_result',
          tool_use_id: event.id,
          is_error: event.error !== undefined,
          content: [{ type: 'text', text: event.output ?? event.error ?? '' }],
        },
      }),
      frame({ type: 'content_block_stop', index }),
    ];
  }

  private openBlock(kind: 'text' | 'thinking'): AnthropicFrame[] {
    if (this.open?.kind === kind) return [];
    const frames = this.closeBlock();
    const index = this.nextIndex++;
    this.open = { kind, index };
    const block: AnthropicContentBlock =
      kind === 'text' ? { type: 'text', text: '' } : { type: 'thinking', thinking: '', signature: '' };
    frames.push(frame({ type: 'content_block_start', index, content_block: block }));
    return frames;
  }

  private closeBlock(): AnthropicFrame[] {
    const open = this.open;
    if (!open) return [];
    this.open = null;
    const frames: AnthropicFrame[] = [];
    // Anthropic sends a thinking block's signature as its last delta.
    if (open.kind === 'thinking') {
      frames.push(
        frame({
          type: 'content_block_delta',
          index: open.index,
          delta: { type: 'signature_delta', signature: THINKING_SIGNATURE },
        }),
      );
    }
    frames.push(frame({ type: 'content_block_stop', index: open.index }));
    return frames;
  }

  private delta(delta: AnthropicDelta): AnthropicFrame {
    return frame({ type: 'content_block_delta', index: this.open?.index ?? 0, delta });
  }
}

/**
 * Collects a whole stream into the non-streaming Message body. It folds the stream encoder's own frames,
 * so both shapes always agree on block boundaries, thinking and stop reasons.
 */
export class MessagesAggregator {
  private readonly encoder: MessagesStreamEncoder;
  private readonly message: AnthropicMessage;
  /** Raw argument JSON per tool_use block index, parsed once in `body()`. */
  private readonly toolJson = new Map<number, string>();

  constructor(private readonly options: MessagesEncoderOptions) {
    this.encoder = new MessagesStreamEncoder(options);
    this.message = emptyMessage(options, anthropicUsage(NO_USAGE));
  }

  add(event: StreamEvent): void {
    for (const { data } of this.encoder.encode(event)) this.fold(data);
  }

  body(): AnthropicMessage {
    const content: AnthropicContentBlock[] = [];
    this.message.content.forEach((block, index) => {
      const json = this.toolJson.get(index);
      if ((block.type !== 'tool_use' && block.type !== 'mcp_tool_use') || json === undefined) {
        content.push({ ...block });
        return;
      }
      const input = parseToolInput(json);
      content.push({ ...block, input: input ?? {} });
      // Unparseable arguments are not thrown away: the client sees them as text after the call.
      if (input === undefined) content.push({ type: 'text', text: json });
    });
    return {
      ...this.message,
      // Read now: a run that fell back names the model that served it (see the gateway's answerModel).
      model: this.options.model,
      content,
      stop_reason: this.message.stop_reason ?? 'end_turn',
      usage: { ...this.message.usage },
    };
  }

  private fold(data: AnthropicStreamEvent): void {
    const content = this.message.content;
    switch (data.type) {
      case 'message_start':
        this.message.usage = { ...data.message.usage };
        break;
      case 'content_block_start':
        content[data.index] = { ...data.content_block };
        break;
      case 'content_block_delta': {
        const block = content[data.index];
        const delta = data.delta;
        if (block?.type === 'text' && delta.type === 'text_delta') block.text += delta.text;
        else if (block?.type === 'thinking' && delta.type === 'thinking_delta') block.thinking += delta.thinking;
        else if (block?.type === 'thinking' && delta.type === 'signature_delta') block.signature = delta.signature;
        else if ((block?.type === 'tool_use' || block?.type === 'mcp_tool_use') && delta.type === 'input_json_delta') {
          this.toolJson.set(data.index, (this.toolJson.get(data.index) ?? '') + delta.partial_json);
        }
        break;
      }
      case 'message_delta':
        this.message.stop_reason = data.delta.stop_reason;
        this.message.stop_sequence = data.delta.stop_sequence;
        this.message.usage = { ...data.usage };
        break;
      default:
        break;
    }
  }
}

function parseToolInput(json: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(json);
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Canonical finish reason → Anthropic stop_reason. `stop_sequence` needs the matched user stop sequence
 * (the finish event's `stopSequence`): without one a stop is `end_turn`. Cancelled and errored streams have
 * no Anthropic equivalent and also read `end_turn` (an errored stream normally ends with an `error` frame).
 */
export function anthropicStopReason(reason: FinishReason, stopSequence?: string): AnthropicStopReason {
  switch (reason) {
    case 'length':
      return 'max_tokens';
    case 'tool_calls':
      return 'tool_use';
    case 'stop':
      return stopSequence ? 'stop_sequence' : 'end_turn';
    default:
      return 'end_turn';
  }
}

/** Canonical usage → Anthropic usage: `input_tokens` excludes the tokens read from the prompt cache. */
export function anthropicUsage(usage: Usage): AnthropicUsage {
  return {
    input_tokens: Math.max(0, usage.promptTokens - usage.cachedPromptTokens),
    output_tokens: usage.completionTokens,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: usage.cachedPromptTokens,
  };
}

/**
 * The registry's error types are OpenAI's names, which Anthropic mostly shares; the rest are mapped here.
 * Capacity errors (`no_worker`, `model_load_failed`, … all typed `service_unavailable`) become
 * `overloaded_error`, the type Anthropic SDKs treat as "retry later". `timeout` keeps `timeout_error`
 * (the SDK's type for a 504). Deriving from the registry type means a newly registered code maps sensibly
 * without an edit here.
 */
const BY_REGISTRY_TYPE: Readonly<Record<string, AnthropicErrorType>> = {
  invalid_request_error: 'invalid_request_error',
  authentication_error: 'authentication_error',
  permission_error: 'permission_error',
  not_found_error: 'not_found_error',
  rate_limit_error: 'rate_limit_error',
  service_unavailable: 'overloaded_error',
  timeout_error: 'timeout_error',
  api_error: 'api_error',
};

/** Codes whose registry type says less than Anthropic can. */
const BY_CODE: Partial<Record<ErrorCode, AnthropicErrorType>> = {
  payload_too_large: 'request_too_large',
  insufficient_quota: 'rate_limit_error',
};

/** Cortex error code → Anthropic error type (`api_error` for anything unknown). */
export function anthropicErrorType(code: ErrorCode): AnthropicErrorType {
  const registered = Object.hasOwn(ErrorCodes, code) ? ErrorCodes[code].type : undefined;
  return BY_CODE[code] ?? (registered && BY_REGISTRY_TYPE[registered]) ?? 'api_error';
}

/** Anthropic's error body, `{type: 'error', error: {type, message}}`: the HTTP body and the stream's `error` frame. */
export function anthropicError(error: ErrorBody): AnthropicErrorBody {
  return { type: 'error', error: { type: anthropicErrorType(error.code), message: error.message } };
}

function frame(data: AnthropicStreamEvent): AnthropicFrame {
  return { event: data.type, data };
}

function emptyMessage(options: MessagesEncoderOptions, usage: AnthropicUsage): AnthropicMessage {
  return {
    id: options.id,
    type: 'message',
    role: 'assistant',
    model: options.model,
    content: [],
    stop_reason: null,
    stop_sequence: null,
    stop_details: null,
    usage,
  };
}
