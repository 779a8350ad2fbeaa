import type { ToolDefinition } from '@cortex/contracts';

/** The keys a call's JSON object names its tool and its arguments under (see ToolSyntax's `json` body). */
export interface CallKeys {
  readonly name: string;
  readonly args: string;
  /** `{"NAME": {arguments}}` (Apertus): the tool's name is the object's one key. */
  readonly nameAsKey?: boolean;
}

/** `{"name", "arguments"}`: Hermes's, and most formats' that write a call as one JSON object. */
export const CALL_KEYS: CallKeys = { name: 'name', args: 'arguments' };

/**
 * The JSON schema of a call to one of `tools`: `{"name": <its name>, "arguments": <its parameters>}`
 * under `keys` (`{"NAME": <its parameters>}` with `nameAsKey`; an id the format may write is left out,
 * and the parser gives the call one), one of the tools' objects when there are several; with `list`, a
 * JSON list of one or more calls (`oneCall`: one only). With `anyArguments` (or for a tool that
 * declares no parameters) the arguments are any JSON object: a grammar compiler that cannot express a
 * tool's parameters still holds the call's shape. The one schema of a call for both engines: the text
 * engine's grammar (GrammarCache.forToolCall) and the vision engine's held output (heldOutput).
 */
export function toolCallSchema(
  tools: readonly ToolDefinition[],
  {
    list = false,
    keys = CALL_KEYS,
    anyArguments = false,
    oneCall = false,
  }: { list?: boolean; keys?: CallKeys; anyArguments?: boolean; oneCall?: boolean } = {},
): Record<string, unknown> {
  const args = (tool: ToolDefinition): Record<string, unknown> =>
    !anyArguments && tool.parameters ? tool.parameters : { type: 'object', additionalProperties: true };
  // node-llama-cpp's grammars hold every property as required; llama.cpp's read the `required` list.
  const call = (tool: ToolDefinition): Record<string, unknown> =>
    keys.nameAsKey
      ? { type: 'object', properties: { [tool.name]: args(tool) }, required: [tool.name], additionalProperties: false }
      : {
          type: 'object',
          properties: { [keys.name]: { const: tool.name }, [keys.args]: args(tool) },
          required: [keys.name, keys.args],
        };
  const one = tools.length === 1 ? call(tools[0] as ToolDefinition) : { oneOf: tools.map(call) };
  return list ? { type: 'array', items: one, minItems: 1, ...(oneCall && { maxItems: 1 }) } : one;
}
