import type { Llama, LlamaGrammar } from 'node-llama-cpp';
import { CortexError, type ResponseFormat, type ToolDefinition } from '@cortex/contracts';
import type { ToolSyntax } from './formats/chat-format.js';
import { createJsonGrammar } from './json-grammar.js';
import { taggedCallGrammar } from './tagged-grammar.js';
import { memoAsync } from './memo.js';
import { toolCallSchema } from './tool-call-schema.js';

/**
 * A model's compiled grammars by key, at most 64; clients tend to send the same schema again and
 * again. One that fails to compile is forgotten so a retry compiles again.
 */
export class GrammarCache {
  private readonly grammars = new Map<string, Promise<LlamaGrammar>>();

  constructor(private readonly llama: Llama) {}

  /** A grammar that makes every output parse: JSON in general, or JSON of one schema. */
  forResponseFormat(format: ResponseFormat): Promise<LlamaGrammar> {
    const key = format.type === 'json_schema' ? JSON.stringify(format.schema ?? {}) : format.type;
    return this.cached(key, () =>
      createJsonGrammar(this.llama, format.type === 'json_schema' ? (format.schema ?? {}) : null).catch(
        (error: Error) => {
          throw new CortexError(
            'invalid_request',
            `response_format: this JSON schema cannot be enforced: ${error.message}`,
            {
              param: 'response_format',
              cause: error,
            },
          );
        },
      ),
    );
  }

  /**
   * JSON of `{"name": <one of the tools>, "arguments": <that tool's parameters>}` (under the format's
   * `keys`; with `list`, a JSON list of one or more of them), with white space allowed around it,
   * compiled once per tool set.
   */
  forToolCall(
    tools: readonly ToolDefinition[],
    list = false,
    keys: { name: string; args: string } = { name: 'name', args: 'arguments' },
  ): Promise<LlamaGrammar> {
    const schema = (strict: boolean): Record<string, unknown> =>
      toolCallSchema(tools, { list, keys, anyArguments: !strict });
    const key = `tools:${list ? 'list:' : ''}${keys.name}:${keys.args}:${JSON.stringify(tools.map((t) => [t.name, t.parameters ?? null]))}`;
    // A parameter schema the grammar compiler cannot express still gets a JSON object for its arguments.
    const padded = { padded: true };
    return this.cached(key, () =>
      createJsonGrammar(this.llama, schema(true), padded).catch(() =>
        createJsonGrammar(this.llama, schema(false), padded),
      ),
    );
  }

  /** A tool's JSON arguments (any JSON object when it declares no parameters), white space allowed around them. */
  forArguments(tool: ToolDefinition): Promise<LlamaGrammar> {
    const any = { type: 'object', additionalProperties: true };
    const padded = { padded: true };
    return this.cached(`arguments:${JSON.stringify(tool.parameters ?? null)}`, () =>
      createJsonGrammar(this.llama, tool.parameters ?? any, padded).catch(() =>
        createJsonGrammar(this.llama, any, padded),
      ),
    );
  }

  /** One call of the tools in a tagged syntax, from after its opening marker through its closing one (see taggedCallGrammar). */
  forTaggedCall(syntax: ToolSyntax, tools: readonly ToolDefinition[]): Promise<LlamaGrammar> {
    const key = `tagged:${JSON.stringify([syntax, tools.map((t) => [t.name, t.parameters ?? null])])}`;
    return this.cached(key, () => this.llama.createGrammar({ grammar: taggedCallGrammar(syntax, tools) }));
  }

  private cached(key: string, create: () => Promise<LlamaGrammar>): Promise<LlamaGrammar> {
    return memoAsync(this.grammars, key, create, 64);
  }
}
