import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Inject, Injectable, Logger, Optional, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { context, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { activeTracer, BusClient, EventPublisher, failSpan } from '@cortex/bus';
import { ErrorCode as McpErrorCode, McpError, type Tool } from '@modelcontextprotocol/sdk/types.js';
import { CONFIG, ConfigError, type CortexConfig, type McpServerConfig } from '@cortex/config';
import {
  CortexError,
  MCP_REQUEST_URL_SERVER,
  Subjects,
  upstreamHost,
  type KeyRecord,
  type McpCallOutcome,
  type McpToolCalledEvent,
} from '@cortex/contracts';
import { CallSlots } from './call-slots.js';
import { refusedAddress, resolveMcpServer, toolAllowed, type McpFieldNames, type McpServerRef } from './mcp-access.js';
import { McpConnection } from './mcp-connection.js';
import { ANSWER_TOO_LARGE } from './message-cap.js';
import { renderToolResult, type McpToolResult } from './tool-result.js';

/** A tool a server offers, as a request's model is shown it. */
export type McpTool = Pick<Tool, 'name' | 'title' | 'description' | 'inputSchema' | 'annotations'>;

/** One server's state on this gateway, for operators: never its headers. */
export interface McpServerStatus {
  label: string;
  transport: McpServerRef['transport'];
  /** A request URL's host (its path and query may hold secrets), or a registered server's label again. */
  where: string;
  sessions: number;
  running: number;
  waiting: number;
  /** The process ids of a stdio server's children (one per session: one). */
  pids: number[];
}

/** Tool lists kept, every server and set of credentials together; the oldest goes first. */
const MAX_CACHED_LISTS = 1_024;
/** How long a server that let a call time out has to answer a ping before its session is closed. */
const PROBE_MS = 2_000;
/** The longest error text from a server quoted in a message. */
const MAX_QUOTED = 500;

/**
 * The gateway's MCP client: resolves a request's `mcp` tool to a server (a label the config registers
 * or, where allowed, a URL) and checks that the request's key may use it; lists a server's tools
 * (cached per server and credentials for `mcp.list_cache_ms`) and calls them, within the server's
 * timeout and output cap, returning the result as text. Sessions are kept per server and set of
 * headers, stdio servers started on first use and again after they die, and all of it closed when the
 * gateway stops. Everything a request can make it hold is bounded: calls at once and waiting per
 * server, sessions per server and for request URLs, bytes of one message, time of each step.
 */
@Injectable()
export class McpService implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('mcp');
  /** Each registered server's own headers, `headers_env` read: its credentials, never logged. */
  private readonly serverHeaders = new Map<string, Record<string, string>>();
  /** Sessions by server (`ref.id`), then by the hash of the request's headers. */
  private readonly pools = new Map<string, Map<string, McpConnection>>();
  private readonly slots = new Map<string, CallSlots>();
  private readonly toolLists = new Map<string, { tools: Tool[]; at: number }>();
  /** Listings under way, so that requests arriving together ask a server once. */
  private readonly listing = new Map<string, Promise<Tool[]>>();
  private sweeper: NodeJS.Timeout | null = null;
  private stopping = false;

  private readonly events: EventPublisher | null;

  constructor(
    @Inject(CONFIG) private readonly config: CortexConfig,
    @Optional() bus?: BusClient,
  ) {
    this.events = bus ? new EventPublisher(bus.nc) : null;
  }

  /** Reads each registered server's `headers_env` from the environment: a variable that is not set stops the gateway, naming it. */
  onModuleInit(env: NodeJS.ProcessEnv = process.env): void {
    for (const [i, server] of this.config.mcp.servers.entries()) {
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(server.headers ?? {})) headers[name.toLowerCase()] = value;
      for (const [name, variable] of Object.entries(server.headersEnv ?? {})) {
        const value = env[variable];
        const at = `config: mcp.servers[${i}].headers_env.${name}`;
        if (!value) throw new ConfigError(`${at}: ${variable} is not set in the gateway's environment`);
        if (/[\r\n\0]/.test(value))
          throw new ConfigError(`${at}: ${variable} holds a line break, which no header carries`);
        headers[name.toLowerCase()] = value;
      }
      this.serverHeaders.set(server.label, headers);
    }
    const labels = this.config.mcp.servers.map((s) => s.label);
    if (labels.length > 0) this.logger.log(`MCP servers registered: ${labels.join(', ')}`);
    const idle = this.config.mcp.sessionIdleMs;
    this.sweeper = setInterval(() => this.closeIdle(idle), Math.min(idle, 30_000));
    this.sweeper.unref();
  }

  async onModuleDestroy(): Promise<void> {
    this.stopping = true;
    if (this.sweeper) clearInterval(this.sweeper);
    const all = [...this.pools.values()].flatMap((pool) => [...pool.values()]);
    this.pools.clear();
    await Promise.allSettled(all.map((connection) => connection.close()));
    this.toolLists.clear();
  }

  /**
   * A request's MCP tool (`tools[i]` of a Responses body, an entry of Anthropic's `mcp_servers` in the
   * same shape) as the server it names; `key` is the request's stored key (null for a static key or
   * none). Throws a 400 naming `param` for a server it cannot have, a 403 `permission_denied` naming
   * the label for one its key may not use (see resolveMcpServer).
   */
  resolve(tool: unknown, key: KeyRecord | null | undefined, param: string, fields?: McpFieldNames): McpServerRef {
    return resolveMcpServer(this.config.mcp, tool, key ?? null, param, fields);
  }

  /** The URL of the server the config registers as `label`, or null (none, or one it starts itself). */
  registeredUrl(label: string): string | null {
    return this.config.mcp.servers.find((server) => server.label === label)?.url ?? null;
  }

  /**
   * The server's tools that the request may see (its and the config's `allowed_tools`): asked at most
   * once per `mcp.list_cache_ms` for one server and set of credentials, and once for requests that
   * ask together. Connecting and listing together take at most `mcp.connect_timeout_ms` (504); a
   * server that cannot be reached or fails is a 502 `upstream_unavailable`; a request URL that
   * resolves to a non-public address a 400.
   */
  async listTools(ref: McpServerRef, signal?: AbortSignal): Promise<McpTool[]> {
    const credentials = ref.credentials.key;
    const key = `${ref.id}\n${credentials}`;
    const ttl = this.config.mcp.listCacheMs;
    const cached = this.toolLists.get(key);
    let tools: Tool[];
    if (cached && ttl > 0 && Date.now() - cached.at < ttl) tools = cached.tools;
    else {
      let pending = this.listing.get(key);
      if (!pending) {
        pending = this.fetchTools(ref, credentials, key).finally(() => this.listing.delete(key));
        this.listing.set(key, pending);
      }
      tools = await untilAborted(pending, signal).catch((error: unknown) => {
        if (signal?.aborted) throw this.cancelled(ref, 'listing its tools');
        throw error;
      });
    }
    return tools
      .filter((tool) => toolAllowed(ref.tools, tool.name, tool.annotations))
      .map(({ name, title, description, inputSchema, annotations }) => ({
        name,
        ...(title !== undefined && { title }),
        ...(description !== undefined && { description }),
        inputSchema,
        ...(annotations !== undefined && { annotations }),
      }));
  }

  /**
   * Calls one tool: within the server's timeout (`timeout_ms`, else `mcp.call_timeout_ms`; waiting
   * for a slot and connecting count too) and `signal` (the client gone). The answer as text, at most
   * `max_output_bytes` of it, cut with a note past that, however large the server's answer (it is
   * never held whole). A tool the request may not call, arguments that are not an object, and an
   * error the server answers with (an unknown tool, bad arguments) are results with `isError`, for
   * the model to read. Throws a 504 `timeout` when the server did not answer in time (the call is
   * cancelled and its request aborted; a server that then does not answer a ping has its session
   * closed, a stdio child stopped, to be started again on the next call), `cancelled` when `signal`
   * ended it, 429 `busy` when the server's calls and queue are full, 502 `upstream_unavailable` when
   * the server cannot be reached or its process died.
   */
  async callTool(
    ref: McpServerRef,
    name: string,
    args: unknown,
    signal?: AbortSignal,
    requestId = '',
  ): Promise<McpToolResult> {
    const started = performance.now();
    const tracer = activeTracer();
    // OpenTelemetry's MCP conventions: a client span `tools/call <tool>`.
    const span = tracer?.startSpan(`tools/call ${name}`, {
      kind: SpanKind.CLIENT,
      attributes: {
        'mcp.method.name': 'tools/call',
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': name,
        'cortex.mcp.server': ref.label,
        'network.transport': ref.transport === 'stdio' ? 'pipe' : 'tcp',
        ...(ref.url !== null && ref.index !== null && { 'server.address': new URL(ref.url).hostname }),
      },
    });
    let outcome: McpCallOutcome = 'ok';
    try {
      const result = await (span
        ? context.with(trace.setSpan(context.active(), span), () => this.runTool(ref, name, args, signal))
        : this.runTool(ref, name, args, signal));
      if (result.isError) {
        outcome = 'tool_error';
        span?.setAttribute('error.type', 'tool_error');
        span?.setStatus({ code: SpanStatusCode.ERROR, message: 'the tool answered with an error' });
      }
      return result;
    } catch (error) {
      const code = error instanceof CortexError ? error.code : undefined;
      outcome = code === 'timeout' ? 'timeout' : code === 'cancelled' ? 'cancelled' : 'failed';
      if (span) failSpan(span, error);
      throw error;
    } finally {
      span?.end();
      this.recordCall(ref, name, outcome, performance.now() - started, requestId);
    }
  }

  /** A call's event for the metrics service: a request URL's server and tools go uncounted by name (a client chose them). */
  private recordCall(ref: McpServerRef, tool: string, outcome: McpCallOutcome, ms: number, requestId: string): void {
    if (!this.events) return;
    const named = ref.index !== null;
    const event: McpToolCalledEvent = {
      requestId,
      server: named ? ref.label : MCP_REQUEST_URL_SERVER,
      tool: named ? tool : MCP_REQUEST_URL_SERVER,
      outcome,
      durationMs: Math.round(ms),
      at: Date.now(),
    };
    this.events
      .publish(Subjects.mcpToolCalled, event, randomUUID())
      .catch((error: Error) => this.logger.warn(`${requestId}: an MCP call's event was lost: ${error.message}`));
  }

  private async runTool(ref: McpServerRef, name: string, args: unknown, signal?: AbortSignal): Promise<McpToolResult> {
    if (typeof name !== 'string' || !toolAllowed({ names: ref.tools.names, readOnly: false }, name))
      return refusedTool(ref, name);
    if (ref.tools.readOnly && !(await this.listTools(ref, signal)).some((tool) => tool.name === name))
      return refusedTool(ref, name);
    if (args !== undefined && (args === null || typeof args !== 'object' || Array.isArray(args)))
      return { text: `the arguments of '${name}' must be a JSON object`, isError: true, truncated: false };
    if (this.stopping) throw this.unavailable(ref, 'the gateway is stopping');
    const deadline = AbortSignal.timeout(ref.timeoutMs);
    const ends = signal ? AbortSignal.any([deadline, signal]) : deadline;
    const slots = this.slotsOf(ref);
    let release: (() => void) | null = null;
    let connection: McpConnection | null = null;
    try {
      release = await slots.acquire(ends);
      if (!release) throw this.busy(ref, slots);
      connection = this.take(ref, ref.credentials.key);
      await untilAborted(connection.open(this.config.mcp.connectTimeoutMs), ends);
      const result = await connection.call(name, (args ?? {}) as Record<string, unknown>, ref.timeoutMs, ends);
      return renderToolResult(result, ref.maxOutputBytes);
    } catch (error) {
      if (signal?.aborted) throw this.cancelled(ref, `the call of '${name}'`);
      if (deadline.aborted) {
        if (connection) void this.probe(connection);
        throw new CortexError(
          'timeout',
          `MCP server '${ref.label}': the tool '${name}' did not answer within ${ref.timeoutMs} ms ` +
            `(${this.timeoutSetting(ref)}); the call was cancelled`,
        );
      }
      if (error instanceof McpError && error.code !== McpErrorCode.ConnectionClosed)
        return {
          text: quoted(error.message),
          isError: true,
          truncated: error.code === ANSWER_TOO_LARGE,
        };
      throw this.failure(ref, connection, error, `the call of '${name}'`);
    } finally {
      release?.();
      this.dropIdleSlots(ref.id, slots);
      if (connection) {
        connection.inFlight--;
        connection.lastUsed = Date.now();
      }
    }
  }

  /** Every server with sessions or calls on this gateway, registered ones first. */
  servers(): McpServerStatus[] {
    const ids = new Set([
      ...this.config.mcp.servers.map((s) => `label:${s.label}`),
      ...this.pools.keys(),
      ...this.slots.keys(),
    ]);
    return [...ids].flatMap((id) => {
      const pool = [...(this.pools.get(id)?.values() ?? [])];
      const registered = id.startsWith('label:')
        ? this.config.mcp.servers.find((s) => `label:${s.label}` === id)
        : null;
      const ref = pool[0]?.ref;
      if (!registered && !ref) return [];
      const slots = this.slots.get(id);
      return [
        {
          label: registered?.label ?? ref!.label,
          transport:
            ref?.transport ??
            (registered!.command !== undefined ? 'stdio' : (registered!.transport ?? 'streamable_http')),
          where: registered ? registered.label : upstreamHost(ref!.url ?? ''),
          sessions: pool.length,
          running: slots?.running ?? 0,
          waiting: slots?.queued ?? 0,
          pids: pool.map((c) => c.pid).filter((pid): pid is number => pid !== null),
        },
      ];
    });
  }

  private async fetchTools(ref: McpServerRef, credentials: string, key: string): Promise<Tool[]> {
    if (this.stopping) throw this.unavailable(ref, 'the gateway is stopping');
    const timeout = this.config.mcp.connectTimeoutMs;
    const deadline = AbortSignal.timeout(timeout);
    const slots = this.slotsOf(ref);
    let release: (() => void) | null = null;
    let connection: McpConnection | null = null;
    try {
      release = await slots.acquire(deadline);
      if (!release) throw this.busy(ref, slots);
      connection = this.take(ref, credentials);
      await untilAborted(connection.open(timeout), deadline);
      const tools = await connection.listTools(timeout, deadline);
      if (this.toolLists.size >= MAX_CACHED_LISTS) this.toolLists.delete(this.toolLists.keys().next().value!);
      this.toolLists.delete(key);
      this.toolLists.set(key, { tools, at: Date.now() });
      return tools;
    } catch (error) {
      if (deadline.aborted || (error instanceof McpError && error.code === McpErrorCode.RequestTimeout))
        throw new CortexError(
          'timeout',
          `MCP server '${ref.label}': connecting and listing its tools took longer than ${timeout} ms (mcp.connect_timeout_ms)`,
        );
      throw this.failure(ref, connection, error, 'listing its tools');
    } finally {
      release?.();
      this.dropIdleSlots(ref.id, slots);
      if (connection) {
        connection.inFlight--;
        connection.lastUsed = Date.now();
      }
    }
  }

  /**
   * The session for this server and these credentials, counted as in use (the caller gives it back
   * with `inFlight--`): an open one, or a new one, closing the least recently used idle session when
   * the server's (or request URLs') session cap is reached.
   */
  private take(ref: McpServerRef, credentials: string): McpConnection {
    let pool = this.pools.get(ref.id);
    if (!pool) {
      pool = new Map();
      this.pools.set(ref.id, pool);
    }
    let connection = pool.get(credentials);
    if (!connection || connection.closed) {
      this.makeRoom(ref);
      const server = this.registered(ref);
      connection = new McpConnection(
        ref,
        server,
        { ...ref.credentials.headers, ...(server ? this.serverHeaders.get(server.label) : {}) },
        this.config.mcp.allowPrivateUrls,
        (closed, expected) => this.forget(closed, credentials, expected),
        (error) => this.logger.debug(`MCP server '${ref.label}': ${quoted(error.message)}`),
      );
      pool.set(credentials, connection);
      this.logger.debug(`MCP server '${ref.label}': opening a session (${this.describe(ref)})`);
    }
    connection.inFlight++;
    connection.lastUsed = Date.now();
    return connection;
  }

  private makeRoom(ref: McpServerRef): void {
    const server = this.registered(ref);
    const [sessions, max, setting] = server
      ? [[...(this.pools.get(ref.id)?.values() ?? [])], server.maxSessions, `${ref.where}.max_sessions`]
      : [
          [...this.pools.entries()].filter(([id]) => id.startsWith('url:')).flatMap(([, pool]) => [...pool.values()]),
          this.config.mcp.maxRequestUrlSessions,
          'mcp.max_request_url_sessions',
        ];
    if (sessions.length < max) return;
    const idle = sessions.filter((c) => c.inFlight === 0).sort((a, b) => a.lastUsed - b.lastUsed)[0];
    if (!idle)
      throw new CortexError(
        'busy',
        `MCP server '${ref.label}': ${max} sessions are open and in use (${setting}); retry shortly`,
        { retryAfter: 1 },
      );
    this.pools.get(idle.ref.id)?.forEach((c, k, pool) => c === idle && pool.delete(k));
    void idle.close();
  }

  private forget(connection: McpConnection, credentials: string, expected: boolean): void {
    const pool = this.pools.get(connection.ref.id);
    if (pool?.get(credentials) === connection) pool.delete(credentials);
    if (pool?.size === 0) this.pools.delete(connection.ref.id);
    if (!expected && connection.opened && !this.stopping) {
      const why = connection.stderrTail ? `: ${quoted(connection.stderrTail)}` : '';
      this.logger.warn(
        `MCP server '${connection.ref.label}': its session ended` +
          `${connection.ref.transport === 'stdio' ? ' (the process exited)' : ''}${why}; ` +
          'a new one is opened on the next call',
      );
    }
  }

  /** After a timed-out call: a server that does not answer a ping either is stuck; its session (or process) goes. */
  private async probe(connection: McpConnection): Promise<void> {
    if (connection.closed || (await connection.ping(PROBE_MS))) return;
    this.logger.warn(
      `MCP server '${connection.ref.label}': no answer to a ping after a call timed out; closing its session`,
    );
    this.pools.get(connection.ref.id)?.forEach((c, k, pool) => c === connection && pool.delete(k));
    await connection.close();
  }

  private closeIdle(idleMs: number): void {
    const now = Date.now();
    for (const pool of this.pools.values())
      for (const [key, connection] of pool)
        if (connection.inFlight === 0 && now - connection.lastUsed > idleMs) {
          pool.delete(key);
          void connection.close();
        }
    for (const [id, pool] of this.pools) if (pool.size === 0) this.pools.delete(id);
  }

  private slotsOf(ref: McpServerRef): CallSlots {
    let slots = this.slots.get(ref.id);
    if (!slots) {
      slots = new CallSlots(ref.maxConcurrency);
      this.slots.set(ref.id, slots);
    }
    return slots;
  }

  /** A request URL's slots go once nothing uses them, so URLs seen once leave nothing behind. */
  private dropIdleSlots(id: string, slots: CallSlots): void {
    if (slots.running === 0 && slots.queued === 0 && this.slots.get(id) === slots) this.slots.delete(id);
  }

  private failure(ref: McpServerRef, connection: McpConnection | null, error: unknown, what: string): CortexError {
    if (error instanceof CortexError) return error;
    if (connection?.refusal) return refusedAddress(`${ref.param}.server_url`, `its host ${connection.refusal}`);
    const message = error instanceof Error ? error.message : String(error);
    const stderr = connection?.stderrTail ? ` (its stderr: ${quoted(connection.stderrTail)})` : '';
    return new CortexError(
      'upstream_unavailable',
      `MCP server '${ref.label}': ${what} failed: ${quoted(message)}${stderr}`,
      {
        cause: error,
      },
    );
  }

  private cancelled(ref: McpServerRef, what: string): CortexError {
    return new CortexError('cancelled', `MCP server '${ref.label}': ${what} was cancelled`);
  }

  private unavailable(ref: McpServerRef, why: string): CortexError {
    return new CortexError('service_unavailable', `MCP server '${ref.label}': ${why}`, { retryAfter: 1 });
  }

  private busy(ref: McpServerRef, slots: CallSlots): CortexError {
    return new CortexError(
      'busy',
      `MCP server '${ref.label}': ${slots.running} calls are running and ${slots.queued} waiting ` +
        `(${this.registered(ref)?.maxConcurrency !== undefined ? `${ref.where}.max_concurrency` : 'mcp.max_concurrency'}); retry shortly`,
      { retryAfter: 1 },
    );
  }

  private timeoutSetting(ref: McpServerRef): string {
    return this.registered(ref)?.timeoutMs !== undefined ? `${ref.where}.timeout_ms` : 'mcp.call_timeout_ms';
  }

  /** Where a server is, for logs: a registered one's transport, a request URL's host only (its path may hold a token). */
  private describe(ref: McpServerRef): string {
    if (ref.transport === 'stdio') return `stdio: ${this.registered(ref)?.command}`;
    return ref.index !== null ? `${ref.transport}, ${ref.where}` : `${ref.transport} at ${upstreamHost(ref.url ?? '')}`;
  }

  /** A registered server's config entry (its credentials and how it is started stay here, not in the reference). */
  private registered(ref: McpServerRef): McpServerConfig | null {
    return ref.index === null ? null : (this.config.mcp.servers[ref.index] ?? null);
  }
}

function refusedTool(ref: McpServerRef, name: unknown): McpToolResult {
  return {
    text: `the tool ${JSON.stringify(name)} is not one the MCP server '${ref.label}' offers this request (allowed_tools)`,
    isError: true,
    truncated: false,
  };
}

function quoted(text: string): string {
  return text.length > MAX_QUOTED ? `${text.slice(0, MAX_QUOTED)}…` : text;
}

/** `work`, or `signal`'s reason once it aborts (the work itself goes on: others may be waiting for it). */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return work;
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const abort = (): void => reject(signal.reason as Error);
    signal.addEventListener('abort', abort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', abort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', abort);
        reject(error as Error);
      },
    );
  });
}
