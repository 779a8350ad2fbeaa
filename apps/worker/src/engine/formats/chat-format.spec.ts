import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { FORMATS } from './families.js';
import { promptReasoning, RAW_FORMAT } from './chat-format.js';

describe('chat format', () => {
  it('chat format - a generation prompt that opens the reasoning leaves the model in it, unless an answer is begun', () => {
    const r1 = FORMATS['deepseek-r1'];
    const [open, close] = [r1.reasoning?.open ?? '', r1.reasoning?.close ?? ''];
    const cases: Array<[string, string, boolean, { startInReasoning: boolean; close: string }]> = [
      ['opened', `<｜Assistant｜>${open}\n`, false, { startInReasoning: true, close }],
      ['opened, an answer begun', `<｜Assistant｜>${open}\n`, true, { startInReasoning: false, close }],
      ['not opened', '<｜Assistant｜>', false, { startInReasoning: false, close: '' }],
      ['closed already', `<｜Assistant｜>${open}${close}`, false, { startInReasoning: false, close: '' }],
    ];
    for (const [name, prompt, prefilled, expected] of cases)
      assert.deepEqual(promptReasoning(r1, prompt, prefilled), expected, name);
    assert.deepEqual(promptReasoning(RAW_FORMAT, open, false), { startInReasoning: false, close: '' }, 'no block');
  });
});
