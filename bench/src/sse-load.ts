import { request, Agent } from 'node:http';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

/** What one streamed chat completion looked like from the client's side. */
export interface StreamTiming {
  /** Request written → first byte of the first content delta on the socket. */
  ttftMs: number;
  /** Completion tokens from the final usage chunk. */
  tokens: number;
  /** First content byte → `[DONE]`. */
  decodeMs: number;
  status: number;
}

const agent = new Agent({ keepAlive: true, maxSockets: Infinity });

/** The streamed chat completion every bench client sends (usage included, for the token count). */
export function streamedChatBody(model: string, maxTokens: number, prompt = 'Once upon a time'): string {
  return JSON.stringify({
    model,
    stream: true,
    stream_options: { include_usage: true },
    temperature: 0,
    max_tokens: maxTokens,
    messages: [{ role: 'user', content: prompt }],
  });
}

/** A chunk of the answer that holds the first non-empty content delta. */
export function holdsContent(chunk: string): boolean {
  return chunk.includes('"content":"') && !chunk.includes('"content":""');
}

/** A streamed `/v1/responses` body, unstored (it continues nothing, so the gateway decodes it itself). */
export function streamedResponsesBody(model: string, maxTokens: number, prompt = 'Once upon a time'): string {
  return JSON.stringify({
    model,
    stream: true,
    store: false,
    temperature: 0,
    max_output_tokens: maxTokens,
    input: prompt,
  });
}

/** A chunk of a Responses stream that holds the first text delta. */
export function holdsResponsesText(chunk: string): boolean {
  return chunk.includes('"type":"response.output_text.delta"');
}

/** A finished stream's timing from its last bytes (`tail`), or why it does not count; `usage` finds the output tokens. */
export function streamTiming(
  status: number | undefined,
  tail: string,
  started: number,
  first: number,
  end: number,
  usagePattern = /"completion_tokens":(\d+)/,
): StreamTiming | Error {
  const usage = usagePattern.exec(tail);
  if (status !== 200 || !usage) return new Error(`status ${status}: ${tail.slice(-300)}`);
  return { ttftMs: first - started, tokens: Number(usage[1]), decodeMs: end - first, status };
}

/**
 * One streamed `/v1/chat/completions` over a keep-alive socket, read as raw bytes: the client does
 * as little as a client can (no SSE or JSON parsing per event) so the measurement is cortex's cost.
 */
export function streamChat(
  baseUrl: string,
  model: string,
  maxTokens: number,
  options: { prompt?: string; requestId?: string; apiKey?: string } = {},
): Promise<StreamTiming> {
  const body = streamedChatBody(model, maxTokens, options.prompt);
  const url = new URL('/v1/chat/completions', baseUrl);
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let first = 0;
    let tail = '';
    const req = request(
      url,
      {
        method: 'POST',
        agent,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          ...(options.requestId && { 'x-request-id': options.requestId }),
          ...(options.apiKey && { authorization: `Bearer ${options.apiKey}` }),
        },
      },
      (res) => {
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          if (first === 0 && holdsContent(chunk)) first = performance.now();
          tail = (tail + chunk).slice(-600);
        });
        res.on('end', () => {
          const timing = streamTiming(res.statusCode, tail, started, first, performance.now());
          if (timing instanceof Error) reject(timing);
          else resolve(timing);
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** CPU seconds (user + system) a process has used so far, from /proc (Linux). */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may hold spaces), from the closing parenthesis on.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

export const percentile = (values: number[], p: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
};
