import { after, before, beforeEach, describe, it } from 'node:test';
import type { ChildProcess } from 'node:child_process';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import Ajv2020 from 'ajv/dist/2020.js';
import WebSocket from 'ws';
import { BusClient } from '@cortex/bus';
import { SseParser, type SseMessage } from '@cortex/wire';
import { Subjects, WORKER_ID_TOKEN, type RequestFinishedEvent } from '@cortex/contracts';
import { scrapeMetrics, startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';
import {
  chatDelta,
  chatResult,
  counts,
  messagesResult,
  readSse,
  responsesFold,
  responsesResult,
  type Read,
  type ResponsesEvent,
} from './migration-reads.js';

/**
 * Workers holding cortex-loop, each a separate process. A stream's serving worker is SIGKILLed after a
 * chosen number of chunks; the client must get exactly what an unbroken run of the same request gets
 * (temperature 0), token for token, with usage counting the prompt once and every token once. The
 * loop fixture's budget is counted by the worker from the resume's tokens, so text the client lacks or
 * has twice shows as a text of another length.
 *
 * A kill must land while the worker still generates, and the fixtures' own reasoning, tool calls and
 * JSON are a few tokens, written in milliseconds. So the loop writes them long: cortex-reasoning-loop
 * reasons in circles and never leaves its reasoning; held to a grammar (a forced call's arguments, a
 * json_schema document) cortex-loop writes its sentence into every string until the string's
 * maxLength, so VERSES below is some 2,300 tokens of complete, valid JSON.
 */

const MODEL = 'cortex-loop';
const REASONING_MODEL = 'cortex-reasoning-loop';
/** Long enough that a kill after a few chunks lands while the worker is still generating. */
const MAX_TOKENS = 3_000;
const messages = [{ role: 'user', content: 'Sing.' }];
/**
 * Sixteen strings of at most 1,000 characters (llama.cpp refuses a grammar that repeats a character
 * rule 2,000 times, so one long string cannot be bounded), under MAX_TOKENS.
 */
const VERSES = {
  type: 'object',
  properties: { verses: { type: 'array', items: { type: 'string', maxLength: 1_000 }, minItems: 16, maxItems: 16 } },
  required: ['verses'],
};
const validVerses = new Ajv2020.default().compile(VERSES);

type Signal = 'SIGKILL' | 'SIGSTOP';

/** The pauses measured, printed together once the suite is done (`npm run test:faults`). */
const measured: { what: string; ms: number }[] = [];

function report(what: string, pauseMs: number | undefined): void {
  if (pauseMs !== undefined && Number.isFinite(pauseMs)) measured.push({ what, ms: pauseMs });
}

/** Family fixtures with long outputs (libs/fixtures/src/family-fixtures.ts). */
const FAMILIES = ['cortex-gpt-oss-long', 'cortex-qwen3-coder-long'];
const REASONING_FAMILIES = ['cortex-gpt-oss-long', 'cortex-minimax-m2-long'];
const isReasoning = (message: SseMessage): boolean => Boolean(chatDelta(message)?.reasoning_content);
const isContent = (message: SseMessage): boolean => Boolean(chatDelta(message)?.content);
/** A delta of a call's arguments (not the call's first delta, which carries its id and name). */
const isToolArgs = (message: SseMessage): boolean =>
  Boolean(chatDelta(message)?.tool_calls?.some((c) => c.id === undefined && c.function?.arguments));

describe('migration e2e', () => {
  let stack: TestStack;
  let bus: BusClient;
  const workers = new Map<string, ChildProcess>();
  let finished: Awaited<ReturnType<typeof watchBus<RequestFinishedEvent>>>;
  /** The workers that were sent a generate command, in order. */
  const generates: string[] = [];

  const spawn = (id: string): void => void workers.set(id, stack.spawnService('worker', { CORTEX_WORKER_ID: id }));

  /** Brings the fleet to exactly `ids` up, each holding `models`. */
  async function fleet(ids: string[], models = [MODEL]): Promise<void> {
    for (const id of ids) if (!workers.has(id)) spawn(id);
    // The process itself must be up: a killed worker's id stays up in the view until its heartbeats lapse.
    await waitFor(
      async () => {
        const view = await stack.fleet();
        return ids.every((id) =>
          view?.workers.some((w) => w.workerId === id && w.up && w.pid === workers.get(id)?.pid),
        );
      },
      60_000,
      200,
    );
    for (const id of ids) for (const model of models) await bus.request(Subjects.routerLoad, { model, worker: id });
  }

  /** The services' log lines about moving streams, for a failure's message. */
  const moves = (): string =>
    stack
      .logs()
      .split('\n')
      .filter((line) => /mid-stream|resum/.test(line))
      .slice(-6)
      .join('\n');

  /** SIGKILLs a worker and forgets it (a later fleet() starts a fresh one under the same id). */
  function kill(id: string): void {
    workers.get(id)?.kill('SIGKILL');
    workers.delete(id);
  }

  before(async () => {
    stack = await startStack({
      services: ['router', 'translator', 'metrics', 'gateway'],
      // Room for a 10k-token prompt and its answer.
      models: [
        { id: MODEL, file: `fixture:${MODEL}`, context_size: 16384, slots: 2 },
        { id: REASONING_MODEL, file: `fixture:${REASONING_MODEL}`, context_size: 4096, slots: 2 },
        ...[...new Set([...FAMILIES, ...REASONING_FAMILIES])].map((id) => ({
          id,
          file: `fixture:${id}`,
          context_size: 4096,
          slots: 2,
        })),
      ],
      // A short idle timeout: a frozen worker's stream moves after it.
      config: { worker: { heartbeat_ms: 200 }, gateway: { stream_idle_timeout_ms: 3_000 }, log_level: 'info' },
    });
    bus = new BusClient(stack.nc, 30_000);
    stack.nc.subscribe(Subjects.workerGenerate.replace(WORKER_ID_TOKEN, '*'), {
      callback: (_error, msg) => {
        generates.push(msg.subject.split('.')[3] ?? '');
      },
    });
    finished = await watchBus<RequestFinishedEvent>(stack.nc, Subjects.requestFinished);
  });

  // Each test starts from two workers holding the model, whatever the test before it left (a failed one
  // included), so one failure does not run on into the next.
  beforeEach(async () => {
    await fleet(['w1', 'w2']);
  });

  // One table of every pause measured, whichever tests ran (a test that failed before its kill has none).
  after((t) => {
    if (measured.length === 0) return;
    const width = Math.max(...measured.map((m) => m.what.length));
    t.diagnostic("pause the client saw, from the serving worker's SIGKILL (SIGSTOP) to the next chunk:");
    for (const { what, ms } of measured)
      t.diagnostic(`  ${what.padEnd(width)}  ${String(Math.round(ms)).padStart(5)} ms`);
  });

  after(async () => {
    await finished?.stop();
    for (const id of [...workers.keys()]) kill(id);
    await stack?.stop();
  });

  const chat = (extra: Record<string, unknown> = {}) => ({
    model: MODEL,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: 0,
    max_tokens: MAX_TOKENS,
    ...extra,
  });

  interface Kills {
    killed: string[];
    /** From each kill to the first message after the stream resumed. */
    pauses: number[];
    /** For each resume, the index of the first message after it. */
    resumedAt: number[];
  }

  /**
   * Kills (or stops) the serving worker after `after[i]` messages for each i, counted since the
   * previous resume, at the first message from there on that `when` accepts. `resumed()` marks the
   * stream as moved: what the dead worker sent before it died may still be arriving, so the pause ends
   * with the first message after that.
   */
  function killer<M>(after: number[], signal: Signal, when: (message: M) => boolean) {
    const kills: Kills = { killed: [], pauses: [], resumedAt: [] };
    const from = generates.length;
    let killedAt = 0;
    let placedAt = 0;
    let resumed = false;
    let next = 0;
    let sinceResume = 0;
    let seen = 0;
    return {
      kills,
      /** Whether the gateway sent the stream to another worker since the kill. */
      placedAgain: (): boolean => killedAt !== 0 && generates.length > placedAt,
      resumed(): void {
        if (!killedAt) return;
        resumed = true;
        sinceResume = 0;
      },
      message(message: M): void {
        seen++;
        sinceResume++;
        if (resumed) {
          kills.pauses.push(performance.now() - killedAt);
          kills.resumedAt.push(seen - 1);
          killedAt = 0;
          resumed = false;
        }
        const serving = generates.at(-1);
        if (
          next < after.length &&
          sinceResume >= (after[next] ?? 0) &&
          when(message) &&
          serving &&
          generates.length > from &&
          !kills.killed.includes(serving)
        ) {
          if (signal === 'SIGKILL') kill(serving);
          else workers.get(serving)?.kill(signal);
          kills.killed.push(serving);
          killedAt = performance.now();
          placedAt = generates.length;
          sinceResume = 0;
          next++;
        }
      },
    };
  }

  interface KillOptions {
    path?: string;
    signal?: Signal;
    /** Kill only on a chunk this accepts (the count reached): what the stream must be doing when its worker dies. */
    when?: (message: SseMessage) => boolean;
  }

  /**
   * Streams `body`, killing the serving worker after `after[i]` chunks for each i (each kill waits for
   * the stream to have moved since the previous one); returns what the client read, the workers
   * killed, the pause after each kill and where each resume begins in `read.messages`.
   */
  async function killedAfter(
    body: unknown,
    after: number[],
    options: KillOptions = {},
  ): Promise<Kills & { read: Read }> {
    const { path = '/v1/chat/completions', signal = 'SIGKILL', when = () => true } = options;
    const k = killer(after, signal, when);
    const onComment = (text: string): void => {
      if (text.startsWith('resumed on ')) k.resumed();
    };
    const read = await readSse(`${stack.baseUrl}${path}`, body, (message) => k.message(message), onComment);
    return { read, ...k.kills };
  }

  it('migration - Chat Completions: the serving worker is SIGKILLed mid-stream and the client gets the unbroken answer', async () => {
    const earlier = finished.messages.length;
    const reference = chatResult(await readSse(`${stack.baseUrl}/v1/chat/completions`, chat()));
    assert.equal(reference.finish, 'length');
    assert.equal(reference.usage?.completion_tokens, MAX_TOKENS);
    await waitFor(() => finished.messages.length > earlier, 10_000);
    const before = finished.messages.length;
    const { read, killed, pauses } = await killedAfter(chat(), [5]);
    const result = chatResult(read);
    assert.equal(killed.length, 1, 'one worker was killed mid-stream');
    assert.equal(result.error, null, `no error reached the client; ${moves()}`);
    assert.equal(result.text.length, reference.text.length, 'as much text as an unbroken run');
    assert.equal(result.text, reference.text);
    assert.equal(result.finish, 'length');
    assert.deepEqual(counts(result), counts(reference), 'the prompt counted once, every token once');
    const survivor = killed[0] === 'w1' ? 'w2' : 'w1';
    assert.ok(
      read.comments.includes(`resumed on ${survivor}`),
      `a comment says where it resumed: ${read.comments.join(' | ')}`,
    );
    await waitFor(() => finished.messages.length > before, 10_000);
    const events = finished.messages.slice(before);
    assert.equal(events.length, 1, 'the request counts once');
    assert.equal(events[0]?.migrations, 1);
    assert.equal(events[0]?.status, 200);
    assert.equal(events[0]?.errorCode, null);
    await waitFor(
      async () =>
        (await scrapeMetrics(stack.metricsUrl)).get(
          `cortex_stream_migrations_total{model="${MODEL}",api="openai.chat"}`,
        ) === 1,
      10_000,
    );
    report(`Chat Completions, ${reference.usage?.prompt_tokens}-token prompt, SIGKILL after 5 chunks`, pauses[0]);
  });

  it('migration - a client that hangs up after its stream moved pays for what it was given, on both workers, once', async () => {
    const before = finished.messages.length;
    const abort = new AbortController();
    const response = await fetch(`${stack.baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chat()),
      signal: abort.signal,
    });
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    let killed = '';
    const rounds = (): number => text.split('Round').length - 1;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      if (!killed && rounds() >= 10) {
        killed = generates.at(-1) ?? '';
        kill(killed);
      }
      // Ten rounds more after the resume, then the client goes.
      const resumed = text.indexOf(': resumed on ');
      if (resumed >= 0 && text.slice(resumed).split('Round').length - 1 >= 10) break;
    }
    abort.abort();
    assert.ok(killed && text.includes(': resumed on '), `the stream moved: ${moves()}`);
    const given = 3 * rounds();
    await waitFor(() => finished.messages.length > before, 10_000);
    const [event] = finished.messages.slice(before);
    console.log(
      `hang-up after a move: the client held ${given} output tokens; charged ${event?.usage?.promptTokens} prompt + ${event?.usage?.completionTokens} completion (${event?.finishReason})`,
    );
    assert.equal(event?.migrations, 1);
    assert.equal(event?.finishReason, 'cancelled');
    const completion = event?.usage?.completionTokens ?? 0;
    // The next worker counts the output it replayed: the tokens from before the move are charged once.
    assert.ok(
      completion >= given - 3 && completion <= given + 600,
      `charged ${completion} completion tokens for ${given} given`,
    );
    assert.ok((event?.usage?.promptTokens ?? 0) > 0);
  });

  it('migration - a 10k-token prompt: the next worker evaluates it again, and the answer is still the unbroken one', async () => {
    const body = chat({ messages: [{ role: 'user', content: 'hello world '.repeat(5_000) }], max_tokens: 2_000 });
    // The unbroken run comes second, so that no worker holds the prompt when the stream moves.
    const { read, killed, pauses } = await killedAfter(body, [5]);
    const result = chatResult(read);
    const reference = chatResult(await readSse(`${stack.baseUrl}/v1/chat/completions`, body));
    assert.ok((reference.usage?.prompt_tokens ?? 0) >= 10_000, `a 10k-token prompt: ${reference.usage?.prompt_tokens}`);
    assert.equal(killed.length, 1);
    assert.equal(result.error, null, moves());
    assert.equal(result.text, reference.text);
    assert.deepEqual(counts(result), counts(reference));
    const cached =
      (result.usage as { prompt_tokens_details?: { cached_tokens?: number } } | null)?.prompt_tokens_details
        ?.cached_tokens ?? 0;
    report(
      `Chat Completions, ${reference.usage?.prompt_tokens?.toLocaleString('en-US')}-token prompt (${cached} cached on the next worker), SIGKILL after 5 chunks`,
      pauses[0],
    );
  });

  it('migration - a stop-string prefix held back when the worker dies is generated again, not lost', async () => {
    // The text is held back at every "go." (the start of the stop string), which never matches.
    const body = chat({ stop: ['go.Roundabout'] });
    const reference = chatResult(await readSse(`${stack.baseUrl}/v1/chat/completions`, body));
    assert.equal(reference.usage?.completion_tokens, MAX_TOKENS);
    const { read, killed } = await killedAfter(body, [7]);
    const result = chatResult(read);
    assert.equal(killed.length, 1);
    assert.equal(result.error, null, moves());
    assert.equal(result.text, reference.text);
    assert.deepEqual(counts(result), counts(reference));
  });

  it('migration - the second worker dies too: the stream moves twice and still equals the unbroken run', async () => {
    await fleet(['w1', 'w2', 'w3']);
    const reference = chatResult(await readSse(`${stack.baseUrl}/v1/chat/completions`, chat()));
    const { read, killed, pauses } = await killedAfter(chat(), [5, 5]);
    const result = chatResult(read);
    assert.equal(killed.length, 2, `two workers were killed: ${killed.join(', ')}`);
    assert.equal(result.error, null, moves());
    assert.equal(result.text, reference.text);
    assert.deepEqual(counts(result), counts(reference));
    assert.equal(read.comments.filter((c) => c.startsWith('resumed on ')).length, 2);
    assert.equal(pauses.length, 2);
    report(
      `Chat Completions, ${reference.usage?.prompt_tokens}-token prompt, SIGKILL after 5 chunks: first move`,
      pauses[0],
    );
    report(`Chat Completions, the same stream's next worker SIGKILLed 5 chunks later: second move`, pauses[1]);
    kill('w3');
    // Not a place to go on for the next test until the fleet knows it is gone.
    await waitFor(async () => !(await stack.fleet())?.workers.some((w) => w.workerId === 'w3' && w.up), 30_000, 200);
  });

  it('migration - Anthropic Messages: one message, its content block indices and usage as in the unbroken run', async () => {
    const body = { model: MODEL, messages, stream: true, temperature: 0, max_tokens: MAX_TOKENS };
    const reference = messagesResult(await readSse(`${stack.baseUrl}/v1/messages`, body));
    assert.equal(reference.stop, 'max_tokens');
    const { read, killed, pauses } = await killedAfter(body, [5], { path: '/v1/messages' });
    const result = messagesResult(read);
    assert.equal(killed.length, 1);
    assert.equal(result.error, null, moves());
    assert.equal(result.text, reference.text);
    assert.deepEqual(result.events, reference.events, 'the same events, one message_start, block indices continuing');
    assert.deepEqual(result.usage, reference.usage);
    assert.ok(
      read.comments.some((c) => c.startsWith('resumed on ')),
      'the stream says where it resumed',
    );
    report(`Anthropic Messages, ${reference.usage?.input}-token prompt, SIGKILL after 5 events`, pauses[0]);
  });

  it('migration - Responses: sequence numbers and output indices continue, usage as in the unbroken run', async () => {
    const body = {
      model: MODEL,
      input: 'Sing.',
      stream: true,
      temperature: 0,
      max_output_tokens: MAX_TOKENS,
      store: false,
    };
    const reference = responsesResult(await readSse(`${stack.baseUrl}/v1/responses`, body));
    assert.equal(reference.status, 'incomplete');
    const { read, killed, pauses } = await killedAfter(body, [6], { path: '/v1/responses' });
    const result = responsesResult(read);
    assert.equal(killed.length, 1);
    assert.equal(result.error, null, moves());
    assert.equal(result.text, reference.text);
    assert.deepEqual(
      result.sequence,
      Array.from({ length: result.sequence.length }, (_, i) => i),
      'sequence_number counts up by one from 0',
    );
    assert.deepEqual(result.events, reference.events, 'the same event types and indices in the same order');
    assert.deepEqual(result.usage, reference.usage);
    assert.ok(
      read.comments.some((c) => c.startsWith('resumed on ')),
      'the stream says where it resumed',
    );
    report(`Responses (SSE), ${reference.usage?.input}-token prompt, SIGKILL after 6 events`, pauses[0]);
  });

  const backgroundBody = {
    model: MODEL,
    input: 'Sing.',
    stream: true,
    background: true,
    temperature: 0,
    max_output_tokens: MAX_TOKENS,
  };

  interface StoredResponse {
    status: string;
    output: { content?: { text?: string }[] }[];
    usage?: { input_tokens: number; output_tokens: number };
  }

  /**
   * A background response as others see it once it has ended: its id (named by the first event the
   * follower read), the resource a translator stored, and its frames read again from the start.
   */
  async function afterwards(
    read: Read,
  ): Promise<{ stored: StoredResponse; storedText: string; again: ReturnType<typeof responsesResult> }> {
    const id = (JSON.parse(read.messages[0]?.data ?? '{}') as { response?: { id?: string } }).response?.id;
    assert.ok(id, 'the first event names the response');
    let stored: StoredResponse | undefined;
    await waitFor(async () => {
      stored = (await (await fetch(`${stack.baseUrl}/v1/responses/${id}`)).json()) as StoredResponse;
      return stored.status === 'incomplete';
    }, 10_000);
    const response = await fetch(`${stack.baseUrl}/v1/responses/${id}?stream=true`);
    const again = responsesResult({
      status: response.status,
      messages: new SseParser().push(await response.text()),
      comments: [],
    });
    const done = stored as StoredResponse;
    return {
      stored: done,
      storedText: done.output
        .flatMap((item) => item.content ?? [])
        .map((part) => part.text ?? '')
        .join(''),
      again,
    };
  }

  it('migration - a background response: its run moves, a follower reads one unbroken stream, and the stored response is the unbroken one', async () => {
    const reference = responsesResult(await readSse(`${stack.baseUrl}/v1/responses`, backgroundBody));
    assert.equal(reference.status, 'incomplete');
    const before = finished.messages.length;
    // The POST follows the response's stored events (any gateway could): the placing gateway moves the run.
    const { read, killed } = await killedAfter(backgroundBody, [6], { path: '/v1/responses' });
    const result = responsesResult(read);
    assert.equal(killed.length, 1);
    assert.equal(result.error, null, moves());
    assert.equal(result.text, reference.text);
    assert.deepEqual(
      result.sequence,
      Array.from({ length: result.sequence.length }, (_, i) => i),
      'sequence_number counts up by one from 0',
    );
    assert.deepEqual(result.events, reference.events);
    assert.deepEqual(result.usage, reference.usage);
    // Stored by a translator from the same events: the finished resource is the unbroken run's; read
    // again from the start by a new follower: the same frames.
    const { stored, storedText, again } = await afterwards(read);
    assert.ok(
      storedText === reference.text,
      `the stored output is the unbroken run's (${storedText.length} characters, ${reference.text.length} expected)`,
    );
    assert.deepEqual({ input: stored.usage?.input_tokens, output: stored.usage?.output_tokens }, reference.usage);
    assert.equal(again.text, reference.text);
    assert.deepEqual(again.events, reference.events);
    await waitFor(() => finished.messages.slice(before).some((event) => event.migrations === 1), 10_000);
  });

  it('migration - a background response whose frozen worker wakes as the move begins: what it still sends is left out, and the response is the unbroken one', async (t) => {
    const reference = responsesResult(await readSse(`${stack.baseUrl}/v1/responses`, backgroundBody));
    // Every background event in the order the server passed them on, which is the order they are stored in.
    const order: Array<{ runId: string; type: string; moving: boolean }> = [];
    const events = stack.nc.subscribe('llm.background.v1.>', {
      callback: (_error, msg) => {
        const event = msg.json<{ type: string; moving?: boolean }>();
        order.push({ runId: msg.subject.split('.').at(-1) ?? '', type: event.type, moving: event.moving === true });
      },
    });
    // The frozen worker is woken by the cancel that tells it its run moved: it sends what it decoded meanwhile and its cancelled finish.
    const woken: string[] = [];
    const cancels = stack.nc.subscribe(Subjects.workerCancel.replace(WORKER_ID_TOKEN, '*'), {
      callback: (_error, msg) => {
        const id = msg.subject.split('.')[3] ?? '';
        if (!/moves to another worker/.test(msg.json<{ reason: string }>().reason) || woken.includes(id)) return;
        woken.push(id);
        workers.get(id)?.kill('SIGCONT');
      },
    });
    let frozen: string | undefined;
    try {
      const { read, killed } = await killedAfter(backgroundBody, [6], { path: '/v1/responses', signal: 'SIGSTOP' });
      frozen = killed[0];
      const result = responsesResult(read);
      assert.equal(killed.length, 1);
      assert.deepEqual(woken, killed, 'the frozen worker was woken when the move began');
      assert.equal(result.error, null, moves());
      assert.equal(result.text, reference.text);
      assert.deepEqual(result.events, reference.events);
      // The woken worker did send after the mark (at least its cancelled finish), so the stored events hold something to leave out.
      const lostRun = order.find((event) => event.moving)?.runId;
      assert.ok(lostRun, 'the placing gateway marked the lost run when the move began');
      const marked = order.findIndex((event) => event.moving);
      await waitFor(
        () => order.slice(marked).some((event) => event.runId === lostRun && event.type === 'finish'),
        10_000,
      );
      const nextStart = order.findIndex((event, i) => i > marked && event.type === 'start');
      const beforeNext = order
        .slice(marked, nextStart < 0 ? undefined : nextStart)
        .filter((event) => event.runId === lostRun && !event.moving).length;
      t.diagnostic(`the woken worker's events stored after the mark and before the next run's start: ${beforeNext}`);
      const { storedText, again } = await afterwards(read);
      assert.equal(storedText, reference.text);
      assert.equal(again.text, reference.text);
      assert.deepEqual(again.events, reference.events);
    } finally {
      events.unsubscribe();
      cancels.unsubscribe();
      if (frozen) {
        workers.get(frozen)?.kill('SIGCONT');
        kill(frozen);
      }
    }
  });

  it('migration - killed while reasoning: the next worker goes on reasoning, and reasoning and text equal the unbroken run', async () => {
    // The next worker must rebuild reasoning mode from the delivered ids. cortex-reasoning-loop never
    // leaves its reasoning, so the worker dies reasoning wherever the kill lands; a resume that lost the
    // mode would send text, or reasoning of another length.
    await fleet(['w1', 'w2'], [MODEL, REASONING_MODEL]);
    const body = chat({ model: REASONING_MODEL });
    const reference = chatResult(await readSse(`${stack.baseUrl}/v1/chat/completions`, body));
    assert.equal(reference.finish, 'length');
    assert.ok(
      reference.reasoning.startsWith('Round and round we go.Round'),
      `it reasons: ${reference.reasoning.slice(0, 40)}`,
    );
    const { read, killed, pauses, resumedAt } = await killedAfter(body, [5], { when: isReasoning });
    const result = chatResult(read);
    assert.equal(killed.length, 1);
    assert.equal(result.error, null, moves());
    const [resumed = read.messages.length] = resumedAt;
    assert.ok(read.messages.slice(resumed).some(isReasoning), 'the next worker sent reasoning deltas');
    assert.equal(result.reasoning.length, reference.reasoning.length, 'as much reasoning as an unbroken run');
    assert.equal(result.reasoning, reference.reasoning);
    assert.equal(result.text, reference.text);
    assert.equal(result.finish, 'length');
    assert.deepEqual(counts(result), counts(reference), 'reasoning tokens counted as in the unbroken run');
    report(
      `Chat Completions reasoning, ${reference.usage?.prompt_tokens}-token prompt, SIGKILL on the 5th reasoning chunk`,
      pauses[0],
    );
  });

  // The models people run: gpt-oss (Harmony channels) and Qwen3-Coder (XML parameters), each writing a
  // 160-token stretch of reasoning or arguments in its own syntax, move mid-stream like any model.
  const weather = {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  };

  for (const model of REASONING_FAMILIES) {
    it(`migration - ${model} killed mid-reasoning (gpt-oss's analysis channel, MiniMax's <think>): reasoning and answer equal the unbroken run`, async () => {
      await fleet(['w1', 'w2'], [MODEL, model]);
      const body = chat({ model, max_tokens: 1_000 });
      const reference = chatResult(await readSse(`${stack.baseUrl}/v1/chat/completions`, body));
      assert.equal(reference.finish, 'stop');
      assert.match(reference.reasoning, /^w001 w002/);
      const { read, killed, resumedAt } = await killedAfter(body, [5], { when: isReasoning });
      const result = chatResult(read);
      assert.equal(killed.length, 1);
      assert.equal(result.error, null, moves());
      const [resumed = read.messages.length] = resumedAt;
      assert.ok(read.messages.slice(resumed).some(isReasoning), 'the next worker went on reasoning');
      assert.equal(result.reasoning, reference.reasoning);
      assert.equal(result.text, reference.text);
      assert.equal(result.finish, 'stop');
      assert.deepEqual(counts(result), counts(reference));
    });
  }

  for (const model of FAMILIES) {
    it(`migration - ${model} killed mid-call: one call, its id kept, arguments equal the unbroken run's`, async () => {
      await fleet(['w1', 'w2'], [MODEL, model]);
      const body = chat({ model, tools: [weather], max_tokens: 1_000 });
      const reference = chatResult(await readSse(`${stack.baseUrl}/v1/chat/completions`, body));
      assert.equal(reference.finish, 'tool_calls');
      assert.equal(reference.toolCalls.length, 1);
      const { read, killed, resumedAt } = await killedAfter(body, [5], { when: isToolArgs });
      const result = chatResult(read);
      assert.equal(killed.length, 1);
      assert.equal(result.error, null, moves());
      const [resumed = read.messages.length] = resumedAt;
      assert.ok(read.messages.slice(resumed).some(isToolArgs), 'the next worker went on with the arguments');
      assert.equal(result.toolCalls.length, 1, JSON.stringify(result.toolCalls));
      const [call] = result.toolCalls;
      assert.equal(call?.ids.length, 1, 'the call was announced once');
      assert.equal(call?.name, 'get_weather');
      assert.equal(call?.arguments, reference.toolCalls[0]?.arguments);
      assert.equal(result.finish, 'tool_calls');
    });
  }

  const sing = { type: 'function', function: { name: 'sing', description: 'Sings the verses', parameters: VERSES } };

  it("migration - killed in the middle of a tool call's arguments: the call keeps its index and id, and its arguments equal the unbroken run's", async () => {
    // The next worker must go on inside the call: the same index, its id not sent again, no second call,
    // the call's grammar where it was. A forced call whose arguments are held to VERSES: some 2,300
    // tokens, and the kill lands on an arguments chunk.
    const body = chat({ tools: [sing], tool_choice: { type: 'function', function: { name: 'sing' } } });
    const reference = chatResult(await readSse(`${stack.baseUrl}/v1/chat/completions`, body));
    assert.equal(reference.finish, 'tool_calls');
    assert.equal(reference.toolCalls.length, 1);
    const { read, killed, pauses, resumedAt } = await killedAfter(body, [8], { when: isToolArgs });
    const result = chatResult(read);
    assert.equal(killed.length, 1);
    assert.equal(result.error, null, moves());
    const [resumed = read.messages.length] = resumedAt;
    assert.ok(read.messages.slice(resumed).some(isToolArgs), 'the next worker went on with the arguments');
    assert.equal(
      result.toolCalls.length,
      1,
      `one call: ${JSON.stringify(result.toolCalls.map((c) => ({ index: c.index, ids: c.ids })))}`,
    );
    const [call] = result.toolCalls;
    assert.equal(call?.index, 0);
    assert.equal(call?.ids.length, 1, `the call's id was sent once, before the kill: ${call?.ids.join(', ')}`);
    assert.equal(call?.name, 'sing');
    assert.equal(
      call?.arguments.length,
      reference.toolCalls[0]?.arguments.length,
      "arguments as long as the unbroken run's",
    );
    assert.equal(call?.arguments, reference.toolCalls[0]?.arguments);
    assert.ok(
      validVerses(JSON.parse(call?.arguments ?? '')),
      `the arguments match the parameters: ${JSON.stringify(validVerses.errors)}`,
    );
    assert.equal(result.finish, 'tool_calls');
    assert.deepEqual(counts(result), counts(reference));
    report(
      `Chat Completions tool call, ${reference.usage?.prompt_tokens}-token prompt, SIGKILL on the 8th arguments chunk`,
      pauses[0],
    );
  });

  it("migration - killed inside a json_schema document: the document validates against the schema and equals the unbroken run's", async () => {
    // The grammar must go on over the delivered tokens: one started afresh at the resume writes another
    // document, or text that is no JSON at all (which the gateway's output check refuses).
    const body = chat({ response_format: { type: 'json_schema', json_schema: { name: 'song', schema: VERSES } } });
    const reference = chatResult(await readSse(`${stack.baseUrl}/v1/chat/completions`, body));
    assert.equal(reference.finish, 'stop');
    const { read, killed, pauses, resumedAt } = await killedAfter(body, [8], { when: isContent });
    const result = chatResult(read);
    assert.equal(killed.length, 1);
    assert.equal(result.error, null, moves());
    const [resumed = read.messages.length] = resumedAt;
    assert.ok(read.messages.slice(resumed).some(isContent), 'the next worker went on with the document');
    assert.equal(result.text.length, reference.text.length, "a document as long as the unbroken run's");
    assert.equal(result.text, reference.text);
    const document = JSON.parse(result.text) as { verses: string[] };
    assert.ok(validVerses(document), `the document matches the schema: ${JSON.stringify(validVerses.errors)}`);
    assert.ok(
      document.verses.every((verse) => verse.length > 900),
      'each verse is written to its length',
    );
    assert.equal(result.finish, 'stop');
    assert.deepEqual(counts(result), counts(reference));
    report(
      `Chat Completions json_schema, ${reference.usage?.prompt_tokens}-token prompt, SIGKILL on the 8th content chunk`,
      pauses[0],
    );
  });

  /** Sends one response.create and collects its turn's events through the terminal event or an error, handing each to `onEvent`. */
  function turn(
    ws: WebSocket,
    body: Record<string, unknown>,
    onEvent: (event: ResponsesEvent) => void = () => undefined,
  ): Promise<ResponsesEvent[]> {
    const events: ResponsesEvent[] = [];
    return new Promise((resolve, reject) => {
      const onMessage = (data: WebSocket.RawData): void => {
        const event = JSON.parse(data.toString()) as ResponsesEvent;
        events.push(event);
        onEvent(event);
        if (['response.completed', 'response.incomplete', 'response.failed', 'error'].includes(event.type)) {
          stop();
          resolve(events);
        }
      };
      const onClose = (code: number): void => {
        stop();
        reject(new Error(`the socket closed (${code}) mid-turn after ${events.length} events`));
      };
      const stop = (): void => void ws.off('message', onMessage).off('close', onClose);
      ws.on('message', onMessage).on('close', onClose);
      ws.send(JSON.stringify({ type: 'response.create', ...body }));
    });
  }

  it('migration - Responses over WebSocket: the turn equals the unbroken one, and the socket goes on with the next turn', async () => {
    // A turn on a socket moves like an SSE stream (the same responder and checkpoint): its events as in
    // the unbroken turn, no error, and the connection keeps the moved response as its latest.
    const ws = new WebSocket(`${stack.baseUrl.replace(/^http/, 'ws')}/v1/responses`);
    try {
      await once(ws, 'open');
      const body = { model: MODEL, input: 'Sing.', temperature: 0, max_output_tokens: MAX_TOKENS, store: false };
      const reference = responsesFold(await turn(ws, body));
      assert.equal(reference.status, 'incomplete', `the unbroken turn: ${reference.error}`);
      // No SSE comment on a socket: the stream has resumed once the gateway sent it to another worker.
      const k = killer<ResponsesEvent>([6], 'SIGKILL', () => true);
      const events = await turn(ws, body, (event) => {
        if (k.placedAgain()) k.resumed();
        k.message(event);
      });
      const result = responsesFold(events);
      const { killed, pauses } = k.kills;
      assert.equal(killed.length, 1);
      assert.equal(pauses.length, 1, 'the turn moved to another worker');
      assert.equal(result.error, null, moves());
      assert.equal(result.text, reference.text);
      assert.deepEqual(
        result.sequence,
        Array.from({ length: result.sequence.length }, (_, i) => i),
        'sequence_number counts up by one from 0',
      );
      assert.deepEqual(result.events, reference.events, 'the same event types and indices in the same order');
      assert.equal(result.status, 'incomplete');
      assert.deepEqual(result.usage, reference.usage);
      // The moved turn is the connection's latest response: the next turn continues it, its whole output the next input.
      const id = events.at(-1)?.response?.id;
      const next = responsesFold(
        await turn(ws, {
          model: MODEL,
          previous_response_id: id,
          input: 'Again.',
          temperature: 0,
          max_output_tokens: 8,
          store: false,
        }),
      );
      assert.equal(next.error, null);
      assert.equal(next.status, 'incomplete');
      assert.ok(
        (next.usage?.input ?? 0) > (result.usage?.input ?? 0) + MAX_TOKENS,
        `the moved turn's output is in the next turn's input: ${JSON.stringify(next.usage)}`,
      );
      report(`Responses (WebSocket), ${reference.usage?.input}-token prompt, SIGKILL after 6 events`, pauses[0]);
    } finally {
      ws.terminate();
    }
  });

  it('migration - a frozen (SIGSTOPped) worker: the stream moves at the idle timeout and the frozen worker is told to stop', async () => {
    const reference = chatResult(await readSse(`${stack.baseUrl}/v1/chat/completions`, chat()));
    const cancels = await watchBus<{ runId: string; reason: string }>(
      stack.nc,
      Subjects.workerCancel.replace(WORKER_ID_TOKEN, '*'),
    );
    let frozen: string | undefined;
    try {
      const { read, killed, pauses } = await killedAfter(chat(), [5], { signal: 'SIGSTOP' });
      frozen = killed[0];
      const result = chatResult(read);
      assert.equal(killed.length, 1);
      assert.equal(result.error, null, moves());
      assert.equal(result.text, reference.text);
      assert.deepEqual(counts(result), counts(reference));
      assert.ok(
        cancels.messages.some((c) => /moves to another worker/.test(c.reason)),
        'the frozen worker was sent a cancel for its copy',
      );
      report(
        `Chat Completions, ${reference.usage?.prompt_tokens}-token prompt, SIGSTOP after 5 chunks (idle timeout 3 s)`,
        pauses[0],
      );
    } finally {
      await cancels.stop();
      if (frozen) {
        workers.get(frozen)?.kill('SIGCONT');
        kill(frozen);
      }
    }
  });

  it('migration - no worker left to go on: the stream ends with the worker_lost error chunk, as without migration', async () => {
    const { read, killed } = await killedAfter(chat(), [5, 5]);
    const result = chatResult(read);
    assert.equal(killed.length, 2);
    assert.match(result.error ?? '', /worker_lost .*is down/);
    assert.equal(result.finish, null);
    assert.equal(read.messages.at(-1)?.data, '[DONE]');
  });
});
