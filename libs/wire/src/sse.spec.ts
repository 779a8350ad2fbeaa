import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SseParser, sseComment, sseFrame, SSE_DONE } from './sse.js';

describe('sse', () => {
  it('sse - frames are one-line JSON with LF endings', () => {
    assert.equal(sseFrame({ a: 'x\ny' }), 'data: {"a":"x\\ny"}\n\n');
    assert.equal(sseFrame({ type: 't' }, 't'), 'event: t\ndata: {"type":"t"}\n\n');
    assert.equal(sseComment('keep\nalive'), ': keep alive\n\n');
  });

  it('sse - the parser survives every possible chunk boundary', () => {
    const stream = `${sseComment('hi')}${sseFrame({ n: 1 }, 'one')}${sseFrame({ n: 'é€' })}${SSE_DONE}`;
    for (let cut = 0; cut <= stream.length; cut++) {
      for (const size of [1, 3, 7]) {
        const parser = new SseParser();
        const messages = [parser.push(stream.slice(0, cut))];
        for (let at = cut; at < stream.length; at += size) messages.push(parser.push(stream.slice(at, at + size)));
        assert.deepEqual(messages.flat(), [
          { event: 'one', data: '{"n":1}' },
          { event: undefined, data: '{"n":"é€"}' },
          { event: undefined, data: '[DONE]' },
        ]);
      }
    }
  });

  it('sse - CRLF and CR line endings and multi-line data are understood', () => {
    const parser = new SseParser();
    assert.deepEqual(parser.push('event: e\r\ndata: a\r\ndata: b\r\n\r\ndata: c\r\r\n'), [
      { event: 'e', data: 'a\nb' },
      { event: undefined, data: 'c' },
    ]);
  });
});
