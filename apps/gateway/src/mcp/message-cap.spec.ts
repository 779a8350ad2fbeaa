import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ANSWER_TOO_LARGE, JsonBodyCap, LineReader, salvageMessage, SseEventCap, type CapStep } from './message-cap.js';
import { CUT_META } from './tool-result.js';

/** A tools/call answer as the TypeScript SDK's servers write it: result first, id last. */
const answer = (id: number, text: string): string =>
  JSON.stringify({ result: { content: [{ type: 'text', text }] }, jsonrpc: '2.0', id });

/** `bytes` fed in pieces of `size`, the steps' output joined. */
function feed(
  cap: { push(chunk: Buffer): CapStep; end(): Buffer[] },
  bytes: string,
  size: number,
): { out: string; done: boolean } {
  const out: Buffer[] = [];
  const buffer = Buffer.from(bytes);
  for (let at = 0; at < buffer.length; at += size) {
    const step = cap.push(buffer.subarray(at, at + size));
    out.push(...step.out);
    if (step.done) return { out: Buffer.concat(out).toString(), done: true };
  }
  out.push(...cap.end());
  return { out: Buffer.concat(out).toString(), done: false };
}

describe('message cap', () => {
  it('message cap - a stand-in: a tool result as far as it got, else an error; its id from the head, the tail or the request', () => {
    const cut = salvageMessage(answer(4, 'x'.repeat(50)).slice(0, 60), '', 60);
    assert.equal(cut, null, 'no id anywhere: whose answer it was cannot be told');
    const fromTail = salvageMessage(answer(4, 'x'.repeat(50)).slice(0, 60), '"jsonrpc":"2.0","id":4}', 60);
    assert.deepEqual(fromTail, {
      jsonrpc: '2.0',
      id: 4,
      result: {
        content: [{ type: 'text', text: 'x'.repeat(60 - '{"result":{"content":[{"type":"text","text":"'.length) }],
        _meta: { [CUT_META]: { limit: 60 } },
      },
    });
    const idFirst = salvageMessage(
      '{"jsonrpc":"2.0","id":"r-1","result":{"content":[{"type":"image","data":"AAAA',
      '',
      60,
    );
    assert.deepEqual(idFirst && 'result' in idFirst && idFirst.result.content, [
      { type: 'text', text: '[image: unknown type, 3 bytes]' },
    ]);
    const list = salvageMessage('{"result":{"tools":[{"name":"a"', '', 60, 9);
    assert.deepEqual(list && 'error' in list && [list.id, list.error.code], [9, ANSWER_TOO_LARGE]);
    assert.equal(salvageMessage('{"method":"notifications/message","params":{"data":"', '', 60, 9), null);
    assert.equal(salvageMessage('not json at all', '', 60), null);
    assert.equal(
      salvageMessage(answer(1, 'a').slice(0, 20), '"nested":{"id":5}}', 60),
      null,
      'a nested id is not the message id',
    );
  });

  it('message cap - stdio lines split anywhere pass whole; one past the limit is cut to its head, its id read from its tail', () => {
    const small = `${answer(1, 'hi')}\n${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/x' })}\r\n`;
    const big = `${answer(2, 'y'.repeat(5_000))}\n`;
    for (const size of [1, 7, 64, 10_000]) {
      const reader = new LineReader(200);
      const lines = [];
      const bytes = Buffer.from(small + big + small);
      for (let at = 0; at < bytes.length; at += size) lines.push(...reader.push(bytes.subarray(at, at + size)));
      assert.deepEqual(
        lines.map((line) => line.kind),
        ['line', 'line', 'cut', 'line', 'line'],
        `pieces of ${size}`,
      );
      assert.deepEqual(JSON.parse((lines[0] as { text: string }).text), JSON.parse(answer(1, 'hi')));
      assert.equal((lines[1] as { text: string }).text.endsWith('\r'), false);
      const cut = lines[2] as Extract<(typeof lines)[number], { kind: 'cut' }>;
      assert.equal(cut.bytes, big.length - 1);
      assert.ok(cut.message && 'result' in cut.message && cut.message.id === 2);
      const text = (cut.message.result.content as Array<{ text: string }>)[0]!.text;
      assert.ok(text.length > 100 && text.length < 200 && /^y+$/.test(text), text);
    }
  });

  it('message cap - a JSON body under the limit passes whole; past it a stand-in answers the POST at once, the rest unread', () => {
    assert.deepEqual(feed(new JsonBodyCap(100, 3), answer(3, 'ok'), 5), { out: answer(3, 'ok'), done: false });
    const { out, done } = feed(new JsonBodyCap(100, 3), answer(3, 'z'.repeat(10_000)), 50);
    assert.equal(done, true, 'stopped at the chunk that went over');
    const message = JSON.parse(out) as { id: number; result: { content: Array<{ text: string }>; _meta: object } };
    assert.equal(message.id, 3);
    assert.match(message.result.content[0]!.text, /^z{50,100}$/);
    assert.deepEqual(message.result._meta, { [CUT_META]: { limit: 100 } });
  });

  it('message cap - SSE events split anywhere pass whole; an oversized answer ends the body, an oversized notification is dropped', () => {
    const event = (data: string, id = 'e1'): string => `event: message\nid: ${id}\ndata: ${data}\n\n`;
    const note = JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progress: 1 } });
    const stream = `: ping\n\n${event(note)}${event(answer(5, 'ok'), 'e2')}`;
    for (const size of [1, 3, 17, 1_000])
      assert.deepEqual(feed(new SseEventCap(300, 5), stream, size), { out: stream, done: false });
    const crlf = stream.replace(/\n/g, '\r\n');
    assert.deepEqual(feed(new SseEventCap(300, 5), crlf, 2), { out: crlf, done: false });

    const huge = `${event(note)}${event(answer(5, 'w'.repeat(20_000)), 'e2')}${event(note, 'e3')}`;
    const early = feed(new SseEventCap(300, 5), huge, 64);
    assert.equal(early.done, true);
    const frames = early.out.split('\n\n').filter(Boolean);
    assert.equal(frames.length, 2);
    assert.equal(frames[0], event(note).trimEnd());
    const standIn = JSON.parse(frames[1]!.replace(/^event: message\ndata: /, '')) as {
      id: number;
      result: { _meta: object };
    };
    assert.equal(standIn.id, 5);
    assert.deepEqual(standIn.result._meta, { [CUT_META]: { limit: 300 } });

    const log = JSON.stringify({
      jsonrpc: '2.0',
      method: 'notifications/message',
      params: { data: 'n'.repeat(9_000) },
    });
    const noisy = `${event(log)}${event(answer(5, 'ok'))}`;
    assert.deepEqual(feed(new SseEventCap(300, 5), noisy, 100), { out: event(answer(5, 'ok')), done: false });
  });

  it('message cap - on a stream of no one POST (GET, legacy SSE) an oversized answer is replaced at its end, by its last id', () => {
    const big = `event: message\ndata: ${answer(8, 'v'.repeat(9_000))}\n\n`;
    const { out, done } = feed(new SseEventCap(300, undefined), `${big}: after\n\n`, 256);
    assert.equal(done, false);
    const [first, second] = out.split('\n\n');
    const message = JSON.parse(first!.replace(/^event: message\ndata: /, '')) as { id: number };
    assert.equal(message.id, 8);
    assert.equal(second, ': after');
  });
});
