import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Heartbeat, RequestFinishedEvent } from '@cortex/contracts';

const SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const RATES = [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000];

/** The fleet's Prometheus metrics, fed only from bus events (never from this process's own work). */
export class CortexMetrics {
  readonly registry = new Registry();
  private readonly requests = new Counter({
    name: 'cortex_requests_total',
    help: 'Requests that reached the inference path, by outcome',
    labelNames: ['model', 'worker', 'api', 'status'],
    registers: [this.registry],
  });
  private readonly errors = new Counter({
    name: 'cortex_request_errors_total',
    help: 'Requests that ended in an error, by error code',
    labelNames: ['model', 'api', 'code'],
    registers: [this.registry],
  });
  private readonly cancelled = new Counter({
    name: 'cortex_requests_cancelled_total',
    help: 'Requests cancelled because the client went away',
    labelNames: ['model', 'api'],
    registers: [this.registry],
  });
  private readonly duration = new Histogram({
    name: 'cortex_request_duration_seconds',
    help: 'Gateway wall time from request arrival to the last byte',
    labelNames: ['model', 'api'],
    buckets: SECONDS,
    registers: [this.registry],
  });
  private readonly ttft = new Histogram({
    name: 'cortex_time_to_first_token_seconds',
    help: 'Worker time from generate arriving to the first token',
    labelNames: ['model', 'worker'],
    buckets: SECONDS,
    registers: [this.registry],
  });
  private readonly rate = new Histogram({
    name: 'cortex_tokens_per_second',
    help: 'Decode rate of each request after its first token',
    labelNames: ['model', 'worker'],
    buckets: RATES,
    registers: [this.registry],
  });
  private readonly tokens = {
    prompt: this.tokenCounter('cortex_prompt_tokens_total', 'Prompt tokens processed'),
    cached: this.tokenCounter('cortex_cached_prompt_tokens_total', 'Prompt tokens served from a reused sequence prefix'),
    completion: this.tokenCounter('cortex_completion_tokens_total', 'Tokens generated'),
    reasoning: this.tokenCounter('cortex_reasoning_tokens_total', 'Generated tokens that were reasoning'),
  };
  private readonly workerUp = new Gauge({
    name: 'cortex_worker_up',
    help: '1 while a worker heartbeats',
    labelNames: ['worker'],
    registers: [this.registry],
  });
  private readonly modelLoaded = new Gauge({
    name: 'cortex_model_loaded',
    help: '1 when the model is ready on the worker',
    labelNames: ['model', 'worker'],
    registers: [this.registry],
  });
  private readonly lastBeat = new Map<string, { at: number; intervalMs: number; models: string[] }>();

  recordRequest(event: RequestFinishedEvent): void {
    const api = event.dialect;
    const worker = event.workerId ?? 'none';
    this.requests.inc({ model: event.model, worker, api, status: String(event.status) });
    this.duration.observe({ model: event.model, api }, event.durationMs / 1000);
    if (event.errorCode) this.errors.inc({ model: event.model, api, code: event.errorCode });
    if (event.finishReason === 'cancelled') this.cancelled.inc({ model: event.model, api });
    if (event.usage) {
      const labels = { model: event.model };
      this.tokens.prompt.inc(labels, event.usage.promptTokens);
      this.tokens.cached.inc(labels, event.usage.cachedPromptTokens);
      this.tokens.completion.inc(labels, event.usage.completionTokens);
      this.tokens.reasoning.inc(labels, event.usage.reasoningTokens);
    }
    if (event.timings && event.usage && event.usage.completionTokens > 0) {
      this.ttft.observe({ model: event.model, worker }, event.timings.ttftMs / 1000);
      if (event.timings.decodeTokensPerSecond > 0) this.rate.observe({ model: event.model, worker }, event.timings.decodeTokensPerSecond);
    }
  }

  recordHeartbeat(beat: Heartbeat): void {
    const previous = this.lastBeat.get(beat.workerId);
    const ready = beat.models.filter((m) => m.state === 'ready').map((m) => m.id);
    for (const model of previous?.models ?? []) if (!ready.includes(model)) this.modelLoaded.remove({ model, worker: beat.workerId });
    for (const model of ready) this.modelLoaded.set({ model, worker: beat.workerId }, 1);
    this.workerUp.set({ worker: beat.workerId }, beat.draining ? 0 : 1);
    this.lastBeat.set(beat.workerId, { at: Date.now(), intervalMs: beat.intervalMs, models: ready });
  }

  /** Gauges of a worker that stopped heartbeating go away instead of freezing at their last value. */
  expireWorkers(now = Date.now()): void {
    for (const [worker, beat] of this.lastBeat) {
      if (now - beat.at <= beat.intervalMs * 3) continue;
      this.workerUp.set({ worker }, 0);
      for (const model of beat.models) this.modelLoaded.remove({ model, worker });
      beat.models = [];
    }
  }

  private tokenCounter(name: string, help: string): Counter<'model'> {
    return new Counter({ name, help, labelNames: ['model'], registers: [this.registry] });
  }
}
