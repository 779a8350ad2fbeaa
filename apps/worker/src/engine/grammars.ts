import type { Llama, LlamaGrammar } from 'node-llama-cpp';
import { CortexError, type ResponseFormat, type ToolDefinition } from '@cortex/contracts';
import type { ToolSyntax } from './formats/chat-format.js';
import { createJsonGrammar, jsonArgumentRules } from './json-grammar.js';
import { wholeCallGrammar, type WholeCallOptions } from './whole-call-grammar.js';
import { memoAsync } from './memo.js';
import { CALL_KEYS, toolCallSchema, type CallKeys } from './tool-call-schema.js';

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
   * JSON of one call of the tools, `{"name": <one of the tools>, "arguments": <that tool's
   * parameters>}` under the format's `keys` (`{"NAME": <parameters>}` with `nameAsKey`; an id the
   * format may write is left out, and the parser gives the call one); with `list`, a JSON list of one
   * or more of them (`oneCall`: one only), white space allowed around it, compiled once per tool set.
   */
  forToolCall(
    tools: readonly ToolDefinition[],
    list = false,
    keys: CallKeys = CALL_KEYS,
    oneCall = false,
  ): Promise<LlamaGrammar> {
    const schema = (strict: boolean): Record<string, unknown> =>
      toolCallSchema(tools, { list, keys, anyArguments: !strict, oneCall });
    const key = `tools:${JSON.stringify([list, oneCall, keys, tools.map((t) => [t.name, t.parameters ?? null])])}`;
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

  /** One call of the tools, from where it starts holding through its closing marker (see wholeCallGrammar). */
  forWholeCall(
    syntax: ToolSyntax,
    tools: readonly ToolDefinition[],
    options: Omit<WholeCallOptions, 'json'>,
  ): Promise<LlamaGrammar> {
    const key = `whole:${JSON.stringify([options, syntax, tools.map((t) => [t.name, t.parameters ?? null])])}`;
    const json = syntax.body.kind === 'named' && syntax.body.args.kind === 'json';
    return this.cached(key, async () => {
      const args = json
        ? await jsonArgumentRules(
            this.llama,
            tools.map((tool) => tool.parameters),
          )
        : undefined;
      return this.llama.createGrammar({ grammar: wholeCallGrammar(syntax, tools, { ...options, json: args }) });
    });
  }

  private cached(key: string, create: () => Promise<LlamaGrammar>): Promise<LlamaGrammar> {
    return memoAsync(this.grammars, key, create, 64);
  }
}
