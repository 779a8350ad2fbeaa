import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Kvm } from '@nats-io/kv';
import { Buckets, factsKey, type FleetHealth } from '@cortex/contracts';
import { encodeFixtureModel, fixtureModel, fixtureTokenId, ModelHub } from '@cortex/fixtures';
import { postJson, runCli, startStack, waitFor, type TestStack } from '@cortex/testing';

const ADMIN = 'sk-admin-e2e';
const USER = 'sk-user-e2e';
const user = [{ role: 'user' as const, content: 'Hi.' }];
const HELLO = fixtureModel('cortex-chat').expected.text;
const CHAT = encodeFixtureModel('cortex-chat');
const file = (name: string): string => `/org/models/resolve/main/${name}`;
/** The worker's budget: every fixture model here fits many times over; `remote-huge` (a 1M context, 64 slots) does not. */
const BUDGET = 512 * 2 ** 20;

interface ListedModel {
  gguf?: { architecture?: string; size_bytes?: number };
  memory_bytes?: number;
  gguf_error?: string;
}

describe('live catalogue e2e (two gateways, two routers)', () => {
  let stack: TestStack;
  let gateways: string[];
  let hub: ModelHub;

  before(async () => {
    hub = await ModelHub.start();
    hub.serve(file('remote.gguf'), CHAT);
    hub.serve(file('huge.gguf'), CHAT);
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true, slots: 2 },
        { id: 'cortex-reasoning', file: 'fixture:cortex-reasoning', context_size: 512, slots: 1 },
        { id: 'remote-chat', file: hub.url(file('remote.gguf')), context_size: 512, slots: 1 },
        { id: 'remote-huge', file: hub.url(file('huge.gguf')), context_size: 1_048_576, slots: 64 },
        { id: 'remote-late', file: hub.url(file('late.gguf')), context_size: 512, slots: 1 },
      ],
      config: { auth: { api_keys: [USER], admin_keys: [ADMIN] }, worker: { memory_budget: BUDGET } },
    });
    stack.spawnService('router');
    gateways = [stack.baseUrl, await stack.spawnGateway()];
  });

  after(async () => {
    await stack?.stop();
    await hub?.close();
  });

  const model = async (base: string, id: string): Promise<ListedModel> => {
    const response = await fetch(`${base}/v1/models/${id}`, { headers: { authorization: `Bearer ${USER}` } });
    return (await response.json()) as ListedModel;
  };
  const health = async (base: string): Promise<FleetHealth> => (await (await fetch(`${base}/health`)).json()) as never;
  /** Requests for a path's whole body (a download), as opposed to a header reader's ranges (`bytes=A-B`). */
  const downloads = (name: string): number =>
    hub.requests.filter((r) => r.path === file(name) && !/^bytes=\d+-\d+$/.test(r.range ?? '')).length;

  const cli = (...args: string[]) => runCli(stack, ...args);
  const chat = async (base: string, model: string): Promise<{ status: number; body: unknown }> => {
    const response = await postJson(
      `${base}/v1/chat/completions`,
      { model, messages: user },
      { authorization: `Bearer ${USER}` },
    );
    return { status: response.status, body: await response.json() };
  };
  const listed = async (base: string): Promise<string[]> => {
    const response = await fetch(`${base}/v1/models`, { headers: { authorization: `Bearer ${USER}` } });
    return ((await response.json()) as { data: Array<{ id: string }> }).data.map((m) => m.id);
  };
  const admin = async (
    method: string,
    path: string,
    body?: unknown,
    key = ADMIN,
  ): Promise<{
    status: number;
    body: { error?: { message: string; param?: string; code?: string } } & Record<string, unknown>;
  }> => {
    const response = await fetch(`${gateways[1]}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
      ...(body !== undefined && { body: JSON.stringify(body) }),
    });
    return { status: response.status, body: (await response.json()) as never };
  };

  it('catalogue - a URL that cannot be read is shown with its error and read again later; `models add` and a changed context are read too', async () => {
    await waitFor(async () => (await model(gateways[0]!, 'remote-late')).gguf_error !== undefined, 30_000, 100);
    assert.match((await model(gateways[1]!, 'remote-late')).gguf_error ?? '', /late\.gguf/);
    hub.serve(file('late.gguf'), CHAT);
    // The first retry comes 5 s after the first failure, the next 10 s after the second, and so on.
    for (const base of gateways)
      await waitFor(async () => (await model(base, 'remote-late')).gguf?.size_bytes === CHAT.length, 45_000, 100);
    assert.equal((await model(gateways[0]!, 'remote-late')).gguf_error, undefined);

    const added = cli(
      'models',
      'add',
      'remote-added',
      hub.url(file('remote.gguf')),
      '--context-size',
      '512',
      '--slots',
      '1',
    );
    assert.equal(added.status, 0, added.stderr);
    for (const base of gateways)
      await waitFor(async () => (await model(base, 'remote-added')).gguf?.architecture === 'llama', 10_000, 50);
    const small = (await model(gateways[0]!, 'remote-added')).memory_bytes ?? 0;
    const set = cli('models', 'set', 'remote-added', '--context-size', '32768');
    assert.equal(set.status, 0, set.stderr);
    for (const base of gateways)
      await waitFor(async () => ((await model(base, 'remote-added')).memory_bytes ?? 0) > small, 10_000, 50);
    assert.equal(downloads('remote.gguf') + downloads('late.gguf'), 0);
    assert.equal(cli('models', 'remove', 'remote-added').status, 0);
  });

  it("catalogue - a URL model's size and architecture are on /v1/models of both gateways before any request; one record, nothing downloaded", async () => {
    for (const base of gateways)
      await waitFor(async () => (await model(base, 'remote-chat')).gguf?.architecture !== undefined, 30_000, 100);
    for (const base of gateways) {
      const listed = await model(base, 'remote-chat');
      assert.equal(listed.gguf?.architecture, 'llama');
      assert.equal(listed.gguf?.size_bytes, CHAT.length);
      assert.ok((listed.memory_bytes ?? 0) > 0, JSON.stringify(listed));
    }
    assert.equal(downloads('remote.gguf'), 0, 'only the header was read');
    assert.equal(
      (await stack.fleet())?.workers.flatMap((w) => w.models).some((m) => m.id === 'remote-chat'),
      false,
    );
    // Two routers, one read: the record was written once, and not again by the other router.
    const kv = await new Kvm(stack.nc).open(Buckets.catalogue);
    const history = [];
    for await (const entry of await kv.history({ key: factsKey('remote-chat') })) history.push(entry);
    assert.equal(history.length, 1);
  });

  it('catalogue - /health names a URL model too large for every worker before anyone asks for it; a request is refused at once', async () => {
    await waitFor(async () => (await health(gateways[1]!)).unservable.includes('remote-huge'), 30_000, 100);
    const verdict = await health(gateways[0]!);
    assert.equal(verdict.status, 'degraded');
    assert.deepEqual(verdict.unservable, ['remote-huge']);
    assert.match(
      verdict.reasons.join(' | '),
      /remote-huge needs about \d+ MiB, more than any worker can hold \(the largest, \S+, 512 MiB\)/,
    );
    assert.equal(downloads('huge.gguf'), 0);
    const refused = await postJson(
      `${gateways[0]}/v1/chat/completions`,
      { model: 'remote-huge', messages: user },
      { authorization: `Bearer ${USER}` },
    );
    assert.equal(refused.status, 503);
    assert.equal(((await refused.json()) as { error: { code: string } }).error.code, 'insufficient_memory');
    const removed = cli('models', 'remove', 'remote-huge');
    assert.equal(removed.status, 0, removed.stderr);
    await waitFor(async () => !(await health(gateways[1]!)).unservable.includes('remote-huge'), 5_000, 100);
  });

  it('catalogue - a model added with `cortex models add` is served by the next request on every gateway', async () => {
    const added = cli('models', 'add', 'cortex-extra', 'fixture:cortex-chat', '--context-size', '512', '--slots', '1');
    assert.equal(added.status, 0, added.stderr);
    assert.equal(
      added.stdout,
      'Added cortex-extra (fixture:cortex-chat) to the catalogue: every router and gateway serves it from the next request; it loads on its first request.\n',
    );
    // No wait: whichever router the request reaches looks in the bucket for a name it has not seen.
    for (const base of gateways) {
      const answer = await chat(base, 'cortex-extra');
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      assert.equal(
        (answer.body as { choices: Array<{ message: { content: string } }> }).choices[0]?.message.content,
        HELLO,
      );
    }
    for (const base of gateways) assert.ok((await listed(base)).includes('cortex-extra'));
  });

  it('catalogue - `cortex models set` changes a field for every router; --json gives the stored model', async () => {
    const set = cli('models', 'set', 'cortex-extra', '--alias', 'extra', '--priority', '7', '--json');
    assert.equal(set.status, 0, set.stderr);
    const reply = JSON.parse(set.stdout) as { model: Record<string, unknown>; origin: string };
    assert.equal(reply.origin, 'added');
    assert.deepEqual(reply.model.aliases, ['extra']);
    assert.equal(reply.model.priority, 7);
    assert.equal(reply.model.context_size, 512);
    // An alias is found by the watch (milliseconds), not by a lookup of its own: wait for both routers.
    for (const base of gateways) await waitFor(async () => (await chat(base, 'extra')).status === 200, 2_000, 20);
    const cleared = cli('models', 'set', 'cortex-extra', '--priority', 'none', '--json');
    assert.equal((JSON.parse(cleared.stdout) as { model: Record<string, unknown> }).model.priority, 0);
  });

  it('catalogue - a removed model is drained and unloaded, then refused with a 404 naming it on every gateway', async () => {
    const before = await stack.fleet();
    assert.ok(
      before?.workers.some((w) => w.models.some((m) => m.id === 'cortex-extra')),
      'cortex-extra is loaded after the requests above',
    );
    const removed = cli('models', 'remove', 'cortex-extra');
    assert.equal(removed.status, 0, removed.stderr);
    assert.match(
      removed.stdout,
      /^Removed cortex-extra from the catalogue: requests for it are refused with 404 on every gateway\. It was drained and unloaded from \S+\.\n$/,
    );
    for (const base of gateways) {
      const answer = await chat(base, 'cortex-extra');
      assert.equal(answer.status, 404);
      assert.match(JSON.stringify(answer.body), /The model 'cortex-extra' does not exist/);
      const messages = await postJson(
        `${base}/v1/messages`,
        { model: 'extra', max_tokens: 16, messages: user },
        { 'x-api-key': USER, 'anthropic-version': '2023-06-01' },
      );
      assert.equal(messages.status, 404);
      assert.equal(((await messages.json()) as { error: { type: string } }).error.type, 'not_found_error');
    }
    const after = await stack.fleet();
    assert.equal(
      after?.workers.some((w) => w.models.some((m) => m.id === 'cortex-extra')),
      false,
    );
    for (const base of gateways) assert.equal((await listed(base)).includes('cortex-extra'), false);
  });

  it('catalogue - removing a model of the config file holds across router restarts; adding it back serves it', async () => {
    assert.equal((await chat(gateways[0]!, 'cortex-reasoning')).status, 200);
    const removed = cli('models', 'remove', 'cortex-reasoning', '--json');
    assert.equal(removed.status, 0, removed.stderr);
    assert.equal((JSON.parse(removed.stdout) as { origin: string }).origin, 'config');
    for (const [name, child] of stack.processes) if (name.startsWith('router')) child.kill('SIGKILL');
    stack.spawnService('router');
    await stack.workersUp(1);
    assert.equal((await chat(gateways[1]!, 'cortex-reasoning')).status, 404);
    // The header facts outlive the routers that read them: the new one has them from the bucket.
    assert.equal((await model(gateways[1]!, 'remote-chat')).gguf?.size_bytes, CHAT.length);
    const again = cli(
      'models',
      'add',
      'cortex-reasoning',
      'fixture:cortex-reasoning',
      '--context-size',
      '512',
      '--slots',
      '1',
      '--json',
    );
    assert.equal(again.status, 0, again.stderr);
    assert.equal((JSON.parse(again.stdout) as { origin: string }).origin, 'changed');
    assert.equal((await chat(gateways[1]!, 'cortex-reasoning')).status, 200);
  });

  it('catalogue - the admin API refuses bad models naming the field, unknown ids with a 404, and keys that are not admin keys (401)', async () => {
    const relative = await admin('POST', '/admin/models', { id: 'rel', file: 'models/x.gguf' });
    assert.equal(relative.status, 400);
    assert.equal(relative.body.error?.param, 'file');
    assert.match(relative.body.error?.message ?? '', /"models\/x\.gguf" is a relative path; give an absolute path/);
    const small = await admin('POST', '/admin/models', { id: 'tiny', file: 'fixture:cortex-chat', context_size: 5 });
    assert.equal(small.status, 400);
    assert.equal(small.body.error?.param, 'context_size');
    const unknownField = await admin('POST', '/admin/models', {
      id: 'odd',
      file: 'fixture:cortex-chat',
      colour: 'blue',
    });
    assert.equal(unknownField.status, 400);
    assert.match(unknownField.body.error?.message ?? '', /colour/);
    const taken = await admin('POST', '/admin/models', { id: 'cortex-chat', file: 'fixture:cortex-chat' });
    assert.equal(taken.status, 400);
    assert.match(taken.body.error?.message ?? '', /a model cortex-chat exists already/);
    const alias = await admin('POST', '/admin/models', {
      id: 'other',
      file: 'fixture:cortex-chat',
      aliases: ['cortex-reasoning'],
    });
    assert.equal(alias.status, 400);
    assert.equal(alias.body.error?.param, 'aliases');
    const rename = await admin('PATCH', '/admin/models/cortex-chat', { id: 'renamed' });
    assert.equal(rename.status, 400);
    assert.equal(rename.body.error?.param, 'id');
    const missing = await admin('DELETE', '/admin/models/no-such-model');
    assert.equal(missing.status, 404);
    assert.match(missing.body.error?.message ?? '', /no-such-model/);
    const notAdmin = await admin('POST', '/admin/models', { id: 'x', file: 'fixture:cortex-chat' }, USER);
    assert.equal(notAdmin.status, 401);
    assert.match(notAdmin.body.error?.message ?? '', /admin key/);
    const added = await admin('POST', '/admin/models', {
      id: 'api-added',
      file: 'fixture:cortex-chat',
      context_size: 512,
      slots: 1,
    });
    assert.equal(added.status, 200, JSON.stringify(added.body));
    assert.equal(added.body.origin, 'added');
    const bad = cli('models', 'set', 'api-added', '--slots', 'many');
    assert.equal(bad.status, 2);
    assert.equal(
      bad.stderr,
      'cortex models set: --slots must be a whole number or "none" (got "many"); run "cortex models set --help" to see its usage\n',
    );
  });

  it("catalogue - sampling defaults: the GGUF's temperature, then the catalogue's (live, on every gateway), then the request's; /v1/models shows them; logit_bias and min_p reach the sampler", async () => {
    const added = await admin('POST', '/admin/models', {
      id: 'cortex-coin',
      file: 'fixture:cortex-coin',
      context_size: 256,
      slots: 1,
    });
    assert.equal(added.status, 200, JSON.stringify(added.body));
    const seeds = Array.from({ length: 32 }, (_, i) => i + 1);
    const answer = async (base: string, extra: Record<string, unknown>): Promise<string> => {
      const response = await postJson(
        `${base}/v1/chat/completions`,
        { model: 'cortex-coin', messages: user, ...extra },
        { authorization: `Bearer ${USER}` },
      );
      const body = (await response.json()) as { choices?: Array<{ message: { content: string } }>; error?: unknown };
      assert.equal(response.status, 200, JSON.stringify(body));
      return body.choices?.[0]?.message.content ?? '';
    };
    const answers = async (base: string, extra: Record<string, unknown> = {}): Promise<string[]> => {
      const out: string[] = [];
      for (const seed of seeds) out.push(await answer(base, { ...extra, seed }));
      return out;
    };
    const sampling = async (
      base: string,
    ): Promise<{ sampling: Record<string, number>; gguf?: { sampling?: Record<string, number> } }> => {
      const response = await fetch(`${base}/v1/models/cortex-coin`, { headers: { authorization: `Bearer ${USER}` } });
      return (await response.json()) as never;
    };

    // No catalogue sampling: the GGUF's temperature 1.5 (general.sampling.temp), seed by seed.
    const gguf = await answers(gateways[0]!);
    assert.deepEqual(gguf, await answers(gateways[0]!, { temperature: 1.5 }));
    assert.notDeepEqual(gguf, await answers(gateways[0]!, { temperature: 0.8 }), "not cortex's own 0.8");
    const listed = await sampling(gateways[1]!);
    assert.deepEqual(listed.sampling, {
      temperature: 1.5,
      top_p: 0.95,
      top_k: 40,
      min_p: 0,
      repetition_penalty: 1,
      repeat_last_n: 64,
    });
    assert.deepEqual(listed.gguf?.sampling, { temperature: 1.5 });

    // The catalogue's, changed live: both gateways sample greedily from their next request.
    const patched = await admin('PATCH', '/admin/models/cortex-coin', { sampling: { temperature: 0, min_p: 0.01 } });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    for (const base of gateways) {
      await waitFor(async () => (await sampling(base)).sampling.temperature === 0, 5_000, 20);
      assert.equal((await sampling(base)).sampling.min_p, 0.01);
      await waitFor(
        async () => (await answer(base, { seed: 3 })) === 'Heads' && (await answer(base, { seed: 1 })) === 'Heads',
        5_000,
        20,
      );
      assert.deepEqual(new Set(await answers(base)), new Set(['Heads']));
    }
    // The request's own over both.
    assert.deepEqual(await answers(gateways[1]!, { temperature: 1.5 }), gguf);
    const badDefault = await admin('PATCH', '/admin/models/cortex-coin', { sampling: { temperature: 3 } });
    assert.equal(badDefault.status, 400);
    assert.match(badDefault.body.error?.message ?? '', /sampling\.temperature/);

    // logit_bias and min_p, by the designed logits (Heads 0, Tails -1, Edge -4).
    const tails = String(fixtureTokenId('Tails'));
    assert.equal(await answer(gateways[0]!, { temperature: 0, logit_bias: { [tails]: 2 } }), 'Tails');
    assert.equal(await answer(gateways[0]!, { temperature: 0, logit_bias: { [tails]: 0.5 } }), 'Heads');
    assert.deepEqual(new Set(await answers(gateways[0]!, { temperature: 1.5, min_p: 0.5 })), new Set(['Heads']));
    const outside = await postJson(
      `${gateways[0]}/v1/chat/completions`,
      { model: 'cortex-coin', messages: user, logit_bias: { '99999999': 1 } },
      { authorization: `Bearer ${USER}` },
    );
    const refused = (await outside.json()) as { error: { message: string; param: string } };
    assert.equal(outside.status, 400);
    assert.equal(refused.error.param, 'logit_bias');
    assert.match(refused.error.message, /not in cortex-coin's vocabulary/);
  });

  it("catalogue - logprobs in Chat Completions and Responses, streamed and not: the generated token's and its top_logprobs by the designed logits (cortex-coin)", async () => {
    const body = { model: 'cortex-coin', messages: user, temperature: 0, logprobs: true, top_logprobs: 3 };
    const designed = [0, -1, -4];
    const total = Math.log(designed.reduce((sum, logit) => sum + Math.exp(logit), 0));
    type Entry = {
      token: string;
      logprob: number;
      bytes: number[];
      top_logprobs: Array<{ token: string; logprob: number }>;
    };
    const check = (content: Entry[]): void => {
      assert.equal(content.length, 1);
      const [entry] = content;
      assert.equal(entry?.token, 'Heads');
      assert.deepEqual(
        entry?.top_logprobs.map((t) => t.token),
        ['Heads', 'Tails', 'Edge'],
      );
      entry?.top_logprobs.forEach((t, i) =>
        assert.ok(Math.abs(t.logprob - ((designed[i] ?? 0) - total)) < 0.01, `${t.token}: ${t.logprob}`),
      );
    };
    const whole = await postJson(`${gateways[0]}/v1/chat/completions`, body, { authorization: `Bearer ${USER}` });
    const answer = (await whole.json()) as { choices: Array<{ logprobs: { content: Entry[]; refusal: null } }> };
    assert.equal(whole.status, 200, JSON.stringify(answer));
    check(answer.choices[0]?.logprobs.content ?? []);
    const streamed = await postJson(
      `${gateways[1]}/v1/chat/completions`,
      { ...body, stream: true },
      { authorization: `Bearer ${USER}` },
    );
    const chunks = (await streamed.text())
      .split('\n')
      .filter((line) => line.startsWith('data: {'))
      .map((line) => JSON.parse(line.slice(6)) as { choices: Array<{ logprobs: { content: Entry[] } | null }> });
    check(chunks.flatMap((chunk) => chunk.choices[0]?.logprobs?.content ?? []));
    const without = (await (
      await postJson(
        `${gateways[0]}/v1/chat/completions`,
        { ...body, logprobs: undefined, top_logprobs: undefined },
        { authorization: `Bearer ${USER}` },
      )
    ).json()) as { choices: Array<{ logprobs: unknown }> };
    assert.equal(without.choices[0]?.logprobs, null);

    // Responses: the include, top_logprobs for the alternatives; on the text part and on each delta.
    const responsesBody = {
      model: 'cortex-coin',
      input: 'Hi.',
      temperature: 0,
      include: ['message.output_text.logprobs'],
      top_logprobs: 3,
      store: false,
    };
    const created = await postJson(`${gateways[1]}/v1/responses`, responsesBody, { authorization: `Bearer ${USER}` });
    const resource = (await created.json()) as {
      output: Array<{ type: string; content?: Array<{ logprobs: Entry[] }> }>;
    };
    assert.equal(created.status, 200, JSON.stringify(resource));
    check(resource.output.find((item) => item.type === 'message')?.content?.[0]?.logprobs ?? []);
    const events = (
      await (
        await postJson(
          `${gateways[0]}/v1/responses`,
          { ...responsesBody, stream: true },
          { authorization: `Bearer ${USER}` },
        )
      ).text()
    )
      .split('\n')
      .filter((line) => line.startsWith('data: {'))
      .map((line) => JSON.parse(line.slice(6)) as { type: string; logprobs?: Entry[] });
    check(
      events.filter((event) => event.type === 'response.output_text.delta').flatMap((event) => event.logprobs ?? []),
    );
    check(events.find((event) => event.type === 'response.output_text.done')?.logprobs ?? []);

    // Legacy completions, in that API's shape.
    const legacy = await postJson(
      `${gateways[0]}/v1/completions`,
      { model: 'cortex-coin', prompt: 'Flip a coin: ', temperature: 0, logprobs: 3 },
      { authorization: `Bearer ${USER}` },
    );
    const completion = (await legacy.json()) as {
      choices: Array<{
        text: string;
        logprobs: {
          tokens: string[];
          token_logprobs: number[];
          top_logprobs: Array<Record<string, number>>;
          text_offset: number[];
        };
      }>;
    };
    assert.equal(legacy.status, 200, JSON.stringify(completion));
    const lp = completion.choices[0]?.logprobs;
    assert.deepEqual(lp?.tokens, ['Heads']);
    assert.deepEqual(lp?.text_offset, [0]);
    assert.deepEqual(Object.keys(lp?.top_logprobs[0] ?? {}), ['Heads', 'Tails', 'Edge']);
    assert.ok(Math.abs((lp?.token_logprobs[0] ?? 0) - (0 - total)) < 0.01);

    // lm-evaluation-harness's loglikelihood request: the prompt echoed with its tokens' log-probabilities, nothing generated.
    const tails = fixtureTokenId('Tails');
    const scored = await postJson(
      `${gateways[1]}/v1/completions`,
      {
        model: 'cortex-coin',
        prompt: [fixtureTokenId('Hello'), tails],
        echo: true,
        logprobs: 1,
        max_tokens: 0,
        temperature: 0,
      },
      { authorization: `Bearer ${USER}` },
    );
    const echoed = (await scored.json()) as {
      choices: Array<{
        text: string;
        finish_reason: string;
        logprobs: {
          tokens: string[];
          token_logprobs: Array<number | null>;
          top_logprobs: Array<Record<string, number> | null>;
          text_offset: number[];
        };
      }>;
      usage: { completion_tokens: number };
    };
    assert.equal(scored.status, 200, JSON.stringify(echoed));
    const choice = echoed.choices[0];
    assert.equal(choice?.text, 'HelloTails');
    assert.deepEqual(choice?.logprobs.tokens, ['Hello', 'Tails']);
    assert.deepEqual(choice?.logprobs.text_offset, [0, 5]);
    assert.equal(choice?.logprobs.token_logprobs[0], null, 'the first token has nothing before it');
    assert.ok(
      Math.abs((choice?.logprobs.token_logprobs[1] ?? 0) - (-1 - total)) < 0.01,
      `Tails after the prompt: ${choice?.logprobs.token_logprobs[1]}`,
    );
    assert.equal(choice?.logprobs.top_logprobs[0], null);
    assert.deepEqual(Object.keys(choice?.logprobs.top_logprobs[1] ?? {}), ['Heads']);
    assert.equal(echoed.usage.completion_tokens, 0);
    assert.equal(choice?.finish_reason, 'length');
  });

  it('catalogue - Chat Completions n: each choice a request of its own (its own seed), one body or one stream, usage added up; n past 16 is a 400', async () => {
    const body = { model: 'cortex-coin', messages: user, n: 6, temperature: 1.5, seed: 11 };
    const whole = await postJson(`${gateways[0]}/v1/chat/completions`, body, { authorization: `Bearer ${USER}` });
    const answer = (await whole.json()) as {
      choices: Array<{ index: number; message: { content: string }; finish_reason: string }>;
      usage: { completion_tokens: number };
    };
    assert.equal(whole.status, 200, JSON.stringify(answer));
    assert.deepEqual(
      answer.choices.map((c) => c.index),
      [0, 1, 2, 3, 4, 5],
    );
    assert.ok(
      answer.choices.every((c) => ['Heads', 'Tails', 'Edge'].includes(c.message.content) && c.finish_reason === 'stop'),
    );
    assert.equal(answer.usage.completion_tokens, 6);
    // Choice i is the request with seed 11 + i: the same answers one by one.
    const alone = [];
    for (let i = 0; i < 6; i++) {
      const one = (await (
        await postJson(
          `${gateways[0]}/v1/chat/completions`,
          { ...body, n: 1, seed: 11 + i },
          { authorization: `Bearer ${USER}` },
        )
      ).json()) as { choices: Array<{ message: { content: string } }> };
      alone.push(one.choices[0]?.message.content);
    }
    assert.deepEqual(
      answer.choices.map((c) => c.message.content),
      alone,
    );

    const streamed = await postJson(
      `${gateways[1]}/v1/chat/completions`,
      { ...body, n: 3, stream: true, stream_options: { include_usage: true } },
      { authorization: `Bearer ${USER}` },
    );
    const chunks = (await streamed.text())
      .split('\n')
      .filter((line) => line.startsWith('data: {'))
      .map(
        (line) =>
          JSON.parse(line.slice(6)) as {
            choices: Array<{ index: number; delta: { content?: string }; finish_reason: string | null }>;
            usage: { completion_tokens: number } | null;
          },
      );
    const finished = chunks
      .flatMap((chunk) => chunk.choices.filter((c) => c.finish_reason !== null).map((c) => c.index))
      .sort();
    assert.deepEqual(finished, [0, 1, 2]);
    const usage = chunks.filter((chunk) => chunk.usage);
    assert.equal(usage.length, 1, 'one usage chunk, after the last choice');
    assert.equal(usage[0]?.usage?.completion_tokens, 3);
    assert.equal(chunks.at(-1), usage[0]);

    const tooMany = await postJson(
      `${gateways[0]}/v1/chat/completions`,
      { ...body, n: 17 },
      { authorization: `Bearer ${USER}` },
    );
    assert.equal(tooMany.status, 400);
    assert.equal(((await tooMany.json()) as { error: { param: string } }).error.param, 'n');
  });
});
