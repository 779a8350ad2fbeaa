import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { FastifyRequest } from 'fastify';
import { browserKey, consoleCookie, cookieValue, isConsolePath } from './console-access.js';

const request = (
  query: Record<string, unknown>,
  cookie?: string,
  method = 'GET',
  headers: Record<string, string> = {},
): FastifyRequest =>
  ({ query, method, headers: { ...headers, ...(cookie ? { cookie } : {}) } }) as unknown as FastifyRequest;

describe('console access', () => {
  it('console - the page and its files are admin paths; nothing else is', () => {
    const cases: Array<[string, boolean]> = [
      ['/console', true],
      ['/console/console.js', true],
      ['/consoles', false],
      ['/v1/console', false],
    ];
    for (const [path, expected] of cases) assert.equal(isConsolePath(path), expected, path);
  });

  it('console - a browser presents its key once in the query of /console, then in the cookie', () => {
    const cases: Array<[FastifyRequest, string, string | undefined]> = [
      [request({ key: 'sk-a' }), '/console', 'sk-a'],
      [request({ key: 'sk-a' }), '/admin/fleet', undefined],
      [request({ key: '' }), '/console', undefined],
      [request({}, 'other=1; cortex_console=sk%2Fb'), '/admin/fleet', 'sk/b'],
      [request({}, 'cortex_consoleX=sk'), '/console', undefined],
      [request({}, 'cortex_console=%E0%A4%A'), '/console', undefined],
      // What the page itself sends: same-origin GETs and JSON posts.
      [
        request({}, 'cortex_console=sk', 'POST', {
          'content-type': 'application/json',
          'sec-fetch-site': 'same-origin',
        }),
        '/admin/keys/k/revoke',
        'sk',
      ],
      // What another page of the same site can make a browser send: a form post, a cross-origin fetch.
      [request({}, 'cortex_console=sk', 'POST', { 'content-type': 'text/plain' }), '/admin/keys/k/revoke', undefined],
      [
        request({}, 'cortex_console=sk', 'POST', { 'content-type': 'application/x-www-form-urlencoded' }),
        '/admin/keys/k/revoke',
        undefined,
      ],
      [request({}, 'cortex_console=sk', 'GET', { 'sec-fetch-site': 'same-site' }), '/admin/usage', undefined],
      // Over plain http to a host that is not localhost a browser sends no Sec-Fetch-*: the Origin decides.
      [
        request({}, 'cortex_console=sk', 'POST', {
          'content-type': 'application/json',
          origin: 'http://gw.example:8080',
          host: 'gw.example:8080',
        }),
        '/admin/keys/k/revoke',
        'sk',
      ],
      [
        request({}, 'cortex_console=sk', 'POST', {
          'content-type': 'application/json',
          origin: 'http://evil.example:8080',
          host: 'gw.example:8080',
        }),
        '/admin/keys/k/revoke',
        undefined,
      ],
      [
        request({}, 'cortex_console=sk', 'POST', {
          'content-type': 'application/json',
          origin: 'http://gw.example:9090',
          host: 'gw.example:8080',
        }),
        '/admin/keys/k/revoke',
        undefined,
      ],
      [
        request({}, 'cortex_console=sk', 'POST', {
          'content-type': 'application/json',
          origin: 'null',
          host: 'gw.example:8080',
        }),
        '/admin/keys/k/revoke',
        undefined,
      ],
      // A WebSocket upgrade carrying the cookie: only from the gateway's own pages, and it must say so.
      [
        request({}, 'cortex_console=sk', 'GET', {
          upgrade: 'websocket',
          origin: 'http://evil.example:8080',
          host: 'gw.example:8080',
        }),
        '/v1/responses',
        undefined,
      ],
      [
        request({}, 'cortex_console=sk', 'GET', { upgrade: 'websocket', host: 'gw.example:8080' }),
        '/v1/responses',
        undefined,
      ],
      [
        request({}, 'cortex_console=sk', 'GET', {
          upgrade: 'websocket',
          origin: 'http://gw.example:8080',
          host: 'gw.example:8080',
        }),
        '/v1/responses',
        'sk',
      ],
    ];
    for (const [req, path, expected] of cases)
      assert.equal(browserKey(req, path), expected, `${path} ${JSON.stringify(req.headers)}`);
    assert.equal(cookieValue(undefined, 'cortex_console'), undefined);
    const proxied = request({}, 'cortex_console=sk', 'GET', {
      upgrade: 'websocket',
      origin: 'https://cortex.example.com',
      host: 'gateway:31313',
    });
    assert.equal(
      browserKey(proxied, '/v1/responses'),
      undefined,
      'behind a proxy that changes Host, the public origin must be listed',
    );
    assert.equal(browserKey(proxied, '/v1/responses', ['https://cortex.example.com']), 'sk');
    // A trusted proxy's X-Forwarded-Host (Fastify's request.host with gateway.trust_proxy) is the host the browser used.
    const forwarded = Object.assign(
      request({}, 'cortex_console=sk', 'GET', {
        upgrade: 'websocket',
        origin: 'https://cortex.example.com',
        host: 'gateway:31313',
      }),
      { host: 'cortex.example.com' },
    );
    assert.equal(browserKey(forwarded, '/v1/responses'), 'sk');
  });

  it('console - the cookie is HttpOnly and SameSite=Strict, Secure over TLS', () => {
    assert.equal(
      consoleCookie('sk/x', false),
      'cortex_console=sk%2Fx; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200',
    );
    assert.match(consoleCookie('k', true), /; Secure$/);
  });
});
