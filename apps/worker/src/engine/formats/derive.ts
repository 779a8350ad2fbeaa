import type { CanonicalMessage, ToolDefinition } from '@cortex/contracts';
import type { ChatFormat, ToolSyntax } from './chat-format.js';
import { JsonDepth } from './scan.js';

/** Renders a conversation with a model's template, as the worker would (see TemplatePrompt.probe). */
export type ProbeRender = (messages: readonly CanonicalMessage[], tools?: readonly ToolDefinition[]) => string;

const USER = 'probe user message';
const TEXT = 'PROBE_ANSWER';
const REASONING = 'PROBE_REASONING';
const NAME = 'probe_function';
const TOOL: ToolDefinition = {
  name: NAME,
  description: 'probe',
  parameters: { type: 'object', properties: { probe_key: { type: 'string' } } },
};
const PROBE_KEY = 'probe_key';
const PROBE_VALUE = 'probe_value';
const CALL = { id: 'a1b2c3d4e', name: NAME, arguments: JSON.stringify({ [PROBE_KEY]: PROBE_VALUE }) };

/**
 * A format for a template no fingerprint knows, found by rendering variants of one conversation and
 * comparing them, as llama.cpp's autoparser does: the assistant turn with an answer, with reasoning,
 * and with a call. What the template writes around the reasoning gives its markers; what it writes
 * for the call gives the call's opening and closing and its shape — a JSON object naming the tool
 * (`{"name": …, "arguments": …}`, whatever the keys), or the name as text, a separator and the
 * arguments as JSON, or as tags, one pair per argument. Null when neither reasoning nor a call is
 * found: the template teaches neither, or a syntax this cannot read, and the model is read as plain text.
 */
export function deriveFormat(render: ProbeRender): ChatFormat | null {
  const turn = (assistant: CanonicalMessage, tools?: readonly ToolDefinition[]): string | null => {
    try {
      const text = render([{ role: 'user', content: USER }, assistant], tools);
      const at = text.lastIndexOf(USER);
      return at === -1 ? null : text.slice(at + USER.length);
    } catch {
      return null;
    }
  };
  const answer = turn({ role: 'assistant', content: TEXT });
  if (answer === null || !answer.includes(TEXT)) return null;
  // What comes before the answer (the assistant's header) and after it (the end of its turn).
  const [head = '', tail = ''] = answer.split(TEXT);
  const reasoning = reasoningMarkers(turn({ role: 'assistant', content: TEXT, reasoning: REASONING }));
  const tools = callSyntax(turn({ role: 'assistant', content: '', toolCalls: [CALL] }, [TOOL]), head, tail);
  if (!reasoning && !tools) return null;
  return { id: 'derived', ...(reasoning && { reasoning }), ...(tools && { tools }) };
}

/** A tag as tool-call syntaxes write them: `<tool_call>`, `</parameter>`, `<minimax:tool_call>`. */
const TAG = String.raw`<[^<>\s]{1,40}>`;

/** A marker: a tag (`<think>`, `<|inner_prefix|>`) or a bracketed word (`[THINK]`). */
const MARKER = String.raw`(?:<[^<>\s]{1,40}>|\[[^[\]\s]{1,40}\])`;

/**
 * The markers around the reasoning, as the template writes a turn that has some: the marker right
 * before it and the one right after it (a template may write them around an empty block too, as
 * Qwen3's does, so they are found next to the reasoning, not by difference).
 */
function reasoningMarkers(rendered: string | null): { open: string; close: string } | null {
  if (rendered === null || !rendered.includes(REASONING)) return null;
  const at = rendered.indexOf(REASONING);
  const open = new RegExp(`(${MARKER})\\s*$`).exec(rendered.slice(0, at))?.[1];
  const close = new RegExp(`^\\s*(${MARKER})`).exec(rendered.slice(at + REASONING.length))?.[1];
  return open && close && open !== close ? { open, close } : null;
}

/** The call's syntax, from the text the template writes for one call in place of an answer. */
function callSyntax(rendered: string | null, head: string, tail: string): ToolSyntax | null {
  if (rendered === null || !rendered.includes(NAME)) return null;
  let call = rendered.startsWith(head)
    ? rendered.slice(head.length)
    : rendered.slice(Math.max(0, rendered.indexOf(NAME) - 64));
  const turnEnd = tail.trim();
  if (turnEnd && call.includes(turnEnd)) call = call.slice(0, call.lastIndexOf(turnEnd));
  const name = call.indexOf(NAME);
  const args = argumentsObject(call, name + NAME.length);
  if (!args) return taggedSyntax(call, name);
  // The name inside a JSON object that holds the arguments too: `{"name": …, "arguments": …}` (or a list of them).
  const holder = enclosingObject(call, name, args);
  if (holder) {
    const json = JSON.parse(call.slice(holder.start, holder.end)) as Record<string, unknown>;
    const nameKey = Object.keys(json).find((key) => json[key] === NAME);
    const argKey = Object.keys(json).find((key) => typeof json[key] === 'object' && json[key] !== null);
    if (!nameKey || !argKey) return null;
    const list = call[holder.start - 1] === '[';
    const open = call.slice(0, holder.start - (list ? 1 : 0)).trim();
    const close = call.slice(holder.end + (list ? 1 : 0)).trim();
    if (!open) return null;
    return {
      callOpen: open,
      ...(close && { callClose: close }),
      body: { kind: 'json', nameKeys: [nameKey], argKeys: [argKey], ...(list && { list: true }) },
    };
  }
  // The name as text, then a separator, then the arguments: `[TOOL_CALLS]NAME[ARGS]{…}`.
  const open = call.slice(0, name).trim();
  const separator = call.slice(name + NAME.length, args.start).trim();
  const close = call.slice(args.end).trim();
  if (!open || !separator) return null;
  return {
    callOpen: open,
    ...(close && { callClose: close }),
    body: { kind: 'named', nameEnd: [separator], args: { kind: 'json' } },
  };
}

/**
 * A call whose arguments are tags, one pair per argument (`<parameter=K>\nV\n</parameter>`,
 * `<arg_key>K</arg_key><arg_value>V</arg_value>`, `<parameter name="K">V</parameter>`): the call's
 * opening marker, the text before the name and after it, the key's and the value's tags, then the
 * markers that close the value, the arguments and the call — each read where the template writes it
 * around the probe's name, key and value. Null for any other shape.
 */
function taggedSyntax(call: string, name: number): ToolSyntax | null {
  const key = call.indexOf(PROBE_KEY, name + NAME.length);
  const value = key === -1 ? -1 : call.indexOf(PROBE_VALUE, key + PROBE_KEY.length);
  if (value === -1) return null;
  // Before the name: the call's opening marker, then what precedes the name inside it (`<function=`, `<invoke name="`).
  const opening = new RegExp(`^\\s*(${TAG})`).exec(call.slice(0, name));
  if (!opening?.[1]) return null;
  const callOpen = opening[1];
  const namePrefix = call.slice(opening[0].length, name).trim();
  // After the name: what ends it, then the key's opening tag (from its last `<`).
  const afterName = call.slice(name + NAME.length, key);
  const keyAt = afterName.lastIndexOf('<');
  if (keyAt === -1) return null;
  const keyOpen = afterName.slice(keyAt);
  const nameEnd = afterName.slice(0, keyAt);
  // Between key and value: the key's closing tag, and the value's opening tag where there is one.
  const between = call.slice(key + PROBE_KEY.length, value);
  const keyEnd = between.indexOf('>');
  if (keyEnd === -1) return null;
  const keyClose = between.slice(0, keyEnd + 1).trim();
  const valueOpen = between.slice(keyEnd + 1).trim();
  // After the value: its closing tag, the arguments' where there is one, and the call's, with only white space between.
  const after = call.slice(value + PROBE_VALUE.length);
  const closing = after.match(new RegExp(TAG, 'g')) ?? [];
  if (closing.length < 2 || closing.length > 3 || closing.join('') !== after.replace(/\s+/g, '')) return null;
  const [valueClose = '', ...rest] = closing;
  const callClose = rest.at(-1) ?? '';
  const argsClose = rest.length === 2 ? rest[0] : undefined;
  if (!keyClose || (valueOpen && !valueOpen.startsWith('<'))) return null;
  return {
    callOpen,
    callClose,
    body: {
      kind: 'named',
      ...(namePrefix && { namePrefix }),
      // A name the template ends with white space alone (GLM's newline) may also end where the first key opens.
      nameEnd: nameEnd.trim() ? [nameEnd.trim()] : [...(nameEnd ? [nameEnd] : []), keyOpen],
      args: {
        kind: 'tagged',
        keyOpen,
        keyClose,
        ...(valueOpen && { valueOpen }),
        valueClose,
        ...(between.endsWith('\n') && after.startsWith('\n') && { trimNewline: true }),
      },
      ...(argsClose && { argsClose }),
    },
  };
}

/** Where the JSON object of the probe's arguments is, at or after `from`. */
function argumentsObject(text: string, from: number): { start: number; end: number } | null {
  for (let start = text.indexOf('{', from); start !== -1; start = text.indexOf('{', start + 1)) {
    const end = balanced(text, start);
    if (end === -1) continue;
    try {
      const value = JSON.parse(text.slice(start, end)) as Record<string, unknown>;
      if (value[PROBE_KEY] === PROBE_VALUE) return { start, end };
    } catch {
      // Not JSON from here: look further.
    }
  }
  return null;
}

/** The JSON object that holds both the name (at `name`) and the arguments, if there is one. */
function enclosingObject(
  text: string,
  name: number,
  args: { start: number; end: number },
): { start: number; end: number } | null {
  for (
    let start = text.lastIndexOf('{', Math.min(name, args.start));
    start !== -1;
    start = text.lastIndexOf('{', start - 1)
  ) {
    const end = balanced(text, start);
    if (end >= args.end && end > name) {
      try {
        JSON.parse(text.slice(start, end));
        return { start, end };
      } catch {
        return null;
      }
    }
    if (start === 0) break;
  }
  return null;
}

/** The index just past the bracket that closes the one at `start` (strings understood), or -1. */
function balanced(text: string, start: number): number {
  const end = new JsonDepth().push(text.slice(start));
  return end === -1 ? -1 : start + end;
}
