import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { CallToolResultSchema, type CallToolResult, type Tool } from '@modelcontextprotocol/sdk/types.js';
import type { McpServerConfig } from '@cortex/config';
import type { McpServerRef } from './mcp-access.js';
import { ADDRESS_REFUSED, asCall, mcpFetch, outsideCalls } from './mcp-fetch.js';
import { messageLimit } from './message-cap.js';
import { BoundedStdioTransport } from './stdio-transport.js';

/** Pages of `tools/list` one listing reads at most: a server that pages for ever is cut off there. */
const MAX_TOOL_PAGES = 32;
/** How long closing a session may take to tell an HTTP server (DELETE) before it is dropped anyway. */
const CLOSE_NOTICE_MS = 1_000;
/** The name and version cortex introduces itself with in MCP's `initialize`. */
const CLIENT_INFO = { name: 'cortex', version: '0.1.0' };

/**
 * One MCP session: an SDK client on one transport, to one server with one set of headers. Calls on it
 * run side by side (MCP multiplexes requests); `inFlight` and `lastUsed` let the pool close idle ones.
 * It closes itself when its transport does (a stdio server that exits, an HTTP server that ends the
 * session), and says so through `onClosed`.
 */
export class McpConnection {
  readonly client = new Client(CLIENT_INFO, { capabilities: {} });
  inFlight = 0;
  lastUsed = Date.now();
  closed = false;
  /** `initialize` succeeded: a session that ends before it was never a working one. */
  opened = false;
  /** Why a request URL's host was refused, when it was: the transports' errors do not always carry it. */
  refusal: string | null = null;
  private readonly transport: Transport;
  private readonly agents: { http: HttpAgent; https: HttpsAgent } | null = null;
  private opening: Promise<void> | null = null;
  /** `close` was called: the transport's end that follows is ours, not the server's. */
  private closing = false;

  constructor(
    readonly ref: McpServerRef,
    /** The config entry of a registered server (how a stdio one is started), null for a request's URL. */
    server: McpServerConfig | null,
    /** Every header sent: the request's, and the registered server's own over them. */
    headers: Record<string, string>,
    allowPrivateUrls: boolean,
    /** Once, when the session ends; `expected` when `close` ended it, not the server or its process. */
    private readonly onClosed: (connection: McpConnection, expected: boolean) => void,
    onError: (error: Error) => void,
  ) {
    const limit = messageLimit(ref.maxOutputBytes);
    if (ref.transport === 'stdio') {
      this.transport = new BoundedStdioTransport({
        command: server!.command!,
        args: server!.args ?? [],
        env: server!.env ?? {},
        cwd: server!.cwd,
        messageLimit: limit,
      });
    } else {
      // Its own agents: their socket cap bounds this session's connections (its calls, the GET stream, notices).
      const sockets = { keepAlive: true, maxSockets: ref.maxConcurrency + 2 };
      this.agents = { http: new HttpAgent(sockets), https: new HttpsAgent(sockets) };
      const base = mcpFetch({
        addresses: server ? null : { allowPrivate: allowPrivateUrls },
        messageLimit: limit,
        agents: this.agents,
      });
      const fetch: typeof base = (url, init) =>
        base(url, init).catch((error: unknown) => {
          if ((error as NodeJS.ErrnoException).code === ADDRESS_REFUSED) this.refusal = (error as Error).message;
          throw error;
        });
      const url = new URL(ref.url!);
      const options = { fetch, requestInit: { headers } };
      this.transport =
        ref.transport === 'sse'
          ? new SSEClientTransport(url, options)
          : new StreamableHTTPClientTransport(url, { ...options, reconnectionOptions: RECONNECTION });
    }
    this.client.onclose = () => this.finish(this.closing);
    this.client.onerror = onError;
  }

  /** The child's process id (stdio), while it runs. */
  get pid(): number | null {
    return this.transport instanceof BoundedStdioTransport ? this.transport.pid : null;
  }

  /** What a stdio child last wrote to stderr, to say why it failed. */
  get stderrTail(): string {
    return this.transport instanceof BoundedStdioTransport ? this.transport.stderrTail : '';
  }

  /**
   * Connects and runs MCP's `initialize`, once, however many callers wait: outside any call, so that
   * one caller giving up does not end a session the others are waiting for. Bounded by `timeoutMs`.
   */
  open(timeoutMs: number): Promise<void> {
    this.opening ??= outsideCalls(async () => {
      const deadline = AbortSignal.timeout(timeoutMs);
      try {
        await this.client.connect(this.transport, { timeout: timeoutMs, signal: deadline });
        this.opened = true;
      } catch (error) {
        await this.close();
        throw error;
      }
    });
    return this.opening;
  }

  /** Every page of the server's tool list (at most MAX_TOOL_PAGES). */
  async listTools(timeoutMs: number, signal: AbortSignal): Promise<Tool[]> {
    const tools: Tool[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < MAX_TOOL_PAGES; page++) {
      const answer = await asCall(signal, () =>
        this.client.listTools(cursor === undefined ? undefined : { cursor }, { timeout: timeoutMs, signal }),
      );
      tools.push(...answer.tools);
      cursor = answer.nextCursor;
      if (!cursor) break;
    }
    return tools;
  }

  /**
   * `tools/call`, as a plain request: the SDK's `callTool` would also hold the result to the tool's
   * output schema, and a gateway passes on what the server said rather than failing it. `signal`
   * ends it (the SDK then tells the server the call is cancelled, and its POST is aborted).
   */
  call(name: string, args: Record<string, unknown>, timeoutMs: number, signal: AbortSignal): Promise<CallToolResult> {
    return asCall(signal, () =>
      this.client.request({ method: 'tools/call', params: { name, arguments: args } }, CallToolResultSchema, {
        // The caller's signal carries the deadline; the SDK's own timer is only a backstop behind it.
        timeout: timeoutMs + 1_000,
        signal,
      }),
    );
  }

  /** Whether the server still answers, within `timeoutMs`. */
  async ping(timeoutMs: number): Promise<boolean> {
    try {
      await this.client.ping({ timeout: timeoutMs });
      return true;
    } catch {
      return false;
    }
  }

  /** Ends the session: an HTTP server is told (DELETE, bounded), a stdio child is stopped. */
  async close(): Promise<void> {
    if (this.closing || this.closed) return;
    this.closing = true;
    if (this.transport instanceof StreamableHTTPClientTransport && this.transport.sessionId !== undefined)
      await Promise.race([
        this.transport.terminateSession().catch(() => undefined),
        new Promise((done) => setTimeout(done, CLOSE_NOTICE_MS).unref()),
      ]);
    await this.client.close().catch(() => undefined);
    // A transport that never started leaves the client's close with nothing to do.
    await this.transport.close().catch(() => undefined);
    this.finish(true);
  }

  private finish(expected: boolean): void {
    if (this.closed) return;
    this.closed = true;
    this.agents?.http.destroy();
    this.agents?.https.destroy();
    this.onClosed(this, expected);
  }
}

/** A stream cut mid-answer is not resumed: the call fails (or times out) and the loop decides what next. */
const RECONNECTION = {
  maxRetries: 0,
  initialReconnectionDelay: 1_000,
  maxReconnectionDelay: 1_000,
  reconnectionDelayGrowFactor: 1,
};
