import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseConfig, type CortexConfig } from '@cortex/config';
import { CortexError, type KeyRecord } from '@cortex/contracts';
import { McpService } from './mcp.service.js';

// The reference servers of the MCP project, as published on npm: the client is tested against them, not an imitation.
const require = createRequire(import.meta.url);
const EVERYTHING = require.resolve('@modelcontextprotocol/server-everything/dist/index.js');
const FILESYSTEM = require.resolve('@modelcontextprotocol/server-filesystem/dist/index.js');

const key = (servers: string[] | null): KeyRecord => ({
  id: 'key_0123456789abcdef',
  name: 'ci',
  account: 'default',
  limits: {},
  models: null,
  mcp_servers: servers,
  expires_at: null,
  tier: 5,
  created_at: '2026-01-01T00:00:00.000Z',
  updated_at: '2026-01-01T00:00:00.000Z',
  revoked_at: null,
  secrets: [],
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * server-everything over HTTP: `streamableHttp` (path /mcp) or `sse` (the older transport, path /sse),
 * on the port in PORT; it says it listens on stderr and logs each POST on stdout.
 */
async function startHttpServer(
  transport: 'streamableHttp' | 'sse' = 'streamableHttp',
): Promise<{ child: ChildProcess; url: string; posts: () => Promise<number> }> {
  const port = await freePort();
  const child = spawn(process.execPath, [EVERYTHING, transport], {
    env: { ...process.env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  child.stdout!.on('data', (chunk: Buffer) => (log += chunk.toString()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('server-everything did not start within 10 s')), 10_000);
    child.stderr!.on('data', (chunk: Buffer) => {
      if (/listening on port|running on port/.test(chunk.toString())) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => reject(new Error(`server-everything exited (${code})`)));
  });
  const path = transport === 'sse' ? 'sse' : 'mcp';
  return {
    child,
    url: `http://127.0.0.1:${port}/${path}`,
    posts: () => settled(() => log.split('Received MCP POST request').length - 1),
  };
}

/**
 * A count read from a server's log once it has stood still for 250 ms (at most 5 s): the log line of
 * a POST comes on the server's stdout, which may reach the test after the POST's answer does.
 */
async function settled(count: () => number): Promise<number> {
  const end = Date.now() + 5_000;
  let last = count();
  let since = Date.now();
  while (Date.now() < end) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    const now = count();
    if (now !== last) [last, since] = [now, Date.now()];
    else if (Date.now() - since >= 250) break;
  }
  return last;
}

/** The CortexError `work` fails with. */
async function failure(work: Promise<unknown>): Promise<CortexError> {
  const error = await work.then(
    () => assert.fail('expected a failure'),
    (e: unknown) => e,
  );
  assert.ok(error instanceof CortexError, String(error));
  return error;
}

async function until(check: () => boolean, what: string, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) assert.fail(`${what} within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('mcp service', () => {
  let dir: string;
  let http: Awaited<ReturnType<typeof startHttpServer>>;
  let sse: Awaited<ReturnType<typeof startHttpServer>>;
  let config: CortexConfig;
  let mcp: McpService;
  const services: McpService[] = [];

  const make = (over: Record<string, unknown>): McpService => {
    const service = new McpService(parseConfig({ mcp: { ...config.mcp, ...over } }));
    service.onModuleInit();
    services.push(service);
    return service;
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'cortex-mcp-'));
    writeFileSync(join(dir, 'small.txt'), 'a small file\n');
    writeFileSync(join(dir, 'big.txt'), 'abcdefghij'.repeat(300_000));
    [http, sse] = await Promise.all([startHttpServer(), startHttpServer('sse')]);
    const everything = { command: process.execPath, args: [EVERYTHING, 'stdio'] };
    config = parseConfig({
      mcp: {
        servers: [
          { label: 'every', ...everything },
          { label: 'every-slow', ...everything, timeout_ms: 300 },
          { label: 'every-http', url: http.url },
          { label: 'every-sse', url: sse.url, transport: 'sse' },
          { label: 'every-http-slow', url: http.url, timeout_ms: 300 },
          { label: 'every-http-small', url: http.url, max_output_bytes: 1024 },
          { label: 'files', command: process.execPath, args: [FILESYSTEM, dir], max_output_bytes: 4096 },
          { label: 'missing', command: join(dir, 'no-such-program') },
          {
            label: 'crashing',
            command: process.execPath,
            args: ['-e', 'process.stderr.write("no config found"); process.exit(3)'],
          },
        ],
      },
    });
    mcp = new McpService(config);
    mcp.onModuleInit();
    services.push(mcp);
  });

  after(async () => {
    await Promise.all(services.map((service) => service.onModuleDestroy()));
    http.child.kill();
    sse.child.kill();
    rmSync(dir, { recursive: true, force: true });
  });

  it('mcp service - lists tools over stdio, Streamable HTTP and SSE, and calls echo on each', async () => {
    for (const label of ['every', 'every-http', 'every-sse']) {
      const server = mcp.resolve({ server_label: label }, null, 'tools[0]');
      const tools = await mcp.listTools(server);
      const names = tools.map((tool) => tool.name);
      assert.ok(
        names.includes('echo') && names.includes('trigger-long-running-operation'),
        `${label}: ${names.join(', ')}`,
      );
      const echo = tools.find((tool) => tool.name === 'echo');
      assert.equal(echo?.inputSchema.type, 'object');
      assert.deepEqual(await mcp.callTool(server, 'echo', { message: `hi over ${label}` }), {
        text: `Echo: hi over ${label}`,
        isError: false,
        truncated: false,
      });
    }
    const files = mcp.resolve({ server_label: 'files', allowed_tools: ['read_text_file'] }, null, 'tools[0]');
    assert.deepEqual(
      (await mcp.listTools(files)).map((tool) => tool.name),
      ['read_text_file'],
    );
    const small = await mcp.callTool(files, 'read_text_file', { path: join(dir, 'small.txt') });
    assert.deepEqual(small, { text: 'a small file\n', isError: false, truncated: false });
  });

  it('mcp service - a server that cannot start is a 502 saying why, in its own words where it wrote any', async () => {
    const missing = await failure(mcp.listTools(mcp.resolve({ server_label: 'missing' }, null, 'tools[0]')));
    assert.deepEqual([missing.status, missing.code], [502, 'upstream_unavailable']);
    assert.match(missing.message, /MCP server 'missing': listing its tools failed: .*ENOENT/);
    const crashing = await failure(mcp.listTools(mcp.resolve({ server_label: 'crashing' }, null, 'tools[0]')));
    assert.equal(crashing.code, 'upstream_unavailable');
    assert.match(
      crashing.message,
      /MCP server 'crashing': listing its tools failed: .*\(its stderr: no config found\)/,
    );
  });

  it('mcp service - a tool list is asked once per server and credentials within list_cache_ms', async () => {
    const server = mcp.resolve({ server_label: 'every-http' }, null, 'tools[0]');
    await mcp.listTools(server);
    const before = await http.posts();
    const again = await Promise.all([mcp.listTools(server), mcp.listTools(server)]);
    assert.equal(again[0]!.length > 0, true);
    assert.equal(await http.posts(), before, 'a cache hit sends nothing');
    // Other credentials are another session and another list.
    const other = mcp.resolve({ server_label: 'every-http', headers: { authorization: 'Bearer other' } }, null, 't');
    await mcp.listTools(other);
    assert.ok((await http.posts()) > before);
    const uncached = make({ list_cache_ms: 0 });
    const fresh = uncached.resolve({ server_label: 'every-http' }, null, 't');
    await uncached.listTools(fresh);
    const counted = await http.posts();
    await uncached.listTools(fresh);
    assert.ok((await http.posts()) > counted, 'list_cache_ms: 0 asks every time');
  });

  it('mcp service - a request URL is refused unless allowed, and a private one unless private URLs are allowed', async () => {
    assert.match(
      (
        await failure(
          Promise.resolve().then(() => mcp.resolve({ server_label: 'x', server_url: http.url }, null, 'tools[3]')),
        )
      ).message,
      /tools\[3\]\.server_url: this gateway does not reach MCP servers named by URL/,
    );
    const open = make({ allow_request_urls: true });
    const literal = await failure(
      Promise.resolve().then(() => open.resolve({ server_label: 'x', server_url: http.url }, null, 'tools[3]')),
    );
    assert.deepEqual([literal.status, literal.extra.param], [400, 'tools[3].server_url']);
    assert.match(literal.message, /names 127\.0\.0\.1, a non-public address/);
    // A host name is checked where it is resolved, when connecting (image URLs' guarded lookup).
    const named = open.resolve(
      { server_label: 'x', server_url: http.url.replace('127.0.0.1', 'localhost') },
      null,
      'tools[3]',
    );
    const refused = await failure(open.listTools(named));
    assert.deepEqual([refused.status, refused.extra.param], [400, 'tools[3].server_url']);
    assert.match(
      refused.message,
      /server_url: its host localhost resolves to (127\.0\.0\.1|::1), a non-public address; the gateway reaches MCP servers at public addresses only \(mcp\.allow_private_urls\)$/,
    );
    const inside = make({ allow_request_urls: true, allow_private_urls: true });
    const mine = inside.resolve({ server_label: 'mine', server_url: http.url }, null, 'tools[0]');
    assert.ok((await inside.listTools(mine)).some((tool) => tool.name === 'echo'));
    assert.equal((await inside.callTool(mine, 'echo', { message: 'by url' })).text, 'Echo: by url');
  });

  it('mcp service - a key whose mcp_servers leave a server out is refused with a 403 naming it', async () => {
    const error = await failure(
      Promise.resolve().then(() => mcp.resolve({ server_label: 'every' }, key(['files']), 'tools[2]')),
    );
    assert.deepEqual(
      [error.status, error.code, error.extra.param],
      [403, 'permission_denied', 'tools[2].server_label'],
    );
    assert.match(error.message, /may not use the MCP server 'every'; it may use: files/);
    assert.equal(mcp.resolve({ server_label: 'files' }, key(['files']), 't').label, 'files');
  });

  it('mcp service - a call past its timeout fails with a 504 naming the setting, and the server goes on serving', async () => {
    for (const label of ['every-http-slow', 'every-slow']) {
      const server = mcp.resolve({ server_label: label }, null, 'tools[0]');
      const started = Date.now();
      const error = await failure(mcp.callTool(server, 'trigger-long-running-operation', { duration: 5, steps: 5 }));
      const took = Date.now() - started;
      assert.deepEqual([error.status, error.code], [504, 'timeout'], error.message);
      assert.match(
        error.message,
        new RegExp(
          `MCP server '${label}': the tool 'trigger-long-running-operation' did not answer within 300 ms ` +
            '\\(mcp\\.servers\\[\\d\\]\\.timeout_ms\\)',
        ),
      );
      assert.ok(took < 2_000, `${label}: ${took} ms`);
      const status = mcp.servers().find((s) => s.label === label);
      assert.deepEqual([status?.running, status?.waiting], [0, 0], 'nothing is held for the call');
      assert.equal((await mcp.callTool(server, 'echo', { message: 'still here' })).text, 'Echo: still here');
    }
    const controller = new AbortController();
    const server = mcp.resolve({ server_label: 'every' }, null, 'tools[0]');
    const call = mcp.callTool(server, 'trigger-long-running-operation', { duration: 5, steps: 5 }, controller.signal);
    setTimeout(() => controller.abort(), 100);
    const cancelled = await failure(call);
    assert.equal(cancelled.code, 'cancelled');
  });

  it('mcp service - an answer past max_output_bytes is cut there with a note, never held whole (stdio and HTTP)', async () => {
    // 3 MB of file (and as much again as structured content): past the 1 MiB the transport holds beyond the cap.
    const files = mcp.resolve({ server_label: 'files' }, null, 'tools[0]');
    const big = await mcp.callTool(files, 'read_text_file', { path: join(dir, 'big.txt') });
    assert.equal(big.truncated, true);
    assert.equal(big.isError, false);
    assert.ok(big.text.startsWith('abcdefghijabcdefghij'), big.text.slice(0, 40));
    assert.match(
      big.text,
      /\n\[cortex: the tool's answer was cut at 4096 bytes \(max_output_bytes\); the rest is not shown\]$/,
    );
    assert.ok(Buffer.byteLength(big.text) < 4096 + 200, String(Buffer.byteLength(big.text)));
    // Over HTTP the answer is an SSE event; 1.5 MB of echo is cut by the fetch under the transport.
    const small = mcp.resolve({ server_label: 'every-http-small' }, null, 'tools[0]');
    const echoed = await mcp.callTool(small, 'echo', { message: 'm'.repeat(1_500_000) });
    assert.equal(echoed.truncated, true);
    assert.match(echoed.text, /^Echo: m{1000,}\n\[cortex: the tool's answer was cut at 1024 bytes/);
    // Under the transport's bound but over the cap: cut when rendered.
    const medium = await mcp.callTool(small, 'echo', { message: 'n'.repeat(5_000) });
    assert.equal(medium.truncated, true);
    assert.ok(Buffer.byteLength(medium.text) < 1024 + 200);
    assert.equal((await mcp.callTool(small, 'echo', { message: 'fits' })).truncated, false);
  });

  it('mcp service - errors a tool answers with, and tools or arguments the request may not send, are results with isError', async () => {
    const server = mcp.resolve({ server_label: 'every', allowed_tools: ['echo', 'get-sum'] }, null, 'tools[0]');
    const unknown = await mcp.callTool(server, 'get-sum', { a: 'x' });
    assert.equal(unknown.isError, true);
    assert.match(unknown.text, /get-sum|invalid|expected/i);
    assert.deepEqual(await mcp.callTool(server, 'get-env', {}), {
      text: `the tool "get-env" is not one the MCP server 'every' offers this request (allowed_tools)`,
      isError: true,
      truncated: false,
    });
    assert.equal((await mcp.callTool(server, 'echo', [1, 2])).isError, true);
    const image = await mcp.callTool(mcp.resolve({ server_label: 'every' }, null, 't'), 'get-tiny-image', {});
    assert.match(image.text, /\[image: image\/png, \d+ bytes\]/);
  });

  it('mcp service - a stdio server that is killed is started again on the next call, and stopped when the gateway stops', async () => {
    const service = make({});
    const server = service.resolve({ server_label: 'every' }, null, 'tools[0]');
    assert.equal((await service.callTool(server, 'echo', { message: 'one' })).text, 'Echo: one');
    const [first] = service.servers().find((s) => s.label === 'every')!.pids;
    assert.ok(first !== undefined && alive(first));
    process.kill(first, 'SIGKILL');
    await until(
      () => service.servers().find((s) => s.label === 'every')!.sessions === 0,
      'the dead session is dropped',
    );
    assert.equal((await service.callTool(server, 'echo', { message: 'two' })).text, 'Echo: two');
    const [second] = service.servers().find((s) => s.label === 'every')!.pids;
    assert.ok(second !== undefined && second !== first && alive(second));
    await service.onModuleDestroy();
    assert.equal(alive(second), false, 'the child is gone once the module is destroyed');
    assert.equal((await failure(service.callTool(server, 'echo', { message: 'three' }))).code, 'service_unavailable');
  });
});
