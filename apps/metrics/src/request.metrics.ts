import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type {
  BusStatusEvent,
  DefragEvent,
  McpToolCalledEvent,
  ForgedEventError,
  Heartbeat,
  LoadFailedEvent,
  LoadResult,
  ReplicaEvent,
  RequestFinishedEvent,
  UnloadResult,
  UsageRecord,
} from '@cortex/contracts';
import { HEALTH_VERDICTS, workerPresence, type FleetHealth } from '@cortex/contracts';

const SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const RATES = [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000];
/** Distinct (server, tool) pairs of MCP calls with series of their own. */
const MAX_MCP_SERIES = 512;
/** Error codes that mean "turned away for lack of capacity", counted as rejections. */
const REJECTIONS = new Set(['busy', 'no_worker', 'insufficient_memory', 'service_unavailable', 'model_load_failed']);

/** The fleet's Prometheus metrics, fed only from bus events (never from this process's own work). */
export class CortexMetrics {
  readonly registry = new Registry();
  private readonly counter = <L extends string>(name: string, help: string, labelNames: readonly L[]) =>
    new Counter<L>({ name, help, labelNames, registers: [this.registry] });
  private readonly gauge = <L extends string>(name: string, help: string, labelNames: readonly L[]) =>
    new Gauge<L>({ name, help, labelNames, registers: [this.registry] });
  private readonly histogram = <L extends string>(
    name: string,
    help: string,
    labelNames: readonly L[],
    buckets = SECONDS,
  ) => new Histogram<L>({ name, help, labelNames, buckets, registers: [this.registry] });

  private readonly requests = this.counter(
    'cortex_requests_total',
    'Requests that reached the inference path, by outcome',
    ['model', 'worker', 'api', 'status'],
  );
  private readonly errors = this.counter(
    'cortex_request_errors_total',
    'Requests that ended in an error, by error code',
    ['model', 'api', 'code'],
  );
  private readonly cancelled = this.counter(
    'cortex_requests_cancelled_total',
    'Requests cancelled because the client went away',
    ['model', 'api'],
  );
  private readonly coldStarts = this.counter(
    'cortex_cold_starts_total',
    'Requests that waited for their model to load',
    ['model'],
  );
  private readonly migrations = this.counter(
    'cortex_stream_migrations_total',
    'Times a stream moved to another worker after its worker was lost mid-stream',
    ['model', 'api'],
  );
  private readonly refusals = this.counter(
    'cortex_gateway_refusals_total',
    'Clients a gateway turned away before any request of theirs ran, by reason: ' +
      'too_many_connections, too_many_websockets, too_many_uploads, upload_bytes, request_timeout, ' +
      'body_too_deep, ws_message_timeout, ws_rate (a WebSocket paused for sending too fast)',
    ['reason'],
  );
  private readonly rejections = this.counter('cortex_rejections_total', 'Requests turned away for lack of capacity', [
    'reason',
  ]);
  private readonly duration = this.histogram(
    'cortex_request_duration_seconds',
    'Gateway wall time from request arrival to the last byte',
    ['model', 'api'],
  );
  private readonly ttft = this.histogram(
    'cortex_time_to_first_token_seconds',
    'Worker time from generate arriving to the first token',
    ['model', 'worker'],
  );
  private readonly promptEval = this.histogram(
    'cortex_prompt_eval_seconds',
    'Worker time evaluating the prompt tokens its sequence did not already hold, up to the first token',
    ['model', 'worker'],
  );
  private readonly itl = this.histogram('cortex_inter_token_latency_seconds', 'Mean time between tokens of a request', [
    'model',
    'worker',
  ]);
  private readonly rate = this.histogram(
    'cortex_tokens_per_second',
    'Decode rate of each request after its first token',
    ['model', 'worker'],
    RATES,
  );
  private readonly queue = this.histogram('cortex_request_queue_seconds', 'Time a request waited for a free sequence', [
    'model',
    'worker',
  ]);
  /** The same wait by the priority tier the request ran at (0: no key); events from gateways before tiers are not in it. */
  private readonly queueByTier = this.histogram(
    'cortex_request_queue_tier_seconds',
    'Time a request waited for a free sequence, by priority tier (0: no key)',
    ['model', 'tier'],
  );
  private readonly tokens = {
    prompt: this.counter(
      'cortex_prompt_tokens_total',
      'Prompt tokens processed (texts embedded and ranked included), by API',
      ['model', 'api'],
    ),
    cached: this.counter(
      'cortex_cached_prompt_tokens_total',
      'Prompt tokens not evaluated again: held by the sequence or restored from the prompt cache',
      ['model'],
    ),
    restored: this.counter(
      'cortex_restored_prompt_tokens_total',
      'Of the cached prompt tokens, those restored from the prompt cache beyond the slots',
      ['model'],
    ),
    completion: this.counter('cortex_completion_tokens_total', 'Tokens generated, by API', ['model', 'api']),
    reasoning: this.counter('cortex_reasoning_tokens_total', 'Generated tokens that were reasoning', ['model']),
    draft: this.counter(
      'cortex_draft_tokens_total',
      'Tokens a draft model or input lookup proposed and the model checked (speculative decoding)',
      ['model'],
    ),
    acceptedDraft: this.counter(
      'cortex_accepted_draft_tokens_total',
      'Proposed tokens the model accepted (speculative decoding)',
      ['model'],
    ),
  };
  /**
   * From the usage records (the `CORTEX_USAGE` stream): what each account and key spent; both labels are empty for
   * requests without a stored key.
   */
  private readonly spendCost = this.counter(
    'cortex_spend_cost_total',
    "What the billed tokens cost, in billing.currency, at each model's price when recorded (priced models only)",
    ['account', 'key', 'model'],
  );
  private readonly spend = {
    prompt: this.counter(
      'cortex_spend_prompt_tokens_total',
      'Prompt tokens billed, by account, key and model (from the usage records)',
      ['account', 'key', 'model'],
    ),
    cached: this.counter(
      'cortex_spend_cached_prompt_tokens_total',
      'Billed prompt tokens served from a reused prefix, by account, key and model',
      ['account', 'key', 'model'],
    ),
    completion: this.counter(
      'cortex_spend_completion_tokens_total',
      'Completion tokens billed, by account, key and model (from the usage records)',
      ['account', 'key', 'model'],
    ),
    reasoning: this.counter(
      'cortex_spend_reasoning_tokens_total',
      'Billed completion tokens that were reasoning, by account, key and model',
      ['account', 'key', 'model'],
    ),
  };
  private readonly route = this.histogram(
    'cortex_bus_route_seconds',
    "Round trip of the gateway's placement request to the router (cold loads included)",
    [],
  );

  private readonly workerUp = this.gauge('cortex_worker_up', '1 while a worker heartbeats', ['worker']);
  private readonly modelLoaded = this.gauge('cortex_model_loaded', '1 when the model is ready on the worker', [
    'model',
    'worker',
  ]);
  private readonly inFlight = this.gauge('cortex_model_in_flight', 'Requests generating on the model', [
    'model',
    'worker',
  ]);
  private readonly queueDepth = this.gauge('cortex_model_queue_depth', 'Requests waiting for a sequence of the model', [
    'model',
    'worker',
  ]);
  private readonly memoryUsed = this.gauge('cortex_device_memory_used_bytes', 'Device memory in use', [
    'worker',
    'device',
  ]);
  private readonly memoryFree = this.gauge('cortex_device_memory_free_bytes', 'Device memory free', [
    'worker',
    'device',
  ]);
  private readonly promptCacheBytes = this.gauge(
    'cortex_prompt_cache_bytes',
    "Bytes the worker's prompt cache beyond its slots holds, by tier (memory, disk)",
    ['worker', 'tier'],
  );
  private readonly promptCacheMaxBytes = this.gauge(
    'cortex_prompt_cache_max_bytes',
    "Bytes the worker's prompt cache may hold, by tier (worker.prompt_cache_mb, worker.prompt_cache_disk_mb)",
    ['worker', 'tier'],
  );
  private readonly loadTime = this.histogram(
    'cortex_model_load_seconds',
    'Time to load a model on a worker',
    ['model', 'worker'],
    [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
  );
  private readonly evictions = this.counter('cortex_evictions_total', 'Models unloaded from a worker, by reason', [
    'model',
    'worker',
    'reason',
  ]);
  private readonly loadFailures = this.counter('cortex_model_load_failures_total', 'Model loads that failed', [
    'model',
    'worker',
  ]);
  private readonly mcpCalls = this.counter(
    'cortex_mcp_tool_calls_total',
    'Tool calls of MCP servers the gateways ran for requests, by server, tool and outcome ' +
      '(ok, tool_error, timeout, cancelled, failed)',
    ['server', 'tool', 'outcome'],
  );
  private readonly mcpCallTime = this.histogram(
    'cortex_mcp_tool_call_seconds',
    'Time of one MCP tool call, from the gateway asking to its answer (or its error)',
    ['server', 'tool'],
  );
  /** The server and tool pairs counted so far; past MAX_MCP_SERIES a new pair is counted as `other`. */
  private readonly mcpSeries = new Set<string>();
  private readonly replications = this.counter(
    'cortex_replications_total',
    'Copies of a model loaded on another worker, by reason (queue_wait, min_replicas)',
    ['model', 'worker', 'reason'],
  );
  private readonly retirements = this.counter(
    'cortex_replica_retirements_total',
    'Spare copies of a model unloaded, by reason (idle, max_replicas)',
    ['model', 'worker', 'reason'],
  );
  private readonly replicaBlocked = this.counter(
    'cortex_replication_blocked_total',
    'Times (at most one per 10 s per model) a model’s requests waited and no copy ' +
      'could be made, by reason (no_room: more workers would relieve it; max_replicas)',
    ['model', 'reason'],
  );
  private readonly forged = this.counter(
    'cortex_forged_events_total',
    "Messages about one worker published under another worker's id (a worker's " +
      "credentials misused), dropped; by the subject's worker and the worker named",
    ['publisher', 'named'],
  );
  private readonly defrags = this.counter(
    'cortex_defrags_total',
    'Backends recreated after defrag_after_cycles load/unload cycles',
    ['worker'],
  );

  private readonly fleetHealth = this.gauge(
    'cortex_fleet_health',
    "1 for the fleet's verdict now (ok, impaired, degraded: GET /health's), 0 for the others",
    ['status'],
  );
  private readonly unservable = this.gauge(
    'cortex_fleet_unservable_models',
    'Catalogue models (and aliases) that no worker serves now or could load',
    [],
  );

  private readonly busConnected = this.gauge(
    'cortex_bus_connected',
    '1 while the service reports a live NATS connection',
    ['service', 'instance'],
  );
  private readonly busReconnects = this.counter('cortex_bus_reconnects_total', 'NATS reconnects of the service', [
    'service',
    'instance',
  ]);

  private readonly beats = new Map<string, { at: number; intervalMs: number; models: string[]; device: string }>();
  private readonly buses = new Map<
    string,
    {
      at: number;
      intervalMs: number;
      reconnects: number;
      refusals?: Record<string, number>;
      service: string;
      instance: string;
    }
  >();

  recordRequest(event: RequestFinishedEvent): void {
    const { model, dialect: api } = event;
    const worker = event.workerId ?? 'none';
    this.requests.inc({ model, worker, api, status: String(event.status) });
    this.duration.observe({ model, api }, event.durationMs / 1000);
    if (event.errorCode) {
      this.errors.inc({ model, api, code: event.errorCode });
      if (REJECTIONS.has(event.errorCode)) this.rejections.inc({ reason: event.errorCode });
    }
    if (event.finishReason === 'cancelled') this.cancelled.inc({ model, api });
    if (event.coldStart) this.coldStarts.inc({ model });
    if (event.migrations) this.migrations.inc({ model, api }, event.migrations);
    if (event.placeMs !== null && event.placeMs !== undefined) this.route.observe(event.placeMs / 1000);
    if (event.usage) {
      this.tokens.prompt.inc({ model, api }, event.usage.promptTokens);
      this.tokens.cached.inc({ model }, event.usage.cachedPromptTokens);
      this.tokens.restored.inc({ model }, event.usage.restoredPromptTokens ?? 0);
      this.tokens.completion.inc({ model, api }, event.usage.completionTokens);
      this.tokens.reasoning.inc({ model }, event.usage.reasoningTokens);
      if (event.usage.draftTokens !== undefined) {
        this.tokens.draft.inc({ model }, event.usage.draftTokens);
        this.tokens.acceptedDraft.inc({ model }, event.usage.acceptedDraftTokens ?? 0);
      }
    }
    if (event.timings && event.usage && event.usage.completionTokens > 0) {
      this.ttft.observe({ model, worker }, event.timings.ttftMs / 1000);
      this.queue.observe({ model, worker }, event.timings.queueMs / 1000);
      if (event.tier !== undefined)
        this.queueByTier.observe({ model, tier: String(event.tier) }, event.timings.queueMs / 1000);
      this.promptEval.observe({ model, worker }, event.timings.promptMs / 1000);
      const rate = event.timings.decodeTokensPerSecond;
      if (rate > 0) {
        this.rate.observe({ model, worker }, rate);
        this.itl.observe({ model, worker }, 1 / rate);
      }
    }
  }

  recordUsage(record: UsageRecord): void {
    const labels = { account: record.account ?? '', key: record.key_id ?? '', model: record.model };
    this.spend.prompt.inc(labels, record.prompt_tokens);
    this.spend.cached.inc(labels, record.cached_prompt_tokens);
    this.spend.completion.inc(labels, record.completion_tokens);
    this.spend.reasoning.inc(labels, record.reasoning_tokens);
    if (record.cost !== undefined) this.spendCost.inc(labels, record.cost);
  }

  recordLoaded(event: LoadResult): void {
    this.loadTime.observe({ model: event.model, worker: event.workerId }, event.loadMs / 1000);
  }

  recordUnloaded(event: UnloadResult): void {
    this.evictions.inc({ model: event.model, worker: event.workerId, reason: event.reason ?? 'admin' });
  }

  recordLoadFailed(event: LoadFailedEvent): void {
    this.loadFailures.inc({ model: event.model, worker: event.workerId });
  }

  recordReplica(kind: 'added' | 'retired' | 'blocked', event: ReplicaEvent): void {
    const worker = event.workerId ?? 'none';
    if (kind === 'added') this.replications.inc({ model: event.model, worker, reason: event.reason });
    else if (kind === 'retired') this.retirements.inc({ model: event.model, worker, reason: event.reason });
    else this.replicaBlocked.inc({ model: event.model, reason: event.reason });
  }

  /** A heartbeat or worker event whose subject's worker is not the one it names (see fromItsWorker). */
  recordForged(error: ForgedEventError): void {
    this.forged.inc({ publisher: error.subject.slice(error.subject.lastIndexOf('.') + 1), named: error.named });
  }

  /** A tool call a gateway ran; the series are bounded, whatever names servers and models come up with. */
  recordMcpCall(event: McpToolCalledEvent): void {
    let { server, tool } = event;
    const key = `${server}\n${tool}`;
    if (!this.mcpSeries.has(key)) {
      if (this.mcpSeries.size >= MAX_MCP_SERIES) [server, tool] = ['other', 'other'];
      else this.mcpSeries.add(key);
    }
    this.mcpCalls.inc({ server, tool, outcome: event.outcome });
    this.mcpCallTime.observe({ server, tool }, event.durationMs / 1000);
  }

  recordDefrag(event: DefragEvent): void {
    this.defrags.inc({ worker: event.workerId });
    for (const model of event.dropped) this.evictions.inc({ model, worker: event.workerId, reason: 'defrag' });
  }

  recordHeartbeat(beat: Heartbeat): void {
    const worker = beat.workerId;
    // A goodbye: the worker left on purpose, and its series go with it (`cortex_worker_up` too).
    if (beat.leaving) return this.forgetWorker(worker);
    const previous = this.beats.get(worker);
    const present = beat.models.map((m) => m.id);
    for (const model of previous?.models ?? []) if (!present.includes(model)) this.dropModel(model, worker);
    for (const m of beat.models) {
      this.modelLoaded.set({ model: m.id, worker }, m.state === 'ready' ? 1 : 0);
      this.inFlight.set({ model: m.id, worker }, m.inFlight);
      this.queueDepth.set({ model: m.id, worker }, m.queued);
    }
    const device = beat.device.name;
    this.memoryUsed.set({ worker, device }, Math.max(0, beat.device.totalBytes - beat.device.freeBytes));
    this.memoryFree.set({ worker, device }, beat.device.freeBytes);
    for (const { tier, bytes, maxBytes } of beat.memory.promptCache ?? []) {
      this.promptCacheBytes.set({ worker, tier }, bytes);
      this.promptCacheMaxBytes.set({ worker, tier }, maxBytes);
    }
    this.workerUp.set({ worker }, beat.draining ? 0 : 1);
    this.beats.set(worker, { at: Date.now(), intervalMs: beat.intervalMs, models: present, device });
  }

  /** The fleet's verdict as GET /health gives it (see fleetHealth). */
  recordHealth(health: FleetHealth): void {
    for (const status of HEALTH_VERDICTS) this.fleetHealth.set({ status }, status === health.status ? 1 : 0);
    this.unservable.set(health.unservable.length);
  }

  recordBus(event: BusStatusEvent): void {
    const key = `${event.service}/${event.instance}`;
    const previous = this.buses.get(key);
    // Cumulative per process: what grew since its last status is counted (a restarted gateway starts again from 0).
    for (const [reason, count] of Object.entries(event.refusals ?? {})) {
      const before = previous?.refusals?.[reason] ?? 0;
      const grown = count >= before ? count - before : count;
      this.refusals.inc({ reason }, grown);
    }
    const labels = { service: event.service, instance: event.instance };
    this.busConnected.set(labels, event.connected ? 1 : 0);
    const delta = event.reconnects - (previous?.reconnects ?? 0);
    if (delta > 0) this.busReconnects.inc(labels, delta);
    else if (!previous) this.busReconnects.inc(labels, 0);
    this.buses.set(key, {
      at: Date.now(),
      intervalMs: event.intervalMs,
      reconnects: event.reconnects,
      ...(event.refusals && { refusals: event.refusals }),
      ...labels,
    });
  }

  /**
   * Gauges of a worker or service that went silent go to 0 or away instead of freezing at their last
   * value; a worker silent for `forgetAfterMs` (`router.forget_worker_after_ms`, as routers forget it)
   * loses its `cortex_worker_up` series too.
   */
  expire(now = Date.now(), forgetAfterMs = Infinity): void {
    for (const [worker, beat] of this.beats) {
      const presence = workerPresence(beat, now - beat.at, forgetAfterMs);
      if (presence === 'up') continue;
      if (presence === 'forgotten') {
        this.forgetWorker(worker);
        continue;
      }
      this.workerUp.set({ worker }, 0);
      for (const model of beat.models) this.dropModel(model, worker);
      this.memoryUsed.remove({ worker, device: beat.device });
      this.memoryFree.remove({ worker, device: beat.device });
      for (const tier of ['memory', 'disk']) {
        this.promptCacheBytes.remove({ worker, tier });
        this.promptCacheMaxBytes.remove({ worker, tier });
      }
      beat.models = [];
    }
    for (const bus of this.buses.values()) {
      if (now - bus.at > bus.intervalMs * 3) this.busConnected.set({ service: bus.service, instance: bus.instance }, 0);
    }
  }

  /** Every series of a worker that left or was forgotten. */
  private forgetWorker(worker: string): void {
    const beat = this.beats.get(worker);
    this.workerUp.remove({ worker });
    if (!beat) return;
    for (const model of beat.models) this.dropModel(model, worker);
    this.memoryUsed.remove({ worker, device: beat.device });
    this.memoryFree.remove({ worker, device: beat.device });
    for (const tier of ['memory', 'disk']) {
      this.promptCacheBytes.remove({ worker, tier });
      this.promptCacheMaxBytes.remove({ worker, tier });
    }
    this.beats.delete(worker);
  }

  private dropModel(model: string, worker: string): void {
    this.modelLoaded.remove({ model, worker });
    this.inFlight.remove({ model, worker });
    this.queueDepth.remove({ model, worker });
  }
}
