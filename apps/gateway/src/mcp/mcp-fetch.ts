import { AsyncLocalStorage } from 'node:async_hooks';
import { request as httpRequest, type Agent as HttpAgent, type IncomingMessage } from 'node:http';
import { request as httpsRequest, type Agent as HttpsAgent } from 'node:https';
import ipaddr from 'ipaddr.js';
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { RequestId } from '@modelcontextprotocol/sdk/types.js';
import { guardedLookup, publicAddress } from '../media/image-source.js';
import { JsonBodyCap, SseEventCap, type CapStep } from './message-cap.js';

/** Bytes kept of a body that is neither JSON nor SSE (an error page): the SDK only quotes it. */
const OTHER_BODY_BYTES = 16 * 1024;

/** The code of the error a request URL's refused address fails with (image-source.ts's guarded lookup's too). */
export const ADDRESS_REFUSED = 'CORTEX_ADDRESS_REFUSED';

export interface McpFetchOptions {
  /** A request URL's rule: public addresses only unless `allowPrivate`. Null for the operator's servers, which are not checked. */
  addresses: { allowPrivate: boolean } | null;
  /** The most bytes of one message held (messageLimit). */
  messageLimit: number;
  /** Keep-alive agents with a socket cap: the bound on connections to one server. */
  agents: { http: HttpAgent; https: HttpsAgent };
}

/**
 * The tool call under way, for the POSTs the SDK makes for it: it gives no handle on the HTTP
 * request it sends, so the call's signal travels with the async context instead, and a call that
 * times out or is cancelled aborts its own POST (and so frees its socket) without closing the
 * session that other calls share.
 */
const callSignals = new AsyncLocalStorage<AbortSignal>();

/** Runs `work` as a call: the POSTs that carry its requests are aborted by `signal`. */
export function asCall<T>(signal: AbortSignal, work: () => Promise<T>): Promise<T> {
  return callSignals.run(signal, work);
}

/** Runs `work` outside any call: a session opened here (and its GET stream) outlives the call that needed it. */
export function outsideCalls<T>(work: () => Promise<T>): Promise<T> {
  return callSignals.exit(work);
}

/**
 * The fetch the SDK's HTTP transports are given: node:http under it, so that a request URL's host is
 * checked at connect time by image URLs' guarded lookup (every address it resolves to public, unless
 * allowed), and the bytes of each answer are counted as they arrive. A JSON body or an SSE event
 * past `messageLimit` is cut there (message-cap.ts): the SDK's transports would otherwise read a
 * body whole (`response.json()`) or an event whole, however large.
 */
export function mcpFetch(options: McpFetchOptions): FetchLike {
  return async (input, init = {}) => {
    const url = new URL(input instanceof URL ? input.href : input);
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      throw new TypeError(`an MCP server is reached over http or https, not ${url.protocol}`);
    const host = url.hostname.replace(/^\[|\]$/g, '');
    // A literal address is never looked up: it is checked here.
    if (options.addresses && !options.addresses.allowPrivate && ipaddr.isValid(host) && !publicAddress(host))
      throw Object.assign(new Error(`${host} is a non-public address`), { code: ADDRESS_REFUSED });
    const body = init.body ?? undefined;
    if (body !== undefined && typeof body !== 'string') throw new TypeError('the MCP transports send text bodies');
    const id = requestIdOf(body);
    const call = id === undefined ? undefined : callSignals.getStore();
    const signals = [init.signal ?? undefined, call].filter((s): s is AbortSignal => s !== undefined);
    const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
    const response = await send(url, init.method ?? 'GET', flatHeaders(init.headers), body, signal, options);
    return toResponse(response, id, options.messageLimit, init.method === 'HEAD');
  };
}

function send(
  url: URL,
  method: string,
  headers: Record<string, string>,
  body: string | undefined,
  signal: AbortSignal | undefined,
  options: McpFetchOptions,
): Promise<IncomingMessage> {
  const https = url.protocol === 'https:';
  const request = https ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method,
        headers: body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) },
        agent: https ? options.agents.https : options.agents.http,
        signal,
        ...(options.addresses && { lookup: guardedLookup(options.addresses.allowPrivate) }),
      },
      resolve,
    );
    req.on('error', reject);
    req.end(body);
  });
}

function toResponse(res: IncomingMessage, id: RequestId | undefined, limit: number, head: boolean): Response {
  const headers = new Headers();
  for (const [name, value] of Object.entries(res.headers)) {
    if (Array.isArray(value)) for (const v of value) headers.append(name, v);
    else if (value !== undefined) headers.set(name, value);
  }
  const status = res.statusCode ?? 502;
  if (head || status === 204 || status === 205 || status === 304) {
    res.resume();
    return new Response(null, { status, headers });
  }
  const type = (headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
  const cap: { push(chunk: Buffer): CapStep; end(): Buffer[] } =
    type === 'text/event-stream'
      ? new SseEventCap(limit, id)
      : type === 'application/json'
        ? new JsonBodyCap(limit, id)
        : new PrefixCap(OTHER_BODY_BYTES);
  const chunks = res[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      for (;;) {
        let next: IteratorResult<Buffer>;
        try {
          next = await chunks.next();
        } catch (error) {
          controller.error(error);
          return;
        }
        if (next.done) {
          for (const bytes of cap.end()) controller.enqueue(bytes);
          controller.close();
          return;
        }
        const step = cap.push(next.value);
        for (const bytes of step.out) controller.enqueue(bytes);
        if (step.done) {
          // The rest is not read: the socket goes, and with it whatever the server still sends.
          res.destroy();
          controller.close();
          return;
        }
        if (step.out.length > 0) return;
      }
    },
    cancel() {
      res.destroy();
    },
  });
  return new Response(stream, { status, headers });
}

/** The first `limit` bytes of a body, the rest left unread. */
class PrefixCap {
  private kept = 0;
  constructor(private readonly limit: number) {}

  push(chunk: Buffer): CapStep {
    const take = chunk.subarray(0, this.limit - this.kept);
    this.kept += take.length;
    return { out: take.length > 0 ? [take] : [], done: this.kept >= this.limit };
  }

  end(): Buffer[] {
    return [];
  }
}

/** The id of the JSON-RPC request a POST carries (a notification or a response has none). */
function requestIdOf(body: string | undefined): RequestId | undefined {
  if (body === undefined) return undefined;
  try {
    const message = JSON.parse(body) as { id?: unknown; method?: unknown };
    if (typeof message.method !== 'string') return undefined;
    return typeof message.id === 'string' || typeof message.id === 'number' ? message.id : undefined;
  } catch {
    return undefined;
  }
}

function flatHeaders(init: RequestInit['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  new Headers(init).forEach((value, name) => {
    out[name] = value;
  });
  return out;
}
