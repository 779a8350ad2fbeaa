import { completionChoices, MAX_CHAT_CHOICES } from '@cortex/wire';
import { isObject, type CanonicalRequest, type CortexError, type Dialect, type StreamEvent } from '@cortex/contracts';
import type { RequestContext } from '../http/request-context.js';
import type { InferenceRun } from '../inference/inference-run.js';
import type { ResponderRun } from '../inference/inference.responder.js';
import type { RunListener } from '../inference/run-notices.js';
import type { InferenceService } from '../inference/inference.service.js';

/** A stream event and the choice (prompt index) it belongs to. */
type ChoiceEvent = StreamEvent & { choice?: number };

/** The dialect state of a fanned-out request: how many choices its response has. */
interface FanOutState {
  choices: number;
}

export const choiceOf = (event: StreamEvent): number => (event as ChoiceEvent).choice ?? 0;

export const choicesOf = (state: unknown): number =>
  isObject(state) && typeof state.choices === 'number' ? state.choices : 1;

/**
 * The choices of one request: how many, and each one's body as a request of its own (`n` 1, and a
 * `seed` of its own so that seeded choices differ; an unseeded choice's run draws its own, see withSeed).
 */
export interface ChoiceBodies {
  count: number;
  bodies: (body: Record<string, unknown>) => Array<Record<string, unknown>>;
}

const ownSeed = (body: Record<string, unknown>, i: number): Record<string, unknown> =>
  typeof body.seed === 'number' && Number.isInteger(body.seed) ? { seed: body.seed + i } : {};

/**
 * The choices of a completion body that asks for several (an array prompt, `n`), or null: a single
 * choice (or a malformed body, which the decoder then refuses naming the field) runs as one request.
 */
export function completionFanOut(body: unknown): ChoiceBodies | null {
  if (!isObject(body)) return null;
  try {
    const prompts = completionChoices(body);
    if (prompts.length < 2) return null;
    return {
      count: prompts.length,
      bodies: (b) => prompts.map((prompt, i) => ({ ...b, prompt, n: 1, ...ownSeed(b, i) })),
    };
  } catch {
    return null;
  }
}

/** The choices of a chat body with `n` from 2 to MAX_CHAT_CHOICES, or null (one choice; a bad `n` is the decoder's 400). */
export function chatFanOut(body: unknown): ChoiceBodies | null {
  if (!isObject(body)) return null;
  const n = body.n;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 2 || n > MAX_CHAT_CHOICES) return null;
  return { count: n, bodies: (b) => Array.from({ length: n }, (_, i) => ({ ...b, n: 1, ...ownSeed(b, i) })) };
}

/**
 * One run per choice of a request with several (a legacy completion's array prompt or `n`, a chat
 * completion's `n`), driven by the responder as one: each is decoded, placed and generated like a
 * request of its own (so they share the model's slots side by side), and their events come out
 * merged, each tagged with its choice index.
 */
export class FanOutRun implements ResponderRun {
  private readonly runs: InferenceRun[];
  readonly state: FanOutState;

  constructor(
    service: InferenceService,
    dialect: Dialect,
    /** The request's: each choice's run reports its usage to its meter, and its span continues its traceparent. */
    context: RequestContext,
    private readonly choices: ChoiceBodies,
  ) {
    this.runs = Array.from({ length: choices.count }, () => service.open(dialect, context));
    // Each choice could move alone, but the choices of one response would then come from different
    // workers' sampling states: a request with several choices keeps today's error instead.
    for (const run of this.runs)
      run.checkpoint.refuse('a request with several choices (n > 1 or an array prompt) does not move');
    this.state = { choices: choices.count };
  }

  get runId(): string {
    return (this.runs[0] as InferenceRun).runId;
  }

  get startedAt(): number {
    return (this.runs[0] as InferenceRun).startedAt;
  }

  /** The fallback model serving the choices, once one does (the first that fell back). */
  get servedBy(): string | null {
    return this.runs.find((run) => run.servedBy !== null)?.servedBy ?? null;
  }

  /** Each choice's seed, in choice order. */
  get seeds(): readonly number[] {
    return this.runs.flatMap((run) => run.seeds);
  }

  /** Every choice's notices (a cold load's steps: its choices do not move). */
  listen(listener: RunListener): () => void {
    const stops = this.runs.map((run) => run.listen(listener));
    return () => stops.forEach((stop) => stop());
  }

  async decode(body: unknown, session?: string): Promise<CanonicalRequest> {
    const bodies = this.choices.bodies(body as Record<string, unknown>);
    const requests = await Promise.all(this.runs.map((run, i) => run.decode(bodies[i], session)));
    return requests[0] as CanonicalRequest;
  }

  firstByteWritten(): void {
    for (const run of this.runs) run.firstByteWritten();
  }

  /** Starts every prompt; when one cannot start, the others are stopped and its error thrown. */
  async start(): Promise<AsyncIterable<StreamEvent>> {
    const started = await Promise.allSettled(this.runs.map((run) => run.start()));
    const failed = started.find((result) => result.status === 'rejected');
    if (failed) {
      for (const run of this.runs) run.cancel('another prompt of the request failed');
      throw failed.reason;
    }
    return merge(started.map((result) => (result as PromiseFulfilledResult<AsyncIterable<StreamEvent>>).value));
  }

  cancel(reason: string): void {
    for (const run of this.runs) run.cancel(reason);
  }

  fail(error: CortexError, responseStarted: boolean): void {
    for (const run of this.runs) run.fail(error, responseStarted);
  }

  finish(): void {
    for (const run of this.runs) run.finish();
  }
}

type Pulled = { index: number; result?: IteratorResult<StreamEvent>; error?: unknown };

/** The events of every stream as they arrive, each tagged with its stream's index. */
async function* merge(streams: Array<AsyncIterable<StreamEvent>>): AsyncIterable<ChoiceEvent> {
  const iterators = streams.map((stream) => stream[Symbol.asyncIterator]());
  const pending = new Map<number, Promise<Pulled>>();
  // A failure is kept as a value, so a stream that fails while another is read is never unhandled.
  const pull = (index: number): void => {
    const next = (iterators[index] as AsyncIterator<StreamEvent>).next();
    pending.set(
      index,
      next.then(
        (result) => ({ index, result }),
        (error: unknown) => ({ index, error }),
      ),
    );
  };
  iterators.forEach((_, index) => pull(index));
  try {
    while (pending.size > 0) {
      const { index, result, error } = await Promise.race(pending.values());
      if (error !== undefined) throw error;
      if (!result || result.done) {
        pending.delete(index);
        continue;
      }
      pull(index);
      yield { ...result.value, choice: index };
    }
  } finally {
    for (const index of pending.keys()) void iterators[index]?.return?.();
  }
}
