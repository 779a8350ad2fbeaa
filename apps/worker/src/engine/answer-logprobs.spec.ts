import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { TokenLogprob } from '@cortex/contracts';
import { AnswerLogprobs } from './answer-logprobs.js';

/**
 * One token's handling as the decode does it: the token sampled (its entry's logprob is minus its
 * number, so a case can say whose entry went out), its text read, the answer text events the parser
 * sent, then how much the parser and the stop strings still hold. `sampled: false`: a written token;
 * `read: undefined`: a token whose character is incomplete (read with the next).
 */
interface Step {
  token?: string;
  read?: string | null;
  sampled?: false;
  emit?: string[];
  hold?: number;
  end?: true;
}

const entry = (token: string, n: number): TokenLogprob => ({
  token,
  logprob: -n,
  bytes: [...Buffer.from(token, 'utf8')],
  top: [],
});

/** Each text event's entries, as `text@token-number`. */
function run(steps: Step[]): string[][] {
  const answer = new AnswerLogprobs();
  const sent: string[][] = [];
  let n = 0;
  for (const step of steps) {
    n++;
    if (step.sampled !== false && step.token !== undefined) answer.sampled(entry(step.token, n));
    const read = step.read === undefined ? step.token : step.read;
    if (read !== undefined && read !== null) answer.read(read);
    if (step.hold !== undefined) answer.hold(step.hold);
    for (const text of step.emit ?? []) {
      const entries = answer.entries(text);
      assert.equal(entries.map((e) => e.token).join(''), text, `the entries of ${JSON.stringify(text)} are its text`);
      for (const e of entries) assert.deepEqual(e.bytes, [...Buffer.from(e.token, 'utf8')]);
      sent.push(entries.map((e) => `${e.token}@${-(e.logprob as number)}`));
    }
    answer.settle(step.end);
  }
  return sent;
}

describe('answer logprobs', () => {
  const cases: Array<[string, Step[], string[][]]> = [
    [
      'plain answer: one entry per token, as sampled',
      [
        { token: 'Hello', emit: ['Hello'] },
        { token: ' world', emit: [' world'] },
      ],
      [['Hello@1'], [' world@2']],
    ],
    [
      'a closing reasoning marker on its own token gets none; the reasoning before it none',
      [
        { token: '<think>' },
        { token: 'The' },
        { token: ' user' },
        { token: '</think>' },
        { token: 'Hello', emit: ['Hello'] },
        { token: ' after', emit: [' after'] },
      ],
      [['Hello@5'], [' after@6']],
    ],
    [
      'reasoning that holds the answer’s letters is settled, never matched: the answer is its own tokens',
      [{ token: 'Hello' }, { token: ' there' }, { token: '</think>' }, { token: 'Hello', emit: ['Hello'] }],
      [['Hello@4']],
    ],
    [
      'a token split between a marker and the answer: one entry with its answer part',
      [{ token: 'thinking' }, { token: '</think>\n\nHi', emit: ['Hi'] }, { token: ' there', emit: [' there'] }],
      [['Hi@2'], [' there@3']],
    ],
    [
      'an answer and a call opened in one token: the answer part only',
      [
        { token: 'Sure', emit: ['Sure'] },
        { token: '.<tool_call>', emit: ['.'], hold: Infinity },
        { token: '{"name"', hold: Infinity },
        { token: '}</tool_call>', hold: 0 },
      ],
      [['Sure@1'], ['.@2']],
    ],
    [
      'text held as the possible start of a marker that was not one: each token its entry, on the event that sends them',
      [
        { token: 'a', emit: ['a'] },
        { token: ' <', emit: [' '], hold: 1 },
        { token: 'b', emit: ['<b'] },
      ],
      [['a@1'], [' @2'], ['<@2', 'b@3']],
    ],
    [
      'a held prefix that was a marker: its token gets none',
      [
        { token: 'Hi', emit: ['Hi'] },
        { token: '[TOOL', hold: 5 },
        { token: '_CALLS]', hold: 0 },
        { token: 'get_weather', hold: Infinity },
      ],
      [['Hi@1']],
    ],
    [
      'white space held after a token until more answer comes: an entry in each event, its part in each',
      [
        { token: 'Done.\n', emit: ['Done.'], hold: 1 },
        { token: 'Bye', emit: ['\nBye'] },
      ],
      [['Done.@1'], ['\n@1', 'Bye@2']],
    ],
    [
      'white space held before a call, then dropped: no entry for it',
      [
        { token: 'Ok', emit: ['Ok'] },
        { token: '\n', hold: 1 },
        { token: '<tool_call>', hold: Infinity },
        { token: '</tool_call>', hold: 0 },
      ],
      [['Ok@1']],
    ],
    [
      'a call to an undeclared tool, given back as text: every token of it gets its entry',
      [
        { token: '<tool_call>', hold: Infinity },
        { token: '{"name": "x"}', hold: Infinity },
        { token: '</tool_call>', emit: ['<tool_call>{"name": "x"}</tool_call>'], hold: 0 },
      ],
      [['<tool_call>@1', '{"name": "x"}@2', '</tool_call>@3']],
    ],
    [
      'Harmony: the channel headers and the analysis get none, the final message its tokens',
      [
        { token: '<|channel|>' },
        { token: 'analysis' },
        { token: '<|message|>' },
        { token: 'Thinking.' },
        { token: '<|end|>' },
        { token: '<|start|>' },
        { token: 'assistant' },
        { token: '<|channel|>' },
        { token: 'final' },
        { token: '<|message|>' },
        { token: 'Hello', emit: ['Hello'] },
      ],
      [['Hello@11']],
    ],
    [
      'a stop string: the text held back for it goes out with its tokens; the stop’s tokens get none',
      [
        { token: 'Hi', emit: ['Hi'] },
        { token: ' EN', hold: 3 },
        { token: 'D', hold: 0 },
      ],
      [['Hi@1']],
    ],
    [
      'held for a stop string that did not come: the held text keeps its token',
      [
        { token: 'Hi', emit: ['Hi'] },
        { token: ' EN', hold: 3 },
        { token: 'jo', emit: [' ENjo'], hold: 0 },
      ],
      [['Hi@1'], [' EN@2', 'jo@3']],
    ],
    [
      'a character split across tokens: read with its last token, the character on the first entry, none on the other',
      [
        { token: '\uFFFD', read: null },
        { token: '\uFFFD', read: 'é', emit: ['é'] },
      ],
      [['é@1', '@2']],
    ],
    [
      'written tokens (a forced call’s opening) have no entries',
      [
        { token: '<tool_call>', sampled: false, hold: Infinity },
        { token: '{}', hold: Infinity },
        { token: '</tool_call>', hold: 0 },
      ],
      [],
    ],
    [
      'a special token the parser reads as nothing gets none',
      [
        { token: 'Hi', emit: ['Hi'] },
        { token: '<|im_end|>', read: '' },
      ],
      [['Hi@1']],
    ],
    [
      'the end of the output: what is still held and never sent gets none',
      [{ token: 'Hi', emit: ['Hi'] }, { token: ' <', emit: [' '], hold: 1 }, { end: true }],
      [['Hi@1'], [' @2']],
    ],
  ];
  for (const [what, steps, expected] of cases) {
    it(`answer logprobs - ${what}`, () => assert.deepEqual(run(steps), expected));
  }
});
