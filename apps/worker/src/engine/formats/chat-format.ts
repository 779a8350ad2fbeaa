/**
 * How one model family writes its output: reasoning, tool calls and (for Harmony) channels, as the
 * text a model's tokens detokenize to with special tokens shown. Every family is data of this shape,
 * read by the one streaming parser (`OutputParser`); nothing in the decode loop knows a family.
 */
export interface ChatFormat {
  /** Shown in `/v1/models` and the worker's load log (`hermes`, `qwen3-coder`, `gpt-oss`, …). */
  readonly id: string;
  /** The reasoning block, where the family has one outside Harmony's channels. */
  readonly reasoning?: { readonly open: string; readonly close: string };
  readonly tools?: ToolSyntax;
  /** Message-structured output (gpt-oss): channels and recipients instead of marked blocks. */
  readonly harmony?: HarmonySyntax;
  /** Markers around the answer that are not content (Command R7B's response markers): dropped. */
  readonly strip?: readonly string[];
  /**
   * What a call to `{name}` starts with, up to its JSON arguments: written for the model when the
   * request forces that call (`tool_choice`), whose arguments a grammar then holds. `{index}` is the
   * number of calls earlier in the conversation (Kimi numbers its call ids across it).
   */
  readonly forcedCall?: string;
}

/**
 * Where calls are: an optional section around them, then each call between its opening marker and its
 * closing one (or, without a closing marker, until its arguments' JSON closes or the next call opens).
 */
export interface ToolSyntax {
  /** Opens the block of calls (DeepSeek's `<｜tool▁calls▁begin｜>`, Kimi's section, MiniMax's `<minimax:tool_call>`). */
  readonly sectionOpen?: string;
  readonly sectionClose?: string;
  /** Opens each call; empty with `atStart` for a call that is bare JSON (Llama 3.x). */
  readonly callOpen: string;
  readonly callClose?: string;
  /** The call can only be the whole answer, written first (Llama 3.x's bare JSON object). */
  readonly atStart?: boolean;
  /**
   * Text that starts a call whose opening marker the model left out (Qwen3-Coder's `<function=`):
   * it opens the call and is read as the call's own text.
   */
  readonly bareOpen?: string;
  /** A call ends a reasoning block the model did not close (Kimi K2, Qwen3.5). */
  readonly endsReasoning?: boolean;
  readonly body: CallBody;
}

/**
 * What is inside one call.
 * - `json`: a JSON object holding the name and the arguments under one of the given keys (Hermes
 *   `{"name", "arguments"}`, Llama `{"name", "parameters"}`); `list`: a JSON array of such objects
 *   (Mistral Nemo, Granite, Nemotron, Command R7B); `nameAsKey`: `{"NAME": {arguments}}` (Apertus).
 * - `named`: the name as text up to one of `nameEnd` (after `namePrefix`), an optional id after
 *   `idMarker`, then the arguments in `args` syntax. `nameId`: the name text is the call's id and the
 *   name is the pattern's first group (Kimi's `functions.NAME:IDX`).
 * - `pythonic`: `[name(key="value", …), …]` (LFM2).
 */
export type CallBody =
  | {
      readonly kind: 'json';
      readonly nameKeys: readonly string[];
      readonly argKeys: readonly string[];
      readonly idKey?: string;
      readonly list?: boolean;
      readonly nameAsKey?: boolean;
    }
  | {
      readonly kind: 'named';
      readonly namePrefix?: string;
      readonly nameEnd: readonly string[];
      readonly idMarker?: string;
      readonly nameId?: RegExp;
      readonly args: ArgSyntax;
      /** Closes the arguments before the call closes (Qwen3-Coder's `</function>`). */
      readonly argsClose?: string;
    }
  | { readonly kind: 'pythonic' };

/**
 * How arguments are written.
 * - `json`: a JSON object, streamed as written; `fence`: inside a ```json code fence (DeepSeek R1).
 * - `dict`: Gemma 4's object syntax, converted to JSON once the call closes.
 * - `tagged`: one tag pair per argument, key then value (`<parameter=K>V</parameter>`,
 *   `<arg_key>K</arg_key><arg_value>V</arg_value>`, `<parameter name="K">V</parameter>`), values
 *   converted by the declared schema's types; `trimNewline`: one newline at each end of a value is
 *   layout, not value.
 */
export type ArgSyntax =
  | { readonly kind: 'json'; readonly fence?: boolean }
  /** Gemma 4's dict: `{key:<|"|>text<|"|>,n:1,list:[…]}`, bare keys and strings between `quote`s. */
  | { readonly kind: 'dict'; readonly quote: string }
  | {
      readonly kind: 'tagged';
      readonly keyOpen: string;
      readonly keyClose: string;
      readonly valueOpen?: string;
      readonly valueClose: string;
      readonly trimNewline?: boolean;
    };

/**
 * OpenAI's Harmony format: the answer is a run of messages `[<|start|>assistant]<|channel|>CHANNEL
 * [to=RECIPIENT] [<|constrain|>json]<|message|>BODY<|end|>`; the channel says what the body is.
 */
export interface HarmonySyntax {
  readonly start: string;
  readonly channel: string;
  readonly message: string;
  /** Stands in a header before the body's content type (`<|constrain|>json`). */
  readonly constrain: string;
  /** What ends a message body. */
  readonly ends: readonly string[];
  readonly reasoningChannels: readonly string[];
  /** A recipient with this prefix is a call to the declared function of the rest of its name. */
  readonly functionPrefix: string;
}

/** A raw completion's output: no reasoning, no calls, special tokens not shown. */
export const RAW_FORMAT: ChatFormat = { id: 'raw' };

/**
 * The reasoning block a rendered chat prompt leaves open: a generation prompt that opens it (DeepSeek
 * R1, GLM, MiniMax) leaves the model inside it, unless an answer is already begun (`prefilled`), which
 * goes on after the block's closing marker. `close` is that marker where the prompt opened the block,
 * else ''.
 */
export function promptReasoning(
  format: ChatFormat,
  prompt: string,
  prefilled: boolean,
): { startInReasoning: boolean; close: string } {
  const { reasoning } = format;
  const opened = reasoning !== undefined && prompt.trimEnd().endsWith(reasoning.open);
  return { startInReasoning: opened && !prefilled, close: opened ? reasoning.close : '' };
}

/** How a format marks its reasoning, for a client that wants it inline: its own markers (Harmony's analysis message). */
export function inlineReasoningMarkers(format: ChatFormat): [string, string] | null {
  if (format.harmony)
    return [`${format.harmony.channel}analysis${format.harmony.message}`, format.harmony.ends[0] ?? ''];
  return format.reasoning ? [format.reasoning.open, format.reasoning.close] : null;
}

/** Every marker a format writes: banned as tokens while a grammar holds the output (a marker inside JSON would read as one). */
export function formatMarkers(format: ChatFormat): string[] {
  const { reasoning, tools, harmony } = format;
  return [
    reasoning?.open,
    reasoning?.close,
    tools?.sectionOpen,
    tools?.sectionClose,
    tools?.callOpen,
    tools?.callClose,
    ...(harmony ? [harmony.start, harmony.channel, harmony.message, harmony.constrain, ...harmony.ends] : []),
  ].filter((marker): marker is string => Boolean(marker));
}

/** Every text a format's data holds (markers, separators, tags): the special tokens among them are shown to the parser. */
export function formatTexts(format: ChatFormat): string[] {
  const texts: string[] = [];
  const walk = (value: unknown): void => {
    if (typeof value === 'string') texts.push(value);
    else if (Array.isArray(value)) value.forEach(walk);
    else if (value !== null && typeof value === 'object' && !(value instanceof RegExp))
      Object.values(value).forEach(walk);
  };
  walk({ ...format, id: '', forcedCall: format.forcedCall?.replace('{name}', '').replace('{index}', '') });
  return texts.filter(Boolean);
}
