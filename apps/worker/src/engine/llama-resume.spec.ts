import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { CortexError, type CanonicalRequest, type Resume } from '@cortex/contracts';
import { ensureFixtureModels } from '@cortex/fixtures';
import type { EngineModel, EngineEvent } from './engine.types.js';
import { LlamaEngine } from './llama-engine.js';

/**
 * The real engine on fixture models: a run resumed from the token ids of its first k output events
 * (what a gateway holds when the worker dies there) must send exactly what the unbroken run sent
 * after them, for every k — during reasoning, around a held-back stop string, inside a tool call held
 * by its grammar, a forced call, a json_schema document.
 */

type Output = Extract<EngineEvent, { type: 'text' | 'reasoning' | 'tool_call' | 'tool_args' }>;
const isOutput = (event: EngineEvent): event is Output =>
  ['text', 'reasoning', 'tool_call', 'tool_args'].includes(event.type);

/** Events as compared: finish without its timings and cached count (they differ between two runs by nature). */
function comparable(events: EngineEvent[]): unknown[] {
  return events
    .filter((event) => event.type !== 'start')
    .map((event) =>
      event.type === 'finish'
        ? {
            reason: event.reason,
            prompt: event.usage.promptTokens,
            completion: event.usage.completionTokens,
            reasoning: event.usage.reasoningTokens,
          }
        : event,
    );
}

describe('llama resume', () => {
  let dir: string;
  let engine: LlamaEngine;
  const models = new Map<string, EngineModel>();

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cortex-resume-'));
    const paths = await ensureFixtureModels(dir);
    engine = await LlamaEngine.create({ gpu: 'cpu', threads: 1, log: () => undefined });
    for (const id of ['cortex-chat', 'cortex-reasoning', 'cortex-tools']) {
      models.set(id, await engine.load({ id, path: paths[id] as string, contextSize: 512, slots: 1, maxQueue: 4 }));
    }
  });

  after(async () => {
    for (const model of models.values()) await model.dispose();
    await engine?.dispose();
    await rm(dir, { recursive: true, force: true });
  });

  async function generate(request: CanonicalRequest, resume?: Resume): Promise<EngineEvent[]> {
    const events: EngineEvent[] = [];
    const model = models.get(request.model) ?? assert.fail(`no ${request.model}`);
    await model.generate({
      request,
      receivedAt: performance.now(),
      signal: new AbortController().signal,
      emit: (event) => events.push(event),
      ...(resume && { resume }),
    });
    return events;
  }

  /** The resume point after the first `k` output events that carry ids (and everything before the next). */
  function cut(events: EngineEvent[], k: number): { resume: Resume; sent: number } {
    const tokens: number[] = [];
    const toolCallIds: string[] = [];
    let carried = 0;
    let sent = 0;
    for (const [i, event] of events.entries()) {
      if (!isOutput(event)) continue;
      if (carried === k) break;
      if (event.type === 'tool_call') toolCallIds[event.index] = event.id;
      if (event.tokens) {
        tokens.push(...event.tokens);
        carried++;
      }
      sent = i + 1;
    }
    return { resume: { tokens, toolCallIds }, sent };
  }

  /** Resumes `request` at every cut of its unbroken run; `refused(k)` names the cuts that must be refused. */
  async function everyCut(
    request: CanonicalRequest,
    refused: (events: EngineEvent[], sent: number) => boolean = () => false,
    most = 24,
  ): Promise<{ resumed: number; refused: number }> {
    const unbroken = await generate(request);
    const cuts = unbroken.filter((event) => isOutput(event) && event.tokens).length;
    assert.ok(cuts >= 3, `enough cuts to test: ${cuts}`);
    let resumed = 0;
    let refusals = 0;
    // Every cut of a short output; `most` of them, evenly spread, of a long one.
    const step = Math.max(1, Math.floor(cuts / most));
    for (let k = 1; k < cuts; k += step) {
      const { resume, sent } = cut(unbroken, k);
      if (refused(unbroken, sent)) {
        await assert.rejects(
          generate(request, resume),
          (error: unknown) =>
            error instanceof CortexError && error.code === 'worker_lost' && /inside a tool call/.test(error.message),
          `cut ${k} is refused`,
        );
        refusals++;
        continue;
      }
      const events = await generate(request, resume);
      assert.deepEqual(
        comparable(events),
        comparable(unbroken.slice(sent)),
        `resumed after ${k} output events (${resume.tokens.length} tokens)`,
      );
      resumed++;
    }
    return { resumed, refused: refusals };
  }

  const chat = (model: string, over: Partial<CanonicalRequest> = {}): CanonicalRequest => ({
    model,
    messages: [{ role: 'user', content: 'Hi.' }],
    sampling: { temperature: 0 },
    stream: true,
    ...over,
  });

  it('llama resume - during reasoning and after it, the resumed run sends what the unbroken one sent', async () => {
    assert.deepEqual(await everyCut(chat('cortex-reasoning')), { resumed: 6, refused: 0 });
  });

  it("llama resume - the reasoning tokens counted are the ids the reasoning's events carry, both markers included", async () => {
    // How reasoning is counted (and cut by max_tokens) is the output processor's (output-processor.spec.ts).
    const whole = await generate(chat('cortex-reasoning'));
    const finish = whole.find((event) => event.type === 'finish') ?? assert.fail('no finish');
    const { usage } = finish as Extract<EngineEvent, { type: 'finish' }>;
    const answer = whole.flatMap((event) => (event.type === 'text' ? (event.tokens ?? []) : []));
    assert.ok(answer.length > 0 && usage.reasoningTokens > 0, 'it reasons, then answers');
    // The closing marker's id rides on the first answer event (a resume needs it), so the answer is one fewer.
    assert.equal(
      usage.reasoningTokens + answer.length - 1,
      usage.completionTokens,
      'every output token is either reasoning (both markers included) or the answer',
    );
  });

  it('llama resume - a stop-string prefix held back at the cut is generated again, and the stop still ends the output', async () => {
    // "a tiny" is held back at "a" (the start of the stop string) and "a tiny model" ends the output.
    const request = chat('cortex-chat', { sampling: { temperature: 0, stop: ['a tiny model', 'a tiny robot'] } });
    const unbroken = await generate(request);
    assert.deepEqual(
      unbroken
        .filter(isOutput)
        .map((e) => (e.type === 'text' ? e.text : ''))
        .join(''),
      'Hello from ',
    );
    assert.ok(
      (await everyCut(chat('cortex-chat', { sampling: { temperature: 0, stop: ['tiny robot'] } }))).resumed >= 2,
    );
  });

  const tools = [{ name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } }];

  it('llama resume - inside a tool call held by its grammar: the call goes on with its index, id and grammar state', async () => {
    const request = chat('cortex-tools', { tools, toolChoice: 'auto' });
    const unbroken = await generate(request);
    assert.ok(
      unbroken.some((e) => e.type === 'tool_call'),
      'the fixture calls the tool',
    );
    assert.ok((await everyCut(request)).resumed >= 2);
  });

  it('llama resume - a forced tool call (tool_choice required) resumes inside the call the decode opened', async () => {
    assert.ok((await everyCut(chat('cortex-tools', { tools, toolChoice: 'required' }))).resumed >= 2);
  });

  it(
    'llama resume - a json_schema response: the grammar goes on over ' +
      'the delivered tokens, and the document equals the unbroken one',
    async () => {
      // Held to another schema the tools fixture writes `{"location": "get_weather"}` (see its fallback).
      const schema = { type: 'object', properties: { location: { type: 'string' } }, required: ['location'] };
      const request = chat('cortex-tools', {
        responseFormat: { type: 'json_schema', schema },
        sampling: { temperature: 0, maxTokens: 64 },
      });
      const unbroken = await generate(request);
      const text = unbroken.map((e) => (e.type === 'text' ? e.text : '')).join('');
      assert.equal(
        unbroken.at(-1)?.type,
        'finish',
        `the document is complete and matches the schema: ${unbroken.at(-1)?.type}`,
      );
      assert.doesNotThrow(() => JSON.parse(text), `the unbroken document parses: ${text}`);
      assert.ok((await everyCut(request, undefined, 12)).resumed >= 2);
    },
  );

  it('llama resume - a resume cancelled in its prompt counts as cached no more tokens than the prompt has', async () => {
    const request = chat('cortex-chat');
    const unbroken = await generate(request);
    const { resume } = cut(unbroken, 1);
    // The slot now holds the prompt and the delivered tokens; a resume that shares them and goes on
    // with other tokens reuses more than the prompt and still has tokens to evaluate when cancelled.
    await generate(request, resume);
    const [first = 0] = resume.tokens;
    const other: Resume = { tokens: [...resume.tokens, first, first], toolCallIds: [] };
    const controller = new AbortController();
    const events: EngineEvent[] = [];
    const model = models.get('cortex-chat') ?? assert.fail('no cortex-chat');
    const emit = (event: EngineEvent): void => {
      events.push(event);
      if (event.type === 'start') controller.abort();
    };
    await model.generate({ request, receivedAt: performance.now(), signal: controller.signal, emit, resume: other });
    const finish = events.at(-1);
    assert.ok(
      finish?.type === 'finish' && finish.reason === 'cancelled',
      `cancelled in the prompt: ${JSON.stringify(finish)}`,
    );
    assert.ok(
      finish.usage.cachedPromptTokens !== undefined && finish.usage.cachedPromptTokens > 0,
      `the shared prefix was reused: ${finish.usage.cachedPromptTokens}`,
    );
    assert.ok(
      finish.usage.cachedPromptTokens <= finish.usage.promptTokens,
      `cached ${finish.usage.cachedPromptTokens} of a ${finish.usage.promptTokens}-token prompt`,
    );
  });

  it("llama resume - a token outside the vocabulary is refused naming it; a forced call's resume must start with its marker", async () => {
    await assert.rejects(
      generate(chat('cortex-chat'), { tokens: [1, 10_000_000], toolCallIds: [] }),
      (error: unknown) => error instanceof CortexError && error.extra.param === 'resume.tokens[1]',
    );
    await assert.rejects(
      generate(chat('cortex-tools', { tools, toolChoice: 'required' }), { tokens: [5], toolCallIds: [] }),
      (error: unknown) => error instanceof CortexError && error.extra.param === 'resume.tokens',
    );
  });
});
