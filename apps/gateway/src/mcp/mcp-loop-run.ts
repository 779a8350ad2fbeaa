import { randomBytes } from 'node:crypto';
import {
  CortexError,
  NO_USAGE,
  type CanonicalMessage,
  type CanonicalRequest,
  type CortexError as CortexErrorType,
  type McpToolListing,
  type StreamEvent,
  type StreamEventBody,
  type Usage,
} from '@cortex/contracts';
import { addUsage } from '@cortex/wire';
import type { RequestContext } from '../http/request-context.js';
import type { InferenceRun } from '../inference/inference-run.js';
import type { ResponderRun } from '../inference/inference.responder.js';
import type { RunListener } from '../inference/run-notices.js';
import type { InferenceService } from '../inference/inference.service.js';
import { needsApproval, type McpToolRequest, type McpTools } from './mcp-request.js';
import type { Approval, McpDialect } from './mcp-dialects.js';
import type { McpServerRef } from './mcp-access.js';
import type { McpService, McpTool } from './mcp.service.js';
import { approvalAnswers } from './mcp-approvals.js';

/** The loop's bounds (`mcp.max_rounds`, `mcp.max_response_output_bytes`). */
export interface McpLoopLimits {
  readonly maxRounds: number;
  readonly maxOutputBytes: number;
}

/** A tool the model was offered, and the server it runs on. */
interface Offered {
  readonly server: McpServerRef;
  readonly request: McpToolRequest;
  readonly tool: McpToolListing;
}

/** A call the model made in one turn, kept from its events. */
interface TurnCall {
  id: string;
  name: string;
  arguments: string;
}

const itemId = (prefix: string): string => `${prefix}_${randomBytes(12).toString('hex')}`;

/**
 * A Responses request with `mcp` tools, run as one response over several model turns: the servers'
 * tools are listed (`mcp_list_tools`) and offered to the model as functions; each call the model makes
 * of one is run here (`mcp_call`) and its result given back for the next turn, until the model answers,
 * calls a function of the client's, or `mcp.max_rounds` turns have run. A call whose tool needs
 * approval ends the response with an `mcp_approval_request`; a later request's `mcp_approval_response`
 * runs it (or tells the model it was declined) before the first turn. Each turn is an InferenceRun of
 * its own (placed, metered and traced like any request); the responder drives the loop as one run.
 */
export class McpLoopRun implements ResponderRun {
  private readonly first: InferenceRun;
  private current: InferenceRun;
  private readonly offered = new Map<string, Offered>();
  /** The request's `mcp` tools and its others, read by decode. */
  private tools: McpTools = { servers: [], others: [] };
  private readonly servers: Array<{ request: McpToolRequest; server: McpServerRef }> = [];
  private readonly aborted = new AbortController();
  private readonly approvals: Approval[] = [];
  /** Bytes of tool output given to the model so far. */
  private outputBytes = 0;
  private request: CanonicalRequest | null = null;
  /** Each server's listing, or why it failed: the response's mcp_list_tools items. */
  private listings: Array<{ request: McpToolRequest; server: McpServerRef; tools: McpToolListing[]; error?: string }> =
    [];

  constructor(
    private readonly service: InferenceService,
    private readonly context: RequestContext,
    private readonly client: McpService,
    private readonly limits: McpLoopLimits,
    /** The stored response a body continues, for the approval requests it answers. */
    private readonly previous: (id: string) => Promise<unknown>,
    private readonly shape: McpDialect,
  ) {
    this.first = service.open(shape.dialect, context);
    this.current = this.first;
    // A turn's stream could move alone, but the tool calls between turns are the gateway's: a run of
    // several turns keeps the error its turn gets.
    this.first.checkpoint.refuse('a response that runs MCP tools does not move');
  }

  get runId(): string {
    return this.first.runId;
  }

  get startedAt(): number {
    return this.first.startedAt;
  }

  get state(): unknown {
    return this.first.state;
  }

  get seeds(): readonly number[] {
    return this.first.seeds;
  }

  get servedBy(): string | null {
    return this.current.servedBy;
  }

  listen(listener: RunListener): () => void {
    return this.first.listen(listener);
  }

  /**
   * Opens each server (the key's and the URL rules' refusals come here, before anything runs), lists
   * its tools, and decodes the body with them in place of the `mcp` tools; an approval the body gives
   * is found with the call it approves. `socket` and `placeEarly` are a WebSocket turn's (see
   * InferenceRun.decode).
   */
  async decode(body: unknown, session?: string, socket?: object, placeEarly = true): Promise<CanonicalRequest> {
    this.tools = this.shape.tools(body);
    for (const request of this.tools.servers)
      this.servers.push({
        request,
        server: this.client.resolve(request.spec, this.context.principal?.key, request.param, request.fields),
      });
    const record = body as Record<string, unknown>;
    const answers = this.shape.approvals ? await approvalAnswers(record, this.previous) : [];
    this.listings = await Promise.all(
      this.servers.map(async ({ request, server }) => {
        try {
          const listed = await this.client.listTools(server, this.aborted.signal);
          // A tool the request turned off is neither listed nor offered.
          const tools = listed.filter((tool) => !request.denied?.has(tool.name)).map(listing);
          return { request, server, tools };
        } catch (error) {
          // A refusal is the request's (a URL whose name resolves to a private address); a server that
          // cannot be reached is the listing's error, and the model is offered none of its tools.
          if (error instanceof CortexError && (error.code === 'invalid_request' || error.code === 'permission_denied'))
            throw error;
          return { request, server, tools: [], error: (error as Error).message };
        }
      }),
    );
    const offered: McpToolListing[] = [];
    for (const listing of this.listings)
      for (const tool of listing.tools) {
        const clash = this.offered.has(tool.name) || this.tools.others.some((other) => nameOf(other) === tool.name);
        const fields = listing.request.fields;
        if (clash)
          throw new CortexError(
            'invalid_request',
            `${listing.request.param}: tool '${tool.name}' of server '${listing.request.serverLabel}' has the name ` +
              `of another tool of this request; leave one out with ${fields?.allowedTools ?? 'allowed_tools'}`,
            { param: `${listing.request.param}.${fields?.allowedTools ?? 'allowed_tools'}` },
          );
        this.offered.set(tool.name, { server: listing.server, request: listing.request, tool });
        offered.push(tool);
      }
    // An approved call runs now: the first turn reads its result. A declined one tells the model so.
    for (const answer of answers) {
      const { request } = answer;
      const offered = this.offered.get(request.name);
      if (!offered || offered.request.serverLabel !== request.serverLabel)
        throw new CortexError(
          'invalid_request',
          `${answer.param}: the call it approves is of server '${request.serverLabel}''s tool '${request.name}', ` +
            'which this request does not offer: send the same mcp tool again',
          { param: `${answer.param}.approval_request_id` },
        );
      const result = answer.approve
        ? await this.callTool(offered, request.arguments)
        : { error: `the user declined this call${answer.reason ? `: ${answer.reason}` : ''}` };
      this.approvals.push({
        item: answer.item,
        call: {
          id: itemId('mcp'),
          serverLabel: request.serverLabel,
          name: request.name,
          arguments: request.arguments,
          approvalRequestId: request.id,
          ...result,
        },
      });
    }
    const request = await this.first.decode(
      this.shape.body(record, this.tools.others, offered, this.approvals),
      session,
      socket,
      placeEarly,
    );
    this.request = request;
    return request;
  }

  firstByteWritten(): void {
    this.current.firstByteWritten();
  }

  async start(): Promise<AsyncIterable<StreamEvent>> {
    // The first turn starts now, so that a placement's error is a real HTTP status.
    const events = await this.first.start();
    return this.loop(events);
  }

  private async *loop(firstEvents: AsyncIterable<StreamEvent>): AsyncIterable<StreamEvent> {
    let seq = 0;
    const out = (event: StreamEventBody): StreamEvent => ({ ...event, seq: seq++ }) as StreamEvent;
    for (const listing of this.listings)
      yield out({
        type: 'mcp_list_tools',
        id: itemId('mcpl'),
        serverLabel: listing.request.serverLabel,
        tools: listing.tools,
        ...(listing.error !== undefined && { error: listing.error }),
      });
    let request = this.request as CanonicalRequest;
    // What the approvals of the body ran before the first turn (its input holds their results already).
    for (const approval of this.approvals) {
      yield out({ ...approval.call, type: 'mcp_call', phase: 'begun' });
      yield out({ ...approval.call, type: 'mcp_call', phase: 'ended' });
    }
    let usage: Usage = { ...NO_USAGE };
    let events = firstEvents;
    for (let round = 1; ; round++) {
      const calls = new Map<number, TurnCall>();
      let text = '';
      let clientCalls = 0;
      let finish: Extract<StreamEvent, { type: 'finish' }> | null = null;
      for await (const event of events) {
        if (event.type === 'tool_call' && this.offered.has(event.name)) {
          calls.set(event.index, { id: event.id, name: event.name, arguments: '' });
          continue;
        }
        if (event.type === 'tool_args' && calls.has(event.index)) {
          (calls.get(event.index) as TurnCall).arguments += event.delta;
          continue;
        }
        if (event.type === 'tool_call') clientCalls++;
        if (event.type === 'text') text += event.text;
        if (event.type === 'finish') {
          finish = event;
          continue;
        }
        // One response starts once.
        if (event.type === 'start' && round > 1) continue;
        yield out(stripSeq(event));
      }
      if (!finish) return;
      usage = addUsage(usage, finish.usage);
      const ran = calls.size > 0 ? await this.runCalls([...calls.values()], out) : null;
      if (ran) for (const event of ran.events) yield event;
      // A client that left while the tools ran is not answered: no next turn starts for nobody.
      if (this.aborted.signal.aborted) {
        yield out({ ...stripSeq(finish), usage, reason: 'cancelled' } as StreamEventBody);
        return;
      }
      // The model answered, called the client's own function, waits for an approval, or has had its turns.
      if (!ran || ran.waiting || clientCalls > 0 || round >= this.limits.maxRounds) {
        yield out({ ...stripSeq(finish), usage, reason: ran?.waiting ? 'stop' : finish.reason } as StreamEventBody);
        return;
      }
      request = { ...request, messages: [...request.messages, ...ran.messages(text)] };
      this.current.finish();
      // In the first turn's trace context: without a caller's traceparent the turns still make one trace.
      this.current = this.first.inTrace(() => this.service.open(this.shape.dialect, this.context));
      this.current.checkpoint.refuse('a response that runs MCP tools does not move');
      this.current.use(request);
      events = await this.current.start();
    }
  }

  /**
   * Runs one turn's calls, in order: each as an `mcp_call` (or, where its tool needs approval, an
   * `mcp_approval_request`, and nothing runs after it), and the messages that give their results to
   * the next turn.
   */
  private async runCalls(
    calls: TurnCall[],
    out: (event: StreamEventBody) => StreamEvent,
  ): Promise<{ events: StreamEvent[]; waiting: boolean; messages: (text: string) => CanonicalMessage[] }> {
    const events: StreamEvent[] = [];
    const results: Array<{ call: TurnCall; content: string }> = [];
    let waiting = false;
    for (const call of calls) {
      const offered = this.offered.get(call.name) as Offered;
      const label = offered.request.serverLabel;
      if (needsApproval(offered.request.approval, call.name)) {
        events.push(
          out({
            type: 'mcp_approval_request',
            id: itemId('mcpr'),
            serverLabel: label,
            name: call.name,
            arguments: call.arguments,
          }),
        );
        waiting = true;
        continue;
      }
      const id = itemId('mcp');
      const base = { id, serverLabel: label, name: call.name, arguments: call.arguments };
      events.push(out({ type: 'mcp_call', phase: 'begun', ...base }));
      const result = await this.callTool(offered, call.arguments);
      events.push(out({ type: 'mcp_call', phase: 'ended', ...base, ...result }));
      results.push({ call, content: result.output ?? `error: ${result.error}` });
    }
    return {
      events,
      waiting,
      messages: (text) => [
        {
          role: 'assistant',
          content: text,
          toolCalls: results.map(({ call }) => ({ ...call, arguments: call.arguments || '{}' })),
        },
        ...results.map(({ call, content }): CanonicalMessage => ({ role: 'tool', content, toolCallId: call.id })),
      ],
    };
  }

  /** One call: its output, or the error the model is told of (bad arguments, a tool's error, a timeout). */
  private async callTool(offered: Offered, args: string): Promise<{ output?: string; error?: string }> {
    let parsed: unknown;
    try {
      parsed = args.trim() === '' ? {} : JSON.parse(args);
    } catch {
      return { error: 'the arguments are not JSON' };
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
      return { error: 'the arguments are not a JSON object' };
    // What one response gives its model is bounded, every call together.
    if (this.outputBytes >= this.limits.maxOutputBytes)
      return {
        error: `this response's tools have given ${this.limits.maxOutputBytes} bytes (mcp.max_response_output_bytes); no more are run`,
      };
    // The console's live view shows the response waiting on the tool, under the turn that called it.
    const { pending } = this.service;
    const turn = this.current;
    pending.toolCall(
      this,
      this.context.id,
      turn.runId,
      this.request?.model ?? '',
      `${offered.request.serverLabel} · ${offered.tool.name}`,
      Date.now(),
      turn.payer,
    );
    try {
      const result = await this.current.inTrace(() =>
        this.client.callTool(offered.server, offered.tool.name, parsed, this.aborted.signal, this.context.id),
      );
      this.outputBytes += Buffer.byteLength(result.text);
      return result.isError ? { error: result.text } : { output: result.text };
    } catch (error) {
      return { error: (error as Error).message };
    } finally {
      pending.done(this);
    }
  }

  cancel(reason: string): void {
    this.aborted.abort(new Error(reason));
    this.current.cancel(reason);
  }

  fail(error: CortexErrorType, responseStarted: boolean): void {
    this.current.fail(error, responseStarted);
  }

  finish(): void {
    this.aborted.abort(new Error('the response ended'));
    this.current.finish();
  }
}

/** A listed tool as the response's `mcp_list_tools` item and the model's function have it. */
function listing(tool: McpTool): McpToolListing {
  return {
    name: tool.name,
    ...(tool.description !== undefined && { description: tool.description }),
    inputSchema: tool.inputSchema as Record<string, unknown>,
    ...(tool.annotations && { annotations: tool.annotations as Record<string, unknown> }),
  };
}

function nameOf(tool: unknown): string | undefined {
  if (tool === null || typeof tool !== 'object') return undefined;
  const record = tool as { name?: unknown; function?: { name?: unknown } };
  const name = record.name ?? record.function?.name;
  return typeof name === 'string' ? name : undefined;
}

function stripSeq(event: StreamEvent): StreamEventBody {
  const { seq: _seq, ...body } = event;
  return body as StreamEventBody;
}
