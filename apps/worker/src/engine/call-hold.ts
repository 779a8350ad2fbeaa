import type { LlamaModel, Token } from 'node-llama-cpp';
import { CortexError, type CanonicalRequest, type ToolDefinition } from '@cortex/contracts';
import type { ChatFormat, ToolSyntax } from './formats/chat-format.js';
import type { CallKeys } from './tool-call-schema.js';
import { hasWholeCallGrammar, type WholeCallStart } from './whole-call-grammar.js';

/**
 * What a grammar holds of a call (see CallGrammar): the whole JSON object of a call after its opening
 * marker, until the JSON closes (`call`: Hermes, Nemotron, Granite, Command R7B, Apertus); the JSON
 * arguments after the name the model wrote as text (`arguments`: Mistral, DeepSeek V3.1, Kimi,
 * Harmony's recipient calls); or the whole call from after its opening marker through its closing one
 * (`whole`: the tagged syntaxes, DeepSeek R1's fenced JSON, Gemma 4's dict, LFM2's pythonic list).
 */
export type CallHold = 'call' | 'arguments' | 'whole';

/** How a model's calls are held, decided once at load from its format's description. */
export interface CallHolding {
  /** Null where no grammar can hold the format's calls (then a forced call is refused). */
  readonly hold: CallHold | null;
  /**
   * A call the model opens by itself is held too: its opening marker is one token, and no section
   * is around the calls (MiniMax's, DeepSeek R1's). Otherwise only a forced call is, whose opening
   * cortex writes.
   */
  readonly auto: boolean;
}

const NONE: CallHolding = { hold: null, auto: false };

/** The one token `text` is, or null when it is several (or none). */
export function singleToken(model: LlamaModel, text: string): Token | null {
  const tokens = model.tokenize(text, true);
  return tokens.length === 1 ? (tokens[0] as Token) : null;
}

/**
 * What a grammar can hold of the format's calls on a model, given which texts are one token of its
 * vocabulary (`single`): the JSON call after a single-token
 * marker (or a list of them; one call must close with a single-token marker of its own), the JSON
 * arguments after a name ended by single-token markers, else the whole call where its syntax has a
 * closing marker (wholeCallGrammar).
 */
export function callHoldOf(format: ChatFormat, single: (text: string) => boolean): CallHolding {
  if (format.harmony) return { hold: 'arguments', auto: true };
  const tools = format.tools;
  if (!tools || tools.atStart) return NONE;
  const { body } = tools;
  // The grammar opens with the token after the separator: a separator of several tokens could share its last one with the JSON.
  if (body.kind === 'named' && body.args.kind === 'json' && !body.args.fence && body.nameEnd.every(single))
    return { hold: 'arguments', auto: true };
  if (body.kind === 'json') {
    if (tools.sectionOpen || callKeys(tools) === null) return NONE;
    // A list of calls may end where its JSON does (Granite's, Mistral Nemo's); one call closes with its marker.
    if (!tools.callClose && !body.list) return NONE;
    const closes = tools.callClose === undefined || single(tools.callClose);
    return single(tools.callOpen) && closes ? { hold: 'call', auto: true } : NONE;
  }
  if (hasWholeCallGrammar(tools)) return { hold: 'whole', auto: !tools.sectionOpen && single(tools.callOpen) };
  return NONE;
}

/** The keys of a call written as one JSON object, or null for any other syntax. */
export function callKeys(syntax: ToolSyntax | undefined): CallKeys | null {
  const body = syntax?.body;
  if (body?.kind !== 'json') return null;
  if (body.nameAsKey) return { name: '', args: '', nameAsKey: true };
  const [name, args] = [body.nameKeys[0], body.argKeys[0]];
  return name && args ? { name, args } : null;
}

/**
 * The keys of a call that is the whole answer, one JSON object (Llama 3's `{"name", "parameters"}`):
 * a forced call is held by the whole output's grammar. Null for every other syntax.
 */
export function wholeAnswerCall(format: ChatFormat): CallKeys | null {
  const tools = format.tools;
  if (!tools?.atStart || tools.body.kind !== 'json' || tools.body.list || tools.body.nameAsKey) return null;
  return callKeys(tools);
}

/** What forcedTools needs to know of the model. */
export interface ForcingModel {
  readonly id: string;
  readonly format: ChatFormat;
  readonly holding: CallHolding;
  /** The model's template teaches calls (its capabilities say `tools`). */
  readonly callsTools: boolean;
}

/**
 * The tools a request obliges the model to call (`tool_choice` required: any of them; a named
 * function: that one), or null when the model chooses. Enforcing needs a grammar that fits the
 * model's format, and for a format whose name the model writes before held arguments, one tool to
 * write it for (a named function, or `required` with one tool declared); otherwise the request is
 * refused rather than silently left to chance.
 */
export function forcedTools(request: CanonicalRequest, model: ForcingModel): ToolDefinition[] | null {
  const choice = request.toolChoice;
  if (!choice || choice === 'auto' || !request.tools?.length) return null;
  const { format, holding } = model;
  const refuse = (why: string, fix: string): never => {
    throw new CortexError('invalid_request', `tool_choice '${choice}' cannot be enforced: ${model.id} ${why}; ${fix}`, {
      param: 'tool_choice',
    });
  };
  if (!wholeAnswerCall(format) && (!holding.hold || (holding.hold === 'arguments' && !format.forcedCall))) {
    const why = model.callsTools
      ? `writes its calls in the ${format.id} format, which cortex cannot hold to a grammar on this model`
      : 'writes no tool calls cortex can parse (its chat template teaches none)';
    refuse(why, "send tool_choice 'auto' or use a model whose format cortex holds (docs/compatibility.md)");
  }
  const name = choice.slice('function:'.length);
  const tools =
    choice === 'required'
      ? request.tools
      : [
          request.tools.find((t) => t.name === name) ??
            refuse(`is asked for '${name}', which is not in tools`, 'name a declared tool'),
        ];
  if (holding.hold === 'arguments' && tools.length > 1) {
    refuse(
      `writes the tool's name itself in the ${format.id} format, so cortex forces one named tool at a time`,
      'name the function to call',
    );
  }
  return tools;
}

/** How a forced call starts: the text written for the model, and where a whole call's grammar starts holding. */
export interface ForcedStart {
  /** Written for the model before it samples; null where nothing is (the grammar writes it all). */
  readonly text: string | null;
  readonly from: WholeCallStart;
}

/**
 * How a forced call to `tools` starts: cortex writes the call's opening marker (or its section's,
 * and the model writes the call's opening under the grammar), or the format's call up to its
 * arguments; nothing for a call that is the whole answer, which the output's grammar holds from the
 * first token. A model that starts inside its reasoning may finish it first where its calls are held
 * whole: the grammar then starts where the reasoning ends and writes the openings itself; for the
 * other holds the reasoning is closed for it.
 */
export function forcedStart(
  tools: readonly ToolDefinition[],
  request: CanonicalRequest,
  format: ChatFormat,
  hold: CallHold | null,
  startInReasoning: boolean,
): ForcedStart {
  const syntax = format.tools;
  if (wholeAnswerCall(format)) return { text: null, from: 'call' };
  const reasoning = startInReasoning && format.reasoning !== undefined;
  if (hold === 'whole' && syntax) {
    if (reasoning) return { text: null, from: 'answer' };
    return syntax.sectionOpen ? { text: syntax.sectionOpen, from: 'section' } : { text: syntax.callOpen, from: 'call' };
  }
  const reasoningClose = reasoning ? (format.reasoning?.close ?? '') : '';
  if (hold === 'call' && syntax) return { text: reasoningClose + syntax.callOpen, from: 'call' };
  const name = tools[0]?.name;
  if (!format.forcedCall || name === undefined) return { text: null, from: 'call' };
  const earlier = request.messages.reduce((count, message) => count + (message.toolCalls?.length ?? 0), 0);
  return {
    text: reasoningClose + format.forcedCall.replace('{name}', name).replace('{index}', String(earlier)),
    from: 'call',
  };
}
