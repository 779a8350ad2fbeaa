import type { StreamEventBody } from '@cortex/contracts';
import type { ChatFormat } from './chat-format.js';
import { HarmonyParser } from './harmony-parser.js';
import { MarkerParser } from './marker-parser.js';

/** What the parser sends: the answer, the reasoning, and each tool call as it streams. */
export type ParsedEvent = Extract<StreamEventBody, { type: 'text' | 'reasoning' | 'tool_call' | 'tool_args' }>;

export interface ParserOptions {
  /** The declared tools by name, with their parameters' JSON schema; null takes any name (the syntax alone). */
  readonly tools: ReadonlyMap<string, Record<string, unknown> | undefined> | null;
  /** The prompt left the model inside its reasoning block (the template's generation prompt opened it). */
  readonly startInReasoning?: boolean;
  /** The id of call `index` where the output gives none. */
  readonly callId: (index: number) => string;
  readonly emit: (event: ParsedEvent) => void;
}

/**
 * Reads a model's output as it streams — text with special tokens shown — and sends the answer,
 * the reasoning and the tool calls as events, by the model's format (see ChatFormat). Text that may
 * be the start of a marker is held until the next piece says; a marker never reaches the answer.
 * Fed in any cuts, the events add up to the same answer, reasoning and calls.
 */
export interface OutputParser {
  push(text: string): void;
  /** The output is over: what is held goes out, an open call ends (or is given back as text). */
  end(): void;
  /** Calls sent so far. */
  readonly calls: number;
  /** Calls whose arguments are complete. */
  readonly completedCalls: number;
  /** Inside a call's text now (the call grammar holds the output there). */
  readonly inCall: boolean;
  /** Inside the reasoning now. */
  readonly reasoning: boolean;
  /** The declared tool whose JSON arguments are being written now, for a grammar of its parameters (see CallParser). */
  readonly argumentsFor: string | null;
  /**
   * How many characters at the end of what it read may still reach the answer: text held as the
   * possible start of a marker, the answer's white space it holds; inside a call everything (a call
   * to a tool the request did not declare is given back as text).
   */
  readonly held: number;
}

export function createOutputParser(format: ChatFormat, options: ParserOptions): OutputParser {
  return format.harmony ? new HarmonyParser(format.harmony, options) : new MarkerParser(format, options);
}
