import type {
  ErrorBody,
  FinishReason,
  McpApprovalRequestEvent,
  McpCallEvent,
  McpListToolsEvent,
  StreamEvent,
  TokenLogprob,
  Usage,
} from '@cortex/contracts';
import { openAiLogprob } from '../logprobs.js';
import {
  emptyResponseResource,
  outputItemId,
  responsesErrorPayload,
  responsesUsage,
  withOutputText,
  type ReasoningEventFamily,
  type ResponsesEncoderOptions,
} from './responses.resource.js';
import type {
  ResponseBody,
  ResponseResource,
  ResponsesFrame,
  ResponsesItemStatus,
  ResponsesOutputItem,
  ResponsesOutputTextPart,
  ResponsesReasoningTextPart,
  ResponsesStreamEvent,
  ResponsesSummaryTextPart,
} from './responses.types.js';

type Unnumbered = ResponsesStreamEvent extends infer E
  ? E extends { sequence_number: number }
    ? Omit<E, 'sequence_number'>
    : never
  : never;

const REASONING_EVENTS: Record<
  ReasoningEventFamily,
  {
    delta: 'response.reasoning_text.delta' | 'response.reasoning.delta';
    done: 'response.reasoning_text.done' | 'response.reasoning.done';
  }
> = {
  // The official openai client's accumulator knows `reasoning_text` (raw chain of thought, what OpenAI's open
  // models and OpenAI-compatible servers stream) and throws on any name outside its list.
  openai: { delta: 'response.reasoning_text.delta', done: 'response.reasoning_text.done' },
  // The OpenResponses spec names raw reasoning `response.reasoning.*` (ResponseReasoning{Delta,Done}StreamingEvent).
  openresponses: { delta: 'response.reasoning.delta', done: 'response.reasoning.done' },
};

/**
 * Canonical stream events → Responses SSE frames, each with `sequence_number` 0, 1, …:
 * `response.created`, `response.in_progress`, then per output item `response.output_item.added`, its content
 * events and `response.output_item.done`, then one terminal event carrying the whole resource:
 * `response.completed` (stop, tool calls), `response.incomplete` (length) or `response.failed` (cancelled,
 * error; an error event also sends an `error` frame first). One item is open at a time: text, reasoning and
 * each tool call get their own item, and an item closes when another starts or the stream ends.
 * A request that asks for a reasoning summary gets the reasoning as the item's one summary part
 * (`response.reasoning_summary_part.*`, `response.reasoning_summary_text.*`) instead of its content: a local
 * model has no separate summariser, and the same text in both places would show twice in clients that read both.
 * The encoder's state is the resource itself, so `resource()` is exactly what the last frame carried.
 */
export class ResponsesStreamEncoder {
  private sequence = 0;
  private started = false;
  private ended = false;
  private readonly state: ResponseResource;
  /** Output index of the item being written, if any. */
  private open: number | null = null;
  /** Canonical tool-call index → output index of its function_call item. */
  private readonly calls = new Map<number, number>();
  /** An MCP call's item id → its output index. */
  private readonly mcpCalls = new Map<string, number>();
  private readonly reasoningEvents: (typeof REASONING_EVENTS)[ReasoningEventFamily];
  /** The request asked for a reasoning summary (`reasoning.summary`): reasoning text goes there. */
  private readonly summaries: boolean;
  private readonly now: () => number;

  constructor(private readonly options: ResponsesEncoderOptions) {
    this.state = emptyResponseResource(options);
    this.reasoningEvents = REASONING_EVENTS[options.reasoningEvents ?? 'openai'];
    this.summaries = options.echo.reasoning.summary !== null;
    this.now = options.now ?? (() => Math.floor(Date.now() / 1000));
  }

  /** A terminal event was encoded; later events encode to nothing. */
  get isEnded(): boolean {
    return this.ended;
  }

  /** Frames to send for one event (none for keep-alives: the caller may send SSE comments). */
  encode(event: StreamEvent): ResponsesFrame[] {
    if (this.ended) return [];
    switch (event.type) {
      case 'start':
        return this.ensureStarted();
      case 'keepalive':
        return [];
      case 'text':
        if (!event.text) return [];
        return [...this.ensureStarted(), ...this.openItem('message'), ...this.appendText(event.text, event.logprobs)];
      case 'reasoning':
        if (!event.text) return [];
        return [...this.ensureStarted(), ...this.openItem('reasoning'), ...this.appendText(event.text)];
      case 'tool_call':
        return [...this.ensureStarted(), ...this.openCall(event.index, event.id, event.name)];
      case 'tool_args':
        return this.appendArguments(event.index, event.delta);
      case 'finish':
        return this.finish(event.reason, event.usage);
      case 'error':
        return this.fail(event.error);
      case 'mcp_list_tools':
        return [...this.ensureStarted(), ...this.listTools(event)];
      case 'mcp_approval_request':
        return [...this.ensureStarted(), ...this.approvalRequest(event)];
      case 'mcp_call':
        return [
          ...this.ensureStarted(),
          ...(event.phase === 'begun' ? this.beginMcpCall(event) : this.endMcpCall(event)),
        ];
    }
  }

  /** An MCP server's tools, listed whole: the item added, in progress, then completed (or failed) and done. */
  private listTools(event: McpListToolsEvent): ResponsesFrame[] {
    const frames = this.closeItem('completed');
    const index = this.state.output.length;
    const item: ResponsesOutputItem = {
      type: 'mcp_list_tools',
      id: event.id,
      server_label: event.serverLabel,
      tools: event.tools.map((tool) => ({
        name: tool.name,
        description: tool.description ?? null,
        input_schema: tool.inputSchema,
        ...(tool.annotations && { annotations: tool.annotations }),
      })),
      error: event.error ?? null,
    };
    this.state.output.push(item);
    const ref = { item_id: event.id, output_index: index };
    frames.push(
      this.frame({
        type: 'response.output_item.added',
        output_index: index,
        item: { ...structuredClone(item), tools: [] },
      }),
      this.frame({ type: 'response.mcp_list_tools.in_progress', ...ref }),
      this.frame({
        type: event.error ? 'response.mcp_list_tools.failed' : 'response.mcp_list_tools.completed',
        ...ref,
      }),
      this.frame({ type: 'response.output_item.done', output_index: index, item: structuredClone(item) }),
    );
    return frames;
  }

  /** A call that waits for the client's approval: one item, added and done. */
  private approvalRequest(event: McpApprovalRequestEvent): ResponsesFrame[] {
    const frames = this.closeItem('completed');
    const index = this.state.output.length;
    const item: ResponsesOutputItem = {
      type: 'mcp_approval_request',
      id: event.id,
      server_label: event.serverLabel,
      name: event.name,
      arguments: event.arguments,
    };
    this.state.output.push(item);
    frames.push(
      this.frame({ type: 'response.output_item.added', output_index: index, item: structuredClone(item) }),
      this.frame({ type: 'response.output_item.done', output_index: index, item: structuredClone(item) }),
    );
    return frames;
  }

  /** A call to an MCP tool, about to run: the item added with its arguments, then in progress. */
  private beginMcpCall(event: McpCallEvent): ResponsesFrame[] {
    const frames = this.closeItem('completed');
    const index = this.state.output.length;
    const item: ResponsesOutputItem = {
      type: 'mcp_call',
      id: event.id,
      server_label: event.serverLabel,
      name: event.name,
      arguments: '',
      output: null,
      error: null,
      status: 'in_progress',
      ...(event.approvalRequestId !== undefined && { approval_request_id: event.approvalRequestId }),
    };
    this.state.output.push(item);
    this.mcpCalls.set(event.id, index);
    const ref = { item_id: event.id, output_index: index };
    frames.push(this.frame({ type: 'response.output_item.added', output_index: index, item: structuredClone(item) }));
    item.arguments = event.arguments;
    if (event.arguments)
      frames.push(this.frame({ type: 'response.mcp_call_arguments.delta', ...ref, delta: event.arguments }));
    frames.push(
      this.frame({ type: 'response.mcp_call_arguments.done', ...ref, arguments: event.arguments }),
      this.frame({ type: 'response.mcp_call.in_progress', ...ref }),
    );
    return frames;
  }

  /** The call ran: its output (or error), completed or failed, and the item done. */
  private endMcpCall(event: McpCallEvent): ResponsesFrame[] {
    const index = this.mcpCalls.get(event.id);
    const item = index === undefined ? undefined : this.state.output[index];
    if (index === undefined || item?.type !== 'mcp_call') return [];
    item.output = event.output ?? null;
    item.error = event.error ?? null;
    item.status = event.error === undefined ? 'completed' : 'failed';
    const ref = { item_id: event.id, output_index: index };
    return [
      this.frame({
        type: event.error === undefined ? 'response.mcp_call.completed' : 'response.mcp_call.failed',
        ...ref,
      }),
      this.frame({ type: 'response.output_item.done', output_index: index, item: structuredClone(item) }),
    ];
  }

  /** Ends the stream with an `error` frame and `response.failed` (also for errors before any event). */
  fail(error: ErrorBody): ResponsesFrame[] {
    if (this.ended) return [];
    const frames = [...this.ensureStarted(), ...this.closeItem('incomplete')];
    frames.push(
      this.frame({
        type: 'error',
        code: error.code,
        message: error.message,
        param: error.param ?? null,
        error: responsesErrorPayload(error),
      }),
    );
    this.state.status = 'failed';
    this.state.error = { code: error.code, message: error.message };
    frames.push(this.terminal('response.failed'));
    return frames;
  }

  /** The resource as it stands: after a terminal event, the final one to store. */
  resource(): ResponseResource {
    return structuredClone(this.state);
  }

  private ensureStarted(): ResponsesFrame[] {
    if (this.started) return [];
    this.started = true;
    // A fallback chosen before the first token is the model that answers.
    const served = this.options.servedBy?.();
    if (served) this.state.model = served;
    return [
      this.frame({ type: 'response.created', response: this.resource() }),
      this.frame({ type: 'response.in_progress', response: this.resource() }),
    ];
  }

  private openItem(kind: 'message' | 'reasoning'): ResponsesFrame[] {
    if (this.current()?.type === kind) return [];
    const frames = this.closeItem('completed');
    const index = this.state.output.length;
    if (kind === 'reasoning' && this.summaries) return [...frames, ...this.openSummary(index)];
    // Each item has one content part, opened with it: the text of a run of deltas.
    let item: ResponsesOutputItem;
    let part: ResponsesOutputTextPart | ResponsesReasoningTextPart;
    if (kind === 'message') {
      const text: ResponsesOutputTextPart = { type: 'output_text', text: '', annotations: [], logprobs: [] };
      item = {
        type: 'message',
        id: outputItemId(this.options.id, 'msg', index),
        status: 'in_progress',
        role: 'assistant',
        content: [text],
      };
      part = text;
    } else {
      const text: ResponsesReasoningTextPart = { type: 'reasoning_text', text: '' };
      item = { type: 'reasoning', id: outputItemId(this.options.id, 'rs', index), summary: [], content: [text] };
      part = text;
    }
    this.state.output.push(item);
    this.open = index;
    // The item is announced empty; its part follows in `response.content_part.added`.
    frames.push(
      this.frame({
        type: 'response.output_item.added',
        output_index: index,
        item: { ...structuredClone(item), content: [] } as ResponsesOutputItem,
      }),
    );
    frames.push(
      this.frame({
        type: 'response.content_part.added',
        item_id: item.id,
        output_index: index,
        content_index: 0,
        part: structuredClone(part),
      }),
    );
    return frames;
  }

  /** `logprobs`: those of the tokens of a message's text, for a request that asked (include `message.output_text.logprobs`). */
  private appendText(delta: string, logprobs?: readonly TokenLogprob[]): ResponsesFrame[] {
    const item = this.current();
    const ref = { item_id: item?.id ?? '', output_index: this.open ?? 0, content_index: 0 };
    if (item?.type === 'message' && item.content[0]) {
      const part = item.content[0];
      part.text += delta;
      const entries = (logprobs ?? []).map(openAiLogprob);
      if (entries.length > 0) (part.logprobs ??= []).push(...entries);
      return [this.frame({ type: 'response.output_text.delta', ...ref, delta, logprobs: entries })];
    }
    if (item?.type === 'reasoning' && item.content?.[0]) {
      item.content[0].text += delta;
      return [this.frame({ type: this.reasoningEvents.delta, ...ref, delta })];
    }
    if (item?.type === 'reasoning' && item.summary[0]) {
      item.summary[0].text += delta;
      return [
        this.frame({ type: 'response.reasoning_summary_text.delta', ...summaryRef(item, ref.output_index), delta }),
      ];
    }
    return [];
  }

  /** A reasoning item whose text is its summary: announced with an empty summary, then its one part. */
  private openSummary(index: number): ResponsesFrame[] {
    const part: ResponsesSummaryTextPart = { type: 'summary_text', text: '' };
    const item: ResponsesOutputItem = {
      type: 'reasoning',
      id: outputItemId(this.options.id, 'rs', index),
      summary: [part],
    };
    this.state.output.push(item);
    this.open = index;
    return [
      this.frame({
        type: 'response.output_item.added',
        output_index: index,
        item: { ...structuredClone(item), summary: [] },
      }),
      this.frame({
        type: 'response.reasoning_summary_part.added',
        ...summaryRef(item, index),
        part: structuredClone(part),
      }),
    ];
  }

  private openCall(toolIndex: number, callId: string, name: string): ResponsesFrame[] {
    const frames = this.closeItem('completed');
    const index = this.state.output.length;
    const namespace = this.options.toolNamespaces?.[name];
    const item: ResponsesOutputItem = {
      type: 'function_call',
      id: outputItemId(this.options.id, 'fc', index),
      call_id: callId,
      name,
      ...(namespace !== undefined && { namespace }),
      arguments: '',
      status: 'in_progress',
    };
    this.state.output.push(item);
    this.open = index;
    this.calls.set(toolIndex, index);
    frames.push(this.frame({ type: 'response.output_item.added', output_index: index, item: structuredClone(item) }));
    return frames;
  }

  private appendArguments(toolIndex: number, delta: string): ResponsesFrame[] {
    const index = this.calls.get(toolIndex);
    const item = index === undefined ? undefined : this.state.output[index];
    if (index === undefined || item?.type !== 'function_call' || !delta) return [];
    // Workers send a call's arguments right after it. Should a delta ever come for a call already closed, it
    // still names its own item (the openai client accumulates by output_index) and lands in the resource.
    item.arguments += delta;
    return [
      this.frame({ type: 'response.function_call_arguments.delta', item_id: item.id, output_index: index, delta }),
    ];
  }

  /** Closes the open item: its `.done` events carry the full text, then `response.output_item.done`. */
  private closeItem(status: ResponsesItemStatus): ResponsesFrame[] {
    const item = this.current();
    const index = this.open;
    this.open = null;
    if (!item || index === null) return [];
    const frames: ResponsesFrame[] = [];
    const ref = { item_id: item.id, output_index: index, content_index: 0 };
    if (item.type === 'message') {
      item.status = status;
      const part = item.content[0];
      if (part) {
        frames.push(
          this.frame({ type: 'response.output_text.done', ...ref, text: part.text, logprobs: part.logprobs ?? [] }),
        );
        frames.push(this.frame({ type: 'response.content_part.done', ...ref, part: structuredClone(part) }));
      }
    } else if (item.type === 'reasoning') {
      const part = item.content?.[0];
      const summary = item.summary[0];
      // The summary is the reasoning itself (no separate summariser), so either one is what gets sealed.
      const reasoning = part?.text ?? summary?.text;
      if (reasoning !== undefined && this.options.sealReasoning)
        item.encrypted_content = this.options.sealReasoning(reasoning);
      if (part) {
        frames.push(this.frame({ type: this.reasoningEvents.done, ...ref, text: part.text }));
        frames.push(this.frame({ type: 'response.content_part.done', ...ref, part: structuredClone(part) }));
      } else if (summary) {
        frames.push(
          this.frame({ type: 'response.reasoning_summary_text.done', ...summaryRef(item, index), text: summary.text }),
        );
        frames.push(
          this.frame({
            type: 'response.reasoning_summary_part.done',
            ...summaryRef(item, index),
            part: structuredClone(summary),
          }),
        );
      }
    } else if (item.type === 'function_call') {
      item.status = status;
      frames.push(
        this.frame({
          type: 'response.function_call_arguments.done',
          item_id: item.id,
          output_index: index,
          arguments: item.arguments,
        }),
      );
    }
    frames.push(this.frame({ type: 'response.output_item.done', output_index: index, item: structuredClone(item) }));
    return frames;
  }

  private finish(reason: FinishReason, usage: Usage): ResponsesFrame[] {
    const done = reason === 'stop' || reason === 'tool_calls';
    const frames = [...this.ensureStarted(), ...this.closeItem(done ? 'completed' : 'incomplete')];
    this.state.usage = responsesUsage(usage);
    if (done) {
      this.state.status = 'completed';
      this.state.completed_at = this.now();
      frames.push(this.terminal('response.completed'));
    } else if (reason === 'length') {
      this.state.status = 'incomplete';
      this.state.incomplete_details = { reason: 'max_output_tokens' };
      frames.push(this.terminal('response.incomplete'));
    } else {
      // A cancelled or failed generation that came without an error event: the resource says which.
      this.state.status = 'failed';
      this.state.error =
        reason === 'cancelled'
          ? { code: 'cancelled', message: 'the request was cancelled before the response completed' }
          : { code: 'internal', message: 'generation failed before the response completed' };
      frames.push(this.terminal('response.failed'));
    }
    return frames;
  }

  private terminal(type: 'response.completed' | 'response.incomplete' | 'response.failed'): ResponsesFrame {
    this.ended = true;
    return this.frame({ type, response: this.resource() });
  }

  private current(): ResponsesOutputItem | undefined {
    return this.open === null ? undefined : this.state.output[this.open];
  }

  private frame(body: Unnumbered): ResponsesFrame {
    const data = { ...body, sequence_number: this.sequence++ } as ResponsesStreamEvent;
    return { event: data.type, data };
  }
}

/** Where a summary event points: the item, its output index, and its one summary part. */
function summaryRef(
  item: { id: string },
  outputIndex: number,
): { item_id: string; output_index: number; summary_index: 0 } {
  return { item_id: item.id, output_index: outputIndex, summary_index: 0 };
}

/**
 * Collects a whole stream into the non-streaming body. It runs the stream encoder and reads its final
 * resource, so both shapes always agree on items, ids, statuses and usage.
 */
export class ResponsesAggregator {
  private readonly encoder: ResponsesStreamEncoder;

  constructor(options: ResponsesEncoderOptions) {
    this.encoder = new ResponsesStreamEncoder(options);
  }

  add(event: StreamEvent): void {
    this.encoder.encode(event);
  }

  /** The resource to store (no `output_text`: it is derived). */
  resource(): ResponseResource {
    return this.encoder.resource();
  }

  /** The HTTP body: the resource plus `output_text`. */
  body(): ResponseBody {
    return withOutputText(this.encoder.resource());
  }
}
