import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { ChatFormat } from './chat-format.js';
import { FORMATS, type FormatId } from './families.js';
import { parseOutput, type ParsedOutput } from './parse-output.js';

/** llama.cpp's parser cases (tests/test-chat.cpp, MIT; see testdata/README.md). */
interface Case {
  family: string;
  template: string;
  note: string;
  input: string;
  options: {
    reasoning_format: string;
    thinking_forced_open: boolean | null;
    parse_tool_calls: boolean;
    is_partial: boolean;
    json_schema?: string;
  };
  tools: Array<{ name: string; parameters?: Record<string, unknown> }>;
  expected: {
    content: string;
    reasoning_content: string;
    tool_calls: Array<{ name: string; arguments: string; id: string }>;
  };
}

const CASES = (
  JSON.parse(
    readFileSync(new URL('../../../src/engine/formats/testdata/llama-cpp-chat-cases.json', import.meta.url), 'utf8'),
  ) as { cases: Case[] }
).cases;

/** llama.cpp's family names for the formats cortex gives them. */
const FAMILY: Readonly<Record<string, FormatId>> = {
  devstral: 'mistral',
  magistral: 'mistral',
  'mistral-small-3.2': 'mistral',
  mistral: 'mistral-nemo',
  'qwen3.5': 'qwen3-coder',
  'nemotron-v3': 'qwen3-coder',
};

/** Granite 4 templates teach Hermes calls (their fingerprint says so too). */
const formatOf = (c: Case): FormatId | undefined =>
  /Granite 4/.test(c.note)
    ? 'hermes'
    : (FAMILY[c.family] ?? (Object.hasOwn(FORMATS, c.family) ? (c.family as FormatId) : undefined));

/**
 * Why a case is not compared, or null. cortex always splits reasoning from the answer (llama.cpp's
 * `reasoning_format: none` leaves it in the content); a JSON response format is held by a grammar
 * and returned as the model wrote it; partial cases check llama.cpp's own partial-message rules.
 */
function skipped(c: Case, format: FormatId | undefined): string | null {
  if (!format) return `no ${c.family} format in cortex`;
  // An opening marker written again inside the reasoning is markup: cortex drops it, llama.cpp keeps it as reasoning text.
  if (c.note.startsWith('model re-emits empty <think></think>')) return 'a reasoning marker re-opened';
  if (c.options.is_partial) return 'a partial message';
  if (c.options.json_schema) return 'a JSON response format';
  const channels = format === 'gpt-oss' || format === 'gemma4';
  if (c.options.reasoning_format === 'none' && (c.options.thinking_forced_open || channels))
    return 'reasoning left in the content';
  return null;
}

function parse(c: Case, format: ChatFormat, pieces: readonly string[]): ParsedOutput {
  const withReasoning = c.options.reasoning_format !== 'none';
  const tools = c.options.parse_tool_calls ? new Map(c.tools.map((tool) => [tool.name, tool.parameters])) : new Map();
  return parseOutput(withReasoning ? format : { ...format, reasoning: undefined }, pieces, {
    tools: c.options.parse_tool_calls && c.tools.length === 0 ? null : tools,
    startInReasoning: withReasoning && c.options.thinking_forced_open === true,
  }).output;
}

const normalised = (args: string): string => {
  try {
    return JSON.stringify(JSON.parse(args));
  } catch {
    return args;
  }
};

describe("llama.cpp's chat parser cases", () => {
  it("llama.cpp's cases - every compared case parses as llama.cpp expects (content, reasoning, calls)", () => {
    const compared = new Map<string, number>();
    for (const c of CASES) {
      const id = formatOf(c);
      if (skipped(c, id) || !id) continue;
      const out = parse(c, FORMATS[id], [c.input]);
      const what = `${c.family} (${c.note}): ${JSON.stringify(c.input)}`;
      assert.equal(out.content.trim(), c.expected.content.trim(), `content of ${what}`);
      assert.equal(out.reasoning.trim(), c.expected.reasoning_content.trim(), `reasoning of ${what}`);
      assert.deepEqual(
        out.toolCalls.map((call, i) => ({
          name: call.name,
          arguments: normalised(call.arguments),
          ...(c.expected.tool_calls[i]?.id && { id: call.id }),
        })),
        c.expected.tool_calls.map((call) => ({
          name: call.name,
          arguments: normalised(call.arguments),
          ...(call.id && { id: call.id }),
        })),
        `calls of ${what}`,
      );
      compared.set(c.family, (compared.get(c.family) ?? 0) + 1);
    }
    // Every family with cases is compared on at least one of them.
    const families = new Set(CASES.filter((c) => formatOf(c)).map((c) => c.family));
    assert.deepEqual(
      [...families].filter((family) => !compared.has(family)),
      [],
    );
    assert.ok(
      [...compared.values()].reduce((a, b) => a + b, 0) >= 160,
      `${[...compared.values()].reduce((a, b) => a + b, 0)} cases compared`,
    );
  });

  it("llama.cpp's cases - cut at every character, and at every character pair, the streamed deltas add up to the whole parse", () => {
    for (const c of CASES) {
      const id = formatOf(c);
      if (!id) continue;
      const format = FORMATS[id];
      const whole = parse(c, format, [c.input]);
      const chars = [...c.input];
      assert.deepEqual(parse(c, format, chars), whole, `${c.family} (${c.note}) one character at a time`);
      for (let at = 1; at < chars.length; at++) {
        const cut = [chars.slice(0, at).join(''), chars.slice(at).join('')];
        assert.deepEqual(parse(c, format, cut), whole, `${c.family} (${c.note}) cut at ${at}`);
      }
    }
  });
});
