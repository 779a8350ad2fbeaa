import { readFile } from 'node:fs/promises';
import { CortexError, type UnreachableUpstream, type UpstreamSpec } from '@cortex/contracts';
import { SseParser, type UpstreamBody, type UpstreamDecoder, type UpstreamEvent } from '@cortex/wire';
import { errorMessage, retryAfterSeconds, upstreamRefusal } from './upstream-failure.js';
import { UpstreamBreaker } from './upstream-breaker.js';

/** The most an SSE message from an upstream may hold before the stream is given up as broken. */
const MAX_MESSAGE_BYTES = 8 * 2 ** 20;
/** The most of an error body that is read. */
const MAX_ERROR_BYTES = 64 * 1024;
/** The Messages API version asked for unless the model's headers name another. */
const ANTHROPIC_VERSION = '2023-06-01';
/** How often an upstream that does not answer is asked again whether it is back. */
export const PROBE_DOWN_MS = 2_000;
/** How often an upstream no request has heard from lately is asked whether it still answers. */
export const PROBE_UP_MS = 15_000;

/** One upstream, as a remote model holds it: where, how to authenticate (the key read at load, kept in memory only). */
export class UpstreamClient {
  /** Null while the upstream answers (any HTTP response counts, a refusal too). */
  private down: UnreachableUpstream | null = null;
  /** When the upstream last answered (epoch ms). */
  private heardAt = 0;
  private probeTimer: NodeJS.Timeout | undefined;
  private closed = false;
  /** Rests an upstream that keeps answering 5xx. */
  private readonly breaker = new UpstreamBreaker();

  private constructor(
    private readonly spec: UpstreamSpec,
    private readonly headers: Record<string, string>,
    /** `host (api)`, for messages: never the URL's path or query, where a key could stand. */
    readonly label: string,
  ) {}

  /** Reads the credential where the spec names it; a missing one fails the load, naming where it looked. */
  static async create(spec: UpstreamSpec, model: string): Promise<UpstreamClient> {
    const key = await readKey(spec, model);
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      accept: 'text/event-stream',
      ...(spec.api === 'messages' && { 'anthropic-version': ANTHROPIC_VERSION }),
      ...spec.headers,
    };
    if (key !== undefined) {
      if (spec.api === 'messages') headers['x-api-key'] = key;
      else headers.authorization = `Bearer ${key}`;
    }
    const client = new UpstreamClient(spec, headers, `${new URL(spec.url).host} (${spec.api})`);
    client.schedule(PROBE_UP_MS);
    return client;
  }

  /** Whether the upstream answers, by the last request or probe, and with more than server errors: null while it does. */
  get unreachable(): UnreachableUpstream | null {
    return this.down ?? this.breaker.failing;
  }

  /** Stops the probes (the model is unloaded). */
  close(): void {
    this.closed = true;
    clearTimeout(this.probeTimer);
  }

  private answered(): void {
    this.heardAt = Date.now();
    this.down = null;
  }

  private unanswered(error: string): void {
    this.down = { since: this.down?.since ?? Date.now(), error };
  }

  private schedule(ms: number): void {
    if (this.closed) return;
    clearTimeout(this.probeTimer);
    this.probeTimer = setTimeout(() => void this.probe(), ms).unref();
  }

  /**
   * Asks the upstream's model list (GET {url}/models, with the model's headers) whether it answers:
   * every PROBE_DOWN_MS while it does not, else once no request has heard from it for PROBE_UP_MS.
   * Any HTTP response means it answers; what it lists is not read.
   */
  private async probe(): Promise<void> {
    if (this.down === null && Date.now() - this.heardAt < PROBE_UP_MS) {
      this.schedule(PROBE_UP_MS - (Date.now() - this.heardAt));
      return;
    }
    try {
      const response = await fetch(this.spec.url.replace(/\/$/, '') + '/models', {
        headers: this.headers,
        signal: AbortSignal.timeout(this.spec.connectTimeoutMs),
        redirect: 'manual',
      });
      await response.body?.cancel();
      this.answered();
    } catch (error) {
      this.unanswered(unreachableWhy(error));
    }
    this.schedule(this.down ? PROBE_DOWN_MS : PROBE_UP_MS);
  }

  /**
   * Posts the body and yields the events of its streamed answer. Refusals become CortexErrors
   * (upstreamRefusal); a connection that fails, no answer within `connect_timeout_ms`, silence past
   * `idle_timeout_ms` or a request past `timeout_ms` is `upstream_unavailable`. `signal` (the run's)
   * cancels the request; the iterator then ends without an error and the caller finishes the run.
   */
  async *stream(request: UpstreamBody, decoder: UpstreamDecoder, signal: AbortSignal): AsyncGenerator<UpstreamEvent> {
    const { spec } = this;
    // An upstream that keeps answering 5xx is not asked while it rests: the request goes to the next place at once.
    const resting = this.breaker.resting(Date.now());
    if (resting)
      throw new CortexError('upstream_unavailable', `the upstream ${this.label} ${resting.why}`, {
        retryAfter: Math.ceil(resting.forMs / 1000),
      });
    const abort = new AbortController();
    let timedOut: string | null = null;
    const expire = (why: string) => () => {
      timedOut = why;
      abort.abort(new Error(why));
    };
    const onCancel = (): void => abort.abort(signal.reason);
    signal.addEventListener('abort', onCancel, { once: true });
    const total = setTimeout(expire(`no complete answer within ${spec.timeoutMs} ms (timeout_ms)`), spec.timeoutMs);
    let idle = setTimeout(
      expire(`no answer within ${spec.connectTimeoutMs} ms (connect_timeout_ms)`),
      spec.connectTimeoutMs,
    );
    const why = (error: unknown): string => timedOut ?? unreachableWhy(error);
    const failed = (error: unknown): CortexError => {
      if (error instanceof CortexError) return error;
      return new CortexError(
        'upstream_unavailable',
        `the upstream ${this.label} ${timedOut ? 'sent ' : ''}${why(error)}`,
        {
          cause: error,
        },
      );
    };
    try {
      let response: Response;
      try {
        response = await fetch(spec.url.replace(/\/$/, '') + request.path, {
          method: 'POST',
          headers: this.headers,
          body: JSON.stringify(request.body),
          signal: abort.signal,
          redirect: 'error',
        });
      } catch (error) {
        if (signal.aborted) return;
        this.unanswered(why(error));
        this.schedule(PROBE_DOWN_MS);
        throw failed(error);
      }
      this.answered();
      if (!response.ok) {
        const text = await boundedText(response, MAX_ERROR_BYTES).catch(() => '');
        this.breaker.answered(response.status, errorMessage(text), Date.now());
        throw upstreamRefusal({
          status: response.status,
          message: errorMessage(text),
          upstream: this.label,
          ...optional('retryAfter', retryAfterSeconds(response.headers.get('retry-after'))),
        });
      }
      this.breaker.answered(response.status, '', Date.now());
      if (!response.body) throw new CortexError('upstream_unavailable', `the upstream ${this.label} sent no body`);
      const parser = new SseParser();
      const text = new TextDecoder();
      let pending = 0;
      const rearm = (): void => {
        clearTimeout(idle);
        idle = setTimeout(
          expire(`nothing for ${spec.idleTimeoutMs} ms (idle_timeout_ms) in the middle of its answer`),
          spec.idleTimeoutMs,
        );
      };
      rearm();
      try {
        for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
          rearm();
          const messages = parser.push(text.decode(chunk, { stream: true }));
          pending = messages.length > 0 ? 0 : pending + chunk.byteLength;
          if (pending > MAX_MESSAGE_BYTES)
            throw new CortexError(
              'upstream_unavailable',
              `the upstream ${this.label} sent an event of more than ${MAX_MESSAGE_BYTES} bytes`,
            );
          for (const message of messages) yield* decoder.push(message);
          if (decoder.done) return;
        }
      } catch (error) {
        if (signal.aborted && !(error instanceof CortexError)) return;
        throw failed(error);
      }
      if (!decoder.done && !signal.aborted)
        throw new CortexError('upstream_unavailable', `the upstream ${this.label} ended its answer before it finished`);
    } finally {
      clearTimeout(total);
      clearTimeout(idle);
      signal.removeEventListener('abort', onCancel);
      // Whatever ended the answer (its end, an error, a cancel), the connection is let go.
      abort.abort();
    }
  }
}

async function readKey(spec: UpstreamSpec, model: string): Promise<string | undefined> {
  if (spec.apiKeyEnv !== undefined) {
    const key = process.env[spec.apiKeyEnv];
    if (!key)
      throw new CortexError(
        'model_load_failed',
        `${model}: its upstream's key is read from $${spec.apiKeyEnv}, which is not set on this worker`,
      );
    return key.trim();
  }
  if (spec.apiKeyFile !== undefined) {
    const text = await readFile(spec.apiKeyFile, 'utf8').catch((error: Error) => {
      throw new CortexError(
        'model_load_failed',
        `${model}: its upstream's key file ${spec.apiKeyFile} cannot be read: ${error.message}`,
      );
    });
    const key = text.split(/\r?\n/)[0]?.trim();
    if (!key)
      throw new CortexError('model_load_failed', `${model}: its upstream's key file ${spec.apiKeyFile} is empty`);
    return key;
  }
  return undefined;
}

/** At most `limit` bytes of a body, as text. */
async function boundedText(response: Response, limit: number): Promise<string> {
  if (!response.body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    chunks.push(chunk);
    size += chunk.byteLength;
    if (size >= limit) break;
  }
  return Buffer.concat(chunks).subarray(0, limit).toString('utf8');
}

/** Why a request got no HTTP response, for messages and the heartbeat. */
function unreachableWhy(error: unknown): string {
  return `cannot be reached: ${describe(error)}`;
}

/** A fetch failure in words: undici puts the reason (ECONNREFUSED, a reset) in `cause`. */
function describe(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (error as Error).message;
}

function optional<K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: V };
}
