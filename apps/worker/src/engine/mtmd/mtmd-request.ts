import { CortexError, type CanonicalMessage, type CanonicalRequest, type ToolDefinition } from '@cortex/contracts';
import type { ChatFormat } from '../formats/chat-format.js';
import { defuseJson } from '../formats/template-prompt.js';
import { toolCallSchema } from '../tool-call-schema.js';
import { MEDIA_MARKER, type LlamaNodeMessage, type LlamaNodeTool } from './llama-node.types.js';

/** A client's text with the model's special tokens in it broken (see defuser); the identity where none need be. */
export type Defuse = (text: string) => string;
const asIs: Defuse = (text) => text;

/*
 * What a request to the vision engine may ask, decided before it waits for a slot. The engine has
 * the text path's chat template (llama.cpp's jinja, tools included), the model's output format read
 * by the text path's parser (reasoning and tool calls), sampling and stop strings, JSON schemas
 * (llama.cpp's own grammar from a schema: a JSON response format, a forced call), and counts image
 * tokens; it has no log-probabilities, no raw prompts and no resume of a migrated stream. A request
 * that needs one of those is refused naming the field, never answered without it; a strict tool's
 * arguments in a call the model chose are checked at the end.
 */

/** Why this request cannot run on the vision engine, as the error to send; null when it can. */
export function refusal(request: CanonicalRequest, model: string, resumed: boolean): CortexError | null {
  const refuse = (param: string, what: string, fix: string): CortexError =>
    new CortexError('invalid_request', `${param}: ${model} ${what}; ${fix}`, { param });
  if (resumed)
    return new CortexError(
      'worker_lost',
      `${model} runs on the vision engine, which cannot resume a stream moved from a lost worker; send the request again`,
    );
  if (request.raw) return refuse('prompt', 'serves chat only (no raw completions)', 'send messages');
  if (request.logprobs !== undefined)
    return refuse('logprobs', 'reports no log-probabilities', 'leave logprobs and top_logprobs out');
  if (request.sampling.logitBias && Object.keys(request.sampling.logitBias).length > 0)
    return refuse('logit_bias', 'takes no logit_bias', 'leave logit_bias out');
  return null;
}

/**
 * The conversation as llama.node's template reads it: each image's marker at its offset in the text,
 * and the images as data URLs in prompt order. Text that spells the marker itself is refused: mtmd
 * would read it as an image, and text must not stand for one. llama.node tokenizes the whole prompt
 * with special tokens parsed, so the client's text is `defuse`d: a `<|im_start|>` a user writes stays
 * text (its invisible mark reaches the model with it), never a turn of its own.
 */
export function mediaMessages(
  messages: readonly CanonicalMessage[],
  defuse: Defuse = asIs,
): {
  messages: LlamaNodeMessage[];
  media: string[];
} {
  const media: string[] = [];
  const out = messages.map((message, i) => {
    if (message.content.includes(MEDIA_MARKER))
      throw new CortexError(
        'invalid_request',
        `messages[${i}].content contains ${MEDIA_MARKER}, the marker that stands for an image here; remove it`,
        { param: `messages[${i}].content` },
      );
    const images = message.images ?? [];
    let content = '';
    let from = 0;
    images.forEach((image, j) => {
      if (image.data === undefined || !image.mediaType?.startsWith('image/'))
        throw new CortexError(
          'invalid_request',
          `messages[${i}].images[${j}] (${image.part}) reached the worker without its bytes; the gateway must fetch it`,
          { param: image.part },
        );
      content += defuse(message.content.slice(from, image.at)) + MEDIA_MARKER;
      from = image.at;
      media.push(`data:${image.mediaType};base64,${image.data}`);
    });
    content += defuse(message.content.slice(from));
    // Earlier tool calls and their results are rendered by the template (an agent's Read tool answers with an image).
    return {
      role: message.role,
      content,
      ...(message.reasoning && { reasoning_content: defuse(message.reasoning) }),
      ...(message.toolCalls?.length && {
        tool_calls: message.toolCalls.map((call) => ({
          type: 'function' as const,
          id: call.id,
          function: { name: defuse(call.name), arguments: defuse(call.arguments) },
        })),
      }),
      ...(message.toolCallId !== undefined && { tool_call_id: message.toolCallId }),
      ...(message.name !== undefined && { name: defuse(message.name) }),
    };
  });
  return { messages: out, media };
}

/** The declared tools as llama.cpp's chat templates read them (OpenAI's shape). */
export function llamaNodeTools(tools: readonly ToolDefinition[], defuse: Defuse = asIs): LlamaNodeTool[] {
  return tools.map((tool) => ({
    type: 'function',
    function: {
      name: defuse(tool.name),
      description: defuse(tool.description ?? ''),
      parameters: defuseJson(tool.parameters ?? { type: 'object', properties: {} }, defuse) as Record<string, unknown>,
    },
  }));
}

/**
 * What holds the output to a grammar on the vision engine, from llama.cpp's own JSON-schema grammar:
 * a JSON response format's schema (any object for `json_object`); or, for a forced call (`tool_choice`
 * `required` or a named function) in a format whose call is a `{"name", "arguments"}` object between
 * markers (Hermes), the call's opening written for the model and the schema of the object — one of
 * the tools, with its parameters. A forced call in any other format is refused naming `tool_choice`.
 * Null when nothing is held.
 */
export function heldOutput(
  request: CanonicalRequest,
  format: ChatFormat,
  model: string,
): { schema: Record<string, unknown>; opening: string } | null {
  const choice = request.toolChoice;
  if (choice && choice !== 'auto' && choice !== 'none' && request.tools?.length) {
    const tools = request.tools;
    const { tools: syntax } = format;
    const body = syntax?.body;
    if (
      !syntax ||
      body?.kind !== 'json' ||
      body.list ||
      body.nameAsKey ||
      syntax.sectionOpen ||
      syntax.atStart ||
      !syntax.callOpen ||
      !syntax.callClose
    )
      throw new CortexError(
        'invalid_request',
        `tool_choice '${choice}' cannot be enforced: ${model} writes its calls in the ${format.id} format, which ` +
          "the vision engine cannot hold to a grammar yet; send tool_choice 'auto'",
        { param: 'tool_choice' },
      );
    const named = choice.startsWith('function:') ? choice.slice('function:'.length) : null;
    const chosen = named === null ? tools : tools.filter((tool) => tool.name === named);
    if (chosen.length === 0)
      throw new CortexError(
        'invalid_request',
        `tool_choice '${choice}' cannot be enforced: ${model} is asked for '${named}', which is not in tools; name a declared tool`,
        { param: 'tool_choice' },
      );
    const keys = { name: body.nameKeys[0] ?? 'name', args: body.argKeys[0] ?? 'arguments' };
    const schema = toolCallSchema(chosen, { keys });
    return { schema, opening: `${syntax.callOpen}\n` };
  }
  const held = request.responseFormat;
  if (!held || held.type === 'text') return null;
  return { schema: held.type === 'json_schema' ? (held.schema ?? {}) : { type: 'object' }, opening: '' };
}
