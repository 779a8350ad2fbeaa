import { affinityKey, keepsPromptLonger } from '../affinity.js';
import { templateOptions } from '../template-options.js';
import { unrunnableTool, type DecodeOptions } from '../hosted-tools.js';
import {
  array,
  defined,
  fail,
  jsonSchema,
  modelName,
  object,
  oneOf,
  optionalBoolean,
  optionalInteger,
  optionalNumber,
  optionalString,
  string,
  type CanonicalRequest,
  type Json,
  type ResponseFormat,
  type Sampling,
  type ToolDefinition,
} from '@cortex/contracts';
import { conversationMessages, decodeResponsesInput } from './responses.items.js';
import type {
  FunctionToolEcho,
  ResponseEcho,
  ResponsesItem,
  TextFormatEcho,
  ToolChoiceEcho,
} from './responses.types.js';
import { samplingExtensions } from '../sampling-extensions.js';

/**
 * A decoded `POST /v1/responses` body. `request` is built from this body's `instructions` and `input` alone;
 * the state fields say what the caller (the translator, which owns storage) must add before running it:
 * the previous response's items, the conversation's items, and the items `item_reference`s name.
 * Then `conversationMessages(instructions, [...history, ...resolveItemReferences(input, found)])` gives the
 * full message list.
 */
export interface DecodedResponsesRequest {
  request: CanonicalRequest;
  /** This body's input items, normalized; `item_reference` entries stay in place as placeholders. */
  input: ResponsesItem[];
  instructions?: string;
  /** Ids of the `item_reference` items in `input`, in order (fetch them, then `resolveItemReferences`). */
  itemReferences: string[];
  previousResponseId?: string;
  /** A conversation id (`conversation` given as a string or as `{id}`). */
  conversation?: string;
  /** Whether the response is to be stored (default true). */
  store: boolean;
  metadata: Record<string, string>;
  /** What the response resource repeats back of this request (`ResponsesEncoderOptions.echo`). */
  echo: ResponseEcho;
  /** Hosted tools left out under `hostedTools: drop`, each as `tools[i] (type)`, for the log. */
  droppedTools: string[];
  /** `include` named `reasoning.encrypted_content`. */
  encryptedReasoning: boolean;
  /** Function name → the `namespace` tool it came from, for the calls the model makes (`ResponsesEncoderOptions`). */
  toolNamespaces: Record<string, string>;
}

const REASONING_EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh'] as const;
const REASONING_SUMMARIES = ['auto', 'concise', 'detailed'] as const;
const SERVICE_TIERS = ['auto', 'default', 'flex', 'scale', 'priority'] as const;
const TOOL_CHOICES = ['none', 'auto', 'required'] as const;

/**
 * OpenResponses / OpenAI Responses body → canonical request plus the state fields. Every field of the
 * spec's `CreateResponseBody` is either mapped, accepted (echoed or harmless to ignore) or rejected with
 * `invalid_request` naming its path; fields the spec does not know are accepted silently (clients send extras).
 */
export function decodeResponsesRequest(input: unknown, options: DecodeOptions = {}): DecodedResponsesRequest {
  const body = object(input, 'body');
  const model = modelName(body.model);

  const background = optionalBoolean(body.background, 'background') ?? false;
  // OpenAI's stored prompt templates live at OpenAI; there is nothing here to expand them from.
  if (body.prompt !== undefined && body.prompt !== null)
    fail('prompt', 'prompt templates are not supported: send instructions and input');

  const previousResponseId = optionalString(body.previous_response_id, 'previous_response_id');
  const conversation = decodeConversation(body.conversation);
  if (previousResponseId !== undefined && conversation !== undefined) {
    fail('previous_response_id', 'cannot be used together with conversation: send one of them');
  }

  const instructions = optionalString(body.instructions, 'instructions');
  const items = body.input === undefined || body.input === null ? [] : decodeResponsesInput(body.input, 'input', model);
  if (items.length === 0 && previousResponseId === undefined && conversation === undefined) {
    fail(
      'input',
      'is required (a string or a non-empty array of items) unless previous_response_id or conversation is given',
    );
  }
  const itemReferences = items.flatMap((item) => (item.type === 'item_reference' ? [item.id] : []));

  const droppedTools: string[] = [];
  const tools = decodeTools(body.tools, options, droppedTools);
  const choice = decodeToolChoice(body.tool_choice, tools);
  const text = decodeTextParam(body.text);
  const stream = optionalBoolean(body.stream, 'stream') ?? false;
  if (body.stream_options !== undefined && body.stream_options !== null) {
    const options = object(body.stream_options, 'stream_options');
    if (!stream) fail('stream_options', 'is only allowed when stream is true');
    // Obfuscation pads deltas against side channels on shared networks; it changes no content, so it is accepted.
    optionalBoolean(options.include_obfuscation, 'stream_options.include_obfuscation');
  }
  const include = decodeInclude(body.include);
  const encryptedReasoning = include.includes('reasoning.encrypted_content');
  const topLogprobs = optionalInteger(body.top_logprobs, 'top_logprobs', 0, 20) ?? 0;
  // Either asks for them: the include for the generated tokens', top_logprobs for the likeliest at each step too.
  const logprobs = include.includes('message.output_text.logprobs') || topLogprobs > 0 ? topLogprobs : undefined;
  optionalString(body.user, 'user');

  const sampling = decodeSampling(body);
  const request: CanonicalRequest = {
    model,
    // Item references cannot be resolved here; the caller rebuilds the messages once it has them.
    messages: conversationMessages(
      instructions,
      items.filter((item) => item.type !== 'item_reference'),
    ),
    sampling,
    stream,
    ...(logprobs !== undefined && { logprobs }),
  };
  // tool_choice 'none' keeps the tools in the echo but out of the prompt, as in the chat dialect.
  if (choice.canonical !== 'none' && choice.tools.length > 0) request.tools = choice.tools;
  if (choice.canonical !== undefined && choice.canonical !== 'none') request.toolChoice = choice.canonical;
  if (text.format) request.responseFormat = text.format;
  const parallelToolCalls = optionalBoolean(body.parallel_tool_calls, 'parallel_tool_calls') ?? true;
  const maxToolCalls = optionalInteger(body.max_tool_calls, 'max_tool_calls', 1);
  if (maxToolCalls !== undefined || !parallelToolCalls)
    request.maxToolCalls = Math.min(maxToolCalls ?? Infinity, parallelToolCalls ? Infinity : 1);
  const cacheKey = optionalString(body.prompt_cache_key, 'prompt_cache_key');
  if (cacheKey) request.affinityKey = affinityKey.promptCacheKey(cacheKey);
  if (keepsPromptLonger(body.prompt_cache_retention)) request.keepPromptLonger = true;

  const store = optionalBoolean(body.store, 'store') ?? true;
  // A background response is read back by id: there is nothing to read without storing it (as OpenAI answers).
  if (background && !store)
    fail('background', 'background responses must be stored: send store: true (the default) or leave background out');
  const metadata = decodeMetadata(body.metadata);
  const reasoning = decodeReasoning(body.reasoning);
  // The effort reaches the model's chat template (gpt-oss reads `reasoning_effort`), as do the client's own template options.
  const forTemplate = templateOptions(
    body.chat_template_kwargs,
    'chat_template_kwargs',
    reasoning.effort ? { reasoning_effort: reasoning.effort } : {},
  );
  if (forTemplate) request.templateOptions = forTemplate;
  const echo: ResponseEcho = {
    model,
    instructions: instructions ?? null,
    previous_response_id: previousResponseId ?? null,
    tools: tools.map(({ echo: tool }) => tool),
    tool_choice: choice.echo,
    // Echoed, not applied: cortex never drops input items to fit the context ('auto').
    truncation:
      body.truncation === undefined || body.truncation === null
        ? 'disabled'
        : oneOf(body.truncation, 'truncation', ['auto', 'disabled'] as const),
    parallel_tool_calls: parallelToolCalls,
    text: text.echo,
    // The resource must state the values used; absent ones are the API's documented defaults.
    top_p: sampling.topP ?? 1,
    temperature: sampling.temperature ?? 1,
    presence_penalty: sampling.presencePenalty ?? 0,
    frequency_penalty: sampling.frequencyPenalty ?? 0,
    top_logprobs: topLogprobs,
    reasoning,
    max_output_tokens: sampling.maxTokens ?? null,
    max_tool_calls: maxToolCalls ?? null,
    store,
    background,
    service_tier: decodeServiceTier(body.service_tier),
    metadata,
    safety_identifier: optionalString(body.safety_identifier, 'safety_identifier') ?? null,
    prompt_cache_key: cacheKey ?? null,
  };
  if (conversation !== undefined) echo.conversation = { id: conversation };

  const decoded: DecodedResponsesRequest = {
    request,
    input: items,
    itemReferences,
    store,
    metadata,
    echo,
    droppedTools,
    encryptedReasoning,
    toolNamespaces: namespacesOf(tools),
  };
  if (instructions !== undefined) decoded.instructions = instructions;
  if (previousResponseId !== undefined) decoded.previousResponseId = previousResponseId;
  if (conversation !== undefined) decoded.conversation = conversation;
  return decoded;
}

/** Every request runs at the one tier there is: a requested tier is validated, the tier used is reported. */
function decodeServiceTier(value: unknown): string {
  if (value !== undefined && value !== null) oneOf(value, 'service_tier', SERVICE_TIERS);
  return 'default';
}

function decodeConversation(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') return value;
  return string(object(value, 'conversation').id, 'conversation.id');
}

interface DecodedTool {
  canonical: ToolDefinition;
  echo: FunctionToolEcho;
  namespace?: string;
}

function namespacesOf(tools: DecodedTool[]): Record<string, string> {
  return Object.fromEntries(
    tools.flatMap((tool) => (tool.namespace === undefined ? [] : [[tool.canonical.name, tool.namespace]])),
  );
}

function decodeTools(value: unknown, options: DecodeOptions, dropped: string[]): DecodedTool[] {
  if (value === undefined || value === null) return [];
  const tools = array(value, 'tools').flatMap((input, i) => {
    const param = `tools[${i}]`;
    const tool = object(input, param);
    if (tool.type === 'function') return [decodeFunctionTool(tool, param)];
    // A namespace groups function tools under one name (Codex's `multi_agent_v1`). The model is offered
    // the functions under their own names; its calls carry the namespace back, which is how the client
    // dispatches them (Codex answers a call without it with "unsupported call").
    if (tool.type === 'namespace') {
      const namespace = string(tool.name, `${param}.name`);
      return array(tool.tools, `${param}.tools`).flatMap((inner, j) => {
        const innerParam = `${param}.tools[${j}]`;
        const member = object(inner, innerParam);
        if (member.type === 'function') return [{ ...decodeFunctionTool(member, innerParam), namespace }];
        dropped.push(unrunnableTool(options, innerParam, `tool type ${JSON.stringify(member.type)}`));
        return [];
      });
    }
    // Hosted tools (web_search, file_search, code_interpreter, computer_use, mcp, image_generation,
    // local_shell, …) run at OpenAI; custom (free-text) tools need a grammar the worker does not have.
    dropped.push(unrunnableTool(options, param, `tool type ${JSON.stringify(tool.type)}`));
    return [];
  });
  const seen = new Set<string>();
  for (const { canonical } of tools) {
    if (seen.has(canonical.name))
      fail('tools', `two tools are named '${canonical.name}': function names must be unique, namespaces included`);
    seen.add(canonical.name);
  }
  return tools;
}

function decodeFunctionTool(tool: Json, param: string): DecodedTool {
  const name = string(tool.name, `${param}.name`);
  if (name.length === 0) fail(`${param}.name`, 'must not be empty');
  const description = optionalString(tool.description, `${param}.description`);
  const parameters =
    tool.parameters === undefined || tool.parameters === null
      ? undefined
      : jsonSchema(tool.parameters, `${param}.parameters`);
  const strict = optionalBoolean(tool.strict, `${param}.strict`);
  const canonical: ToolDefinition = { name };
  if (description !== undefined) canonical.description = description;
  if (parameters !== undefined) canonical.parameters = parameters;
  // The Responses API's documented default for `strict` is true; the echo states it like OpenAI does.
  if (strict ?? true) canonical.strict = true;
  const echo: FunctionToolEcho = {
    type: 'function',
    name,
    description: description ?? null,
    parameters: parameters ?? null,
    strict: strict ?? true,
  };
  return { canonical, echo };
}

interface DecodedToolChoice {
  /** Canonical `auto | required | function:<name>`, 'none' (drop the tools), or nothing said. */
  canonical: string | undefined;
  /** The tools the model may see: `allowed_tools` narrows the list. */
  tools: ToolDefinition[];
  echo: ToolChoiceEcho;
}

function decodeToolChoice(value: unknown, tools: DecodedTool[]): DecodedToolChoice {
  const all = tools.map((tool) => tool.canonical);
  if (value === undefined || value === null) return { canonical: undefined, tools: all, echo: 'auto' };
  if (typeof value === 'string') {
    const mode = oneOf(value, 'tool_choice', TOOL_CHOICES);
    return { canonical: mode, tools: all, echo: mode };
  }
  const choice = object(value, 'tool_choice');
  const type = oneOf(choice.type, 'tool_choice.type', ['function', 'allowed_tools'] as const);
  const known = (name: string, param: string) => {
    if (!all.some((tool) => tool.name === name)) fail(param, `no function tool named '${name}' in tools`);
    return name;
  };
  if (type === 'function') {
    const name = known(string(choice.name, 'tool_choice.name'), 'tool_choice.name');
    return { canonical: `function:${name}`, tools: all, echo: { type, name } };
  }
  // allowed_tools limits which tools may be called without changing the list; the canonical request has no
  // such field, so the same effect comes from offering only the allowed tools under the given mode.
  const mode =
    choice.mode === undefined || choice.mode === null ? 'auto' : oneOf(choice.mode, 'tool_choice.mode', TOOL_CHOICES);
  const allowed = array(choice.tools, 'tool_choice.tools').map((input, i) => {
    const param = `tool_choice.tools[${i}]`;
    const entry = object(input, param);
    oneOf(entry.type, `${param}.type`, ['function'] as const);
    return known(string(entry.name, `${param}.name`), `${param}.name`);
  });
  if (allowed.length === 0) fail('tool_choice.tools', 'must name at least one tool');
  return {
    canonical: mode,
    tools: all.filter((tool) => allowed.includes(tool.name)),
    echo: { type, mode, tools: allowed.map((name) => ({ type: 'function' as const, name })) },
  };
}

function decodeTextParam(value: unknown): { format: ResponseFormat | undefined; echo: ResponseEcho['text'] } {
  if (value === undefined || value === null)
    return { format: undefined, echo: { format: { type: 'text' }, verbosity: 'medium' } };
  const text = object(value, 'text');
  const verbosity =
    text.verbosity === undefined || text.verbosity === null
      ? 'medium'
      : oneOf(text.verbosity, 'text.verbosity', ['low', 'medium', 'high'] as const);
  const { format, echo } = decodeTextFormat(text.format);
  return { format, echo: { format: echo, verbosity } };
}

function decodeTextFormat(value: unknown): { format: ResponseFormat | undefined; echo: TextFormatEcho } {
  if (value === undefined || value === null) return { format: undefined, echo: { type: 'text' } };
  const format = object(value, 'text.format');
  const type = oneOf(format.type, 'text.format.type', ['text', 'json_object', 'json_schema'] as const);
  if (type === 'text') return { format: undefined, echo: { type } };
  if (type === 'json_object') return { format: { type }, echo: { type } };
  const name = string(format.name, 'text.format.name');
  const schema = jsonSchema(format.schema, 'text.format.schema');
  const description = optionalString(format.description, 'text.format.description') ?? null;
  const strict = optionalBoolean(format.strict, 'text.format.strict') ?? false;
  // The spec's `JsonSchemaResponseFormat.schema` admits only null, so the echo leaves the schema out (the
  // client has it; OpenAI would repeat it) and the resource stays valid against the spec.
  return { format: { type, schema }, echo: { type, name, description, schema: null, strict } };
}

function decodeReasoning(value: unknown): ResponseEcho['reasoning'] {
  if (value === undefined || value === null) return { effort: null, summary: null };
  const reasoning = object(value, 'reasoning');
  const pick = <T extends string>(field: unknown, param: string, allowed: readonly T[]): T | null =>
    field === undefined || field === null ? null : oneOf(field, param, allowed);
  // Effort goes to the model's chat template (a template that does not read it is unaffected). A
  // `summary` asks the encoder to put the model's reasoning in the reasoning item's summary (see ResponsesStreamEncoder).
  const effort = pick(reasoning.effort, 'reasoning.effort', REASONING_EFFORTS);
  const summary =
    pick(reasoning.summary, 'reasoning.summary', REASONING_SUMMARIES) ??
    pick(reasoning.generate_summary, 'reasoning.generate_summary', REASONING_SUMMARIES);
  return { effort, summary };
}

/** Checks `include`: what it names (other includables name hosted-tool outputs, which never occur here). */
function decodeInclude(value: unknown): string[] {
  if (value === undefined || value === null) return [];
  return array(value, 'include').map((entry, i) => string(entry, `include[${i}]`));
}

function decodeMetadata(value: unknown): Record<string, string> {
  if (value === undefined || value === null) return {};
  const metadata = object(value, 'metadata');
  const entries = Object.entries(metadata);
  if (entries.length > 16) fail('metadata', `at most 16 keys, got ${entries.length}`);
  const out: Record<string, string> = {};
  for (const [key, entry] of entries) {
    if (key.length > 64) fail(`metadata.${key}`, 'keys are at most 64 characters');
    const text = string(entry, `metadata.${key}`);
    if (text.length > 512) fail(`metadata.${key}`, 'values are at most 512 characters');
    out[key] = text;
  }
  return out;
}

function decodeSampling(body: Json): Sampling {
  return defined<Sampling>({
    temperature: optionalNumber(body.temperature, 'temperature', 0, 2),
    topP: optionalNumber(body.top_p, 'top_p', 0, 1),
    // The spec's minimum is 16; smaller caps are still meaningful to a local model, so only >= 1 is required.
    maxTokens: optionalInteger(body.max_output_tokens, 'max_output_tokens', 1),
    presencePenalty: optionalNumber(body.presence_penalty, 'presence_penalty', -2, 2),
    frequencyPenalty: optionalNumber(body.frequency_penalty, 'frequency_penalty', -2, 2),
    ...samplingExtensions(body),
  });
}
