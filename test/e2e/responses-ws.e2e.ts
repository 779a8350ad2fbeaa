import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect as netConnect, type Socket as Socket_ } from 'node:net';
import OpenAI from 'openai';
import { ResponsesWS } from 'openai/resources/responses/ws';
import WebSocket from 'ws';
import { BusClient, freePort } from '@cortex/bus';
import {
  decodeDecodedRequest,
  Subjects,
  WORKER_ID_TOKEN,
  type GenerateCommand,
  type StreamEvent,
} from '@cortex/contracts';
import { COMPACTION_PREFIX } from '@cortex/wire';
import { fixtureModel } from '@cortex/fixtures';
import {
  OpenResponsesSchema,
  postSse,
  startStack,
  waitFor,
  watchBus,
  FIXTURE_CATALOGUE,
  type TestStack,
} from '@cortex/testing';

const KEY = 'ws-e2e-key';
const chat = fixtureModel('cortex-chat');
const tools = fixtureModel('cortex-tools');
const weather = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'Current weather',
  parameters: { type: 'object', properties: { city: { type: 'string' } } },
  strict: false,
};
const TERMINAL = new Set(['response.completed', 'response.incomplete', 'response.failed']);

type ServerEvent = {
  type: string;
  sequence_number?: number;
  status?: number;
  response?: { id: string; output: Array<Record<string, unknown>> };
  error?: { code: string; message: string; param: string | null };
  delta?: string;
};

/** A turn ends with its terminal event, or with the WebSocket error envelope (which has `status`). */
const ends = (event: ServerEvent): boolean =>
  TERMINAL.has(event.type) || (event.type === 'error' && event.status !== undefined);

/** One connection driven by the openai client's ResponsesWS, with every message it received kept in order. */
class Socket {
  readonly events: ServerEvent[] = [];
  closed: { code: number; reason: string } | null = null;

  constructor(readonly ws: ResponsesWS) {
    ws.on('event', (event) => void this.events.push(event as unknown as ServerEvent));
    // Error events also reach here (the client raises them as errors); they are read from `events`.
    ws.on('error', () => undefined);
    ws.on('close', (code, reason) => (this.closed = { code, reason }));
  }

  send(body: Record<string, unknown>): void {
    this.ws.send({ type: 'response.create', ...body } as never);
  }

  /** Sends one create and returns its turn's events. */
  async turn(body: Record<string, unknown>): Promise<ServerEvent[]> {
    const from = this.events.length;
    this.send(body);
    return this.next(from);
  }

  /** The events from index `from` through the first that ends a turn. */
  async next(from: number): Promise<ServerEvent[]> {
    const end = (): number => this.events.findIndex((event, i) => i >= from && ends(event));
    await waitFor(() => end() !== -1 || this.closed !== null, 60_000, 20);
    assert.notEqual(end(), -1, `the turn ended without a terminal event (closed: ${JSON.stringify(this.closed)})`);
    return this.events.slice(from, end() + 1);
  }

  close(): void {
    this.ws.close({ code: 1000, reason: 'done' });
  }
}

/** The HTTP answer to an upgrade the gateway refuses (a plain `ws` client: the refusal happens before any WebSocket). */
function refusedUpgrade(url: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.on('open', () => reject(new Error('the upgrade was accepted')));
    ws.on('error', () => undefined);
    ws.on('unexpected-response', (request, response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => (body += chunk.toString()));
      response.on('end', () => {
        request.destroy();
        resolve({ status: response.statusCode ?? 0, body });
      });
    });
  });
}

describe('responses websocket e2e', () => {
  let stack: TestStack;
  let client: OpenAI;
  const schema = new OpenResponsesSchema();
  const sockets: Socket[] = [];

  const open = (options: ConstructorParameters<typeof ResponsesWS>[1] = {}, target = client): Socket => {
    const socket = new Socket(new ResponsesWS(target, options));
    sockets.push(socket);
    return socket;
  };

  /** Every event valid against the spec; a stream's events numbered from 0 in order; its text. */
  const checkTurn = (events: ServerEvent[]): { id: string; text: string; output: Array<Record<string, unknown>> } => {
    assert.ok(events.at(-1)?.status === undefined, `the turn failed: ${JSON.stringify(events.at(-1))}`);
    for (const event of events)
      assert.equal(schema.checkEvent(event as { type: string }), null, `${event.type} is valid`);
    assert.deepEqual(
      events.map((e) => e.sequence_number),
      events.map((_, i) => i),
    );
    assert.deepEqual(
      events.slice(0, 2).map((e) => e.type),
      ['response.created', 'response.in_progress'],
    );
    const last = events.at(-1);
    assert.equal(last?.type, 'response.completed');
    const text = events
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    return { id: last?.response?.id ?? '', text, output: last?.response?.output ?? [] };
  };

  const checkError = (events: ServerEvent[], status: number, code: string): ServerEvent => {
    assert.equal(events.length, 1, `one error envelope, got ${events.map((e) => e.type).join(', ')}`);
    const [envelope] = events as [ServerEvent];
    assert.equal(schema.check('WebSocketErrorEvent', envelope), null);
    assert.equal(envelope.status, status);
    assert.equal(envelope.error?.code, code);
    return envelope;
  };

  before(async () => {
    // cortex-chat takes Codex's recorded request, whose prompt is over a thousand tokens.
    const models = [
      ...FIXTURE_CATALOGUE.map((m) => ({ ...m, context_size: m.id === 'cortex-chat' ? 4096 : 1024 })),
      { id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 32768, slots: 2 },
    ];
    stack = await startStack({ models, config: { auth: { api_keys: [KEY] } } });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: KEY, maxRetries: 0 });
  });

  after(async () => {
    for (const socket of sockets) if (!socket.closed) socket.ws.socket.platformSocket.terminate();
    await stack?.stop();
  });

  it('responses ws - a create streams the same events as SSE, valid against the spec, and is stored', async () => {
    const socket = open();
    const body = { model: 'cortex-chat', input: 'Say hello.', instructions: 'Be kind.' };
    const events = await socket.turn(body);
    const turn = checkTurn(events);
    assert.equal(turn.text, chat.expected.text);
    const sse = await postSse(
      `${stack.baseUrl}/v1/responses`,
      { ...body, stream: true },
      { authorization: `Bearer ${KEY}` },
    );
    const streamed = sse.messages.filter((m) => m.data !== '[DONE]').map((m) => JSON.parse(m.data) as ServerEvent);
    // The same events in the same order; how many deltas the text comes in depends on timing (the worker batches tokens).
    const shape = (list: ServerEvent[]) =>
      list.map((e) => e.type).filter((type, i, all) => type !== 'response.output_text.delta' || all[i - 1] !== type);
    assert.deepEqual(shape(events), shape(streamed));
    assert.equal(checkTurn(streamed).text, turn.text);
    const stored = await client.responses.retrieve(turn.id);
    assert.equal(stored.output_text, chat.expected.text);
    socket.close();
  });

  it('responses ws - a message nested deeper than any real request is a 400 naming its field, and the socket goes on', async () => {
    const socket = open();
    let deep: unknown = 'x';
    for (let i = 0; i < 300; i++) deep = [deep];
    const envelope = checkError(await socket.turn({ model: 'cortex-chat', input: deep }), 400, 'invalid_request');
    assert.equal(envelope.error?.param, 'input');
    checkTurn(await socket.turn({ model: 'cortex-chat', input: 'Say hello.' }));
    socket.close();
  });

  it('responses ws - a window compacted over HTTP is the input of a turn on the socket', async () => {
    const message = (role: 'user' | 'assistant', text: string) => ({
      type: 'message',
      role,
      content: [
        {
          type: role === 'user' ? 'input_text' : 'output_text',
          text,
          ...(role === 'assistant' && { annotations: [] }),
        },
      ],
    });
    const compacted = await client.responses.compact({
      model: 'cortex-chat',
      input: [
        message('user', 'Plan a picnic.'),
        message('assistant', 'Bring bread.'),
        message('user', 'Which park?'),
      ] as never,
    });
    assert.equal(schema.check('CompactResource', compacted), null);
    const window = compacted.output as unknown as Array<{ type: string }>;
    assert.equal(window[0]?.type, 'compaction');
    const generates = await watchBus<GenerateCommand>(stack.nc, Subjects.workerGenerate.replace(WORKER_ID_TOKEN, '*'));
    const socket = open();
    const turn = checkTurn(await socket.turn({ model: 'cortex-chat', input: [...window, message('user', 'Thanks.')] }));
    await generates.stop();
    assert.equal(turn.text, chat.expected.text);
    // The worker got the summary (as the model wrote it) where the older turns were, then the kept and the new turn.
    const messages = generates.messages.at(-1)?.request.messages.map((m) => ({ role: m.role, content: m.content }));
    assert.deepEqual(messages, [
      { role: 'user', content: COMPACTION_PREFIX + chat.expected.text },
      { role: 'user', content: 'Which park?' },
      { role: 'user', content: 'Thanks.' },
    ]);
    socket.close();
  });

  it('responses ws - continuation by previous_response_id on one socket, stored and store: false', async () => {
    const socket = open();
    for (const store of [true, false]) {
      const first = checkTurn(
        await socket.turn({ model: 'cortex-tools', input: 'Weather in Paris?', tools: [weather], store }),
      );
      const call = first.output.find((o) => o.type === 'function_call');
      assert.equal(call?.name, 'get_weather');
      const output = { type: 'function_call_output', call_id: call?.call_id, output: '{"temp_c": 21}' };
      const second = checkTurn(
        await socket.turn({
          model: 'cortex-tools',
          previous_response_id: first.id,
          input: [output],
          tools: [weather],
          store,
        }),
      );
      assert.equal(second.text, tools.expected.afterToolResult?.text, `store: ${store}`);
      if (!store) {
        // Zero retention: neither turn reached the store, so only this connection could continue them.
        for (const id of [first.id, second.id])
          await assert.rejects(client.responses.retrieve(id), OpenAI.NotFoundError);
      }
    }
    socket.close();
  });

  it('responses ws - a store: false turn continued from a stored one, then stored again, rebuilds the whole chain', async () => {
    const socket = open();
    const first = checkTurn(await socket.turn({ model: 'cortex-tools', input: 'Weather in Paris?', tools: [weather] }));
    const call = first.output.find((o) => o.type === 'function_call');
    const middle = checkTurn(
      await socket.turn({
        model: 'cortex-chat',
        previous_response_id: first.id,
        input: [{ type: 'function_call_output', call_id: call?.call_id, output: '21' }],
        store: false,
      }),
    );
    const last = checkTurn(
      await socket.turn({ model: 'cortex-chat', previous_response_id: middle.id, input: 'And tomorrow?' }),
    );
    socket.close();
    // Stored though its predecessor was not: the conversation before it was stored with it, so an HTTP
    // follow-up (another connection, another gateway) rebuilds all of it.
    const body = { model: 'cortex-chat', previous_response_id: last.id, input: 'Thanks.' };
    const decoded = await new BusClient(stack.nc, 10_000).request(
      Subjects.translatorDecode,
      { dialect: 'openai.responses', body },
      { decode: decodeDecodedRequest },
    );
    const said = decoded.request.messages.map((m) => `${m.role}: ${m.content}`);
    assert.deepEqual(
      said.filter((line) => /^(user|tool):/.test(line)),
      ['user: Weather in Paris?', 'tool: 21', 'user: And tomorrow?', 'user: Thanks.'],
    );
    const next = await client.responses.create(body);
    assert.equal(next.output_text, chat.expected.text);
  });

  it('responses ws - a missing previous response is previous_response_not_found; a failed continuation evicts it', async () => {
    const socket = open();
    const missing = checkError(
      await socket.turn({ model: 'cortex-chat', previous_response_id: 'resp_nothing_here', input: 'Hi.' }),
      404,
      'previous_response_not_found',
    );
    assert.equal(missing.error?.param, 'previous_response_id');
    const kept = checkTurn(await socket.turn({ model: 'cortex-chat', input: 'Say hello.', store: false }));
    checkError(
      await socket.turn({ model: 'no-such-model', previous_response_id: kept.id, input: 'Hi.', store: false }),
      404,
      'model_not_found',
    );
    const evicted = checkError(
      await socket.turn({ model: 'cortex-chat', previous_response_id: kept.id, input: 'Hi.', store: false }),
      404,
      'previous_response_not_found',
    );
    assert.match(evicted.error?.message ?? '', new RegExp(kept.id));
    // Bad messages are errors in the same envelope, and the connection goes on.
    const background = checkError(
      await socket.turn({ model: 'cortex-chat', input: 'Hi.', background: true }),
      400,
      'invalid_request',
    );
    assert.equal(background.error?.param, 'background');
    checkTurn(await socket.turn({ model: 'cortex-chat', input: 'Say hello.', stream: true }));
    socket.close();
  });

  it('responses ws - a function_call_output answering no call fails the turn (400 naming the call_id) and evicts the response it continued', async () => {
    const socket = open();
    const kept = checkTurn(await socket.turn({ model: 'cortex-chat', input: 'Say hello.', store: false }));
    const orphan = checkError(
      await socket.turn({
        model: 'cortex-chat',
        previous_response_id: kept.id,
        store: false,
        input: [{ type: 'function_call_output', call_id: 'call_missing', output: 'x' }],
      }),
      400,
      'invalid_request',
    );
    assert.equal(orphan.error?.param, 'input[0].call_id');
    assert.match(orphan.error?.message ?? '', /'call_missing'/);
    checkError(
      await socket.turn({ model: 'cortex-chat', previous_response_id: kept.id, input: 'Go on.', store: false }),
      404,
      'previous_response_not_found',
    );
    socket.close();
  });

  it("responses ws - Codex's message (its recorded HTTP body as response.create, stream: true included) runs", async () => {
    // Codex builds its WebSocket response.create from the HTTP body it would POST (codex-api ResponseCreateWsRequest).
    const recorded = JSON.parse(
      readFileSync(new URL('../../../libs/wire/src/testing/recorded/codex.say-hi.json', import.meta.url), 'utf8'),
    ) as { body: Record<string, unknown> };
    assert.equal(recorded.body.stream, true);
    const socket = open();
    const turn = checkTurn(await socket.turn(recorded.body));
    assert.equal(turn.text, chat.expected.text);
    socket.close();
  });

  it("responses ws - Codex's warm-up (generate: false) completes at once with no output, and the next turn continues from it", async () => {
    const generates = await watchBus<GenerateCommand>(stack.nc, Subjects.workerGenerate.replace(WORKER_ID_TOKEN, '*'));
    const socket = open();
    // Codex's shape: the instructions so far, no generation, then the turn with the warm-up's id and only what is new.
    const developer = { type: 'message', role: 'developer', content: 'Be kind.' };
    const events = await socket.turn({
      model: 'cortex-chat',
      input: [developer],
      store: false,
      stream: true,
      generate: false,
      prompt_cache_key: 'warm-up',
    });
    const warm = checkTurn(events);
    assert.deepEqual(
      events.map((e) => e.type),
      ['response.created', 'response.in_progress', 'response.completed'],
    );
    assert.deepEqual(warm.output, []);
    assert.deepEqual((events.at(-1)?.response as { usage?: unknown } | undefined)?.usage, {
      input_tokens: 0,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 0,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 0,
    });
    const turn = checkTurn(
      await socket.turn({
        model: 'cortex-chat',
        previous_response_id: warm.id,
        input: [{ type: 'message', role: 'user', content: 'Say hello.' }],
        store: false,
        prompt_cache_key: 'warm-up',
      }),
    );
    assert.equal(turn.text, chat.expected.text);
    // Codex may say it read a response to its end; nothing answers that, and the next turn's events come as usual.
    socket.ws.send({ type: 'response.processed', response_id: turn.id } as never);
    const next = checkTurn(
      await socket.turn({ model: 'cortex-chat', previous_response_id: turn.id, input: 'Thanks.', store: false }),
    );
    assert.equal(next.text, chat.expected.text);
    await generates.stop();
    assert.equal(generates.messages.length, 2, 'the warm-up ran no model');
    const said = generates.messages[0]?.request.messages.map((m) => `${m.role}: ${m.content}`);
    assert.deepEqual(said, ['system: Be kind.', 'user: Say hello.'], 'the turn after the warm-up continued its input');
    // A warm-up that asks to be stored is, like any response.
    const stored = checkTurn(await socket.turn({ model: 'cortex-chat', input: [developer], generate: false }));
    assert.deepEqual((await client.responses.retrieve(stored.id)).output, []);
    socket.close();
  });

  it('responses ws - a second create waits for the first and runs after it', async () => {
    const socket = open();
    const from = socket.events.length;
    socket.send({ model: 'cortex-loop', input: 'Go.', max_output_tokens: 40, store: false });
    socket.send({ model: 'cortex-chat', input: 'Say hello.', store: false });
    const first = await socket.next(from);
    const second = await socket.next(from + first.length);
    assert.equal(first.at(-1)?.type, 'response.incomplete');
    assert.deepEqual(
      first.map((e) => e.sequence_number),
      first.map((_, i) => i),
    );
    for (const event of first)
      assert.equal(schema.checkEvent(event as { type: string }), null, `${event.type} is valid`);
    assert.equal(checkTurn(second).text, chat.expected.text);
    assert.notEqual(first.at(-1)?.response?.id, second.at(-1)?.response?.id);
    socket.close();
  });

  it('responses ws - creates run in the order sent; past 16 waiting, one more is refused as busy', async () => {
    const socket = open();
    const from = socket.events.length;
    // All sent at once: the first is in flight, 16 wait, the 18th finds the queue full.
    for (let n = 0; n < 18; n++)
      socket.send({ model: 'cortex-chat', input: 'Say hello.', store: false, metadata: { n: String(n) } });
    const metadataOf = (event: ServerEvent) =>
      (event.response as { metadata?: Record<string, string> } | undefined)?.metadata?.n;
    const completed = () => socket.events.slice(from).filter((e) => e.type === 'response.completed');
    await waitFor(() => completed().length === 17, 120_000, 50).catch((error: Error) => {
      throw new Error(
        `${error.message}: ${socket.events
          .slice(from)
          .map((e) => e.type)
          .join(' ')}\n${stack.logs().slice(-3000)}`,
      );
    });
    assert.deepEqual(
      completed().map(metadataOf),
      Array.from({ length: 17 }, (_, n) => String(n)),
    );
    const busy = socket.events.slice(from).filter((e) => e.type === 'error');
    checkError(busy, 429, 'busy');
    assert.match(busy[0]?.error?.message ?? '', /open another connection for parallel runs/);
    socket.close();
  });

  it('responses ws - a client that disconnects cancels its run in the worker', async () => {
    const streams = await watchBus<StreamEvent>(stack.nc, Subjects.streamsAll);
    const finishes = () =>
      streams.messages.filter((e): e is Extract<StreamEvent, { type: 'finish' }> => e.type === 'finish');
    try {
      const socket = open();
      socket.send({ model: 'cortex-loop', input: 'Go.', max_output_tokens: 30_000, store: false });
      await waitFor(() => socket.events.some((e) => e.type === 'response.output_text.delta'), 60_000, 20);
      socket.ws.socket.platformSocket.terminate();
      await waitFor(() => finishes().length > 0, 30_000);
      assert.equal(finishes()[0]?.reason, 'cancelled');
      assert.ok((finishes()[0]?.usage.completionTokens ?? 0) < 30_000);
    } finally {
      await streams.stop();
    }
  });

  it('responses ws - after the socket drops, the client reconnects and continues from the stored response', async () => {
    const socket = open({ reconnect: { onReconnecting: () => undefined, initialDelay: 50, maxRetries: 5 } });
    let reconnected = false;
    socket.ws.on('reconnected', () => (reconnected = true));
    const stored = checkTurn(
      await socket.turn({ model: 'cortex-tools', input: 'Weather in Paris?', tools: [weather] }),
    );
    const unstored = checkTurn(await socket.turn({ model: 'cortex-chat', input: 'Say hello.', store: false }));
    socket.ws.socket.platformSocket.terminate();
    await waitFor(() => reconnected, 30_000, 20);
    const call = stored.output.find((o) => o.type === 'function_call');
    const output = { type: 'function_call_output', call_id: call?.call_id, output: '{"temp_c": 21}' };
    const next = checkTurn(
      await socket.turn({ model: 'cortex-tools', previous_response_id: stored.id, input: [output], tools: [weather] }),
    );
    assert.equal(next.text, tools.expected.afterToolResult?.text);
    // The dropped connection's memory went with it: an unstored response cannot be continued any more.
    checkError(
      await socket.turn({ model: 'cortex-chat', previous_response_id: unstored.id, input: 'Hi.', store: false }),
      404,
      'previous_response_not_found',
    );
    socket.close();
  });

  it('responses ws - the upgrade is refused without a valid API key, with the HTTP status of a POST', async () => {
    const url = `${stack.baseUrl.replace('http', 'ws')}/v1/responses`;
    for (const headers of [{}, { authorization: 'Bearer wrong' }] as Array<Record<string, string>>) {
      const refused = await refusedUpgrade(url, headers);
      assert.equal(refused.status, 401);
      assert.match(refused.body, /API key (is missing|is not valid)/);
    }
    // With a key but no upgrade, the URL says what it is for.
    const plain = await fetch(`${stack.baseUrl}/v1/responses`, { headers: { authorization: `Bearer ${KEY}` } });
    assert.equal(plain.status, 404);
    assert.match(
      ((await plain.json()) as { error: { message: string } }).error.message,
      /is the Responses WebSocket: connect with "Upgrade: websocket"/,
    );
  });

  /** One more gateway on the same bus, with its own config over the stack's. */
  const spawnGateway = async (name: string, override: Record<string, Record<string, unknown>>) => {
    const config = JSON.parse(readFileSync(stack.configPath, 'utf8')) as Record<string, Record<string, unknown>>;
    const port = await freePort();
    for (const [section, values] of Object.entries(override)) config[section] = { ...config[section], ...values };
    config.gateway = { ...config.gateway, listen: `127.0.0.1:${port}` };
    const path = `${stack.configPath}.${name}.json`;
    writeFileSync(path, JSON.stringify(config));
    const child = stack.spawnService('gateway', { CORTEX_CONFIG: path });
    const target = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: KEY, maxRetries: 0 });
    await waitFor(async () => (await target.models.list().catch(() => null)) !== null, 30_000);
    return { child, client: target, port };
  };

  it('responses ws - a connection past its time limit gets websocket_connection_limit_reached and is closed', async () => {
    const { client: limited } = await spawnGateway('limit', { responses: { websocket_connection_limit_ms: 1000 } });
    const socket = open({}, limited);
    await waitFor(() => socket.closed !== null, 30_000);
    const envelope = checkError(
      socket.events.filter((e) => e.type === 'error'),
      400,
      'websocket_connection_limit_reached',
    );
    assert.match(envelope.error?.message ?? '', /open a new connection/);
    assert.equal(socket.closed?.code, 1000);
  });

  it('responses ws - a gateway sent SIGTERM mid-turn finishes the turn, closes the socket with 1001 and exits 0', async () => {
    const { child: stopping, client: viaStopping } = await spawnGateway('stopping', {});
    const exited = new Promise<number | null>((resolve) => stopping.once('exit', (code) => resolve(code)));
    const socket = open({}, viaStopping);
    const from = socket.events.length;
    socket.send({ model: 'cortex-loop', input: 'Go.', max_output_tokens: 300, store: false });
    await waitFor(() => socket.events.some((e) => e.type === 'response.output_text.delta'), 60_000, 20);
    stopping.kill('SIGTERM');
    const events = await socket.next(from);
    const last = events.at(-1) as ServerEvent & { response?: { usage?: { output_tokens: number } } };
    assert.equal(last.type, 'response.incomplete', `the turn ran to its max_output_tokens: ${last.type}`);
    assert.equal(last.response?.usage?.output_tokens, 300);
    await waitFor(() => socket.closed !== null, 30_000);
    assert.equal(socket.closed?.code, 1001);
    assert.equal(await exited, 0);
  });

  it('responses ws - with the Responses API switched off, the upgrade is refused like a POST', async () => {
    const { port } = await spawnGateway('off', {
      gateway: { endpoints: { chat_completions: true, responses: false, messages: true } },
    });
    const refused = await refusedUpgrade(`ws://127.0.0.1:${port}/v1/responses`, { authorization: `Bearer ${KEY}` });
    assert.equal(refused.status, 404);
    assert.match(refused.body, /the Responses API is disabled on this gateway/);
  });

  it('responses ws - a gateway that dies mid-turn: the worker cancels the run, another gateway continues from the store', async () => {
    const { child: doomed, client: viaDoomed } = await spawnGateway('doomed', {});
    const streams = await watchBus<StreamEvent>(stack.nc, Subjects.streamsAll);
    const finishes = () =>
      streams.messages.filter(
        (e): e is Extract<StreamEvent, { type: 'finish' }> => e.type === 'finish' && e.reason === 'cancelled',
      );
    try {
      const socket = open({}, viaDoomed);
      const stored = checkTurn(
        await socket.turn({ model: 'cortex-tools', input: 'Weather in Paris?', tools: [weather] }),
      );
      socket.send({ model: 'cortex-loop', input: 'Go.', max_output_tokens: 30_000, store: false });
      await waitFor(() => socket.events.some((e) => e.type === 'response.output_text.delta'), 60_000, 20);
      doomed.kill('SIGKILL');
      await waitFor(() => socket.closed !== null, 30_000);
      assert.equal(socket.closed?.code, 1006);
      await waitFor(() => finishes().length > 0, 30_000);
      assert.ok((finishes()[0]?.usage.completionTokens ?? 0) < 30_000);
      const call = stored.output.find((o) => o.type === 'function_call');
      const again = open();
      const output = { type: 'function_call_output', call_id: call?.call_id, output: '{"temp_c": 21}' };
      const next = checkTurn(
        await again.turn({ model: 'cortex-tools', previous_response_id: stored.id, input: [output], tools: [weather] }),
      );
      assert.equal(next.text, tools.expected.afterToolResult?.text);
      again.close();
    } finally {
      await streams.stop();
    }
  });
});

describe('responses websocket e2e - waiting messages bounded by size', () => {
  let stack: TestStack;

  before(async () => {
    // A 64 KiB body limit: a connection holds at most 128 KiB of messages.
    const models = [{ id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 32768, slots: 1 }];
    // And 3 s to send a whole request, or a whole WebSocket message.
    stack = await startStack({ models, config: { gateway: { body_limit_bytes: 65_536, request_timeout_ms: 3_000 } } });
  });

  after(async () => {
    await stack?.stop();
  });

  it('responses ws - past twice the body limit of waiting messages, one more is refused as busy', async () => {
    const socket = new Socket(
      new ResponsesWS(new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 })),
    );
    // Three messages of 45 KB: a long turn in flight, one waiting beside it (90 KB), and one too many.
    const big = 'word '.repeat(9_000);
    socket.send({ model: 'cortex-loop', input: big, store: false, max_output_tokens: 4000, metadata: { n: 'long' } });
    socket.send({ model: 'cortex-loop', input: big, store: false, max_output_tokens: 1, metadata: { n: 'fits' } });
    socket.send({ model: 'cortex-loop', input: big, store: false, max_output_tokens: 1, metadata: { n: 'refused' } });
    const done = () =>
      socket.events.filter((e) => e.type === 'response.completed' || e.type === 'response.incomplete').length;
    await waitFor(() => done() >= 2 || socket.closed !== null, 60_000, 20);
    const busy = socket.events.filter((e) => e.type === 'error');
    assert.equal(
      busy.length,
      1,
      socket.events
        .filter((e) => !e.type.includes('delta'))
        .map((e) => e.type)
        .join(', '),
    );
    assert.equal(busy[0]?.status, 429);
    assert.equal(busy[0]?.error?.code, 'busy');
    assert.match(busy[0]?.error?.message ?? '', /over 128 KiB \(twice gateway.body_limit_bytes\)/);
    const finished = socket.events.filter((e) => e.type === 'response.completed' || e.type === 'response.incomplete');
    assert.deepEqual(
      finished.map((e) => (e.response as { metadata?: Record<string, string> } | undefined)?.metadata?.n),
      ['long', 'fits'],
    );
    socket.ws.close();
  });

  it('responses ws - a message stalled short of its end is cut after the request timeout (1008); an idle connection is not', async () => {
    const { port } = new URL(stack.baseUrl);
    const handshake = (socket: Socket_): Promise<void> =>
      new Promise((resolve, reject) => {
        socket.write(
          `GET /v1/responses HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`,
        );
        socket.once('data', (chunk) =>
          String(chunk).startsWith('HTTP/1.1 101') ? resolve() : reject(new Error(String(chunk))),
        );
      });
    /** The close code the server sent, or null when the socket is still open after `ms`. */
    const closeCode = (socket: Socket_, ms: number): Promise<number | null> =>
      new Promise((resolve) => {
        const timer = setTimeout(() => resolve(null), ms);
        socket.on('data', (chunk: Buffer) => {
          // A server frame is unmasked: 0x88, a length byte, then the code.
          const at = chunk.indexOf(0x88);
          if (at >= 0 && chunk.length >= at + 4) {
            clearTimeout(timer);
            resolve(chunk.readUInt16BE(at + 2));
          }
        });
      });
    const stalled = netConnect(Number(port), '127.0.0.1');
    const idle = netConnect(Number(port), '127.0.0.1');
    try {
      await Promise.all([handshake(stalled), handshake(idle)]);
      // A masked text frame that says 1,000 bytes and sends 10 of them.
      stalled.write(Buffer.concat([Buffer.from([0x81, 0x80 | 126, 0x03, 0xe8, 1, 2, 3, 4]), Buffer.alloc(10, 0x20)]));
      const [cut, idleAfter] = await Promise.all([closeCode(stalled, 15_000), closeCode(idle, 9_000)]);
      assert.equal(cut, 1008, 'the stalled message closes its connection with 1008 (policy violation)');
      assert.equal(idleAfter, null, 'a connection idle between messages stays open');
    } finally {
      stalled.destroy();
      idle.destroy();
    }
  });
});
