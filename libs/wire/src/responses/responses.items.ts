import { ContentParts, openaiImage, rejectMedia } from '../media.js';
import {
  array,
  CortexError,
  fail,
  isObject,
  object,
  oneOf,
  optionalString,
  string,
  type CanonicalMessage,
  type Json,
} from '@cortex/contracts';
import { compactionMessage, openPlain } from './responses.compaction.js';
import type {
  ResponsesCompactionItem,
  ResponsesFunctionCallItem,
  ResponsesFunctionCallOutputItem,
  ResponsesInputImagePart,
  ResponsesInputTextPart,
  ResponsesItem,
  ResponsesMessageItem,
  ResponsesMessageRole,
  ResponsesReasoningItem,
} from './responses.types.js';

const MEDIA_PARTS = new Set(['input_file', 'input_audio', 'input_video']);
const ROLES = ['user', 'assistant', 'system', 'developer'] as const;

// Separate content parts are separate pieces of text; gluing them would merge words across the seam.
const PART_SEPARATOR = '\n';

/**
 * `input` (a string, or an array of items) → normalized items. Throws `invalid_request` naming the path
 * (and `model`, when given, in the refusal of an image).
 */
export function decodeResponsesInput(value: unknown, param = 'input', model?: string): ResponsesItem[] {
  if (typeof value === 'string')
    return [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: value }] }];
  return array(value, param).map((item, i) => decodeItem(item, `${param}[${i}]`, model));
}

function decodeItem(input: unknown, param: string, model: string | undefined): ResponsesItem {
  const item = object(input, param);
  // `EasyInputMessage` ({role, content}) has no type; an `ItemReferenceParam` may carry only its id.
  const type =
    item.type ?? (item.role !== undefined ? 'message' : item.id !== undefined ? 'item_reference' : undefined);
  if (type === undefined) fail(`${param}.type`, 'is required');
  const id = optionalString(item.id, `${param}.id`);
  switch (type) {
    case 'message':
      return withId(decodeMessageItem(item, param, model), id);
    case 'function_call': {
      const name = string(item.name, `${param}.name`);
      if (name.length === 0) fail(`${param}.name`, 'must not be empty');
      const args =
        item.arguments === undefined || item.arguments === null ? '' : string(item.arguments, `${param}.arguments`);
      const call: ResponsesFunctionCallItem = {
        type: 'function_call',
        call_id: callId(item.call_id, `${param}.call_id`),
        name,
        arguments: args,
      };
      return withId(call, id);
    }
    case 'function_call_output': {
      const output: ResponsesFunctionCallOutputItem = {
        type: 'function_call_output',
        call_id: callId(item.call_id, `${param}.call_id`),
        output: decodeOutput(item.output, `${param}.output`, model),
      };
      return withId(output, id);
    }
    case 'reasoning':
      return withId(decodeReasoningItem(item, param), id);
    case 'item_reference':
      return { type: 'item_reference', id: string(item.id, `${param}.id`) };
    // `compaction_summary` is the name some agents (Codex) also read and write for the same item.
    case 'compaction':
    case 'compaction_summary': {
      const content = string(item.encrypted_content, `${param}.encrypted_content`);
      const compaction: ResponsesCompactionItem = { type: 'compaction', encrypted_content: content };
      const summary = openPlain(content);
      if (summary !== undefined) compaction.summary = summary;
      return withId(compaction, id);
    }
    // The items of MCP tools run server-side, sent back as input by a client that keeps its own history.
    case 'mcp_list_tools':
      return withId(
        {
          type: 'mcp_list_tools',
          server_label: string(item.server_label, `${param}.server_label`),
          tools: array(item.tools, `${param}.tools`).map((tool, i) => {
            const listed = object(tool, `${param}.tools[${i}]`);
            return {
              name: string(listed.name, `${param}.tools[${i}].name`),
              input_schema: isObject(listed.input_schema) ? listed.input_schema : {},
            };
          }),
        },
        id,
      );
    case 'mcp_call':
      return withId(
        {
          type: 'mcp_call',
          server_label: string(item.server_label, `${param}.server_label`),
          name: string(item.name, `${param}.name`),
          arguments: optionalString(item.arguments, `${param}.arguments`) ?? '',
          output: optionalString(item.output ?? undefined, `${param}.output`) ?? null,
          error: optionalString(item.error ?? undefined, `${param}.error`) ?? null,
          ...(typeof item.approval_request_id === 'string' && { approval_request_id: item.approval_request_id }),
        },
        id,
      );
    case 'mcp_approval_request':
      return withId(
        {
          type: 'mcp_approval_request',
          server_label: string(item.server_label, `${param}.server_label`),
          name: string(item.name, `${param}.name`),
          arguments: optionalString(item.arguments, `${param}.arguments`) ?? '',
        },
        id,
      );
    default:
      // Other hosted-tool calls (web_search_call, computer_call, …) and custom tools have nothing a
      // local model can read or answer.
      return fail(
        `${param}.type`,
        `unsupported item type ${JSON.stringify(type)}: only message, function_call, ` +
          'function_call_output, reasoning, compaction, mcp_list_tools, mcp_call, mcp_approval_request and item_reference items',
      );
  }
}

function decodeMessageItem(item: Json, param: string, model: string | undefined): ResponsesMessageItem {
  const role = oneOf(item.role, `${param}.role`, ROLES);
  const parts = decodeParts(item.content, `${param}.content`, model);
  // Stored as the wire writes each role: assistant text is output, everything else input.
  const content = parts.map((part): ResponsesMessageItem['content'][number] => {
    if (part.type === 'input_image') {
      if (role === 'assistant') fail(`${param}.content`, 'an assistant message has no input_image parts');
      return part;
    }
    return role === 'assistant'
      ? { type: 'output_text', text: part.text, annotations: [] }
      : { type: 'input_text', text: part.text };
  });
  return { type: 'message', role, content };
}

/** Message content: a string, or parts (`input_text`, `output_text`, `text`, `refusal`, `input_image`). */
function decodeParts(
  value: unknown,
  param: string,
  model: string | undefined,
): Array<ResponsesInputTextPart | ResponsesInputImagePart> {
  if (typeof value === 'string') return [{ type: 'input_text', text: value }];
  return array(value, param).map((input, i) => {
    const path = `${param}[${i}]`;
    const part = object(input, path);
    const type = string(part.type, `${path}.type`);
    if (type === 'input_text' || type === 'output_text' || type === 'text')
      return { type: 'input_text', text: string(part.text, `${path}.text`) };
    // An assistant's earlier refusal is still what it said.
    if (type === 'refusal') return { type: 'input_text', text: string(part.refusal, `${path}.refusal`) };
    if (type === 'input_image') {
      if (part.file_id !== undefined && part.file_id !== null)
        fail(`${path}.file_id`, 'files are not kept here: send the image as image_url (a URL or a base64 data URL)');
      // Checked now, so a stored item holds only what the gateway can fetch or read.
      const image = openaiImage(part, path);
      return {
        type: 'input_image',
        image_url: string(part.image_url, `${path}.image_url`),
        detail: image.detail ?? 'auto',
      };
    }
    if (MEDIA_PARTS.has(type)) rejectMedia(path, `${type} parts`, model);
    return fail(`${path}.type`, `unknown content part type ${JSON.stringify(type)}`);
  });
}

function decodeOutput(
  value: unknown,
  param: string,
  model: string | undefined,
): ResponsesFunctionCallOutputItem['output'] {
  if (typeof value === 'string') return value;
  const parts = decodeParts(value, param, model);
  // Text alone stays the plain string it always was; with images the parts are kept.
  return parts.some((part) => part.type === 'input_image')
    ? parts
    : parts.map((part) => (part as ResponsesInputTextPart).text).join(PART_SEPARATOR);
}

function decodeReasoningItem(item: Json, param: string): ResponsesReasoningItem {
  const texts = (value: unknown, path: string, type: 'summary_text' | 'reasoning_text'): string[] =>
    value === undefined || value === null
      ? []
      : array(value, path).map((input, i) => {
          const part = object(input, `${path}[${i}]`);
          oneOf(part.type, `${path}[${i}].type`, [type]);
          return string(part.text, `${path}[${i}].text`);
        });
  // The spec requires `summary`; OpenAI clients also send raw `content` (reasoning_text) back.
  const out: ResponsesReasoningItem = {
    type: 'reasoning',
    summary: texts(item.summary, `${param}.summary`, 'summary_text').map((text) => ({ type: 'summary_text', text })),
  };
  const content = texts(item.content, `${param}.content`, 'reasoning_text');
  if (content.length > 0) out.content = content.map((text) => ({ type: 'reasoning_text', text }));
  const encrypted = optionalString(item.encrypted_content, `${param}.encrypted_content`);
  if (encrypted !== undefined) out.encrypted_content = encrypted;
  return out;
}

function callId(value: unknown, param: string): string {
  const id = string(value, param);
  if (id.length === 0) fail(param, 'must not be empty');
  return id;
}

function withId<T extends Exclude<ResponsesItem, { type: 'item_reference' }>>(item: T, id: string | undefined): T {
  if (id !== undefined) item.id = id;
  return item;
}

/**
 * Replaces each `item_reference` with the item it names. `found` holds the items the caller fetched for
 * `DecodedResponsesRequest.itemReferences`; a missing one is the client's error, named by its input path.
 */
export function resolveItemReferences(
  items: readonly ResponsesItem[],
  found: ReadonlyMap<string, ResponsesItem>,
): ResponsesItem[] {
  return items.map((item, i) => {
    if (item.type !== 'item_reference') return item;
    const target = found.get(item.id);
    if (!target || target.type === 'item_reference') fail(`input[${i}].id`, `no item with id '${item.id}'`);
    return target;
  });
}

/** The instructions as a leading system message, then the items' conversation (see `itemsToMessages`). */
export function conversationMessages(
  instructions: string | undefined,
  items: readonly ResponsesItem[],
  inputFrom = 0,
): CanonicalMessage[] {
  const messages = itemsToMessages(items, inputFrom);
  return instructions ? [{ role: 'system', content: instructions }, ...messages] : messages;
}

/**
 * Normalized items (input items, or a stored response's input then output items, the request's own from
 * `inputFrom`) → canonical messages.
 *
 * A model turn is spread over several items (`reasoning`, an assistant `message`, `function_call`s); they are
 * folded back into one assistant message, the shape chat templates render. A turn ends at any other item, at
 * reasoning that follows text or calls (a new model step), and at text that follows calls. Developer
 * messages become system messages; `function_call_output` becomes a `tool` message. Reasoning with only
 * encrypted content is dropped: it cannot be read here.
 */
export function itemsToMessages(items: readonly ResponsesItem[], inputFrom = 0): CanonicalMessage[] {
  const messages: CanonicalMessage[] = [];
  // An image is named in errors by where the request had it; items before `inputFrom` were stored earlier.
  const partPath =
    (index: number, field: 'content' | 'output') =>
    (part: number): string =>
      index >= inputFrom ? `input[${index - inputFrom}].${field}[${part}]` : `stored item ${index}, ${field}[${part}]`;
  // The assistant turn being folded, if any (a holder, so the helpers below can end it).
  const state: { turn: CanonicalMessage | null } = { turn: null };
  const flush = () => {
    if (state.turn) messages.push(state.turn);
    state.turn = null;
  };
  const open = (): CanonicalMessage => (state.turn ??= { role: 'assistant', content: '' });
  const hasOutput = () => Boolean(state.turn && (state.turn.content || state.turn.toolCalls));

  for (const [index, item] of items.entries()) {
    switch (item.type) {
      case 'reasoning': {
        const text = reasoningText(item);
        if (text === undefined) break;
        if (hasOutput()) flush();
        const current = open();
        current.reasoning = current.reasoning ? `${current.reasoning}${PART_SEPARATOR}${text}` : text;
        break;
      }
      case 'message':
        if (item.role === 'assistant') {
          if (hasOutput()) flush();
          open().content = textOf(item.content);
        } else {
          flush();
          messages.push({ role: systemRole(item.role), ...contentOf(item.content, partPath(index, 'content')) });
        }
        break;
      case 'function_call':
        (open().toolCalls ??= []).push({ id: item.call_id, name: item.name, arguments: item.arguments });
        break;
      case 'function_call_output':
        flush();
        messages.push(toolMessage(item, partPath(index, 'output')));
        break;
      case 'compaction': {
        flush();
        const message = compactionMessage(item);
        if (message) messages.push(message);
        break;
      }
      case 'mcp_call': {
        // A tool the gateway ran: the model sees it as its call and the tool's answer (or error).
        const callId = item.id ?? `mcp_${index}`;
        (open().toolCalls ??= []).push({ id: callId, name: item.name, arguments: item.arguments || '{}' });
        flush();
        messages.push({
          role: 'tool',
          content: item.output ?? `error: ${item.error ?? 'the tool gave no output'}`,
          toolCallId: callId,
        });
        break;
      }
      // What a server offered is the request's tools, and a call waiting for approval has not run: the
      // call the approval lets run comes as an mcp_call of its own.
      case 'mcp_list_tools':
      case 'mcp_approval_request':
        break;
      case 'item_reference':
        // The decoder leaves references out of its own request; anything else must resolve them first.
        throw new CortexError('internal', `item_reference '${item.id}' was not resolved before building messages`);
    }
  }
  flush();
  return messages;
}

function reasoningText(item: ResponsesReasoningItem): string | undefined {
  const parts = item.content?.length ? item.content : item.summary;
  return parts.length > 0 ? parts.map((part) => part.text).join(PART_SEPARATOR) : undefined;
}

function textOf(content: ResponsesMessageItem['content']): string {
  return contentOf(content, () => '').content;
}

/** Parts as canonical content: text joined, images where they stand (named by `path(j)` in errors). */
function contentOf(
  content: ReadonlyArray<ResponsesMessageItem['content'][number]>,
  path: (part: number) => string,
): Pick<CanonicalMessage, 'content' | 'images'> {
  const parts = new ContentParts(PART_SEPARATOR);
  content.forEach((part, j) => {
    if (part.type === 'input_image') parts.addImage(openaiImage(part as unknown as Json, path(j)));
    else parts.addText(part.text);
  });
  return parts.message;
}

function systemRole(role: ResponsesMessageRole): 'user' | 'system' {
  return role === 'user' ? 'user' : 'system';
}

function toolMessage(item: ResponsesFunctionCallOutputItem, path: (part: number) => string): CanonicalMessage {
  const output = typeof item.output === 'string' ? { content: item.output } : contentOf(item.output, path);
  return { role: 'tool', ...output, toolCallId: item.call_id };
}
