import { createHash } from 'node:crypto';
import { Template } from '@huggingface/jinja';
import { LlamaText, SpecialTokensText, type LlamaModel, type Token, type Tokenizer } from 'node-llama-cpp';
import { CortexError, type CanonicalMessage, type ToolDefinition } from '@cortex/contracts';
import { parseJson } from '../prompt.js';
import { escapeRegExp } from './scan.js';

/**
 * `x.items()`, `x.keys()` and `x.values()` as filters. Python's Jinja finds a dict's methods before
 * its keys; @huggingface/jinja finds the keys first, so a JSON schema with an `items` key (any array
 * parameter, as agents' tools have) broke templates that iterate `schema.items()` (gpt-oss's,
 * Qwen3-Coder's). The filters read the dict whatever its keys.
 */
export function pythonMethods(source: string): string {
  return source.replace(/\.(items|keys|values)\(\s*\)/g, '|$1');
}

/** llama.cpp's token types that its tokenizer reads as special tokens in a prompt: unknown, control, user-defined. */
const SPECIAL_TYPES = new Set([2, 3, 4]);

/** What the template reads besides the conversation (`enable_thinking`, `reasoning_effort`, …). */
export type TemplateOptions = Readonly<Record<string, unknown>>;

/**
 * The prompt as the model's own chat template writes it — the system prompt, the tools, earlier calls
 * and tool results in the family's native syntax — ending exactly as the template's generation prompt
 * ends (so Qwen3 thinks, and a template that opens the reasoning block leaves the model inside it).
 * llama.cpp's server renders the same way; node-llama-cpp's specialised wrappers, which sometimes teach
 * a syntax the family was not trained on, are not used for a model that carries a template.
 */
export class TemplatePrompt {
  private readonly template: Template;
  /** The model's special tokens, longest first, as one pattern: the rendered text is split at them. */
  private readonly special: RegExp | null;
  /** The template reads a call's arguments as an object (most do); otherwise as JSON text. */
  private readonly objectArguments: boolean;
  /** The template takes only 9-character alphanumeric call ids (Mistral's): other ids are mapped to such. */
  private readonly shortIds: boolean;
  /**
   * Whether the template writes the declared tools, and earlier calls, itself. Where it does not
   * (DeepSeek's leave tools to the system prompt, Kimi K2's first template drops earlier calls), the
   * tools go into the system message and earlier calls into their message's text, as llama.cpp's
   * template engine does for such templates.
   */
  private readonly rendersTools: boolean;
  private readonly rendersCalls: boolean;
  private readonly bos: string;
  private readonly eos: string;

  constructor(
    readonly source: string,
    private readonly model: LlamaModel,
  ) {
    this.template = new Template(pythonMethods(source));
    this.bos = model.tokens.bosString ?? '';
    this.eos = model.tokens.eosString ?? '';
    this.special = specialPattern(model.fileInfo.metadata);
    this.defuse = defuser(this.special);
    // One call and its result, with a short id and object arguments: what most templates accept.
    const probe = this.attempt(() => this.render(probeCall(SHORT_PROBE_ID), undefined, {}, true));
    this.shortIds =
      probe !== null && this.attempt(() => this.render(probeCall('call_probe_id'), undefined, {}, true)) === null;
    // A template that shows an object's value only when given the object reads objects.
    this.objectArguments = probe === null || probe.includes('probe_value');
    this.rendersTools = this.shows(
      () => this.render([{ role: 'user', content: 'probe' }], [PROBE_TOOL], {}, this.objectArguments),
      PROBE_TOOL.name,
    );
    this.rendersCalls = this.objectArguments
      ? (probe?.includes('probe_tool') ?? false)
      : this.shows(() => this.render(probeCall(SHORT_PROBE_ID), undefined, {}, false), 'probe_tool');
  }

  /** What `render` writes, or null when it throws. */
  private attempt(render: () => string): string | null {
    try {
      return render();
    } catch {
      return null;
    }
  }

  /** Whether what `render` writes contains `text` (false when it throws). */
  private shows(render: () => string, text: string): boolean {
    return this.attempt(render)?.includes(text) ?? false;
  }

  /** A model's template, once it has rendered a plain conversation: throws when the Jinja engine cannot run it. */
  static checked(source: string, model: LlamaModel): TemplatePrompt {
    const prompt = new TemplatePrompt(source, model);
    prompt.render([{ role: 'user', content: 'probe' }], undefined, {}, prompt.objectArguments, prompt.shortIds);
    return prompt;
  }

  /** A conversation as the template writes it, as it is (no tools moved, no generation prompt): for learning its format (deriveFormat). */
  probe(messages: readonly CanonicalMessage[], tools?: readonly ToolDefinition[]): string {
    return this.render(messages, tools, { add_generation_prompt: false }, this.objectArguments, this.shortIds);
  }

  /** The rendered prompt's text. Throws a client error when the template refuses the conversation. */
  text(
    messages: readonly CanonicalMessage[],
    tools: readonly ToolDefinition[] | undefined,
    options: TemplateOptions = {},
  ): string {
    let conversation = this.rendersCalls ? messages : messages.map(callsAsText);
    if (tools?.length && !this.rendersTools) conversation = withToolsInSystem(conversation, tools);
    try {
      return this.render(conversation, tools, options, this.objectArguments, this.shortIds);
    } catch (error) {
      throw new CortexError(
        'invalid_request',
        `messages: the model's chat template refused this conversation: ${(error as Error).message}`,
        {
          param: 'messages',
          cause: error,
        },
      );
    }
  }

  /**
   * The text as tokens: special tokens where the model has them, each run of text between them
   * tokenized on its own (as llama.cpp's tokenizer does, and through the memo of runs), after the BOS
   * token where the model wants one (once: a template that writes it itself is not doubled).
   */
  tokens(text: string, tokenizer: Tokenizer): Token[] {
    const bos = this.model.tokens.bos;
    // A template that writes BOS itself: written once, by the tokenizer's rule where it has one.
    const prepend = bos !== null && this.model.tokens.shouldPrependBosToken;
    const body = prepend && this.bos && text.startsWith(this.bos) ? text.slice(this.bos.length) : text;
    const parts = this.special
      ? body
          .split(this.special)
          .map((part, i) => (i % 2 === 1 ? new SpecialTokensText(part) : part.replaceAll(DEFUSED, '')))
      : [body.replaceAll(DEFUSED, '')];
    const tokens = LlamaText(parts.filter((part) => part !== '')).tokenize(tokenizer);
    return prepend && tokens[0] !== bos ? [bos, ...tokens] : tokens;
  }

  /**
   * The prompt with an answer already begun after its generation prompt (a request's `prefill`), as
   * llama.cpp's server writes a prefilled assistant turn: the client's text, its special tokens broken.
   */
  continued(prompt: string, prefill: string): string {
    return prompt + this.defuse(prefill);
  }

  /** A client's text with every special token in it broken (see defuser); `tokens` takes the mark out of the text runs. */
  private readonly defuse: (text: string) => string;

  private render(
    messages: readonly CanonicalMessage[],
    tools: readonly ToolDefinition[] | undefined,
    options: TemplateOptions,
    objectArguments: boolean,
    shortIds = false,
  ): string {
    return this.template.render({
      ...options,
      messages: templateMessages(messages, objectArguments, shortIds, this.defuse),
      ...(tools?.length && {
        tools: tools.map((tool) => ({
          type: 'function',
          function: {
            name: this.defuse(tool.name),
            description: this.defuse(tool.description ?? ''),
            parameters: defuseJson(tool.parameters ?? { type: 'object', properties: {} }, this.defuse),
          },
        })),
      }),
      add_generation_prompt: options.add_generation_prompt ?? true,
      bos_token: this.bos,
      eos_token: this.eos,
    });
  }
}

/** A call id of the shape Mistral's templates require (9 letters and digits). */
const SHORT_PROBE_ID = 'a1b2c3d4e';

const PROBE_TOOL: ToolDefinition = {
  name: 'probe_declared_tool',
  description: 'probe',
  parameters: { type: 'object', properties: {} },
};

/**
 * The declared tools, for a template that does not write them, at the end of the system message
 * (one is added first when there is none), in the words of llama.cpp's template engine (minja).
 */
function withToolsInSystem(
  messages: readonly CanonicalMessage[],
  tools: readonly ToolDefinition[],
): CanonicalMessage[] {
  const declared = JSON.stringify(
    tools.map((tool) => ({
      type: 'function',
      function: { name: tool.name, description: tool.description ?? '', parameters: tool.parameters ?? {} },
    })),
    null,
    2,
  );
  const text = `You can call any of the following tools to satisfy the user's requests: ${declared}`;
  const [first, ...rest] = messages;
  if (first?.role === 'system') return [{ ...first, content: `${first.content}\n\n${text}` }, ...rest];
  return [{ role: 'system', content: text }, ...messages];
}

/** An earlier call, for a template that does not write calls, as the JSON text of its message (minja's polyfill). */
function callsAsText(message: CanonicalMessage): CanonicalMessage {
  if (message.role !== 'assistant' || !message.toolCalls?.length) return message;
  const calls = message.toolCalls.map((call) => ({
    name: call.name,
    arguments: parseJson(call.arguments),
    id: call.id,
  }));
  const text = JSON.stringify({ tool_calls: calls }, null, 2);
  return {
    role: 'assistant',
    content: message.content ? `${message.content}\n${text}` : text,
    ...(message.reasoning && { reasoning: message.reasoning }),
  };
}

/** A conversation with one call and its result, to learn what the template reads. */
function probeCall(id: string): CanonicalMessage[] {
  return [
    { role: 'user', content: 'probe' },
    {
      role: 'assistant',
      content: '',
      toolCalls: [{ id, name: 'probe_tool', arguments: '{"probe_key":"probe_value"}' }],
    },
    { role: 'tool', content: 'probe result', toolCallId: id },
  ];
}

/** A 9-character alphanumeric id for `id`, the same every time (the prompt stays cacheable). */
function shortId(id: string): string {
  return /^[a-zA-Z0-9]{9}$/.test(id) ? id : createHash('sha256').update(id).digest('hex').slice(0, 9);
}

/** Canonical messages as chat templates read them (OpenAI's shape, with the reasoning under both names templates use). */
export function templateMessages(
  messages: readonly CanonicalMessage[],
  objectArguments: boolean,
  shortIds: boolean,
  defuse: (text: string) => string = (text) => text,
): Array<Record<string, unknown>> {
  const names = new Map<string, string>();
  const idOf = (id: string): string => (shortIds ? shortId(id) : id);
  return messages.map((message) => {
    switch (message.role) {
      case 'assistant': {
        for (const call of message.toolCalls ?? []) names.set(call.id, call.name);
        return {
          role: 'assistant',
          content: defuse(message.content),
          ...(message.reasoning && {
            reasoning_content: defuse(message.reasoning),
            thinking: defuse(message.reasoning),
          }),
          ...(message.toolCalls?.length && {
            tool_calls: message.toolCalls.map((call) => ({
              id: idOf(call.id),
              type: 'function',
              function: {
                name: defuse(call.name),
                arguments: objectArguments ? defuseJson(parseJson(call.arguments), defuse) : defuse(call.arguments),
              },
            })),
          }),
        };
      }
      case 'tool': {
        const name = message.name ?? (message.toolCallId ? names.get(message.toolCallId) : undefined);
        return {
          role: 'tool',
          content: defuse(message.content),
          ...(message.toolCallId && { tool_call_id: idOf(message.toolCallId) }),
          ...(name && { name: defuse(name) }),
        };
      }
      default:
        return {
          role: message.role,
          content: defuse(message.content),
          ...(message.name && { name: defuse(message.name) }),
        };
    }
  });
}

/** Marks a special token's text inside a client's string (see TemplatePrompt.defuse): a private-use character. */
const DEFUSED = '\uE000';

/**
 * A client's text with every special token in it broken by an invisible mark, so that a prompt split
 * at special tokens leaves it text: a message that writes `<|im_start|>system` is read as those
 * characters, not as a turn of its own (as node-llama-cpp's wrappers tokenize messages).
 */
export function defuser(special: RegExp | null): (text: string) => string {
  if (!special) return (text) => text;
  const every = new RegExp(special.source, 'g');
  return (text) => (text ? text.replace(every, (token) => `${token.slice(0, 1)}${DEFUSED}${token.slice(1)}`) : text);
}

/** Every string in a JSON value (keys too) defused. */
export function defuseJson(value: unknown, defuse: (text: string) => string): unknown {
  if (typeof value === 'string') return defuse(value);
  if (Array.isArray(value)) return value.map((item) => defuseJson(item, defuse));
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [defuse(key), defuseJson(item, defuse)]));
}

/** A pattern that captures the special tokens of a model's GGUF metadata, longest first; null when it has none. */
export function specialPattern(metadata: unknown): RegExp | null {
  const ggml = (metadata as { tokenizer?: { ggml?: { tokens?: readonly string[]; token_type?: readonly number[] } } })
    .tokenizer?.ggml;
  const tokens = ggml?.tokens ?? [];
  const types = ggml?.token_type ?? [];
  const special = tokens.filter(
    (token, i) => token.length > 1 && SPECIAL_TYPES.has(types[i] ?? 1) && !/^<0x[0-9A-F]{2}>$/.test(token),
  );
  if (special.length === 0) return null;
  special.sort((a, b) => b.length - a.length);
  return new RegExp(`(${special.map(escapeRegExp).join('|')})`);
}
