import { jsonSchemaMismatch, type CanonicalRequest, type ErrorBody } from '@cortex/contracts';
import type { EngineEvent } from './engine.types.js';

/**
 * Checks a finished generation against what the request asked for before its `finish` goes out: the
 * answer text against a `json_schema` (or `json_object`) response format, and each tool call's
 * arguments against the declared tool's parameters. The grammar holds the model to most of a schema
 * but not all of it (bounds, patterns, formats, sizes of arrays...), so a mismatch is possible. For
 * the response format and a `strict` tool it is published as an `invalid_output` error in place of
 * the finish, never as a success (deltas already streamed stay sent: the error is the stream's last
 * word). A call to a tool that is not strict is returned as the model wrote it, with a warning in the
 * log, as OpenAI does: the client can answer it with an error result and the agent loses one round,
 * not its turn.
 */
export class OutputCheck {
  private text = '';
  private readonly calls = new Map<number, { name: string; args: string }>();
  private readonly format: { schema: Record<string, unknown> | null } | null;
  private readonly tools: ReadonlyMap<string, { schema: Record<string, unknown>; strict: boolean }>;

  constructor(
    request: CanonicalRequest,
    private readonly emitEvent: (event: EngineEvent) => void,
    private readonly warn: (message: string) => void = () => undefined,
  ) {
    const format = request.responseFormat;
    this.format =
      format?.type === 'json_schema'
        ? { schema: format.schema ?? null }
        : format?.type === 'json_object'
          ? { schema: null }
          : null;
    this.tools = new Map(
      (request.tools ?? []).flatMap((tool) =>
        tool.parameters ? [[tool.name, { schema: tool.parameters, strict: tool.strict === true }] as const] : [],
      ),
    );
  }

  /** Whether any check applies; when not, the model's `emit` is used directly. */
  get active(): boolean {
    return this.format !== null || this.tools.size > 0;
  }

  readonly emit = (event: EngineEvent): void => {
    if (this.observe(event)) this.emitEvent(event);
  };

  /**
   * Takes in an event; false when it is a finish replaced by an error. A resumed stream's replayed
   * output comes here only (the client has it already) so that the check judges the whole output.
   */
  readonly observe = (event: EngineEvent): boolean => {
    switch (event.type) {
      case 'text':
        if (this.format) this.text += event.text;
        break;
      case 'tool_call':
        this.calls.set(event.index, { name: event.name, args: '' });
        break;
      case 'tool_args': {
        const call = this.calls.get(event.index);
        if (call) call.args += event.delta;
        break;
      }
      case 'finish': {
        // Output cut short (max tokens, a cancel) is told by its finish reason; only a complete one is judged.
        const error = event.reason === 'stop' || event.reason === 'tool_calls' ? this.mismatch() : null;
        if (error) {
          this.emitEvent({ type: 'error', error });
          return false;
        }
        break;
      }
    }
    return true;
  };

  private mismatch(): ErrorBody | null {
    for (const [index, call] of this.calls) {
      const tool = this.tools.get(call.name);
      const why = tool ? jsonSchemaMismatch(tool.schema, call.args || '{}') : null;
      if (!why) continue;
      const message = `the model's arguments for tool call ${index} (${call.name}) do not match the tool's parameters schema: ${why}`;
      if (tool?.strict) return invalid(message);
      this.warn(`${message}; returned as written (the tool is not strict)`);
    }
    // A reply that is only tool calls has no answer text to judge.
    if (!this.format || (this.calls.size > 0 && !this.text.trim())) return null;
    const why = jsonSchemaMismatch(this.format.schema ?? {}, this.text);
    return why
      ? invalid(
          `the model's output does not match the requested ${this.format.schema ? 'JSON schema' : 'JSON format'}: ${why}`,
        )
      : null;
  }
}

function invalid(message: string): ErrorBody {
  return { code: 'invalid_output', message };
}
