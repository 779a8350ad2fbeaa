/**
 * Every NATS subject cortex uses. This is the only file that spells a subject string.
 * Grammar: `llm.<service>.v1.<verb>`, `llm.worker.v1.<workerId>.<verb>`, `llm.hb.v1.worker.<workerId>`,
 * `llm.evt.v1.<noun>.<past-tense>` (`.<workerId>` after a worker's own events), `llm.stream.v1.<workerId>.<runId>`,
 * `llm.background.v1.<responseId>.<workerId>.<runId>`. Ids come last, never `$`. A subject a worker
 * writes names that worker, so NATS permissions keep every worker to its own (deploy/nats).
 */
export const WORKER_ID_TOKEN = '{worker}';

export const Subjects = {
  translatorDecode: 'llm.translator.v1.decode',
  responsesStore: 'llm.translator.v1.responses.store',
  responsesGet: 'llm.translator.v1.responses.get',
  responsesDelete: 'llm.translator.v1.responses.delete',
  responsesInputItems: 'llm.translator.v1.responses.input_items',
  /** A background response's stored record: the encoder options, the resource as it stands, its current run. */
  responsesBackground: 'llm.translator.v1.responses.background',
  /** `POST /v1/responses/{id}/cancel` of a background response, to every gateway (the one placing it stops). */
  backgroundCancel: 'llm.gateway.v1.responses.cancel',
  /** The console asks every gateway for the requests it runs (each answers; the asker gathers). */
  gatewayRuns: 'llm.gateway.v1.runs',
  /** The events of every background run, kept in the `CORTEX_BACKGROUND` stream. */
  backgroundAll: 'llm.background.v1.>',
  /** `POST /v1/responses/compact`: the summarisation request and the items kept verbatim. */
  responsesCompaction: 'llm.translator.v1.responses.compaction',
  routerPlace: 'llm.router.v1.place',
  routerModels: 'llm.router.v1.models',
  routerFleet: 'llm.router.v1.fleet',
  routerLoad: 'llm.router.v1.load',
  routerUnload: 'llm.router.v1.unload',
  routerPin: 'llm.router.v1.pin',
  /** Change the live catalogue (`cortex models add|set|remove`, `/admin/models`): one router writes `cortex_catalogue`, all watch it. */
  routerCatalogueAdd: 'llm.router.v1.catalogue.add',
  routerCatalogueSet: 'llm.router.v1.catalogue.set',
  routerCatalogueRemove: 'llm.router.v1.catalogue.remove',
  /** admin → router: fetch a model's file onto workers ahead of time. */
  routerPull: 'llm.router.v1.pull',
  /** Handler patterns for one worker; the bus server replaces `{worker}` with its own id. */
  workerGenerate: `llm.worker.v1.${WORKER_ID_TOKEN}.generate`,
  workerCancel: `llm.worker.v1.${WORKER_ID_TOKEN}.cancel`,
  workerTokenize: `llm.worker.v1.${WORKER_ID_TOKEN}.tokenize`,
  workerEmbed: `llm.worker.v1.${WORKER_ID_TOKEN}.embed`,
  workerRank: `llm.worker.v1.${WORKER_ID_TOKEN}.rank`,
  workerLoad: `llm.worker.v1.${WORKER_ID_TOKEN}.load`,
  workerUnload: `llm.worker.v1.${WORKER_ID_TOKEN}.unload`,
  /** Stops a load in progress (the console's cancel); answered whether there was one. */
  workerCancelLoad: `llm.worker.v1.${WORKER_ID_TOKEN}.cancel_load`,
  workerEstimate: `llm.worker.v1.${WORKER_ID_TOKEN}.estimate`,
  workerPull: `llm.worker.v1.${WORKER_ID_TOKEN}.pull`,
  /** Gateways list the requests they still stream from a worker; the rest are abandoned. */
  workerWatch: `llm.worker.v1.${WORKER_ID_TOKEN}.watch`,
  heartbeatAll: 'llm.hb.v1.worker.*',
  /** Every request's token stream (observers and tests; a gateway reads only its own, `streamSubject`). */
  streamsAll: 'llm.stream.v1.>',
  requestFinished: 'llm.evt.v1.request.finished',
  /** A gateway ran a tool of an MCP server for a request (see McpToolCalledEvent). */
  mcpToolCalled: 'llm.evt.v1.mcp.tool_called',
  modelLoaded: 'llm.evt.v1.model.loaded',
  modelUnloaded: 'llm.evt.v1.model.unloaded',
  modelLoadFailed: 'llm.evt.v1.model.load_failed',
  /** Replication (router): a copy loaded, a spare copy retired, a copy wanted that could not be made. */
  replicaAdded: 'llm.evt.v1.replica.added',
  replicaRetired: 'llm.evt.v1.replica.retired',
  replicaBlocked: 'llm.evt.v1.replica.blocked',
  workerUp: 'llm.evt.v1.worker.up',
  workerDown: 'llm.evt.v1.worker.down',
  workerDefragmented: 'llm.evt.v1.worker.defragmented',
  /**
   * A loading model's progress, many times per load. Core NATS, not under `llm.evt.v1.`: it is only
   * of use while the load runs (gateways show it to waiting clients), nothing replays it, and keeping
   * it would crowd request events out of the bounded events stream.
   */
  modelProgressed: 'llm.status.v1.model.progressed',
  serviceStatus: 'llm.status.v1.ping',
  /** Every service, every few seconds: its bus connection state (core NATS, not stored). */
  serviceBus: 'llm.status.v1.bus',
  /**
   * One usage record per run that used tokens, kept in the `CORTEX_USAGE` stream (not under `llm.evt.v1.`: billing
   * outlives the events).
   */
  usageRecorded: 'llm.usage.v1.recorded',
  /** Everything under `llm.evt.v1.` is kept in this JetStream stream. */
  eventsAll: 'llm.evt.v1.>',
} as const;

/** The JetStream stream that keeps lifecycle and request events for metrics. */
export const EVENTS_STREAM = 'CORTEX_EVENTS';

/** The JetStream stream of usage records, kept as long as `metrics.usage_retention_s` (0: for ever). */
export const USAGE_STREAM = 'CORTEX_USAGE';

/** The JetStream stream that keeps the events of background responses while they run (bounded age). */
export const BACKGROUND_STREAM = 'CORTEX_BACKGROUND';

/** How often a gateway sends `watch` for its open streams; a worker drops a request unwatched for 3×. */
export const WATCH_INTERVAL_MS = 2_000;

/** The subject of one worker's handler pattern, e.g. `workerSubject(Subjects.workerGenerate, 'w1')`. */
export function workerSubject(pattern: string, workerId: string): string {
  assertToken(workerId, 'workerId');
  return pattern.replace(WORKER_ID_TOKEN, workerId);
}

export function heartbeatSubject(workerId: string): string {
  assertToken(workerId, 'workerId');
  return `llm.hb.v1.worker.${workerId}`;
}

/**
 * The token stream of one run on `workerId`. The subject names the worker, so NATS itself keeps every
 * other worker's user from writing it (deploy/nats/nats-server.conf grants each worker its own id).
 */
export function streamSubject(workerId: string, runId: string): string {
  assertToken(workerId, 'workerId');
  assertToken(runId, 'runId');
  return `llm.stream.v1.${workerId}.${runId}`;
}

/** The run id of a token stream's subject (see streamSubject), or null for any other subject. */
export function streamRunId(subject: string): string | null {
  const match = /^llm\.stream\.v1\.[A-Za-z0-9_-]{1,128}\.([A-Za-z0-9_-]{1,128})$/.exec(subject);
  return match?.[1] ?? null;
}

/** The writer of a background run's events that no worker took (a gateway ends it before placing it): no worker id starts with `_`. */
export const NO_WORKER = '_';

/**
 * The events of one run (`runId`) of a background response, written by `workerId` (NO_WORKER for a
 * run no worker took); a failover before the first token starts another run.
 */
export function backgroundSubject(responseId: string, workerId: string, runId: string): string {
  assertToken(responseId, 'responseId');
  assertToken(workerId, 'workerId');
  assertToken(runId, 'runId');
  return `llm.background.v1.${responseId}.${workerId}.${runId}`;
}

/** Every run's events of one background response. */
export function backgroundResponseSubjects(responseId: string): string {
  assertToken(responseId, 'responseId');
  return `llm.background.v1.${responseId}.*.*`;
}

/**
 * The subject a worker publishes one of its lifecycle events on (`Subjects.modelLoaded`, …): the
 * event's subject ends with the worker's id, which its NATS user may publish alone.
 */
export function workerEventSubject(event: WorkerEvent, workerId: string): string {
  assertToken(workerId, 'workerId');
  return `${event}.${workerId}`;
}

/** The events a worker publishes about itself, each under its own id (see workerEventSubject). */
export const WORKER_EVENTS = [
  'llm.evt.v1.model.loaded',
  'llm.evt.v1.model.unloaded',
  'llm.evt.v1.model.load_failed',
  'llm.evt.v1.worker.defragmented',
] as const;
export type WorkerEvent = (typeof WORKER_EVENTS)[number];

/** Subscribes to one worker event from every worker. */
export function everyWorker(event: WorkerEvent): string {
  return `${event}.*`;
}

/**
 * Which worker event a subject carries, and the worker whose user published it; null for any other
 * subject. A subscriber accepts the payload only when it names that worker (see fromItsWorker).
 */
export function workerEventOf(subject: string): { event: WorkerEvent; workerId: string } | null {
  const dot = subject.lastIndexOf('.');
  const event = subject.slice(0, dot) as WorkerEvent;
  return dot > 0 && WORKER_EVENTS.includes(event) ? { event, workerId: subject.slice(dot + 1) } : null;
}

/**
 * Whether a message about `workerId` came on a subject of that worker: a worker event or heartbeat
 * whose last token is the id it names. Anything else was written by another worker's user (NATS lets
 * a worker publish only under its own id) and is dropped.
 */
export function fromItsWorker(subject: string, workerId: string): boolean {
  return subject.slice(subject.lastIndexOf('.') + 1) === workerId;
}

/** A message about one worker published under another worker's id: dropped, and counted where metrics are kept. */
export class ForgedEventError extends Error {
  constructor(
    readonly subject: string,
    readonly named: string,
  ) {
    super(`${subject}: names worker "${named}", but only that worker may publish about itself; dropped`);
  }
}

/** `event` as it came on `subject`, when the worker it names published it; else ForgedEventError. */
export function fromWorker<T extends { workerId: string }>(subject: string, event: T): T {
  if (!fromItsWorker(subject, event.workerId)) throw new ForgedEventError(subject, event.workerId);
  return event;
}

/** Ids end up inside subjects: a dot, a wildcard or white space would change which subscribers match. */
export function assertToken(value: string, name: string): void {
  if (!/^[A-Za-z0-9_-]{1,128}$/.test(value)) {
    throw new Error(`${name} "${value}" must be 1-128 characters of letters, digits, '_' or '-'`);
  }
}
