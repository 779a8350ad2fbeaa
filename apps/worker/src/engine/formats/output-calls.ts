import type { CallSink } from './call-body.js';
import type { ParserOptions } from './output-parser.js';

/** The calls of one output: each announced once its name is known, numbered in order. */
export class Calls implements CallSink {
  count = 0;
  completed = 0;
  private tool: Record<string, unknown> | undefined;

  constructor(private readonly options: ParserOptions) {}

  private declared(name: string): boolean {
    return this.options.tools === null || this.options.tools.has(name);
  }

  start(name: string, id?: string): boolean {
    if (!name || !this.declared(name)) return false;
    const index = this.count++;
    this.tool = this.options.tools?.get(name);
    this.options.emit({ type: 'tool_call', index, id: id ?? this.options.callId(index), name });
    return true;
  }

  args(delta: string): void {
    if (delta) this.options.emit({ type: 'tool_args', index: this.count - 1, delta });
  }

  whole(calls: ReadonlyArray<{ name: string; arguments: string; id?: string }>): boolean {
    if (calls.length === 0 || calls.some((call) => !this.declared(call.name))) return false;
    for (const call of calls) {
      this.start(call.name, call.id);
      this.args(call.arguments);
    }
    return true;
  }

  typesOf(key: string): readonly string[] | undefined {
    const properties = this.tool?.properties as Record<string, Record<string, unknown> | undefined> | undefined;
    return schemaTypes(properties?.[key]);
  }
}

/** The JSON types a schema allows (`type`, a list of types, or the types of its `anyOf`/`oneOf` branches). */
function schemaTypes(schema: Record<string, unknown> | undefined): string[] | undefined {
  if (!schema) return undefined;
  const { type } = schema;
  if (typeof type === 'string') return [type];
  if (Array.isArray(type)) return type.filter((t): t is string => typeof t === 'string');
  const branches = (schema.anyOf ?? schema.oneOf) as Array<Record<string, unknown>> | undefined;
  if (!Array.isArray(branches)) return undefined;
  const types = branches.flatMap((branch) => schemaTypes(branch) ?? []);
  return types.length > 0 ? [...new Set(types)] : undefined;
}
