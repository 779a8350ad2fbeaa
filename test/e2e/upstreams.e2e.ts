import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { ResponsesWS } from 'openai/resources/responses/ws';
import Anthropic from '@anthropic-ai/sdk';
import { Subjects, type RequestFinishedEvent, type UsageRecord } from '@cortex/contracts';
import { fixtureModel, solidPng, VISION_FIXTURE } from '@cortex/fixtures';
import { startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';
import { SseParser } from '@cortex/wire';

// Two independent cortex stacks, each with its own NATS: the upstream serves the fixtures on local
// workers; the front has only a remote worker and serves upstream models, one per wire format the
// upstream is spoken to in. Every client dialect is asked through every upstream format.

const UPSTREAM_KEY = 'sk-upstream-e2e';
const APIS = ['chat', 'responses', 'messages'] as const;
const reasoning = fixtureModel('cortex-reasoning').expected;
const weather = fixtureModel('cortex-tools').expected;
const ANSWER = 'The weather tool has answered.';
const { expected: colours } = VISION_FIXTURE;
const redPng = solidPng(32, 32, [...(colours.red.rgb ?? [0, 0, 0])] as never).toString('base64');
const tool = {
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

/** What one answer said, whatever the dialect. */
interface Answer {
  text: string;
  reasoning: string;
  call?: { id: string; name: string; arguments: string };
  usage: { input: number; output: number };
}

describe('upstreams e2e', () => {
  let upstream: TestStack;
  let front: TestStack;
  let openai: OpenAI;
  let anthropic: Anthropic;
  let records: { messages: UsageRecord[]; stop: () => Promise<void> };

  before(async () => {
    upstream = await startStack({
      models: [
        { id: 'cortex-tools', file: 'fixture:cortex-tools', context_size: 1024, pinned: true },
        { id: 'cortex-reasoning', file: 'fixture:cortex-reasoning', context_size: 512, pinned: true },
        {
          id: 'cortex-vision',
          file: 'fixture:cortex-vision',
          mmproj: 'fixture:mmproj-cortex-vision',
          context_size: 512,
          pinned: true,
        },
      ],
      config: { auth: { api_keys: [UPSTREAM_KEY] } },
    });
    const url = `${upstream.baseUrl}/v1`;
    const models = APIS.flatMap((api) => [
      { id: `up-${api}-tools`, upstream: { url, api, model: 'cortex-tools', api_key_env: 'UPSTREAM_KEY' } },
      {
        id: `up-${api}-reasoning`,
        upstream: { url, api, model: 'cortex-reasoning', api_key_env: 'UPSTREAM_KEY', reasoning: true },
      },
      {
        id: `up-${api}-vision`,
        upstream: { url, api, model: 'cortex-vision', api_key_env: 'UPSTREAM_KEY', vision: true },
      },
    ]);
    front = await startStack({
      models,
      serviceEnv: { worker: { CORTEX_WORKER_ENGINE: 'remote', CORTEX_WORKER_ID: 'remote-1', UPSTREAM_KEY } },
    });
    openai = new OpenAI({ baseURL: `${front.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    anthropic = new Anthropic({ baseURL: front.baseUrl, apiKey: 'unused', maxRetries: 0 });
    records = await watchBus<UsageRecord>(upstream.nc, Subjects.usageRecorded);
  });

  after(async () => {
    await records?.stop();
    await front?.stop();
    await upstream?.stop();
  });

  /** The usage the upstream recorded for the request just answered (its own record, from its own bus). */
  /**
   * The upstream's usage record of the request sent after `before` records had come, as it reported
   * it: the one of those that came since that equals `expected` (a record of an earlier request may
   * still arrive after `before` was read), else the last, for the failure to show.
   */
  async function upstreamUsage(
    before: number,
    expected: { input: number; output: number },
  ): Promise<{ input: number; output: number }> {
    const since = (): Array<{ input: number; output: number }> =>
      records.messages
        .slice(before)
        .map((record) => ({ input: record.prompt_tokens, output: record.completion_tokens }));
    const same = (usage: { input: number; output: number }): boolean =>
      usage.input === expected.input && usage.output === expected.output;
    await waitFor(() => since().some(same), 10_000, 20).catch(() => undefined);
    return since().find(same) ?? since().at(-1) ?? { input: -1, output: -1 };
  }

  // One function per client dialect: the question, streamed or not, and what came back.
  type Turn = { model: string; stream: boolean; tools?: boolean; image?: boolean; result?: Answer['call'] };
  const user = (turn: Turn): string => (turn.image ? 'What is in the picture?' : 'What is the weather in Paris?');

  async function chat(turn: Turn): Promise<Answer> {
    const content: OpenAI.ChatCompletionContentPart[] = [{ type: 'text', text: user(turn) }];
    if (turn.image) content.push({ type: 'image_url', image_url: { url: `data:image/png;base64,${redPng}` } });
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content }];
    if (turn.result) {
      messages.push({
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: turn.result.id,
            type: 'function',
            function: { name: turn.result.name, arguments: turn.result.arguments },
          },
        ],
      });
      messages.push({ role: 'tool', tool_call_id: turn.result.id, content: '{"temperature": 21}' });
    }
    const body = {
      model: turn.model,
      messages,
      // Room for an Anthropic upstream's least thinking budget.
      max_tokens: 2048,
      ...(turn.tools && { tools: [{ type: 'function' as const, function: tool }] }),
    };
    if (!turn.stream) {
      const reply = await openai.chat.completions.create(body);
      const message = reply.choices[0]?.message as OpenAI.ChatCompletionMessage & { reasoning_content?: string };
      const call = message.tool_calls?.[0];
      return {
        text: message.content ?? '',
        reasoning: message.reasoning_content ?? '',
        ...(call?.type === 'function' && { call: { id: call.id, ...call.function } }),
        usage: { input: reply.usage?.prompt_tokens ?? -1, output: reply.usage?.completion_tokens ?? -1 },
      };
    }
    const stream = await openai.chat.completions.create({
      ...body,
      stream: true,
      stream_options: { include_usage: true },
    });
    const answer: Answer = { text: '', reasoning: '', usage: { input: -1, output: -1 } };
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as
        (OpenAI.ChatCompletionChunk.Choice.Delta & { reasoning_content?: string }) | undefined;
      answer.text += delta?.content ?? '';
      answer.reasoning += delta?.reasoning_content ?? '';
      const call = delta?.tool_calls?.[0];
      if (call?.id) answer.call = { id: call.id, name: call.function?.name ?? '', arguments: '' };
      if (answer.call && call?.function?.arguments) answer.call.arguments += call.function.arguments;
      if (chunk.usage) answer.usage = { input: chunk.usage.prompt_tokens, output: chunk.usage.completion_tokens };
    }
    return answer;
  }

  function responsesInput(turn: Turn): OpenAI.Responses.ResponseInput {
    const content: OpenAI.Responses.ResponseInputContent[] = [{ type: 'input_text', text: user(turn) }];
    if (turn.image) content.push({ type: 'input_image', image_url: `data:image/png;base64,${redPng}`, detail: 'auto' });
    const input: OpenAI.Responses.ResponseInput = [{ role: 'user', content }];
    if (turn.result) {
      input.push({
        type: 'function_call',
        call_id: turn.result.id,
        name: turn.result.name,
        arguments: turn.result.arguments,
      });
      input.push({ type: 'function_call_output', call_id: turn.result.id, output: '{"temperature": 21}' });
    }
    return input;
  }

  function fromResponse(response: OpenAI.Responses.Response): Answer {
    const answer: Answer = {
      // The SDK's output_text is its own addition to what the HTTP API returns, not on a socket's events.
      text: response.output
        .flatMap((item) => (item.type === 'message' ? item.content : []))
        .map((part) => (part.type === 'output_text' ? part.text : ''))
        .join(''),
      reasoning: '',
      usage: { input: response.usage?.input_tokens ?? -1, output: response.usage?.output_tokens ?? -1 },
    };
    for (const item of response.output) {
      if (item.type === 'reasoning')
        answer.reasoning += [...item.summary, ...(item.content ?? [])].map((part) => part.text).join('');
      if (item.type === 'function_call') answer.call = { id: item.call_id, name: item.name, arguments: item.arguments };
    }
    return answer;
  }

  async function responses(turn: Turn): Promise<Answer> {
    const body = {
      model: turn.model,
      input: responsesInput(turn),
      max_output_tokens: 2048,
      ...(turn.tools && { tools: [{ type: 'function' as const, strict: false, ...tool }] }),
    };
    if (!turn.stream) return fromResponse(await openai.responses.create(body));
    return fromResponse(await openai.responses.stream(body).finalResponse());
  }

  async function responsesSocket(turn: Turn): Promise<Answer> {
    const ws = new ResponsesWS(openai);
    const done = new Promise<OpenAI.Responses.Response>((resolve, reject) => {
      ws.on('event', (event) => {
        if (event.type === 'response.completed') resolve(event.response);
        if (event.type === 'error') reject(new Error(JSON.stringify(event)));
      });
      ws.on('error', reject);
    });
    try {
      ws.send({
        type: 'response.create',
        model: turn.model,
        input: responsesInput(turn),
        max_output_tokens: 2048,
        ...(turn.tools && { tools: [{ type: 'function' as const, strict: false, ...tool }] }),
      });
      return fromResponse(await done);
    } finally {
      ws.close();
    }
  }

  async function messages(turn: Turn): Promise<Answer> {
    const content: Anthropic.ContentBlockParam[] = [{ type: 'text', text: user(turn) }];
    if (turn.image) content.push({ type: 'image', source: { type: 'base64', media_type: 'image/png', data: redPng } });
    const history: Anthropic.MessageParam[] = [{ role: 'user', content }];
    if (turn.result) {
      history.push({
        role: 'assistant',
        content: [
          {
            type: 'tool_use',
            id: turn.result.id,
            name: turn.result.name,
            input: JSON.parse(turn.result.arguments) as object,
          },
        ],
      });
      history.push({
        role: 'user',
        content: [{ type: 'tool_result', tool_use_id: turn.result.id, content: '{"temperature": 21}' }],
      });
    }
    const body = {
      model: turn.model,
      max_tokens: 2048,
      messages: history,
      thinking: { type: 'enabled' as const, budget_tokens: 1024 },
      ...(turn.tools && {
        tools: [
          {
            name: tool.name,
            description: tool.description,
            input_schema: tool.parameters as Anthropic.Tool.InputSchema,
          },
        ],
      }),
    };
    const message = turn.stream
      ? await anthropic.messages.stream(body).finalMessage()
      : await anthropic.messages.create(body);
    // Anthropic counts prompt tokens read from a cache apart from the rest.
    const { input_tokens, cache_read_input_tokens, cache_creation_input_tokens, output_tokens } = message.usage;
    const input = input_tokens + (cache_read_input_tokens ?? 0) + (cache_creation_input_tokens ?? 0);
    const answer: Answer = { text: '', reasoning: '', usage: { input, output: output_tokens } };
    for (const block of message.content) {
      if (block.type === 'text') answer.text += block.text;
      if (block.type === 'thinking') answer.reasoning += block.thinking;
      if (block.type === 'tool_use')
        answer.call = { id: block.id, name: block.name, arguments: JSON.stringify(block.input) };
    }
    return answer;
  }

  const clients = { chat, responses, 'responses over WebSocket': responsesSocket, messages } as const;

  for (const [dialect, ask] of Object.entries(clients)) {
    for (const api of APIS) {
      it(`upstreams - a ${dialect} client through a ${api} upstream: reasoning and text, streamed and not, with the upstream's usage`, async () => {
        for (const stream of dialect === 'responses over WebSocket' ? [true] : [false, true]) {
          const seen = records.messages.length;
          const answer = await ask({ model: `up-${api}-reasoning`, stream });
          assert.equal(answer.text, reasoning.text, `${dialect} ${api} stream=${stream}: text`);
          assert.equal(answer.reasoning, reasoning.reasoning, `${dialect} ${api} stream=${stream}: reasoning`);
          assert.deepEqual(
            answer.usage,
            await upstreamUsage(seen, answer.usage),
            `${dialect} ${api} stream=${stream}: usage`,
          );
        }
      });

      it(`upstreams - a ${dialect} client through a ${api} upstream: a tool call, and the answer to its result`, async () => {
        for (const stream of dialect === 'responses over WebSocket' ? [true] : [false, true]) {
          const seen = records.messages.length;
          const called = await ask({ model: `up-${api}-tools`, stream, tools: true });
          assert.equal(called.call?.name, weather.toolCall?.name, `${dialect} ${api} stream=${stream}: the call`);
          assert.deepEqual(JSON.parse(called.call?.arguments ?? 'null'), weather.toolCall?.arguments);
          assert.deepEqual(
            called.usage,
            await upstreamUsage(seen, called.usage),
            `${dialect} ${api}: usage of the call`,
          );
          const answered = await ask({ model: `up-${api}-tools`, stream, tools: true, result: called.call });
          assert.equal(answered.text, ANSWER, `${dialect} ${api} stream=${stream}: the answer to the result`);
          assert.equal(answered.call, undefined);
        }
      });

      it(`upstreams - a ${dialect} client through a ${api} upstream: an image`, async () => {
        const answer = await ask({ model: `up-${api}-vision`, stream: dialect !== 'chat', image: true });
        assert.equal(answer.text, colours.red.text, `${dialect} ${api}: the image reached the upstream's vision model`);
      });
    }
  }

  it('upstreams - /v1/models lists the upstream models with what they can do', async () => {
    const model = (await openai.models.retrieve('up-messages-vision')) as unknown as {
      capabilities: { vision: boolean; tools: boolean; format: string } | null;
    };
    assert.deepEqual(
      { vision: model.capabilities?.vision, tools: model.capabilities?.tools, format: model.capabilities?.format },
      { vision: true, tools: true, format: 'upstream messages' },
    );
  });
});

describe('upstream failover e2e', () => {
  const ADMIN = 'sk-upstream-admin';
  const FRONT_KEY = 'sk-front-e2e';
  const FRONT_ADMIN = 'sk-front-admin';
  /** The remote model's price per million tokens, in the default billing.currency (USD). */
  const PRICE = { input: 2, output: 10 };
  const hello = fixtureModel('cortex-chat').expected.text;
  let upstream: TestStack;
  let front: TestStack;
  let upstreamListen = '';
  let secondUrl = '';
  let secondGateway = '';

  before(async () => {
    upstream = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true },
        // Room for a stream that runs for seconds.
        { id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 16_384, pinned: true },
      ],
      config: { auth: { api_keys: [UPSTREAM_KEY], admin_keys: [ADMIN] } },
    });
    upstreamListen = new URL(upstream.baseUrl).host;
    // A model of the upstream whose file is not there: every request for it gets a real 503.
    const broken = await fetch(`${upstream.baseUrl}/admin/models`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ id: 'broken', file: '/nonexistent/cortex-broken.gguf', context_size: 512 }),
    });
    assert.equal(broken.status, 200, await broken.text());
    // A second gateway of the upstream: a place of its own, killed mid-answer while the first serves on.
    secondUrl = await upstream.spawnGateway();
    secondGateway = [...upstream.processes.keys()].at(-1) ?? '';
    // A key the upstream lets through once a minute: its second request gets the upstream's real 429.
    const created = await fetch(`${upstream.baseUrl}/admin/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'once-a-minute', account: 'front', limits: { requests_per_minute: 1 } }),
    });
    assert.equal(created.status, 200);
    const limitedKey = ((await created.json()) as { secret: string }).secret;
    const url = `${upstream.baseUrl}/v1`;
    front = await startStack({
      models: [
        { id: 'local-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true },
        {
          id: 'flaky',
          upstream: { url, api: 'chat', model: 'cortex-chat', api_key_env: 'UPSTREAM_KEY', connect_timeout_ms: 2000 },
          fallback: ['local-chat'],
        },
        {
          id: 'limited',
          upstream: { url, api: 'messages', model: 'cortex-chat', api_key_env: 'LIMITED_KEY' },
          fallback: ['local-chat'],
        },
        // Spoken to in Chat on the second gateway; when it fails mid-answer, the answer goes on in the
        // next place, the same model through the first gateway in Messages, as an answer begun.
        {
          id: 'looping',
          upstream: { url: `${secondUrl}/v1`, api: 'chat', model: 'cortex-loop', api_key_env: 'UPSTREAM_KEY' },
          fallback: ['looping-b'],
        },
        {
          id: 'looping-b',
          upstream: { url, api: 'messages', model: 'cortex-loop', api_key_env: 'UPSTREAM_KEY' },
        },
        // Its upstream model cannot load there (until the test fixes it): the upstream answers 503.
        {
          id: 'overloaded',
          upstream: { url, api: 'chat', model: 'broken', api_key_env: 'UPSTREAM_KEY' },
          fallback: ['local-chat'],
        },
        // One request at the upstream at a time: the rest wait in the remote worker's fair queue.
        {
          id: 'one-at-a-time',
          upstream: { url, api: 'chat', model: 'cortex-loop', api_key_env: 'UPSTREAM_KEY', max_concurrency: 1 },
        },
        // No fallback: what it answers is what its budgets count.
        {
          id: 'priced',
          upstream: { url, api: 'responses', model: 'cortex-chat', api_key_env: 'UPSTREAM_KEY' },
          cost: PRICE,
        },
      ],
      // Heartbeats often, for a model's queue to be seen as it grows.
      config: { auth: { api_keys: [FRONT_KEY], admin_keys: [FRONT_ADMIN] }, worker: { heartbeat_ms: 100 } },
    });
    front.spawnService('worker', {
      CORTEX_WORKER_ENGINE: 'remote',
      CORTEX_WORKER_ID: 'remote-1',
      UPSTREAM_KEY,
      LIMITED_KEY: limitedKey,
    });
    await front.workersUp(2);
  });

  after(async () => {
    await front?.stop();
    await upstream?.stop();
  });

  async function ask(model: string, extra: Record<string, unknown> = {}, key = FRONT_KEY): Promise<Response> {
    return fetch(`${front.baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 16, ...extra }),
    });
  }

  it('upstreams - /v1/models says before any request which models an upstream serves, in what format, with what they can do and their fallbacks', async () => {
    const response = await fetch(`${front.baseUrl}/v1/models`, { headers: { authorization: `Bearer ${FRONT_KEY}` } });
    assert.equal(response.status, 200);
    const { data } = (await response.json()) as {
      data: Array<{
        id: string;
        loaded: boolean;
        upstream?: { api: string };
        fallback?: string[];
        capabilities: Record<string, unknown>;
      }>;
    };
    const looping = data.find((m) => m.id === 'looping');
    const next = data.find((m) => m.id === 'looping-b');
    assert.deepEqual(looping?.upstream, { api: 'chat' });
    assert.deepEqual(looping?.fallback, ['looping-b']);
    assert.equal(next?.loaded, false, 'nothing asked for it yet');
    assert.deepEqual(next?.upstream, { api: 'messages' });
    assert.equal(next?.fallback, undefined);
    assert.deepEqual(
      { ...next?.capabilities },
      {
        chat: true,
        embeddings: false,
        rerank: false,
        tools: true,
        reasoning: false,
        vision: false,
        format: 'upstream messages',
        completions: false,
      },
    );
    const local = data.find((m) => m.id === 'local-chat');
    assert.equal(local?.upstream, undefined, 'a local model has no upstream');
    // Where the upstream is stays with the operator: no URL in the list.
    assert.doesNotMatch(JSON.stringify(data), new RegExp(upstreamListen.replace(/[.]/g, '\\.')));
  });

  it("upstreams - an upstream's 400 reaches the client in its dialect, never retried away to the fallback", async () => {
    const response = await ask('flaky', { logit_bias: { '99999999': 1 } });
    assert.equal(response.status, 400);
    assert.equal(response.headers.get('x-cortex-served-by'), null);
    const body = (await response.json()) as { error: { message: string; param: string | null; type: string } };
    assert.equal(body.error.type, 'invalid_request_error');
    assert.equal(body.error.param, 'logit_bias');
    assert.match(body.error.message, /the upstream 127\.0\.0\.1:\d+ \(chat\) refused the request \(400\): logit_bias/);
  });

  it("upstreams - the upstream's real 429 sends the request to the fallback, which the answer names", async () => {
    const first = await ask('limited');
    assert.equal(first.status, 200);
    assert.equal(first.headers.get('x-cortex-served-by'), null);
    assert.equal(((await first.json()) as { model: string }).model, 'limited');
    const second = await ask('limited');
    assert.equal(second.status, 200);
    assert.equal(second.headers.get('x-cortex-served-by'), 'local-chat');
    const body = (await second.json()) as { model: string; choices: Array<{ message: { content: string } }> };
    assert.equal(body.model, 'local-chat');
    assert.equal(body.choices[0]?.message.content, hello);
  });

  const admin = async <T>(path: string, body?: unknown): Promise<T> => {
    const response = await fetch(`${front.baseUrl}${path}`, {
      method: body === undefined ? 'GET' : 'POST',
      headers: { authorization: `Bearer ${FRONT_ADMIN}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    assert.equal(response.status, 200, `${path}: ${response.status}`);
    return (await response.json()) as T;
  };

  for (const budget of ['token', 'money'] as const)
    it(`upstreams - a key with a ${budget} budget on a remote model: refused at its end, charged exactly what its usage records say`, async () => {
      const limits =
        budget === 'token'
          ? { token_budget: { tokens: 400, window: 'day' } }
          : { money_budget: { amount: 0.0008, window: 'day' } };
      const key = await admin<{ id: string; secret: string }>('/admin/keys', { name: `remote-${budget}`, limits });
      const answered: Array<{ status: number; tokens: number; cost: number; code?: string; message?: string }> = [];
      /** Waits until none of the key's requests holds a reservation, and returns its budget as shown. */
      const settled = async (): Promise<{ spent: number; reserved: number }> => {
        let shown = { spent: -1, reserved: -1 };
        await waitFor(async () => {
          const { usage } = await admin<{ usage: Record<string, typeof shown> }>(`/admin/keys/${key.id}`);
          shown = usage[`${budget}_budget`]!;
          return shown.reserved === 0;
        }, 10_000);
        return shown;
      };
      // One at a time, each settled before the next: only the spent budget refuses.
      for (let i = 0; i < 40 && answered.at(-1)?.status !== 429; i++) {
        await settled();
        const response = await ask('priced', {}, key.secret);
        const json = (await response.json()) as {
          usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
          error?: { code: string; message: string };
        };
        answered.push({
          status: response.status,
          tokens: json.usage?.total_tokens ?? 0,
          cost: json.usage
            ? (json.usage.prompt_tokens * PRICE.input + json.usage.completion_tokens * PRICE.output) / 1e6
            : 0,
          code: json.error?.code,
          message: json.error?.message,
        });
      }
      const refusal = answered.at(-1)!;
      assert.equal(refusal.status, 429, `the ${budget} budget ran out: ${JSON.stringify(answered)}`);
      assert.equal(refusal.code, 'insufficient_quota');
      assert.match(refusal.message ?? '', new RegExp(`has used its ${budget} budget`));
      assert.ok(answered.length >= 3, `a few requests fit the budget first: ${answered.length - 1}`);
      assert.ok(answered.slice(0, -1).every((a) => a.status === 200));
      const shown = await settled();
      // The usage records of the remote runs, written by the front's gateway as for a local model.
      let row: { requests: number; total_tokens: number; cost: number; unpriced_requests: number } | undefined;
      await waitFor(async () => {
        [row] = (await admin<{ data: Array<NonNullable<typeof row>> }>(`/admin/usage?key=${key.id}&group_by=key`)).data;
        return row?.requests === answered.length - 1;
      }, 10_000);
      console.log(
        `remote model, ${budget} budget: ${answered.length - 1} requests admitted, then refused; ${shown.spent} spent`,
      );
      assert.equal(row!.unpriced_requests, 0);
      const byAnswers = answered.reduce((sum, a) => sum + (budget === 'token' ? a.tokens : a.cost), 0);
      const byRecords = budget === 'token' ? row!.total_tokens : row!.cost;
      assert.ok(
        Math.abs(shown.spent - byAnswers) < 1e-9,
        `the ledger charged ${shown.spent}, the answers say ${byAnswers}`,
      );
      assert.ok(
        Math.abs(shown.spent - byRecords) < 1e-9,
        `the ledger charged ${shown.spent}, the usage records ${byRecords}`,
      );
    });

  it('upstreams - the upstream gateway SIGKILLed: served by the fallback, streamed and not, /health impaired; ok and served again once the upstream is back', async () => {
    const before = await ask('flaky');
    assert.equal(before.status, 200);
    assert.equal(before.headers.get('x-cortex-served-by'), null);
    upstream.processes.get('gateway')?.kill('SIGKILL');
    await waitFor(async () => (await fetch(`${upstream.baseUrl}/v1/models`).catch(() => null)) === null, 10_000);
    const plain = await ask('flaky');
    assert.equal(plain.status, 200);
    assert.equal(plain.headers.get('x-cortex-served-by'), 'local-chat');
    assert.equal(
      ((await plain.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]?.message.content,
      hello,
    );
    // A stream's headers may have left with a keep-alive before it fell back: its chunks name the model.
    const streamed = await ask('flaky', { stream: true });
    assert.equal(streamed.status, 200);
    const text = await streamed.text();
    assert.match(text, /"model":"local-chat"/);
    assert.match(text, /data: \[DONE\]/);
    const messages = await fetch(`${front.baseUrl}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'x-api-key': FRONT_KEY },
      body: JSON.stringify({ model: 'flaky', max_tokens: 16, messages: [{ role: 'user', content: 'Hi' }] }),
    });
    assert.equal(messages.status, 200);
    assert.equal(messages.headers.get('x-cortex-served-by'), 'local-chat');
    assert.equal(((await messages.json()) as { model: string }).model, 'local-chat');
    const response = await fetch(`${front.baseUrl}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${FRONT_KEY}` },
      body: JSON.stringify({ model: 'flaky', max_output_tokens: 16, input: 'Hi' }),
    });
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('x-cortex-served-by'), 'local-chat');
    const resource = (await response.json()) as { id: string; model: string; output_text?: string };
    assert.equal(resource.model, 'local-chat', 'the Responses body names the model that served');
    const stored = (await (
      await fetch(`${front.baseUrl}/v1/responses/${resource.id}`, { headers: { authorization: `Bearer ${FRONT_KEY}` } })
    ).json()) as { model: string };
    assert.equal(stored.model, 'local-chat', 'and so does the stored response');
    // The remote worker's requests and probes found the upstream gone: the fleet is impaired, saying why.
    const health = async (): Promise<{ status: string; reasons: string[] }> =>
      (await (await fetch(`${front.baseUrl}/health`)).json()) as { status: string; reasons: string[] };
    let shown = await health();
    await waitFor(async () => (shown = await health()).status === 'impaired', 10_000);
    assert.match(
      shown.reasons.join(' | '),
      /the upstream of flaky on worker remote-1 is failing \(cannot be reached: ECONNREFUSED\) since \d{4}-.*: its requests go to another place or its fallback/,
    );
    await upstream.spawnGateway(upstreamListen);
    // Its probes find it back: ok again, with no request needed.
    await waitFor(async () => (shown = await health()).status === 'ok', 20_000);
    assert.deepEqual(shown.reasons, []);
    const after = await ask('flaky');
    assert.equal(after.status, 200);
    assert.equal(after.headers.get('x-cortex-served-by'), null, 'the upstream serves again');
  });

  it('upstreams - fair queueing on a remote model: with its one upstream slot taken by account A and more of A queued, account B’s later request goes first', async () => {
    const key = async (name: string, account: string): Promise<string> =>
      (await admin<{ secret: string }>('/admin/keys', { name, account, tier: 5 })).secret;
    const a = await key('fair-a', 'team-a');
    const b = await key('fair-b', 'team-b');
    const queued = async (): Promise<number> =>
      (await front.fleet())?.workers.flatMap((w) => w.models).find((m) => m.id === 'one-at-a-time')?.queued ?? -1;
    const post = (secret: string, maxTokens: number, signal?: AbortSignal): Promise<Response> =>
      fetch(`${front.baseUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'one-at-a-time',
          messages: [{ role: 'user', content: 'Go.' }],
          // The loop fixture loops for as long as it is let at temperature 0.
          temperature: 0,
          stream: true,
          max_tokens: maxTokens,
        }),
        signal,
      });
    // A's long stream holds the upstream slot until it is stopped (before its end: it owes for what it
    // was given, far over the fair queue's quantum of 64 tokens).
    const holding = new AbortController();
    const held = await post(a, 16_000, holding.signal);
    assert.equal(held.status, 200);
    const holder = held.body!.getReader();
    await holder.read();
    let heldToItsEnd = false;
    void (async () => {
      try {
        while (!(await holder.read()).done);
        heldToItsEnd = true;
      } catch {
        // stopped
      }
    })();
    const order: string[] = [];
    const done: Promise<void>[] = [];
    for (const [i, [name, secret]] of (
      [
        ['a2', a],
        ['a3', a],
        ['a4', a],
        ['b1', b],
      ] as const
    ).entries()) {
      done.push(
        (async () => {
          const response = await post(secret, 3);
          assert.equal(response.status, 200, name);
          const decoder = new TextDecoder();
          let text = '';
          for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
            text += decoder.decode(chunk, { stream: true });
            // Keep-alive comments come while it waits; its first data frame once the upstream runs it.
            if (!order.includes(name) && /^data: /m.test(text)) order.push(name);
          }
          assert.match(text, /data: \[DONE\]/, name);
        })(),
      );
      // Each is sent once the one before it shows queued, so their arrival order is known.
      await waitFor(async () => (await queued()) === i + 1, 10_000, 50);
    }
    assert.equal(heldToItsEnd, false, 'the long stream still held the slot when the others had queued');
    holding.abort();
    await Promise.all(done);
    // A owes for the long stream it ran; B owes nothing. First come first served would be a2, a3, a4, b1.
    assert.deepEqual(order, ['b1', 'a2', 'a3', 'a4']);
  });

  it("upstreams - the upstream's gateway SIGKILLed mid-answer: the stream goes on in the next place from the text given, nothing lost or repeated", async () => {
    const cycle = fixtureModel('cortex-loop').expected.text;
    const loop = (length: number): string => cycle.repeat(Math.ceil(length / cycle.length) + 1).slice(0, length);
    // What the prompt alone counts at the upstream, for the continuation's count to be measured against.
    const plain = await ask('looping-b', { max_tokens: 4 });
    assert.equal(plain.status, 200);
    const alone = ((await plain.json()) as { usage: { prompt_tokens: number } }).usage.prompt_tokens;
    const response = await fetch(`${front.baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${FRONT_KEY}` },
      body: JSON.stringify({
        model: 'looping',
        messages: [{ role: 'user', content: 'Sing.' }],
        max_tokens: 2000,
        temperature: 0,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    assert.equal(response.status, 200);
    const parser = new SseParser();
    const decoder = new TextDecoder();
    const comments: string[] = [];
    let text = '';
    let atKill = -1;
    let finish: string | null = null;
    let failed: string | null = null;
    let pieces = 0;
    let line = '';
    let promptTokens = 0;
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      const raw = decoder.decode(chunk, { stream: true });
      const lines = (line + raw).split('\n');
      line = lines.pop() ?? '';
      for (const whole of lines) if (whole.startsWith(':')) comments.push(whole.slice(1).trim());
      for (const message of parser.push(raw)) {
        if (message.data === '[DONE]') continue;
        const body = JSON.parse(message.data) as {
          error?: { message: string };
          choices?: Array<{ delta?: { content?: string }; finish_reason?: string | null }>;
          usage?: { prompt_tokens: number };
        };
        if (body.error) failed = body.error.message;
        if (body.usage) promptTokens = body.usage.prompt_tokens;
        const choice = body.choices?.[0];
        if (choice?.delta?.content) {
          text += choice.delta.content;
          pieces++;
        }
        if (choice?.finish_reason) finish = choice.finish_reason;
        // A few pieces in, the upstream's gateway serving it dies: its worker and model live on.
        if (pieces === 20 && atKill < 0) {
          atKill = text.length;
          upstream.processes.get(secondGateway)?.kill('SIGKILL');
        }
      }
    }
    assert.equal(failed, null, 'the stream ends without an error');
    assert.ok(atKill > 0, 'the gateway was killed mid-answer');
    assert.equal(finish, 'length');
    assert.ok(
      comments.some((comment) => comment.startsWith('resumed on ')),
      `a comment says where it went on: ${comments.join(' | ')}`,
    );
    // The answer is the text given before the move, then what the next place wrote after it. cortex-loop's
    // chain tokens cannot be spelled by text, so after any prompt, an answer begun included, it starts its
    // round again: where the two parts meet is where the loop starts over (or, cut between rounds, nowhere).
    let given = 0;
    while (given < text.length && text[given] === loop(given + 1)[given]) given++;
    assert.ok(given >= atKill, `nothing given before the kill is lost (${given} of the ${atKill} characters)`);
    const after = text.slice(given);
    assert.equal(after, loop(after.length), 'the next place wrote on after the text given, not over it');
    assert.ok(text.length > atKill + cycle.length, `the answer went on (${atKill} → ${text.length} characters)`);
    // The next place was given the text as an answer begun: its prompt holds it.
    assert.ok(
      promptTokens > alone + 10,
      `the continuation's prompt (${promptTokens} tokens) holds the text given (the prompt alone: ${alone})`,
    );
  });

  it('upstreams - an upstream that answers only 503: after three in a row it rests, its requests served by the fallback without asking it; then tried again, and served', async () => {
    const finished = await watchBus<RequestFinishedEvent>(upstream.nc, Subjects.requestFinished);
    const asked = (): number => finished.messages.filter((event) => event.model === 'broken').length;
    try {
      for (let i = 0; i < 5; i++) {
        const response = await ask('overloaded');
        assert.equal(response.status, 200, `request ${i + 1}`);
        assert.equal(response.headers.get('x-cortex-served-by'), 'local-chat', `request ${i + 1}`);
        await response.body?.cancel();
        // Each answer of the upstream is seen before the next request goes.
        if (i < 3) await waitFor(() => asked() === i + 1, 10_000);
      }
      await new Promise((done) => setTimeout(done, 500));
      assert.equal(asked(), 3, 'the fourth and fifth requests did not reach the upstream');
      assert.ok(finished.messages.every((event) => event.status === 503));
      const health = async (): Promise<{ status: string; reasons: string[] }> =>
        (await (await fetch(`${front.baseUrl}/health`)).json()) as { status: string; reasons: string[] };
      let shown = await health();
      await waitFor(
        async () => (shown = await health()).reasons.some((reason) => reason.includes('upstream of overloaded')),
        10_000,
      );
      assert.equal(shown.status, 'impaired');
      assert.match(
        shown.reasons.join(' | '),
        /the upstream of overloaded on worker remote-1 is failing \(answers HTTP 503: .* \(3 in a row\)\) since \d{4}-/,
      );
      // The upstream's model is fixed; once the rest is over, the next request tries it and is served there.
      const fixed = await fetch(`${upstream.baseUrl}/admin/models/broken`, {
        method: 'PATCH',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ file: 'fixture:cortex-chat' }),
      });
      assert.equal(fixed.status, 200, await fixed.text());
      let servedBy: string | null = 'local-chat';
      await waitFor(
        async () => {
          const response = await ask('overloaded');
          assert.equal(response.status, 200);
          servedBy = response.headers.get('x-cortex-served-by');
          await response.body?.cancel();
          return servedBy === null;
        },
        30_000,
        1_000,
      );
      // Its mark is gone (another model's upstream, the second gateway killed above, may still be down).
      await waitFor(
        async () => !(shown = await health()).reasons.some((reason) => reason.includes('upstream of overloaded')),
        10_000,
      );
    } finally {
      await finished.stop();
    }
  });
});
