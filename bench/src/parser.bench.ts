/**
 * `npm run bench:parser`: what reading a model's output by its family's format costs per token. For
 * each format, a family's raw output (reasoning, text and calls, repeated to BENCH_TOKENS pieces of
 * about a token's length) is fed piece by piece to the worker's output parser
 * (`formats/output-parser.ts`), paired in the same rounds with a baseline that only hands each piece
 * on as text (what the decode did with plain text before the parser). Rounds alternate which goes
 * first; the table gives the medians per piece and the difference, the parser's own cost per token.
 *
 * Options (env): BENCH_TOKENS (20000), BENCH_ROUNDS (15).
 */
import { cpus, totalmem } from 'node:os';
import { performance } from 'node:perf_hooks';
import { FORMATS, type FormatId } from '../../apps/worker/dist/engine/formats/families.js';
import { createOutputParser, type ParsedEvent } from '../../apps/worker/dist/engine/formats/output-parser.js';

const TOKENS = Number(process.env.BENCH_TOKENS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 15);
const log = (line: string): void => console.log(line);
const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;

const ANSWER = 'The weather in Paris is sunny, with a light breeze from the west and 20 degrees. ';
/** One turn of each family's raw output: reasoning, an answer and a call, as its models write them. */
const OUTPUTS: ReadonlyArray<[FormatId, string]> = [
  [
    'hermes',
    `<think>\nThe user wants the weather, so I call the tool.\n</think>\n\n${ANSWER}<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>`,
  ],
  [
    'qwen3-coder',
    `${ANSWER}\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>`,
  ],
  [
    'gpt-oss',
    `<|channel|>analysis<|message|>The user wants the weather, so I call the tool.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris","days":3}`,
  ],
  [
    'mistral',
    `[THINK]The user wants the weather, so I call the tool.[/THINK]${ANSWER}[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}`,
  ],
  [
    'kimi-k2',
    `<think>The user wants the weather, so I call the tool.</think>${ANSWER}<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|><|tool_calls_section_end|>`,
  ],
  [
    'glm-4.5',
    `<think>The user wants the weather, so I call the tool.</think>\n${ANSWER}<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>`,
  ],
];

/** One turn's text cut into pieces of 1 to 7 characters (a token's usual length), the same cuts every run. */
function pieces(text: string): string[] {
  const out: string[] = [];
  let seed = 7;
  for (let at = 0; at < text.length;) {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    const size = 1 + (seed % 7);
    out.push(text.slice(at, at + size));
    at += size;
  }
  return out;
}

const TOOLS = new Map<string, Record<string, unknown> | undefined>([
  ['get_weather', { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } }],
]);

/** ns per piece through the parser: a parser per turn, as each request has its own. */
function parse(format: FormatId, turn: readonly string[], turns: number): number {
  let events = 0;
  const emit = (_event: ParsedEvent): void => void events++;
  const started = performance.now();
  for (let t = 0; t < turns; t++) {
    const parser = createOutputParser(FORMATS[format], { tools: TOOLS, callId: () => 'call_0', emit });
    for (const piece of turn) parser.push(piece);
    parser.end();
  }
  if (events === 0) throw new Error(`${format}: no events`);
  return ((performance.now() - started) * 1e6) / (turn.length * turns);
}

/** ns per piece handed on as text, as plain text went out before. */
function passThrough(turn: readonly string[], turns: number): number {
  let events = 0;
  const emit = (event: ParsedEvent): void => void (events += event.type === 'text' ? 1 : 0);
  const started = performance.now();
  for (let t = 0; t < turns; t++) for (const piece of turn) emit({ type: 'text', text: piece });
  if (events !== turn.length * turns) throw new Error('lost pieces');
  return ((performance.now() - started) * 1e6) / (turn.length * turns);
}

function main(): void {
  log(`cortex parser bench — ${new Date().toISOString()}`);
  log(
    `machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}`,
  );
  log(`settings: ${TOKENS} pieces per format, ${ROUNDS} paired rounds (the first one warms up and is left out)\n`);
  log('format        pieces/turn   pass-through ns/piece   parser ns/piece   parser − pass-through');
  for (const [format, text] of OUTPUTS) {
    const turn = pieces(text);
    const turns = Math.ceil(TOKENS / turn.length);
    const base: number[] = [];
    const parsed: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const parserFirst = round % 2 === 1;
      const first = parserFirst ? parse(format, turn, turns) : passThrough(turn, turns);
      const second = parserFirst ? passThrough(turn, turns) : parse(format, turn, turns);
      if (round === 0) continue;
      base.push(parserFirst ? second : first);
      parsed.push(parserFirst ? first : second);
    }
    const diff = parsed.map((ns, i) => ns - (base[i] ?? 0));
    log(
      `${format.padEnd(13)} ${String(turn.length).padStart(11)}   ${median(base).toFixed(0).padStart(21)}   ${median(parsed).toFixed(0).padStart(15)}   ${median(diff).toFixed(0).padStart(21)}`,
    );
  }
}

main();
