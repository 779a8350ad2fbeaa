import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parsePartialJson } from './partial-json.js';

describe('partial json', () => {
  it('partial json - a whole document reads as JSON.parse reads it', () => {
    const documents = [
      '{}',
      '[]',
      '{"a":1,"b":[true,false,null],"c":{"d":"e\\n\\u00e9\\ud83d\\ude00"},"f":-1.5e3}',
      ' [ 1 , "two" , { "three" : [ ] } ] ',
      '{"result":{"content":[{"type":"text","text":"Echo: hi"}]},"jsonrpc":"2.0","id":3}',
    ];
    for (const text of documents) assert.deepEqual(parsePartialJson(text), JSON.parse(text), text);
  });

  it('partial json - every prefix of a message reads, and what it holds is what the whole document holds so far', () => {
    const text =
      '{"result":{"content":[{"type":"text","text":"caf\\u00e9 \\"q\\" 😀 end"},{"n":12.5}],"isError":false},"id":7}';
    for (let end = 1; end <= text.length; end++) {
      const value = parsePartialJson(text.slice(0, end)) as Record<string, unknown>;
      assert.equal(typeof value, 'object', `prefix ${end}`);
      const content = (value.result as { content?: Array<{ text?: string }> } | undefined)?.content;
      const partial = content?.[0]?.text;
      if (partial !== undefined) assert.ok('café "q" 😀 end'.startsWith(partial), `prefix ${end}: ${partial}`);
    }
  });

  it('partial json - cut values: a string keeps what arrived, a number, literal or key without its value is left out', () => {
    const table: Array<[string, unknown]> = [
      ['{"text":"Echo: aaa', { text: 'Echo: aaa' }],
      ['{"text":"a\\', { text: 'a' }],
      ['{"text":"a\\u00', { text: 'a' }],
      ['{"text":"\\ud83d', { text: '' }],
      ['{"text":"ok","id":12', { text: 'ok' }],
      ['{"id":1.', {}],
      ['{"flag":tr', {}],
      ['{"flag":true', { flag: true }],
      ['{"key', {}],
      ['{"key":', {}],
      ['[1,2,"thr', [1, 2, 'thr']],
      ['[{"a":[{"b":"c', [{ a: [{ b: 'c' }] }]],
    ];
    for (const [text, expected] of table) assert.deepEqual(parsePartialJson(text), expected, text);
  });

  it('partial json - what is not the beginning of JSON is refused, and so is hostile nesting', () => {
    for (const text of ['', 'hello', '{"a" 1}', '{"a":1 "b":2}', '[1 2]', '{"a":"\\q"}', '{"a":1}x', '12'])
      assert.throws(() => parsePartialJson(text), SyntaxError, text);
    assert.throws(() => parsePartialJson('['.repeat(100_000)), /nested deeper than 256/);
    const own = parsePartialJson('{"__proto__":{"polluted":true}}') as Record<string, unknown>;
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    assert.deepEqual(Object.keys(own), ['__proto__']);
  });
});
