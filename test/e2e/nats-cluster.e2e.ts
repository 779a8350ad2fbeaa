import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { BACKGROUND_STREAM, Buckets, EVENTS_STREAM } from '@cortex/contracts';
import { fixtureModel } from '@cortex/fixtures';
import {
  FIXTURE_CATALOGUE,
  startStack,
  startTestNatsCluster,
  type TestNatsCluster,
  type TestStack,
} from '@cortex/testing';

// Three clustered nats-servers, JetStream with 3 replicas, each service given every server with its
// own first (nats.randomize: false), so the services sit on different servers. One server is killed
// (SIGKILL) while clients send requests: each request completes or ends with a clear error, a retry
// of a failed one succeeds, and responses stored before and during the loss stay readable.

const chat = fixtureModel('cortex-chat');
/** Which server each service connects to first (index into the cluster's nodes). */
const HOME: Record<string, number> = { gateway: 0, translator: 1, router: 2, worker: 1, metrics: 2 };
const STREAMS = [
  EVENTS_STREAM,
  BACKGROUND_STREAM,
  ...[Buckets.responses, Buckets.conversations, Buckets.pins, Buckets.leases, Buckets.affinity].map((b) => `KV_${b}`),
];
/** A request that takes longer than this has hung: the gateway's own bounds (stream idle 5 s, NATS requests 5 s) end every request well before. */
const REQUEST_BOUND_MS = 45_000;
const CLIENTS = 4;
/** Room for the fixture's whole answer: it ends on its own. */
const MAX_TOKENS = chat.completionTokens + 8;
const AFTER_KILL_PER_CLIENT = 3;

type Outcome = { ok: true; text: string; responseId?: string } | { ok: false; error: string; hung: boolean };

describe('nats cluster e2e', () => {
  let cluster: TestNatsCluster;
  let stack: TestStack;
  let client: OpenAI;
  let jsm: JetStreamManager;

  before(async () => {
    cluster = await startTestNatsCluster(3);
    const serviceEnv = Object.fromEntries(
      Object.entries(HOME).map(([service, node]) => [service, { CORTEX_NATS_URL: cluster.urlFrom(node) }]),
    );
    stack = await startStack({
      nats: cluster,
      serviceEnv,
      models: [FIXTURE_CATALOGUE[0]!],
      config: { nats: { replicas: 3, randomize: false } },
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: REQUEST_BOUND_MS });
    jsm = await jetstreamManager(stack.nc, { timeout: 5_000 });
  });

  after(async () => {
    await stack?.stop();
  });

  it('nats cluster e2e - every stream and KV bucket cortex creates has 3 replicas, and the services sit on different servers', async () => {
    for (const name of STREAMS) {
      const info = await jsm.streams.info(name);
      assert.equal(info.config.num_replicas, 3, `${name} replicas`);
      assert.equal(info.cluster?.replicas?.length, 2, `${name} has a leader and two followers`);
    }
    for (const [service, node] of Object.entries(HOME)) {
      assert.ok(
        (await cluster.nodes[node]!.connectionNames()).includes(`cortex-${service}`),
        `${service} is connected to n${node}`,
      );
    }
  });

  it('nats cluster e2e - killing the server that leads the responses bucket loses no request, and stored responses stay readable', async (t) => {
    const stored: Array<{ id: string; text: string }> = [];
    for (let i = 0; i < 3; i++) {
      const response = await client.responses.create({
        model: 'cortex-chat',
        input: `Before ${i}.`,
        store: true,
        max_output_tokens: MAX_TOKENS,
      });
      stored.push({ id: response.id, text: response.output_text });
    }
    const victim = cluster.node((await jsm.streams.info(`KV_${Buckets.responses}`)).cluster!.leader!);
    const onVictim = (await victim.connectionNames()).filter((name) => name.startsWith('cortex-'));
    t.diagnostic(`killing ${victim.name}, leader of KV_${Buckets.responses}, with ${onVictim.join(', ')} connected`);
    assert.ok(onVictim.length > 0, 'the killed server has cortex services on it');

    let killed = false;
    let succeeded = 0;
    const failures: Array<{ error: string; retried: Outcome }> = [];
    const hung: string[] = [];
    const runClient = async (n: number): Promise<void> => {
      let afterKill = 0;
      for (let i = 0; afterKill < AFTER_KILL_PER_CLIENT; i++) {
        const wasKilled = killed;
        const operation = [streamChat, plainChat, storedResponse][(n + i) % 3]!;
        const outcome = await operation(client, `Client ${n} request ${i}.`);
        if (!outcome.ok) {
          if (outcome.hung) hung.push(outcome.error);
          // A retry must succeed once the cluster has settled (a new stream leader is elected within
          // seconds): up to 10 tries, 1.5 s apart.
          let retried: Outcome = outcome;
          for (let attempt = 0; attempt < 10 && !retried.ok; attempt++) {
            await new Promise((done) => setTimeout(done, 1_500));
            retried = await operation(client, `Client ${n} request ${i}, again.`);
          }
          failures.push({ error: outcome.error, retried });
          if (!retried.ok) return;
        }
        const done = outcome.ok ? outcome : (failures.at(-1)!.retried as Extract<Outcome, { ok: true }>);
        assert.equal(done.text, chat.expected.text);
        if (done.responseId) stored.push({ id: done.responseId, text: done.text });
        succeeded++;
        if (wasKilled) afterKill++;
      }
    };
    const clients = Array.from({ length: CLIENTS }, (_, n) => runClient(n));
    // The kill comes mid-load: once a few requests have gone through and the rest are in flight.
    const deadline = Date.now() + 60_000;
    while (succeeded < CLIENTS * 2 && Date.now() < deadline) await new Promise((done) => setTimeout(done, 50));
    assert.ok(succeeded >= CLIENTS * 2, 'requests complete before the kill');
    await victim.kill();
    killed = true;
    await Promise.all(clients);

    t.diagnostic(
      `${succeeded} requests completed; ${failures.length} ended with an error and were retried: ${failures.map((f) => f.error).join(' | ') || 'none'}`,
    );
    assert.deepEqual(hung, [], 'no request hung');
    for (const failure of failures) {
      assert.ok(
        failure.retried.ok,
        `a retry after "${failure.error}" succeeded (${failure.retried.ok ? '' : failure.retried.error})`,
      );
      assert.match(
        failure.error,
        /^(4\d\d|50[234]|stream error:) \S/,
        'a failed request ended with a retryable HTTP error or a stream error event with a message, not a 500 or a dropped connection',
      );
    }
    assert.ok(succeeded >= CLIENTS * (2 + AFTER_KILL_PER_CLIENT), 'every client kept being served after the kill');

    const leader = (await jsm.streams.info(`KV_${Buckets.responses}`)).cluster?.leader;
    assert.ok(leader && leader !== victim.name, `the responses bucket has a new leader (${leader})`);
    for (const { id, text } of stored) {
      const response = await client.responses.retrieve(id);
      assert.equal(response.output_text, text, `stored response ${id} is readable after the kill`);
    }
    t.diagnostic(`${stored.length} stored responses read back after the kill`);
  });
});

/** Runs one request, turning every way it can end into an outcome: a timeout is a hung request. */
async function attempt(run: () => Promise<{ text: string; responseId?: string }>): Promise<Outcome> {
  try {
    return { ok: true, ...(await run()) };
  } catch (error) {
    if (error instanceof OpenAI.APIConnectionTimeoutError)
      return { ok: false, error: `no answer within ${REQUEST_BOUND_MS} ms`, hung: true };
    // An error after the response started comes as an SSE error event: an APIError without a status.
    if (error instanceof OpenAI.APIError)
      return { ok: false, error: `${error.status ?? 'stream error:'} ${error.message}`, hung: false };
    return { ok: false, error: (error as Error).message, hung: false };
  }
}

function streamChat(client: OpenAI, content: string): Promise<Outcome> {
  return attempt(async () => {
    const stream = await client.chat.completions.create({
      model: 'cortex-chat',
      messages: [{ role: 'user', content }],
      max_tokens: MAX_TOKENS,
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    return { text };
  });
}

function plainChat(client: OpenAI, content: string): Promise<Outcome> {
  return attempt(async () => {
    const completion = await client.chat.completions.create({
      model: 'cortex-chat',
      messages: [{ role: 'user', content }],
      max_tokens: MAX_TOKENS,
    });
    return { text: completion.choices[0]?.message.content ?? '' };
  });
}

function storedResponse(client: OpenAI, input: string): Promise<Outcome> {
  return attempt(async () => {
    const response = await client.responses.create({
      model: 'cortex-chat',
      input,
      store: true,
      max_output_tokens: MAX_TOKENS,
    });
    return { text: response.output_text, responseId: response.id };
  });
}
