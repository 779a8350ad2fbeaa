import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { inspect } from 'node:util';
import { parseConfig, type McpConfig } from '@cortex/config';
import { CortexError } from '@cortex/contracts';
import { resolveMcpServer, toolAllowed } from './mcp-access.js';

const mcp = (over: Record<string, unknown> = {}): McpConfig =>
  parseConfig({
    mcp: {
      servers: [
        { label: 'docs', url: 'https://mcp.example.com/mcp', allowed_tools: ['search', 'fetch'], timeout_ms: 2_000 },
        { label: 'fs', command: 'node', args: ['fs.js'] },
      ],
      ...over,
    },
  }).mcp;
const key = (servers: string[] | null) => ({ id: 'key_1', name: 'ci', mcp_servers: servers });

/** The error `spec` is refused with: its status, the field it names, and its message. */
function refusal(config: McpConfig, spec: unknown, k: ReturnType<typeof key> | null = null): [number, string, string] {
  try {
    resolveMcpServer(config, spec, k, 'tools[1]');
  } catch (error) {
    assert.ok(error instanceof CortexError, String(error));
    return [error.status, error.extra.param ?? '', error.message];
  }
  return assert.fail('expected a refusal');
}

describe('mcp access', () => {
  it('mcp access - a registered label resolves with its transport and bounds; the key may name it, or has no list', () => {
    const docs = resolveMcpServer(mcp(), { server_label: 'docs' }, key(['docs']), 'tools[1]');
    assert.deepEqual(
      [docs.id, docs.transport, docs.url, docs.timeoutMs, docs.maxOutputBytes, docs.maxConcurrency, docs.where],
      ['label:docs', 'streamable_http', 'https://mcp.example.com/mcp', 2_000, 256 * 1024, 8, 'mcp.servers[0]'],
    );
    const fs = resolveMcpServer(mcp(), { server_label: 'fs' }, key(null), 'tools[1]');
    assert.deepEqual([fs.id, fs.transport, fs.url, fs.timeoutMs], ['label:fs', 'stdio', null, 60_000]);
    const legacy = resolveMcpServer(mcp(), { server_label: 'fs' }, { ...key(null), mcp_servers: undefined }, 'x');
    assert.equal(legacy.label, 'fs', 'a key stored before mcp_servers existed may use every server');
  });

  it('mcp access - refusals name the field: unknown labels, request URLs when off, a key without the server (403)', () => {
    const table: Array<[string, McpConfig, unknown, ReturnType<typeof key> | null, number, string, RegExp]> = [
      ['not an object', mcp(), 'docs', null, 400, 'tools[1]', /must be an object/],
      ['a bad label', mcp(), { server_label: 'my docs' }, null, 400, 'tools[1].server_label', /1-64 letters/],
      [
        'an unknown label',
        mcp(),
        { server_label: 'wiki' },
        null,
        400,
        'tools[1].server_label',
        /no MCP server is registered as 'wiki' .*registered: docs, fs/,
      ],
      [
        'a key without it',
        mcp(),
        { server_label: 'fs' },
        key(['docs']),
        403,
        'tools[1].server_label',
        /key_1 \("ci"\) may not use the MCP server 'fs'; it may use: docs/,
      ],
      [
        'a URL when off',
        mcp(),
        { server_label: 'x', server_url: 'https://mcp.example.org/mcp' },
        null,
        400,
        'tools[1].server_url',
        /does not reach MCP servers named by URL \(mcp.allow_request_urls is off\)/,
      ],
      [
        'headers for stdio',
        mcp(),
        { server_label: 'fs', headers: { authorization: 'Bearer t' } },
        null,
        400,
        'tools[1].headers',
        /runs beside the gateway \(stdio\)/,
      ],
      [
        'a reserved header',
        mcp(),
        { server_label: 'docs', headers: { 'mcp-session-id': 'x' } },
        null,
        400,
        'tools[1].headers',
        /set by the MCP transport/,
      ],
      [
        'a header on two lines',
        mcp(),
        { server_label: 'docs', headers: { authorization: 'a\r\nb' } },
        null,
        400,
        'tools[1].headers',
        /on one line/,
      ],
      [
        'bad allowed_tools',
        mcp(),
        { server_label: 'docs', allowed_tools: 'search' },
        null,
        400,
        'tools[1].allowed_tools',
        /list of tool names/,
      ],
      [
        'an unknown filter field',
        mcp(),
        { server_label: 'docs', allowed_tools: { names: [] } },
        null,
        400,
        'tools[1].allowed_tools.names',
        /not a known field/,
      ],
    ];
    for (const [what, config, spec, k, status, param, message] of table) {
      const [gotStatus, gotParam, gotMessage] = refusal(config, spec, k);
      assert.deepEqual([gotStatus, gotParam], [status, param], `${what}: ${gotMessage}`);
      assert.match(gotMessage, message, what);
    }
  });

  it('mcp access - request URLs when allowed: public addresses only unless private ones are allowed too, never with a key list', () => {
    const open = mcp({ allow_request_urls: true });
    const ref = resolveMcpServer(
      open,
      { server_label: 'mine', server_url: 'https://mcp.example.org/mcp#x' },
      null,
      'tools[1]',
    );
    assert.deepEqual(
      [ref.id, ref.transport, ref.index, ref.where, ref.timeoutMs],
      ['url:https://mcp.example.org/mcp', 'streamable_http', null, 'mcp', 60_000],
    );
    assert.equal(
      resolveMcpServer(open, { server_label: 'old', server_url: 'https://h.example/sse' }, null, 't').transport,
      'sse',
    );
    const table: Array<[string, McpConfig, unknown, ReturnType<typeof key> | null, number, string, RegExp]> = [
      [
        'loopback',
        open,
        { server_label: 'l', server_url: 'http://127.0.0.1:8080/mcp' },
        null,
        400,
        'tools[1].server_url',
        /names 127\.0\.0\.1, a non-public address; .*\(mcp.allow_private_urls\)/,
      ],
      [
        'private',
        open,
        { server_label: 'l', server_url: 'http://10.1.2.3/mcp' },
        null,
        400,
        'tools[1].server_url',
        /non-public/,
      ],
      [
        'link-local metadata',
        open,
        { server_label: 'l', server_url: 'http://169.254.169.254/' },
        null,
        400,
        'tools[1].server_url',
        /non-public/,
      ],
      [
        'IPv6 loopback',
        open,
        { server_label: 'l', server_url: 'http://[::1]:9/mcp' },
        null,
        400,
        'tools[1].server_url',
        /names ::1/,
      ],
      [
        'a label the config registers',
        open,
        { server_label: 'docs', server_url: 'https://h.example/mcp' },
        null,
        400,
        'tools[1].server_label',
        /label of an MCP server this gateway registers/,
      ],
      [
        'a key with a list',
        open,
        { server_label: 'l', server_url: 'https://h.example/mcp' },
        key(['docs']),
        403,
        'tools[1].server_url',
        /may use only the MCP servers docs, not one named by URL/,
      ],
      [
        'credentials in the URL',
        open,
        { server_label: 'l', server_url: 'https://u:p@h.example/mcp' },
        null,
        400,
        'tools[1].server_url',
        /carries credentials/,
      ],
      [
        'not http',
        open,
        { server_label: 'l', server_url: 'file:///etc/passwd' },
        null,
        400,
        'tools[1].server_url',
        /http or https/,
      ],
    ];
    for (const [what, config, spec, k, status, param, message] of table) {
      const [gotStatus, gotParam, gotMessage] = refusal(config, spec, k);
      assert.deepEqual([gotStatus, gotParam], [status, param], `${what}: ${gotMessage}`);
      assert.match(gotMessage, message, what);
    }
    const inside = mcp({ allow_request_urls: true, allow_private_urls: true });
    assert.equal(
      resolveMcpServer(inside, { server_label: 'l', server_url: 'http://127.0.0.1:8080/mcp' }, null, 't').url,
      'http://127.0.0.1:8080/mcp',
    );
  });

  it("mcp access - a request's headers travel as credentials: sent, hashed for the pool, never in JSON or inspect", () => {
    const spec = { server_label: 'docs', headers: { Authorization: 'Bearer sk-secret-token' } };
    const ref = resolveMcpServer(mcp(), spec, null, 'tools[0]');
    assert.deepEqual(ref.credentials.headers, { authorization: 'Bearer sk-secret-token' });
    assert.match(ref.credentials.key, /^[0-9a-f]{64}$/);
    assert.equal(resolveMcpServer(mcp(), { server_label: 'docs' }, null, 't').credentials.key, '');
    for (const shown of [JSON.stringify(ref), inspect(ref, { depth: 5 }), String(ref.credentials)])
      assert.equal(shown.includes('sk-secret-token'), false, shown);
    assert.match(JSON.stringify(ref), /"credentials":"\[1 header\(s\)\]"/);
  });

  it("mcp access - a tool passes the config's allowed_tools and the request's, names and read-only together", () => {
    const both = resolveMcpServer(mcp(), { server_label: 'docs', allowed_tools: ['fetch', 'delete'] }, null, 't').tools;
    assert.deepEqual([...(both.names ?? [])], ['fetch']);
    const readOnly = resolveMcpServer(
      mcp(),
      { server_label: 'fs', allowed_tools: { read_only: true } },
      null,
      't',
    ).tools;
    assert.equal(readOnly.names, null);
    assert.equal(toolAllowed(readOnly, 'read', { readOnlyHint: true }), true);
    assert.equal(toolAllowed(readOnly, 'write', { readOnlyHint: false }), false);
    assert.equal(toolAllowed(readOnly, 'unknown'), false, 'without annotations a tool is not known to be read-only');
    assert.equal(toolAllowed(both, 'search'), false);
  });
});
