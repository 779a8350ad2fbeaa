import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { CanonicalRequest, FinishReason, Usage } from '@cortex/contracts';
import type { EngineEvent } from './engine.types.js';
import { OutputProcessor, type OutputOptions } from './output-processor.js';
import { TokenRelease } from './token-release.js';
import { FORMATS } from './formats/families.js';
import { RAW_FORMAT, type ChatFormat } from './formats/chat-format.js';

/*
 * The output processor as both engines feed it. Each case is a model's output, a token's text at a
 * time, run twice: as the text engine feeds it (each token's text with its id, a TokenRelease putting
 * the ids on the events, the end of generation a token of its own, the token limit acted on) and as
 * the vision engine does (the text alone, after llama.node, which ends its run on the stop strings and
 * n_predict itself and reports what it generated). Both must send the same output, finish reason and
 * usage.
 */

const PROMPT = 7;
const WEATHER = { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } };
const CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}';

interface Case {
  name: string;
  format?: ChatFormat;
  request?: Partial<CanonicalRequest>;
  /** What the model writes, a token's text each; then its end of generation (unless a limit comes first). */
  tokens: string[];
  startInReasoning?: boolean;
  /** The chat template's own stop strings. */
  hiddenStops?: string[];
  /** The context's room after the prompt. */
  room?: number;
  /** A forced call's opening: the text engine writes it as output tokens, the vision engine ends its prompt with it. */
  opening?: string[];
  expect: {
    text?: string;
    reasoning?: string;
    calls?: Array<[string, string]>;
    reason: FinishReason;
    stopSequence?: string;
    completion: number | { text: number; vision: number };
    reasoningTokens?: number;
  };
}

const request = (over: Partial<CanonicalRequest> = {}): CanonicalRequest => ({
  model: 'm',
  messages: [{ role: 'user', content: 'hi' }],
  sampling: {},
  stream: true,
  ...over,
});

const CASES: Case[] = [
  { name: 'an answer', tokens: ['Hel', 'lo', '!'], expect: { text: 'Hello!', reason: 'stop', completion: 3 } },
  {
    name: 'reasoning, then the answer: both markers count as reasoning',
    tokens: ['<think>', 'hmm', '</think>', 'Hi'],
    expect: { reasoning: 'hmm', text: 'Hi', reason: 'stop', completion: 4, reasoningTokens: 3 },
  },
  {
    name: 'a prompt that opened the reasoning',
    tokens: ['hmm', '</think>', 'Hi'],
    startInReasoning: true,
    expect: { reasoning: 'hmm', text: 'Hi', reason: 'stop', completion: 3, reasoningTokens: 2 },
  },
  {
    name: "a user's stop string ends the answer before it and is reported",
    request: { sampling: { stop: [' image'] } },
    tokens: ['A red', ' ima', 'ge of', ' red'],
    expect: { text: 'A red', reason: 'stop', stopSequence: ' image', completion: 3 },
  },
  {
    name: "the template's stop string ends it unreported",
    hiddenStops: ['<|im_end|>'],
    tokens: ['Hi', '<|im_end|>', 'more'],
    expect: { text: 'Hi', reason: 'stop', completion: 2 },
  },
  {
    name: 'what may begin a stop string is held, and sent at the end when none came',
    request: { sampling: { stop: [' image'] } },
    tokens: ['Hello', ' ima'],
    expect: { text: 'Hello ima', reason: 'stop', completion: 2 },
  },
  {
    name: 'a call to a declared tool: its events, and the finish says tool_calls',
    request: { tools: [WEATHER] },
    tokens: ['<tool_call>', CALL, '</tool_call>'],
    expect: { calls: [['get_weather', '{"city": "Paris"}']], reason: 'tool_calls', completion: 3 },
  },
  {
    name: 'a call to a tool not declared is text',
    tokens: ['<tool_call>', CALL, '</tool_call>'],
    expect: { text: `<tool_call>${CALL}</tool_call>`, reason: 'stop', completion: 3 },
  },
  {
    name: 'max_tool_calls: the output ends when the last call allowed is complete, at its closing marker',
    request: { tools: [WEATHER], maxToolCalls: 1 },
    tokens: ['<tool_call>', CALL, '</tool_call>', '<tool_call>', CALL, '</tool_call>'],
    expect: { calls: [['get_weather', '{"city": "Paris"}']], reason: 'tool_calls', completion: 3 },
  },
  {
    name: 'a list of calls the parser completes only at the end is still a call',
    format: FORMATS['nemotron-v2'],
    request: { tools: [WEATHER] },
    tokens: ['<TOOLCALL>', `[${CALL}]`],
    expect: { calls: [['get_weather', '{"city":"Paris"}']], reason: 'tool_calls', completion: 2 },
  },
  {
    name: 'max_tokens ends the output',
    request: { sampling: { maxTokens: 2 } },
    tokens: ['<think>', 'hmm', '</think>', 'Hi'],
    expect: { reasoning: 'hmm', reason: 'length', completion: 2, reasoningTokens: 2 },
  },
  {
    name: "the context's room ends it where that is less",
    request: { sampling: { maxTokens: 10 } },
    room: 2,
    tokens: ['a', 'b', 'c'],
    expect: { text: 'ab', reason: 'length', completion: 2 },
  },
  {
    name: "a forced call's opening starts the output inside the call (output tokens only where the engine writes them)",
    request: { tools: [WEATHER], toolChoice: 'required' },
    opening: ['<tool_call>', '\n'],
    tokens: [CALL, '</tool_call>'],
    expect: { calls: [['get_weather', '{"city": "Paris"}']], reason: 'tool_calls', completion: { text: 4, vision: 2 } },
  },
];

interface Outcome {
  events: EngineEvent[];
  usage: Usage;
}

function options(c: Case, emit: (event: EngineEvent) => void): OutputOptions {
  return {
    job: { request: request(c.request), receivedAt: 0 },
    model: 'm',
    format: c.format ?? FORMATS.hermes,
    startInReasoning: c.startInReasoning ?? false,
    hiddenStops: c.hiddenStops ?? [],
    room: c.room ?? 100,
    emit,
  };
}

/** The options of a processor for `request` alone, outside the table. */
function setUp(request: Partial<CanonicalRequest>, emit: (event: EngineEvent) => void = () => {}): OutputOptions {
  return options({ name: '', request, tokens: [], expect: { reason: 'stop', completion: 0 } }, emit);
}

/** As the decode feeds it: each token with its id, the end of generation a token, a finish reason acted on. */
function asTextEngine(c: Case): Outcome {
  const events: EngineEvent[] = [];
  const release = new TokenRelease((event) => events.push(event));
  const output = new OutputProcessor({ ...options(c, release.emit), release });
  output.start(PROMPT);
  if (c.opening) {
    c.opening.forEach((_, i) => release.written(90 + i));
    output.open(c.opening.join(''), c.opening.length);
  }
  let reason: FinishReason = 'stop';
  for (const [i, text] of c.tokens.entries()) {
    output.arrived();
    const ended = release.step(i, () => output.push(text));
    if (ended) {
      reason = ended;
      break;
    }
  }
  release.step(null, () => output.end());
  return { events, usage: output.finish({ reason, promptTokens: PROMPT, cachedPromptTokens: 0 }) };
}

/** As the vision engine feeds it: the text of each token llama.node sends, which ends its run on its own stops and n_predict. */
function asVisionEngine(c: Case): Outcome {
  const events: EngineEvent[] = [];
  const output = new OutputProcessor(options(c, (event) => events.push(event)));
  output.start(PROMPT);
  if (c.opening) output.open(c.opening.join(''), 0);
  const stops = [...(c.request?.sampling?.stop ?? []), ...(c.hiddenStops ?? [])];
  let generated = 0;
  let written = '';
  let stopped: 'eos' | 'word' | 'asked' | null = null;
  for (const text of c.tokens) {
    if (generated === output.maxTokens) break;
    generated++;
    written += text;
    // llama.node sends the token before it checks its stop strings.
    if (!output.ended) {
      output.arrived();
      if (output.push(text) === 'tool_calls') stopped = 'asked';
    }
    if (stops.some((stop) => written.includes(stop))) stopped = 'word';
    if (stopped) break;
  }
  if (!stopped && generated < output.maxTokens) stopped = 'eos';
  output.end();
  const reason = stopped === 'eos' || stopped === 'word' ? 'stop' : 'length';
  const usage = output.finish({ reason, promptTokens: PROMPT, cachedPromptTokens: 0, completionTokens: generated });
  return { events, usage };
}

/** What the events add up to: the answer, the reasoning, the calls, and the finish. */
function summary(events: EngineEvent[]) {
  const joined = (type: 'text' | 'reasoning') =>
    events.flatMap((event) => (event.type === type ? [event.text] : [])).join('') || undefined;
  const calls = events.flatMap((event) => (event.type === 'tool_call' ? [[event.name, ''] as [string, string]] : []));
  for (const event of events) {
    const call = event.type === 'tool_args' ? calls[event.index] : undefined;
    if (call && event.type === 'tool_args') call[1] += event.delta;
  }
  const finish = events.at(-1);
  assert.ok(finish?.type === 'finish', 'the finish comes last');
  assert.equal(events[0]?.type, 'start', 'the start comes first');
  return {
    text: joined('text'),
    reasoning: joined('reasoning'),
    calls: calls.length > 0 ? calls : undefined,
    reason: finish.reason,
    stopSequence: finish.stopSequence,
  };
}

describe('output processor', () => {
  for (const [style, feed] of [
    ['text engine', asTextEngine],
    ['vision engine', asVisionEngine],
  ] as const) {
    it(`output processor - fed as the ${style} feeds it: the output, finish reason and usage of each case`, () => {
      for (const c of CASES) {
        const { events, usage } = feed(c);
        const { completion, reasoningTokens = 0, ...expected } = c.expect;
        assert.deepEqual(
          summary(events),
          { text: undefined, reasoning: undefined, calls: undefined, stopSequence: undefined, ...expected },
          c.name,
        );
        const tokens =
          typeof completion === 'number' ? completion : style === 'text engine' ? completion.text : completion.vision;
        assert.deepEqual(
          usage,
          { promptTokens: PROMPT, cachedPromptTokens: 0, completionTokens: tokens, reasoningTokens },
          c.name,
        );
        const finish = events.at(-1);
        assert.deepEqual(finish?.type === 'finish' && finish.usage, usage, `${c.name}: the finish event's usage`);
      }
    });
  }

  it("output processor - the start event: the prompt, what of it was reused, the format's reasoning markers", () => {
    const starts: EngineEvent[] = [];
    const emit = (event: EngineEvent): void => void starts.push(event);
    new OutputProcessor(setUp({}, emit)).start(9, 4);
    new OutputProcessor({ ...setUp({}, emit), format: RAW_FORMAT }).start(9);
    assert.deepEqual(starts, [
      { type: 'start', model: 'm', promptTokens: 9, cachedPromptTokens: 4, reasoningMarkers: ['<think>', '</think>'] },
      { type: 'start', model: 'm', promptTokens: 9 },
    ]);
  });

  it('output processor - a character split across tokens is read once whole: counted at once, its reasoning and limit then', () => {
    const reads: string[] = [];
    const release = { read: (text: string) => void reads.push(text), hold: () => undefined };
    const output = new OutputProcessor({ ...setUp({ sampling: { maxTokens: 3 } }), startInReasoning: true, release });
    assert.deepEqual(
      [output.push('a'), output.push(null), output.push(null), output.completionTokens],
      [null, null, null, 3],
      'the limit waits for the character',
    );
    assert.equal(output.push('é'), 'length');
    assert.deepEqual(reads, ['a', 'é'], 'the release is told each text read');
    output.end();
    const usage = output.finish({ reason: 'length', promptTokens: PROMPT, cachedPromptTokens: 0 });
    assert.deepEqual([usage.completionTokens, usage.reasoningTokens], [4, 4]);
  });

  it("output processor - the engine's own rule ends the output after the call limit and before the token limit", () => {
    const seen: Array<[boolean, string]> = [];
    const follow = (wasInCall: boolean, text: string): FinishReason | null => {
      seen.push([wasInCall, text]);
      return text === 'x' ? 'tool_calls' : null;
    };
    const held = new OutputProcessor({ ...setUp({ tools: [WEATHER], sampling: { maxTokens: 2 } }), follow });
    assert.deepEqual([held.push('<tool_call>'), held.push('x')], [null, 'tool_calls'], 'the rule, not the token limit');
    assert.deepEqual(seen, [
      [false, '<tool_call>'],
      [true, 'x'],
    ]);
    assert.equal(held.ended, null, "the rule is the engine's: it acts on the reason itself");
    seen.length = 0;
    const limited = new OutputProcessor({ ...setUp({ tools: [WEATHER], maxToolCalls: 1 }), follow });
    assert.deepEqual(
      ['<tool_call>', CALL, '</tool_call>'].map((piece) => limited.push(piece)),
      [null, null, 'tool_calls'],
    );
    assert.deepEqual(
      seen.map(([, text]) => text),
      ['<tool_call>', CALL],
      'the last call allowed ended the output before the rule was asked',
    );
  });

  it('output processor - a cancel is the finish reason unless the output had ended before it', () => {
    for (const [name, tokens, reason, text] of [
      ['cancelled', ['Hello', ' ima'], 'cancelled', 'Hello ima'],
      ['ended by a stop string, then cancelled', ['Hello', ' image'], 'stop', 'Hello'],
    ] as const) {
      const events: EngineEvent[] = [];
      const output = new OutputProcessor(setUp({ sampling: { stop: [' image'] } }, (event) => events.push(event)));
      output.start(PROMPT);
      for (const piece of tokens) output.push(piece);
      output.end();
      const usage = output.finish({ reason: 'cancelled', promptTokens: PROMPT, cachedPromptTokens: 0 });
      assert.deepEqual([summary(events).reason, summary(events).text, usage.completionTokens], [reason, text, 2], name);
    }
  });
});
