import { after, before, describe, it, type TestContext } from 'node:test';
import type { ChildProcess } from 'node:child_process';
import assert from 'node:assert/strict';
import { BusClient } from '@cortex/bus';
import { SseParser, type SseMessage } from '@cortex/wire';
import { Subjects, WORKER_ID_TOKEN, type RequestFinishedEvent } from '@cortex/contracts';
import { postJson, scrapeMetrics, startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';

/**
 * Workers holding cortex-loop, each a separate process. A stream's serving worker is SIGKILLed after a
 * chosen number of chunks; the client must get exactly what an unbroken run of the same request gets
 * (temperature 0), token for token, with usage counting the prompt once and every token once. The
 * loop fixture's budget is counted by the worker from the resume's tokens, so text the client lacks or
 * has twice shows as a text of another length.
 */

const MODEL = 'cortex-loop';
/** Long enough that a kill after a few chunks lands while the worker is still generating. */
const MAX_TOKENS = 3_000;
const messages = [{ role: 'user', content: 'Sing.' }];

interface Read {
  status: number;
  messages: SseMessage[];
  /** The SSE comment lines (`: ...`), in order. */
  comments: string[];
}

/** Streams a POST's SSE reply, calling `onMessage` with each message as it arrives. */
async function readSse(url: string, body: unknown, onMessage: (message: SseMessage) => void = () => undefined, onComment: (text: string) => void = () => undefined): Promise<Read> {
  const response = await postJson(url, body);
  const parser = new SseParser();
  const decoder = new TextDecoder();
  const read: Read = { status: response.status, messages: [], comments: [] };
  let line = '';
  const reader = response.body?.getReader();
  for (let chunk = await reader?.read(); chunk && !chunk.done; chunk = await reader?.read()) {
    const text = decoder.decode(chunk.value, { stream: true });
    for (const char of text) {
      if (char !== '\n') line += char;
      else {
        if (line.startsWith(':')) {
          read.comments.push(line.slice(1).trim());
          onComment(line.slice(1).trim());
        }
        line = '';
      }
    }
    for (const message of parser.push(text)) {
      read.messages.push(message);
      onMessage(message);
    }
  }
  return read;
}

interface ChatResult {
  text: string;
  finish: string | null;
  usage: { prompt_tokens: number; completion_tokens: number } | null;
  error: string | null;
}

function chatResult(read: Read): ChatResult {
  const result: ChatResult = { text: '', finish: null, usage: null, error: null };
  for (const message of read.messages) {
    if (message.data === '[DONE]') continue;
    const chunk = JSON.parse(message.data) as {
      choices?: { delta?: { content?: string }; finish_reason?: string | null }[];
      usage?: ChatResult['usage'];
      error?: { message: string; code?: string };
    };
    if (chunk.error) result.error = `${chunk.error.code ?? ''} ${chunk.error.message}`;
    for (const choice of chunk.choices ?? []) {
      result.text += choice.delta?.content ?? '';
      if (choice.finish_reason) result.finish = choice.finish_reason;
    }
    if (chunk.usage) result.usage = chunk.usage;
  }
  return result;
}

interface MessagesResult {
  text: string;
  stop: string | null;
  /** Each event's type, and a content block's index where it has one; text deltas folded into one entry per block. */
  events: string[];
  usage: { input: number; output: number } | null;
  error: string | null;
}

function messagesResult(read: Read): MessagesResult {
  const result: MessagesResult = { text: '', stop: null, events: [], usage: null, error: null };
  let input = 0;
  for (const message of read.messages) {
    const event = JSON.parse(message.data) as {
      type: string;
      index?: number;
      delta?: { type?: string; text?: string; stop_reason?: string };
      message?: { usage?: { input_tokens: number } };
      usage?: { output_tokens: number };
      error?: { type: string; message: string };
    };
    const entry = event.index === undefined ? event.type : `${event.type}[${event.index}]`;
    if (result.events.at(-1) !== entry || event.type !== 'content_block_delta') result.events.push(entry);
    if (event.type === 'error') result.error = `${event.error?.type} ${event.error?.message}`;
    if (event.type === 'message_start') input = event.message?.usage?.input_tokens ?? 0;
    if (event.type === 'content_block_delta') result.text += event.delta?.text ?? '';
    if (event.type === 'message_delta') {
      result.stop = event.delta?.stop_reason ?? null;
      result.usage = { input, output: event.usage?.output_tokens ?? 0 };
    }
  }
  return result;
}

interface ResponsesResult {
  text: string;
  status: string | null;
  sequence: number[];
  /** Each event's type with its output and content index, text deltas folded into one entry per part. */
  events: string[];
  usage: { input: number; output: number } | null;
  error: string | null;
}

function responsesResult(read: Read): ResponsesResult {
  const result: ResponsesResult = { text: '', status: null, sequence: [], events: [], usage: null, error: null };
  for (const message of read.messages) {
    if (message.data === '[DONE]') continue;
    const event = JSON.parse(message.data) as {
      type: string;
      sequence_number: number;
      output_index?: number;
      content_index?: number;
      delta?: string;
      message?: string;
      response?: { status: string; usage?: { input_tokens: number; output_tokens: number } };
    };
    result.sequence.push(event.sequence_number);
    const entry = `${event.type}[${event.output_index ?? ''},${event.content_index ?? ''}]`;
    if (result.events.at(-1) !== entry || event.type !== 'response.output_text.delta') result.events.push(entry);
    if (event.type === 'error') result.error = event.message ?? 'error';
    if (event.type === 'response.output_text.delta') result.text += event.delta ?? '';
    if (event.type === 'response.completed' || event.type === 'response.incomplete' || event.type === 'response.failed') {
      result.status = event.response?.status ?? null;
      const usage = event.response?.usage;
      result.usage = usage ? { input: usage.input_tokens, output: usage.output_tokens } : null;
    }
  }
  return result;
}

/** Prompt, completion and total tokens (cached prompt tokens depend on which worker held the prompt already). */
function counts(result: ChatResult): unknown {
  const usage = result.usage as Record<string, unknown> | null;
  return usage && { prompt: usage.prompt_tokens, completion: usage.completion_tokens, total: usage.total_tokens };
}

function report(t: TestContext, what: string, pauseMs: number): void {
  t.diagnostic(`${what}: the client waited ${Math.round(pauseMs)} ms from the kill to the next chunk`);
}

describe('migration e2e', () => {
  let stack: TestStack;
  let bus: BusClient;
  const workers = new Map<string, ChildProcess>();
  let finished: Awaited<ReturnType<typeof watchBus<RequestFinishedEvent>>>;
  /** The workers that were sent a generate command, in order. */
  const generates: string[] = [];

  const spawn = (id: string): void => void workers.set(id, stack.spawnService('worker', { CORTEX_WORKER_ID: id }));

  /** Brings the fleet to exactly `ids` up, each holding the model. */
  async function fleet(ids: string[]): Promise<void> {
    for (const id of ids) if (!workers.has(id)) spawn(id);
    // The process itself must be up: a killed worker's id stays up in the view until its heartbeats lapse.
    await waitFor(async () => {
      const view = await stack.fleet();
      return ids.every((id) => view?.workers.some((w) => w.workerId === id && w.up && w.pid === workers.get(id)?.pid));
    }, 60_000, 200);
    for (const id of ids) await bus.request(Subjects.routerLoad, { model: MODEL, worker: id });
  }

  /** The services' log lines about moving streams, for a failure's message. */
  const moves = (): string => stack.logs().split('\n').filter((line) => /mid-stream|resum/.test(line)).slice(-6).join('\n');

  /** SIGKILLs a worker and forgets it (a later fleet() starts a fresh one under the same id). */
  function kill(id: string): void {
    workers.get(id)?.kill('SIGKILL');
    workers.delete(id);
  }

  before(async () => {
    stack = await startStack({
      services: ['router', 'translator', 'metrics', 'gateway'],
      // Room for a 10k-token prompt and its answer.
      models: [{ id: MODEL, file: `fixture:${MODEL}`, context_size: 16384, slots: 2 }],
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
    await fleet(['w1', 'w2']);
  });

  after(async () => {
    await finished?.stop();
    for (const id of [...workers.keys()]) kill(id);
    await stack?.stop();
  });

  const chat = (extra: Record<string, unknown> = {}) => ({ model: MODEL, messages, stream: true, stream_options: { include_usage: true }, temperature: 0, max_tokens: MAX_TOKENS, ...extra });

  /**
   * Streams `body`, killing the serving worker after `after[i]` chunks for each i (each kill waits for
   * the stream to have moved since the previous one); returns what the client read, the workers
   * killed and the pause after each kill.
   */
  async function killedAfter(body: unknown, after: number[], path = '/v1/chat/completions', signal: 'SIGKILL' | 'SIGSTOP' = 'SIGKILL'): Promise<{ read: Read; killed: string[]; pauses: number[] }> {
    const killed: string[] = [];
    const pauses: number[] = [];
    let killedAt = 0;
    let resumed = false;
    let next = 0;
    let sinceResume = 0;
    const from = generates.length;
    const onComment = (text: string): void => {
      if (!killedAt || !text.startsWith('resumed on ')) return;
      resumed = true;
      sinceResume = 0;
    };
    const read = await readSse(`${stack.baseUrl}${path}`, body, () => {
      sinceResume++;
      // What the dead worker sent before it died may still be arriving: the pause ends with the first chunk after the resume.
      if (resumed) {
        pauses.push(performance.now() - killedAt);
        killedAt = 0;
        resumed = false;
      }
      const serving = generates.at(-1);
      if (next < after.length && sinceResume >= (after[next] ?? 0) && serving && generates.length > from && !killed.includes(serving)) {
        if (signal === 'SIGKILL') kill(serving);
        else workers.get(serving)?.kill(signal);
        killed.push(serving);
        killedAt = performance.now();
        sinceResume = 0;
        next++;
      }
    }, onComment);
    return { read, killed, pauses };
  }

  it('migration - Chat Completions: the serving worker is SIGKILLed mid-stream and the client gets the unbroken answer', async (t) => {
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
    assert.ok(read.comments.includes(`resumed on ${survivor}`), `a comment says where it resumed: ${read.comments.join(' | ')}`);
    await waitFor(() => finished.messages.length > before, 10_000);
    const events = finished.messages.slice(before);
    assert.equal(events.length, 1, 'the request counts once');
    assert.equal(events[0]?.migrations, 1);
    assert.equal(events[0]?.status, 200);
    assert.equal(events[0]?.errorCode, null);
    await waitFor(async () => (await scrapeMetrics(stack.metricsUrl)).get(`cortex_stream_migrations_total{model="${MODEL}",api="openai.chat"}`) === 1, 10_000);
    report(t, 'chat stream, worker SIGKILL after 5 chunks', pauses[0] ?? NaN);
    await fleet(['w1', 'w2']);
  });

  it('migration - a 10k-token prompt: the next worker evaluates it again, and the answer is still the unbroken one', async (t) => {
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
    const cached = (result.usage as { prompt_tokens_details?: { cached_tokens?: number } } | null)?.prompt_tokens_details?.cached_tokens ?? 0;
    report(t, `chat stream with a ${reference.usage?.prompt_tokens}-token prompt (${cached} of them cached on the next worker), worker SIGKILL after 5 chunks`, pauses[0] ?? NaN);
    await fleet(['w1', 'w2']);
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
    await fleet(['w1', 'w2']);
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
    kill('w3');
    // Not a place to go on for the next test until the fleet knows it is gone.
    await waitFor(async () => !(await stack.fleet())?.workers.some((w) => w.workerId === 'w3' && w.up), 30_000, 200);
    await fleet(['w1', 'w2']);
  });

  it('migration - Anthropic Messages: one message, its content block indices and usage as in the unbroken run', async (t) => {
    const body = { model: MODEL, messages, stream: true, temperature: 0, max_tokens: MAX_TOKENS };
    const reference = messagesResult(await readSse(`${stack.baseUrl}/v1/messages`, body));
    assert.equal(reference.stop, 'max_tokens');
    const { read, killed, pauses } = await killedAfter(body, [5], '/v1/messages');
    const result = messagesResult(read);
    assert.equal(killed.length, 1);
    assert.equal(result.error, null, moves());
    assert.equal(result.text, reference.text);
    assert.deepEqual(result.events, reference.events, 'the same events, one message_start, block indices continuing');
    assert.deepEqual(result.usage, reference.usage);
    assert.ok(read.comments.some((c) => c.startsWith('resumed on ')), 'the stream says where it resumed');
    report(t, 'Anthropic Messages stream, worker SIGKILL after 5 events', pauses[0] ?? NaN);
    await fleet(['w1', 'w2']);
  });

  it('migration - Responses: sequence numbers and output indices continue, usage as in the unbroken run', async (t) => {
    const body = { model: MODEL, input: 'Sing.', stream: true, temperature: 0, max_output_tokens: MAX_TOKENS, store: false };
    const reference = responsesResult(await readSse(`${stack.baseUrl}/v1/responses`, body));
    assert.equal(reference.status, 'incomplete');
    const { read, killed, pauses } = await killedAfter(body, [6], '/v1/responses');
    const result = responsesResult(read);
    assert.equal(killed.length, 1);
    assert.equal(result.error, null, moves());
    assert.equal(result.text, reference.text);
    assert.deepEqual(result.sequence, Array.from({ length: result.sequence.length }, (_, i) => i), 'sequence_number counts up by one from 0');
    assert.deepEqual(result.events, reference.events, 'the same event types and indices in the same order');
    assert.deepEqual(result.usage, reference.usage);
    assert.ok(read.comments.some((c) => c.startsWith('resumed on ')), 'the stream says where it resumed');
    report(t, 'Responses stream, worker SIGKILL after 6 events', pauses[0] ?? NaN);
    await fleet(['w1', 'w2']);
  });

  it('migration - a background response: its run moves, a follower reads one unbroken stream, and the stored response is the unbroken one', async () => {
    const body = { model: MODEL, input: 'Sing.', stream: true, background: true, temperature: 0, max_output_tokens: MAX_TOKENS };
    const reference = responsesResult(await readSse(`${stack.baseUrl}/v1/responses`, body));
    assert.equal(reference.status, 'incomplete');
    const before = finished.messages.length;
    // The POST follows the response's stored events (any gateway could): the placing gateway moves the run.
    const { read, killed } = await killedAfter(body, [6], '/v1/responses');
    const result = responsesResult(read);
    assert.equal(killed.length, 1);
    assert.equal(result.error, null, moves());
    assert.equal(result.text, reference.text);
    assert.deepEqual(result.sequence, Array.from({ length: result.sequence.length }, (_, i) => i), 'sequence_number counts up by one from 0');
    assert.deepEqual(result.events, reference.events);
    assert.deepEqual(result.usage, reference.usage);
    const id = (JSON.parse(read.messages[0]?.data ?? '{}') as { response?: { id?: string } }).response?.id;
    assert.ok(id, 'the first event names the response');
    // Stored by a translator from the same events: the finished resource is the unbroken run's.
    let stored: { status: string; output: { content?: { text?: string }[] }[]; usage?: { input_tokens: number; output_tokens: number } } | undefined;
    await waitFor(async () => {
      stored = (await (await fetch(`${stack.baseUrl}/v1/responses/${id}`)).json()) as typeof stored;
      return stored?.status === 'incomplete';
    }, 10_000);
    const storedText = stored?.output.flatMap((item) => item.content ?? []).map((part) => part.text ?? '').join('');
    assert.ok(storedText === reference.text, `the stored output is the unbroken run's (${storedText?.length} characters, ${reference.text.length} expected)`);
    assert.deepEqual({ input: stored?.usage?.input_tokens, output: stored?.usage?.output_tokens }, reference.usage);
    // Read again from the start by a new follower: the same frames.
    const again = responsesResult(await (async () => {
      const response = await fetch(`${stack.baseUrl}/v1/responses/${id}?stream=true`);
      const parser = new SseParser();
      return { status: response.status, messages: parser.push(await response.text()), comments: [] };
    })());
    assert.equal(again.text, reference.text);
    assert.deepEqual(again.events, reference.events);
    await waitFor(() => finished.messages.slice(before).some((event) => event.migrations === 1), 10_000);
    await fleet(['w1', 'w2']);
  });

  it('migration - a frozen (SIGSTOPped) worker: the stream moves at the idle timeout and the frozen worker is told to stop', async (t) => {
    const reference = chatResult(await readSse(`${stack.baseUrl}/v1/chat/completions`, chat()));
    const cancels = await watchBus<{ runId: string; reason: string }>(stack.nc, Subjects.workerCancel.replace(WORKER_ID_TOKEN, '*'));
    let frozen: string | undefined;
    try {
      const { read, killed, pauses } = await killedAfter(chat(), [5], '/v1/chat/completions', 'SIGSTOP');
      frozen = killed[0];
      const result = chatResult(read);
      assert.equal(killed.length, 1);
      assert.equal(result.error, null, moves());
      assert.equal(result.text, reference.text);
      assert.deepEqual(counts(result), counts(reference));
      assert.ok(cancels.messages.some((c) => /moves to another worker/.test(c.reason)), 'the frozen worker was sent a cancel for its copy');
      report(t, 'chat stream, worker SIGSTOP after 5 chunks (idle timeout 3 s)', pauses[0] ?? NaN);
    } finally {
      await cancels.stop();
      if (frozen) {
        workers.get(frozen)?.kill('SIGCONT');
        kill(frozen);
      }
    }
    await fleet(['w1', 'w2']);
  });

  it('migration - no worker left to go on: the stream ends with the worker_lost error chunk, as without migration', async () => {
    const { read, killed } = await killedAfter(chat(), [5, 5]);
    const result = chatResult(read);
    assert.equal(killed.length, 2);
    assert.match(result.error ?? '', /worker_lost .*is down/);
    assert.equal(result.finish, null);
    assert.equal(read.messages.at(-1)?.data, '[DONE]');
    await fleet(['w1', 'w2']);
  });
});
