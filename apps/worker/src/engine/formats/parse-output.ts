import type { ChatFormat } from './chat-format.js';
import { createOutputParser, type ParsedEvent, type ParserOptions } from './output-parser.js';

/** A whole output as the parser reads it: the answer, the reasoning and the calls. */
export interface ParsedOutput {
  content: string;
  reasoning: string;
  toolCalls: Array<{ name: string; id: string; arguments: string }>;
}

/**
 * Feeds `pieces` to a parser of `format` and adds its events up (ids numbered `call_0`, …); for
 * tests, benchmarks and checking a format against a raw output.
 */
export function parseOutput(
  format: ChatFormat,
  pieces: readonly string[],
  options: Partial<Pick<ParserOptions, 'tools' | 'startInReasoning'>> = {},
): { output: ParsedOutput; events: ParsedEvent[] } {
  const events: ParsedEvent[] = [];
  const parser = createOutputParser(format, {
    tools: null,
    callId: (index) => `call_${index}`,
    emit: (event) => events.push(event),
    ...options,
  });
  for (const piece of pieces) parser.push(piece);
  parser.end();
  return { output: addUp(events), events };
}

export function addUp(events: readonly ParsedEvent[]): ParsedOutput {
  const output: ParsedOutput = { content: '', reasoning: '', toolCalls: [] };
  for (const event of events) {
    if (event.type === 'text') output.content += event.text;
    else if (event.type === 'reasoning') output.reasoning += event.text;
    else if (event.type === 'tool_call')
      output.toolCalls[event.index] = { name: event.name, id: event.id, arguments: '' };
    else {
      const call = output.toolCalls[event.index];
      if (!call) throw new Error(`arguments for call ${event.index} before the call`);
      call.arguments += event.delta;
    }
  }
  return output;
}

/** Cuts `text` into pieces of `size` characters. */
export function cut(text: string, size: number): string[] {
  const pieces: string[] = [];
  for (let i = 0; i < text.length; i += size) pieces.push(text.slice(i, i + size));
  return pieces;
}
