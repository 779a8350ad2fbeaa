import { SseParser, type SseMessage } from '@cortex/wire';

/** POSTs a JSON body (a string is sent as it is, for malformed-body tests) and returns the raw response. */
export function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

/** Posts JSON and collects the raw SSE messages of the reply, for framing assertions. */
export async function postSse(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Headers; raw: string; messages: SseMessage[] }> {
  const response = await postJson(url, body, headers);
  const parser = new SseParser();
  const messages: SseMessage[] = [];
  let raw = '';
  const decoder = new TextDecoder();
  for await (const chunk of response.body ?? []) {
    const text = decoder.decode(chunk as Uint8Array, { stream: true });
    raw += text;
    messages.push(...parser.push(text));
  }
  return { status: response.status, headers: response.headers, raw, messages };
}

/** Posts JSON and yields each SSE message of the reply as it arrives, for tests that act mid-stream. */
export async function* streamSse(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): AsyncGenerator<SseMessage, { status: number }> {
  const response = await postJson(url, body, headers);
  const parser = new SseParser();
  const decoder = new TextDecoder();
  for await (const chunk of response.body ?? [])
    yield* parser.push(decoder.decode(chunk as Uint8Array, { stream: true }));
  return { status: response.status };
}
