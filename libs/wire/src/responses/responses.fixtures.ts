/** Test fixtures shared by the Responses codec specs: canonical event scripts and the codec run over them. */
import type { StreamEvent } from '@cortex/contracts';
import { SSE_DONE, sseFrame } from '../sse.js';
import { decodeResponsesRequest } from './responses.decoder.js';
import { ResponsesAggregator, ResponsesStreamEncoder } from './responses.encoder.js';
import type { ReasoningEventFamily, ResponsesEncoderOptions } from './responses.resource.js';
import type { ResponseBody, ResponsesFrame } from './responses.types.js';

export const usage = { promptTokens: 12, cachedPromptTokens: 2, completionTokens: 9, reasoningTokens: 3 };
export const timings = { ttftMs: 1, promptMs: 1, decodeTokensPerSecond: 100, durationMs: 10, queueMs: 0 };

/** Numbers events in order, as a worker does. */
export function events(...bodies: Array<Record<string, unknown>>): StreamEvent[] {
  return bodies.map((body, seq) => ({ seq, ...body }) as StreamEvent);
}

export const start = { type: 'start', runId: 'r', workerId: 'w', model: 'worker-model', promptTokens: 12 };
export const finish = (reason: string) => ({ type: 'finish', reason, usage, timings });

export const weatherTool = {
  type: 'function',
  name: 'weather',
  description: 'Forecast for a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

/** The request the scripts answer: instructions, a user turn and one function tool. */
export const requestBody = {
  model: 'local-model',
  instructions: 'You are terse.',
  input: 'Weather in Paris?',
  tools: [weatherTool],
};

export const scripts = {
  text: events(
    start,
    { type: 'keepalive' },
    { type: 'text', text: 'Hello' },
    { type: 'text', text: ', world.' },
    finish('stop'),
  ),
  reasoning: events(
    start,
    { type: 'reasoning', text: 'The user ' },
    { type: 'reasoning', text: 'greets me.' },
    { type: 'text', text: 'Hi!' },
    finish('stop'),
  ),
  toolCall: events(
    start,
    { type: 'reasoning', text: 'Need the forecast.' },
    { type: 'text', text: 'Let me check.' },
    { type: 'tool_call', index: 0, id: 'call_1', name: 'weather' },
    { type: 'tool_args', index: 0, delta: '{"city":' },
    { type: 'tool_args', index: 0, delta: ' "Paris"}' },
    { type: 'tool_call', index: 1, id: 'call_2', name: 'weather' },
    { type: 'tool_args', index: 1, delta: '{"city": "Lyon"}' },
    finish('tool_calls'),
  ),
  incomplete: events(start, { type: 'text', text: 'A long ans' }, finish('length')),
  error: events(
    start,
    { type: 'text', text: 'Partial' },
    { type: 'error', error: { code: 'worker_lost', message: 'the worker went away' } },
  ),
  cancelled: events(start, { type: 'text', text: 'Partial' }, finish('cancelled')),
};

export type ScriptName = keyof typeof scripts;

/** The results of the toolCall script's two calls, as the client sends them back. */
export const toolResults = [
  { type: 'function_call_output', call_id: 'call_1', output: '18C' },
  { type: 'function_call_output', call_id: 'call_2', output: '21C' },
] as const;

/** The conversation after `Weather in Paris?`, the toolCall script's output and `toolResults`, as canonical messages. */
export const toolCallTurns = [
  { role: 'user', content: 'Weather in Paris?' },
  {
    role: 'assistant',
    content: 'Let me check.',
    reasoning: 'Need the forecast.',
    toolCalls: [
      { id: 'call_1', name: 'weather', arguments: '{"city": "Paris"}' },
      { id: 'call_2', name: 'weather', arguments: '{"city": "Lyon"}' },
    ],
  },
  { role: 'tool', content: '18C', toolCallId: 'call_1' },
  { role: 'tool', content: '21C', toolCallId: 'call_2' },
];

export function encoderOptions(
  reasoningEvents: ReasoningEventFamily = 'openai',
  body: unknown = requestBody,
): ResponsesEncoderOptions {
  return {
    id: 'resp_test1',
    createdAt: 1_700_000_000,
    echo: decodeResponsesRequest(body).echo,
    reasoningEvents,
    now: () => 1_700_000_005,
  };
}

export function encodeAll(list: StreamEvent[], options: ResponsesEncoderOptions = encoderOptions()): ResponsesFrame[] {
  const encoder = new ResponsesStreamEncoder(options);
  return list.flatMap((event) => encoder.encode(event));
}

export function aggregate(list: StreamEvent[], options: ResponsesEncoderOptions = encoderOptions()): ResponseBody {
  const aggregator = new ResponsesAggregator(options);
  for (const event of list) aggregator.add(event);
  return aggregator.body();
}

/** The SSE text a server sends for these frames: one-line JSON, LF endings, then `data: [DONE]`. */
export function sseText(frames: ResponsesFrame[]): string {
  return frames.map(({ event, data }) => sseFrame(data, event)).join('') + SSE_DONE;
}
