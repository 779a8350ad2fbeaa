import { SseParser, type SseMessage } from '@cortex/wire';
import { postJson } from '@cortex/testing';

/*
 * What a client of a moved stream reads, folded for comparison with an unbroken run
 * (migration.e2e.ts): the text, reasoning and tool calls it was given, the events' order and indices,
 * and usage.
 */

export interface Read {
  status: number;
  messages: SseMessage[];
  /** The SSE comment lines (`: ...`), in order. */
  comments: string[];
}

/** Streams a POST's SSE reply, calling `onMessage` with each message as it arrives. */
export async function readSse(
  url: string,
  body: unknown,
  onMessage: (message: SseMessage) => void = () => undefined,
  onComment: (text: string) => void = () => undefined,
): Promise<Read> {
  const response = await postJson(url, body);
  const parser = new SseParser();
  const decoder = new TextDecoder();
  const read: Read = { status: response.status, messages: [], comments: [] };
  let line = '';
  const reader = response.body?.getReader();
  for (let chunk = await reader?.read(); chunk && !chunk.done; chunk = await reader?.read()) {
    const text = decoder.decode(chunk.value, { stream: true });
    for (const char of text) {
      if (char !== '\n') line += char;
      else {
        if (line.startsWith(':')) {
          read.comments.push(line.slice(1).trim());
          onComment(line.slice(1).trim());
        }
        line = '';
      }
    }
    for (const message of parser.push(text)) {
      read.messages.push(message);
      onMessage(message);
    }
  }
  return read;
}

interface ChatDelta {
  content?: string;
  reasoning_content?: string;
  tool_calls?: { index: number; id?: string; function?: { name?: string; arguments?: string } }[];
}

type ChatChunk = {
  choices?: { delta?: ChatDelta; finish_reason?: string | null }[];
  usage?: ChatResult['usage'];
  error?: { message: string; code?: string };
};

/** A chat chunk's delta, or null for `[DONE]`, a usage chunk or an error. */
export function chatDelta(message: SseMessage): ChatDelta | null {
  if (message.data === '[DONE]') return null;
  return (JSON.parse(message.data) as ChatChunk).choices?.[0]?.delta ?? null;
}

export interface ChatToolCall {
  index: number;
  /** Every id the stream gave this call: one, on its first delta. */
  ids: string[];
  name: string;
  arguments: string;
}

export interface ChatResult {
  text: string;
  reasoning: string;
  toolCalls: ChatToolCall[];
  finish: string | null;
  usage: { prompt_tokens: number; completion_tokens: number } | null;
  error: string | null;
}

export function chatResult(read: Read): ChatResult {
  const result: ChatResult = { text: '', reasoning: '', toolCalls: [], finish: null, usage: null, error: null };
  for (const message of read.messages) {
    if (message.data === '[DONE]') continue;
    const chunk = JSON.parse(message.data) as ChatChunk;
    if (chunk.error) result.error = `${chunk.error.code ?? ''} ${chunk.error.message}`;
    for (const choice of chunk.choices ?? []) {
      result.text += choice.delta?.content ?? '';
      result.reasoning += choice.delta?.reasoning_content ?? '';
      for (const delta of choice.delta?.tool_calls ?? []) {
        let call = result.toolCalls.find((c) => c.index === delta.index);
        if (!call) result.toolCalls.push((call = { index: delta.index, ids: [], name: '', arguments: '' }));
        if (delta.id !== undefined) call.ids.push(delta.id);
        call.name += delta.function?.name ?? '';
        call.arguments += delta.function?.arguments ?? '';
      }
      if (choice.finish_reason) result.finish = choice.finish_reason;
    }
    if (chunk.usage) result.usage = chunk.usage;
  }
  return result;
}

/** Prompt, completion, reasoning and total tokens (cached prompt tokens depend on which worker held the prompt already). */
export function counts(result: ChatResult): unknown {
  const usage = result.usage as
    (Record<string, unknown> & { completion_tokens_details?: { reasoning_tokens?: number } }) | null;
  return (
    usage && {
      prompt: usage.prompt_tokens,
      completion: usage.completion_tokens,
      reasoning: usage.completion_tokens_details?.reasoning_tokens,
      total: usage.total_tokens,
    }
  );
}

export interface MessagesResult {
  text: string;
  stop: string | null;
  /** Each event's type, and a content block's index where it has one; text deltas folded into one entry per block. */
  events: string[];
  usage: { input: number; output: number } | null;
  error: string | null;
}

export function messagesResult(read: Read): MessagesResult {
  const result: MessagesResult = { text: '', stop: null, events: [], usage: null, error: null };
  let input = 0;
  for (const message of read.messages) {
    const event = JSON.parse(message.data) as {
      type: string;
      index?: number;
      delta?: { type?: string; text?: string; stop_reason?: string };
      message?: { usage?: { input_tokens: number; cache_read_input_tokens?: number } };
      usage?: { output_tokens: number };
      error?: { type: string; message: string };
    };
    const entry = event.index === undefined ? event.type : `${event.type}[${event.index}]`;
    if (result.events.at(-1) !== entry || event.type !== 'content_block_delta') result.events.push(entry);
    if (event.type === 'error') result.error = `${event.error?.type} ${event.error?.message}`;
    // The prompt's tokens: `input_tokens` leaves out those read from the cache, which depends on what
    // the worker held before (the unbroken run and the moved one find different caches).
    if (event.type === 'message_start')
      input = (event.message?.usage?.input_tokens ?? 0) + (event.message?.usage?.cache_read_input_tokens ?? 0);
    if (event.type === 'content_block_delta') result.text += event.delta?.text ?? '';
    if (event.type === 'message_delta') {
      result.stop = event.delta?.stop_reason ?? null;
      result.usage = { input, output: event.usage?.output_tokens ?? 0 };
    }
  }
  return result;
}

/** A Responses stream event as SSE data or a WebSocket message carries it. */
export interface ResponsesEvent {
  type: string;
  sequence_number: number;
  output_index?: number;
  content_index?: number;
  delta?: string;
  message?: string;
  response?: { id: string; status: string; usage?: { input_tokens: number; output_tokens: number } };
}

export interface ResponsesResult {
  text: string;
  status: string | null;
  sequence: number[];
  /** Each event's type with its output and content index, text deltas folded into one entry per part. */
  events: string[];
  usage: { input: number; output: number } | null;
  error: string | null;
}

export function responsesResult(read: Read): ResponsesResult {
  return responsesFold(
    read.messages.filter((m) => m.data !== '[DONE]').map((m) => JSON.parse(m.data) as ResponsesEvent),
  );
}

export function responsesFold(events: readonly ResponsesEvent[]): ResponsesResult {
  const result: ResponsesResult = { text: '', status: null, sequence: [], events: [], usage: null, error: null };
  for (const event of events) {
    result.sequence.push(event.sequence_number);
    const entry = `${event.type}[${event.output_index ?? ''},${event.content_index ?? ''}]`;
    if (result.events.at(-1) !== entry || event.type !== 'response.output_text.delta') result.events.push(entry);
    if (event.type === 'error') result.error = event.message ?? 'error';
    if (event.type === 'response.output_text.delta') result.text += event.delta ?? '';
    if (
      event.type === 'response.completed' ||
      event.type === 'response.incomplete' ||
      event.type === 'response.failed'
    ) {
      result.status = event.response?.status ?? null;
      const usage = event.response?.usage;
      result.usage = usage ? { input: usage.input_tokens, output: usage.output_tokens } : null;
    }
  }
  return result;
}
