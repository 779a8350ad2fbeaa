import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { requestPath } from './request-path.js';

describe('request path', () => {
  const cases: Array<[string, string | undefined, string]> = [
    ['/admin/keys?x=1', '/admin/keys', '/admin/keys'],
    ['/%61dmin/keys', '/admin/keys', '/admin/keys'],
    ['/admin/%6beys/key_1', '/admin/keys/:id', '/admin/keys/:id'],
    ['/%61dmin/nothing', undefined, '/admin/nothing'],
    ['/v1/%63hat/completions?stream=1', undefined, '/v1/chat/completions'],
    ['/bad%zz', undefined, '/bad%zz'],
  ];
  for (const [url, pattern, expected] of cases) {
    it(`request path - ${url} with route ${pattern ?? 'none'} is checked as ${expected}`, () => {
      assert.equal(requestPath({ url, routeOptions: { url: pattern } as never }), expected);
    });
  }
});
