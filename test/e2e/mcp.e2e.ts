import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import OpenAI from 'openai';
import { fixtureModel } from '@cortex/fixtures';
import { fixtureEntry as fixture, postJson, startStack, type TestStack } from '@cortex/testing';

/*
 * MCP tools the gateway runs itself, on the MCP project's own reference server
 * (@modelcontextprotocol/server-everything, started over stdio from the config): the Responses API's
 * `mcp` tool through the openai SDK, the loop's items and events, approvals, the stored chain, and
 * what is refused. cortex-tools-echo calls the server's `echo` tool, and answers differently once a
 * tool's result is in its prompt: the answer shows the result reached the model.
 */

const require = createRequire(import.meta.url);
const EVERYTHING = join(
  dirname(require.resolve('@modelcontextprotocol/server-everything/package.json')),
  'dist/index.js',
);
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

describe('MCP tools run by the gateway e2e', () => {
  let stack: TestStack;
  let client: OpenAI;

  before(async () => {
    stack = await startStack({
      services: ['router', 'translator', 'worker', 'gateway'],
      models: [fixture(MODEL, { context_size: 4096, pinned: true })],
      config: {
        auth: { api_keys: [STATIC], admin_keys: [ADMIN] },
        mcp: {
          servers: [{ label: 'everything', command: process.execPath, args: [EVERYTHING, 'stdio'] }],
          allow_request_urls: true,
        },
      },
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: STATIC, maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
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
