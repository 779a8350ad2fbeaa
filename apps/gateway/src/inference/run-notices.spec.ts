import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { RunNotices, type RunNotice } from './run-notices.js';

describe('run notices', () => {
  it('run notices - every listener hears every notice in the order it began to listen, until it stops', () => {
    const notices = new RunNotices();
    assert.equal(notices.heard, false);
    const heard: string[] = [];
    const stopFirst = notices.listen((n) => heard.push(`first ${n.type}`));
    notices.listen((n) => heard.push(`second ${n.type}`));
    assert.equal(notices.heard, true);
    notices.emit({ type: 'moving' });
    stopFirst();
    notices.emit({ type: 'resumed', workerId: 'w2' });
    assert.deepEqual(heard, ['first moving', 'second moving', 'second resumed']);
  });

  it('run notices - a listener that throws does not keep the notice from the others; its error is thrown after', () => {
    const notices = new RunNotices();
    const heard: RunNotice[] = [];
    notices.listen(() => {
      throw new Error('broken observer');
    });
    notices.listen((n) => heard.push(n));
    assert.throws(() => notices.emit({ type: 'resumed', workerId: 'w1' }), /broken observer/);
    assert.deepEqual(heard, [{ type: 'resumed', workerId: 'w1' }]);
  });
});
