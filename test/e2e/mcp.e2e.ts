import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { ResponsesWS } from 'openai/resources/responses/ws';
import { freePort } from '@cortex/bus';
import { fixtureModel } from '@cortex/fixtures';
import { fixtureEntry as fixture, postJson, scrapeMetrics, startStack, waitFor, type TestStack } from '@cortex/testing';

/*
 * MCP tools the gateway runs itself, on the MCP project's own servers from npm: the reference server
 * (@modelcontextprotocol/server-everything) started over stdio from the config and, as its own
 * process, over Streamable HTTP; the filesystem server over stdio. The Responses API's `mcp` tool
 * through the openai SDK, the loop's items and events, approvals, the stored chain, what is refused,
 * a tool that outlasts its timeout and one whose answer is 50 MB. cortex-tools-echo calls the
 * server's `echo` tool (cortex-tools-read the filesystem's read_text_file, cortex-tools-wait a long
 * operation), and answers differently once a tool's result is in its prompt: the answer shows the
 * result reached the model.
 */

const require = createRequire(import.meta.url);
const serverScript = (name: string): string =>
  join(dirname(require.resolve(`@modelcontextprotocol/${name}/package.json`)), 'dist/index.js');
const EVERYTHING = serverScript('server-everything');
const FILESYSTEM = serverScript('server-filesystem');
/** What the filesystem server's 50 MB file holds, over and over. */
const LINE = 'The quick brown fox jumps over the lazy dog.\n';
/** The filesystem server's cut (its `max_output_bytes`): small enough for the fixture's context. */
const FILE_CAP = 1024;
/** The HTTP server's call timeout: its long operation takes 10 s. */
const HTTP_TIMEOUT_MS = 1500;
const STATIC = 'sk-mcp-static';
const ADMIN = 'sk-mcp-admin';
const MODEL = 'cortex-tools-echo';
const ANSWER = (fixtureModel(MODEL).expected.afterToolResult ?? assert.fail('no answer after a result')).text;

/** The server's echo tool alone: its other tools would fill the fixture's context. */
const echoTool = (approval: unknown = 'never'): Record<string, unknown> => ({
  type: 'mcp',
  server_label: 'everything',
  allowed_tools: ['echo'],
  require_approval: approval,
});

type Item = { type: string } & Record<string, unknown>;

/** server-everything over Streamable HTTP, as its own process on a free port: its endpoint. */
async function startHttpServer(): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const child = spawn(process.execPath, [EVERYTHING, 'streamableHttp'], {
    env: { ...process.env, PORT: String(port) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let said = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server-everything did not start: ${said}`)), 30_000);
    child.stderr?.on('data', (chunk: Buffer) => {
      said += chunk.toString();
      if (said.includes('listening on port')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server-everything exited (${code}): ${said}`));
    });
  });
  return { url: `http://127.0.0.1:${port}/mcp`, child };
}

describe('MCP tools run by the gateway e2e', () => {
  let stack: TestStack;
  let client: OpenAI;
  let http: { url: string; child: ChildProcess } | undefined;
  let files: string;

  before(async () => {
    http = await startHttpServer();
    files = await mkdtemp(join(tmpdir(), 'cortex-mcp-files-'));
    // 50 MB that the filesystem server reads whole and sends in one message.
    await writeFile(join(files, 'Paris'), LINE.repeat(Math.ceil((50 * 1024 * 1024) / LINE.length)));
    stack = await startStack({
      services: ['router', 'translator', 'metrics', 'worker', 'gateway'],
      models: [MODEL, 'cortex-tools-read', 'cortex-tools-wait'].map((id) =>
        fixture(id, { context_size: 4096, pinned: true }),
      ),
      config: {
        auth: { api_keys: [STATIC], admin_keys: [ADMIN] },
        mcp: {
          servers: [
            { label: 'everything', command: process.execPath, args: [EVERYTHING, 'stdio'] },
            { label: 'everything-http', url: http.url, timeout_ms: HTTP_TIMEOUT_MS },
            { label: 'files', command: process.execPath, args: [FILESYSTEM, files], max_output_bytes: FILE_CAP },
          ],
          allow_request_urls: true,
        },
      },
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: STATIC, maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
    if (http && http.child.exitCode === null) {
      http.child.kill();
      await once(http.child, 'exit');
    }
    if (files) await rm(files, { recursive: true, force: true });
  });

  const create = (body: Record<string, unknown>): Promise<OpenAI.Responses.Response> =>
    client.responses.create({
      model: MODEL,
      input: 'Say Paris back to me.',
      ...body,
    } as never) as Promise<OpenAI.Responses.Response>;

  /** The response's output, the mcp_call's result checked: echo's answer to the fixture's call. */
  function assertRan(output: readonly Item[], what: string): void {
    assert.deepEqual(
      output.map((item) => item.type),
      ['mcp_list_tools', 'mcp_call', 'message'],
      `${what}: ${JSON.stringify(output)}`,
    );
    const [listed, call, message] = output as [Item, Item, Item];
    assert.equal(listed.server_label, 'everything');
    assert.deepEqual(
      (listed.tools as Array<{ name: string }>).map((tool) => tool.name),
      ['echo'],
    );
    assert.equal(call.server_label, 'everything');
    assert.equal(call.name, 'echo');
    assert.deepEqual(JSON.parse(call.arguments as string), { message: 'Paris' });
    assert.equal(call.output, 'Echo: Paris');
    assert.equal(call.error ?? null, null);
    assert.equal(call.status, 'completed');
    const content = message.content as Array<{ type: string; text: string }>;
    assert.equal(content[0]?.text, ANSWER, `${what}: the answer after the tool's result`);
  }

  it('mcp e2e - the model calls echo on the MCP server, the gateway runs it, and the next turn answers from it', async () => {
    const response = await create({ tools: [echoTool()] });
    assert.equal(response.status, 'completed');
    assertRan(response.output as unknown as Item[], 'not streamed');
    assert.equal(response.output_text, ANSWER);
    // Both turns are counted: the second prompt holds the first and the tool's result.
    const single = await client.responses.create({ model: MODEL, input: 'Say Paris back to me.' });
    assert.ok(
      (response.usage?.input_tokens ?? 0) > 2 * (single.usage?.input_tokens ?? 0) - 1,
      JSON.stringify(response.usage),
    );
    // Stored as answered.
    const stored = await client.responses.retrieve(response.id);
    assertRan(stored.output as unknown as Item[], 'stored');
  });

  it('mcp e2e - streamed: the listing, the call and its arguments, then the answer, in order', async () => {
    const stream = client.responses.stream({
      model: MODEL,
      input: 'Say Paris back to me.',
      tools: [echoTool()],
    } as never);
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    const response = await stream.finalResponse();
    assertRan(response.output as unknown as Item[], 'streamed');
    const order = [
      'response.created',
      'response.mcp_list_tools.in_progress',
      'response.mcp_list_tools.completed',
      'response.mcp_call_arguments.delta',
      'response.mcp_call_arguments.done',
      'response.mcp_call.in_progress',
      'response.mcp_call.completed',
      'response.output_text.delta',
      'response.completed',
    ];
    let at = -1;
    for (const type of order) {
      const next = types.indexOf(type, at + 1);
      assert.ok(next > at, `${type} after ${order[order.indexOf(type) - 1] ?? 'nothing'}: ${types.join(', ')}`);
      at = next;
    }
    assert.equal(types.filter((type) => type === 'response.created').length, 1, 'one response, over both turns');
  });

  it('mcp e2e - approval required: the response ends with an approval request, and the approved call runs on the next', async () => {
    const asked = await create({ tools: [echoTool('always')] });
    assert.equal(asked.status, 'completed');
    const output = asked.output as unknown as Item[];
    assert.deepEqual(
      output.map((item) => item.type),
      ['mcp_list_tools', 'mcp_approval_request'],
      JSON.stringify(output),
    );
    const request = output[1] as Item;
    assert.equal(request.name, 'echo');
    assert.deepEqual(JSON.parse(request.arguments as string), { message: 'Paris' });
    const approved = await create({
      previous_response_id: asked.id,
      input: [{ type: 'mcp_approval_response', approval_request_id: request.id, approve: true }],
      tools: [echoTool('always')],
    });
    const ran = approved.output as unknown as Item[];
    assert.deepEqual(
      ran.map((item) => item.type),
      ['mcp_list_tools', 'mcp_call', 'message'],
      JSON.stringify(ran),
    );
    assert.equal(ran[1]?.approval_request_id, request.id);
    assert.equal(ran[1]?.output, 'Echo: Paris');
    assert.equal(approved.output_text, ANSWER);
    // Declined: nothing runs, and the model is told.
    const declined = await create({
      previous_response_id: asked.id,
      input: [{ type: 'mcp_approval_response', approval_request_id: request.id, approve: false, reason: 'not now' }],
      tools: [echoTool('always')],
    });
    const refused = (declined.output as unknown as Item[])[1] as Item;
    assert.equal(refused.type, 'mcp_call');
    assert.equal(refused.output ?? null, null);
    assert.match(String(refused.error), /declined this call: not now/);
    // An approval of no request of the chain.
    await assert.rejects(
      create({
        previous_response_id: asked.id,
        input: [{ type: 'mcp_approval_response', approval_request_id: 'mcpr_unknown', approve: true }],
        tools: [echoTool('always')],
      }),
      (error: { status?: number; message?: string }) => {
        assert.equal(error.status, 400);
        assert.match(
          String(error.message),
          /input\[0\]\.approval_request_id: 'mcpr_unknown' is no mcp_approval_request/,
        );
        return true;
      },
    );
  });

  it('mcp e2e - a 50 MB answer (the filesystem server over stdio) is cut at the server cap, and the model reads the cut', async () => {
    const response = await client.responses.create({
      model: 'cortex-tools-read',
      input: 'Read the file Paris.',
      tools: [{ type: 'mcp', server_label: 'files', allowed_tools: ['read_text_file'], require_approval: 'never' }],
    } as never);
    const output = response.output as unknown as Item[];
    assert.deepEqual(
      output.map((item) => item.type),
      ['mcp_list_tools', 'mcp_call', 'message'],
      JSON.stringify(output).slice(0, 2000),
    );
    const call = output[1] as Item;
    assert.deepEqual(JSON.parse(call.arguments as string), { path: 'Paris' });
    const text = call.output as string;
    const note = `\n[cortex: the tool's answer was cut at ${FILE_CAP} bytes (max_output_bytes); the rest is not shown]`;
    assert.ok(text.endsWith(note), text.slice(-300));
    const kept = text.slice(0, -note.length);
    assert.ok(Buffer.byteLength(kept) <= FILE_CAP, `${Buffer.byteLength(kept)} bytes kept`);
    assert.ok(kept.length > FILE_CAP / 2, 'the head of the file is kept');
    assert.equal(kept, LINE.repeat(100).slice(0, kept.length), 'the file as it begins');
    assert.equal(response.output_text, fixtureModel('cortex-tools-read').expected.afterToolResult?.text);
    // The gateway is whole after it.
    assertRan((await create({ tools: [echoTool()] })).output as unknown as Item[], 'after the 50 MB answer');
  });

  it('mcp e2e - Streamable HTTP: a tool that outlasts its timeout fails as the call error, the model is told, and the server goes on', async () => {
    const tools = [
      {
        type: 'mcp',
        server_label: 'everything-http',
        allowed_tools: ['trigger-long-running-operation'],
        require_approval: 'never',
      },
    ];
    const response = await client.responses.create({ model: 'cortex-tools-wait', input: 'Wait.', tools } as never);
    const output = response.output as unknown as Item[];
    assert.deepEqual(
      output.map((item) => item.type),
      ['mcp_list_tools', 'mcp_call', 'message'],
      JSON.stringify(output),
    );
    const call = output[1] as Item;
    assert.equal(call.server_label, 'everything-http');
    assert.equal(call.name, 'trigger-long-running-operation');
    assert.equal(call.output ?? null, null);
    assert.match(
      String(call.error),
      new RegExp(
        `did not answer within ${HTTP_TIMEOUT_MS} ms \\(mcp\\.servers\\[1\\]\\.timeout_ms\\); the call was cancelled`,
      ),
    );
    // The model was told: its next turn read the error as the tool's result.
    assert.equal(response.output_text, fixtureModel('cortex-tools-wait').expected.afterToolResult?.text);
    // The same server answers the next call.
    const echoed = await create({
      tools: [{ type: 'mcp', server_label: 'everything-http', allowed_tools: ['echo'], require_approval: 'never' }],
    });
    const ran = echoed.output as unknown as Item[];
    assert.equal(ran[1]?.output, 'Echo: Paris', JSON.stringify(ran));
    assert.equal(echoed.output_text, ANSWER);
    // Counted per server, tool and outcome, with their time.
    const series = (tool: string, outcome: string): string =>
      `cortex_mcp_tool_calls_total{server="everything-http",tool="${tool}",outcome="${outcome}"}`;
    let metrics = new Map<string, number>();
    await waitFor(async () => {
      metrics = await scrapeMetrics(stack.metricsUrl);
      return (metrics.get(series('echo', 'ok')) ?? 0) >= 1;
    }, 15_000).catch(() => assert.fail([...metrics].filter(([name]) => name.includes('mcp')).join('\n')));
    assert.equal(metrics.get(series('trigger-long-running-operation', 'timeout')), 1);
    const timed = `cortex_mcp_tool_call_seconds_sum{server="everything-http",tool="trigger-long-running-operation"}`;
    assert.ok((metrics.get(timed) ?? 0) >= HTTP_TIMEOUT_MS / 1000, `${timed}: ${metrics.get(timed)}`);
  });

  it('mcp e2e - Anthropic: the SDK with mcp_servers gets mcp_tool_use and mcp_tool_result blocks, streamed and not', async () => {
    const anthropic = new Anthropic({ baseURL: stack.baseUrl, apiKey: STATIC, maxRetries: 0 });
    const question = { role: 'user' as const, content: 'Say Paris back to me.' };
    // The 2025-11-20 beta: the registered HTTP server by its own URL, its echo tool alone by an mcp_toolset.
    const body = {
      model: MODEL,
      max_tokens: 64,
      messages: [question],
      mcp_servers: [{ type: 'url' as const, name: 'everything-http', url: http?.url ?? '' }],
      tools: [
        {
          type: 'mcp_toolset' as const,
          mcp_server_name: 'everything-http',
          default_config: { enabled: false },
          configs: { echo: { enabled: true } },
        },
      ],
      betas: ['mcp-client-2025-11-20'],
    };
    type Block = { type: string } & Record<string, unknown>;
    const assertBlocks = (content: readonly Block[], server: string, what: string): void => {
      assert.deepEqual(
        content.map((block) => block.type),
        ['mcp_tool_use', 'mcp_tool_result', 'text'],
        `${what}: ${JSON.stringify(content)}`,
      );
      const [use, result, text] = content as [Block, Block, Block];
      assert.equal(use.name, 'echo');
      assert.equal(use.server_name, server);
      assert.deepEqual(use.input, { message: 'Paris' });
      assert.equal(result.tool_use_id, use.id);
      assert.equal(result.is_error, false);
      assert.deepEqual(result.content, [{ type: 'text', text: 'Echo: Paris' }]);
      assert.equal(text.text, ANSWER, `${what}: the answer after the tool's result`);
    };
    const message = await anthropic.beta.messages.create(body);
    assertBlocks(message.content as unknown as Block[], 'everything-http', 'not streamed');
    assert.equal(message.stop_reason, 'end_turn');

    // The 2025-04-04 beta, streamed: the stdio server by its name, its tools by tool_configuration.
    const stream = anthropic.beta.messages.stream({
      model: MODEL,
      max_tokens: 64,
      messages: [question],
      mcp_servers: [{ type: 'url', name: 'everything', tool_configuration: { allowed_tools: ['echo'] } } as never],
      betas: ['mcp-client-2025-04-04'],
    });
    const starts: string[] = [];
    for await (const event of stream) if (event.type === 'content_block_start') starts.push(event.content_block.type);
    assert.deepEqual(starts, ['mcp_tool_use', 'mcp_tool_result', 'text']);
    const streamed = await stream.finalMessage();
    assertBlocks(streamed.content as unknown as Block[], 'everything', 'streamed');

    // The answer sent back as history reads as the calls and results it holds.
    const again = await anthropic.beta.messages.create({
      ...body,
      messages: [
        question,
        { role: 'assistant', content: message.content as never },
        { role: 'user', content: 'Once more.' },
      ],
    });
    assert.equal(again.stop_reason, 'end_turn');
    assert.ok(again.usage.input_tokens > message.usage.input_tokens / 2, JSON.stringify(again.usage));

    // Without the beta header, as at Anthropic, mcp_servers is refused; so is a server the key may not use.
    await assert.rejects(
      anthropic.messages.create({ ...body, betas: undefined } as never),
      (error: { status?: number; message?: string }) => {
        assert.equal(error.status, 400);
        assert.match(String(error.message), /mcp_servers: .*anthropic-beta: mcp-client-2025-11-20/);
        return true;
      },
    );
    const made = await postJson(
      `${stack.baseUrl}/admin/keys`,
      { name: 'docs-only', mcp_servers: ['docs'] },
      { authorization: `Bearer ${ADMIN}` },
    );
    const { secret } = (await made.json()) as { secret: string };
    await assert.rejects(
      new Anthropic({ baseURL: stack.baseUrl, apiKey: secret, maxRetries: 0 }).beta.messages.create(body),
      (error: { status?: number; message?: string }) => {
        assert.equal(error.status, 403);
        assert.match(String(error.message), /may not use the MCP server 'everything-http'/);
        return true;
      },
    );
  });

  it('mcp e2e - over the WebSocket mode: the loop in one turn, and an approval of the unstored response before it', async () => {
    const ws = new ResponsesWS(client);
    type Event = { type: string; response?: { id: string; output: Item[] } };
    const events: Event[] = [];
    ws.on('event', (event) => void events.push(event as unknown as Event));
    ws.on('error', () => undefined);
    const turn = async (body: Record<string, unknown>): Promise<Event[]> => {
      const from = events.length;
      ws.send({ type: 'response.create', model: MODEL, input: 'Say Paris back to me.', ...body } as never);
      const end = (): number =>
        events.findIndex((event, i) => i >= from && (event.type === 'response.completed' || event.type === 'error'));
      await waitFor(() => end() !== -1, 60_000, 20);
      return events.slice(from, end() + 1);
    };
    try {
      const ran = await turn({ tools: [echoTool()], store: false });
      const done = ran.at(-1) as Event;
      assert.equal(done.type, 'response.completed', JSON.stringify(done));
      assertRan(done.response?.output ?? [], 'over the WebSocket');
      assert.ok(ran.some((event) => event.type === 'response.mcp_call.completed'));
      // Unstored, so only the connection holds the approval request the next turn answers.
      const asked = (await turn({ tools: [echoTool('always')], store: false })).at(-1) as Event;
      const request = asked.response?.output[1] as Item;
      assert.equal(request.type, 'mcp_approval_request', JSON.stringify(asked));
      const approved = (
        await turn({
          previous_response_id: asked.response?.id,
          input: [{ type: 'mcp_approval_response', approval_request_id: request.id, approve: true }],
          tools: [echoTool('always')],
          store: false,
        })
      ).at(-1) as Event;
      const output = approved.response?.output ?? [];
      assert.deepEqual(
        output.map((item) => item.type),
        ['mcp_list_tools', 'mcp_call', 'message'],
        JSON.stringify(approved),
      );
      assert.equal(output[1]?.output, 'Echo: Paris');
    } finally {
      ws.close({ code: 1000, reason: 'done' });
    }
  });

  it('mcp e2e - refused naming the field: a server the key may not use (403), an unknown label, a private server_url, background', async () => {
    const made = await postJson(
      `${stack.baseUrl}/admin/keys`,
      { name: 'no-tools', mcp_servers: ['docs'] },
      { authorization: `Bearer ${ADMIN}` },
    );
    assert.equal(made.status, 200, await made.clone().text());
    const { secret } = (await made.json()) as { secret: string };
    const ask = (key: string, body: Record<string, unknown>) =>
      postJson(
        `${stack.baseUrl}/v1/responses`,
        { model: MODEL, input: 'hi', ...body },
        { authorization: `Bearer ${key}` },
      );
    const refused = async (response: Response, status: number, param: string, message: RegExp): Promise<void> => {
      const body = (await response.json()) as { error: { param: string; message: string } };
      assert.equal(response.status, status, JSON.stringify(body));
      assert.equal(body.error.param, param);
      assert.match(body.error.message, message);
    };
    await refused(
      await ask(secret, { tools: [echoTool()] }),
      403,
      'tools[0].server_label',
      /may not use the MCP server 'everything'/,
    );
    await refused(
      await ask(STATIC, { tools: [{ type: 'mcp', server_label: 'nowhere' }] }),
      400,
      'tools[0].server_label',
      /no MCP server is registered as 'nowhere'/,
    );
    await refused(
      await ask(STATIC, { tools: [{ type: 'mcp', server_label: 'local', server_url: 'http://127.0.0.1:9/mcp' }] }),
      400,
      'tools[0].server_url',
      /names 127\.0\.0\.1, a non-public address; the gateway reaches MCP servers at public addresses only/,
    );
    await refused(await ask(STATIC, { background: true, tools: [echoTool()] }), 400, 'background', /foreground/);
    // The gateway is whole after all of it.
    assertRan((await create({ tools: [echoTool()] })).output as unknown as Item[], 'after the refusals');
  });
});
