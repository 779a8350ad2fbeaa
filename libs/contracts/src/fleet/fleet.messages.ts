import { Type } from 'class-transformer';
import {
  IsBoolean,
  IsIn,
  IsInt,
  IsNumber,
  IsOptional,
  IsString,
  MaxLength,
  Min,
  ValidateNested,
  IsArray,
  IsObject,
} from 'class-validator';
import { MODEL_KINDS, type ModelKind } from '../retrieval/retrieval.messages.js';
import { UpstreamSpec, type UpstreamApi } from './upstream.js';
import type { SamplingDefaults } from '../generate/canonical-request.js';
import {
  fail,
  maxLength,
  object,
  oneOf,
  optionalArray,
  optionalBoolean,
  optionalInteger,
  optionalString,
  string,
} from '../fields.js';

export const MODEL_STATES = ['loading', 'ready', 'unloading'] as const;
export type ModelState = (typeof MODEL_STATES)[number];

/** What a loaded model can do, as its worker found out at load (marker tokens, template). */
export class ModelCapabilities {
  /** Writes tool calls in a format cortex parses. */
  @IsBoolean() tools!: boolean;
  /** Writes reasoning cortex splits from the answer. */
  @IsBoolean() reasoning!: boolean;
  /** The output format its chat template teaches (`hermes`, `qwen3-coder`, `gpt-oss`, …; see docs/compatibility.md). */
  @IsOptional() @IsString() @MaxLength(64) format?: string;
  /** Accepts images (never, with the text-only backend). */
  @IsBoolean() vision!: boolean;
  /** Serves legacy text completions (`/v1/completions`: a raw prompt, no chat template). */
  @IsOptional() @IsBoolean() completions?: boolean;
  /** Has fill-in-the-middle tokens: `/v1/completions` takes a `suffix`. */
  @IsOptional() @IsBoolean() fim?: boolean;
  /** Decodes speculatively: `draft` (a draft model) or `lookup` (input lookup). */
  @IsOptional() @IsIn(['draft', 'lookup']) speculative?: 'draft' | 'lookup';
}

/** A download under way for a load: bytes on disk so far of the whole (all split parts). */
export class DownloadState {
  @IsNumber() @Min(0) bytes!: number;
  @IsNumber() @Min(0) totalBytes!: number;
}

/** An upstream model whose upstream does not answer: since when (epoch ms), and the last failure in words (no URL path, no key). */
export class UnreachableUpstream {
  @IsNumber() since!: number;
  @IsString() @MaxLength(500) error!: string;
}

export class LoadedModel {
  @IsString() id!: string;
  @IsIn(MODEL_STATES) state!: ModelState;
  @IsInt() @Min(0) inFlight!: number;
  @IsInt() @Min(0) queued!: number;
  @IsInt() @Min(0) slots!: number;
  /** Epoch milliseconds of the last request that used the model. */
  @IsNumber() lastUsedAt!: number;
  @IsOptional() @IsNumber() sizeBytes?: number;
  @IsOptional() @ValidateNested() @Type(() => ModelCapabilities) capabilities?: ModelCapabilities;
  /** While a `loading` model's file is still being fetched. */
  @IsOptional() @ValidateNested() @Type(() => DownloadState) download?: DownloadState;
  /** Served by an upstream that does not answer now (a remote worker's probes and requests). */
  @IsOptional() @ValidateNested() @Type(() => UnreachableUpstream) unreachable?: UnreachableUpstream;
}

export class DeviceInfo {
  @IsString() name!: string;
  @IsString() kind!: string;
  @IsNumber() totalBytes!: number;
  @IsNumber() freeBytes!: number;
}

/** One tier of a worker's prompt cache: memory (`worker.prompt_cache_mb`) or disk (`worker.prompt_cache_disk_mb`). */
export class PromptCacheTier {
  @IsIn(['memory', 'disk']) tier!: 'memory' | 'disk';
  @IsNumber() bytes!: number;
  @IsNumber() maxBytes!: number;
}

/** What a worker may still use for models: the device's free memory, capped by its budget. */
export class MemoryInfo {
  /** 0 when no budget is set. */
  @IsNumber() budgetBytes!: number;
  /** Estimated memory of the models it holds (loading included). */
  @IsNumber() usedBytes!: number;
  @IsNumber() freeBytes!: number;
  /** What the prompt cache beyond the slots holds now and may hold, per tier; absent without one. */
  @IsOptional() @IsArray() @ValidateNested({ each: true }) @Type(() => PromptCacheTier) promptCache?: PromptCacheTier[];
}

/**
 * A worker whose last heartbeat is older than three intervals is down — never sooner than 2 s, since a
 * worker's event loop can stall for most of a second while it sets up a model's chat template.
 */
export function heartbeatFresh(intervalMs: number, ageMs: number): boolean {
  return ageMs <= livenessWindowMs(intervalMs);
}

/** How long a worker heartbeating every `intervalMs` may stay silent and still be up (see heartbeatFresh). */
export function livenessWindowMs(intervalMs: number): number {
  return Math.max(intervalMs * 3, 2_000);
}

/**
 * Where a worker stands by its last heartbeat (a pure decider, table-tested): `left` once it said
 * goodbye, whatever came before; else `up` while its beats are fresh (see heartbeatFresh), `down` once
 * they stopped, and `forgotten` after `forgetAfterMs` of silence (`router.forget_worker_after_ms`).
 * A window shorter than the liveness window forgets nothing sooner than the worker is down.
 */
export type WorkerPresence = 'up' | 'down' | 'forgotten' | 'left';

export function workerPresence(
  beat: { intervalMs: number; leaving?: boolean },
  silentMs: number,
  forgetAfterMs: number,
): WorkerPresence {
  if (beat.leaving) return 'left';
  if (heartbeatFresh(beat.intervalMs, silentMs)) return 'up';
  return silentMs >= Math.max(forgetAfterMs, livenessWindowMs(beat.intervalMs)) ? 'forgotten' : 'down';
}

/** worker → everyone, about once a second on `llm.hb.v1.worker.<id>`. */
export class Heartbeat {
  @IsString() workerId!: string;
  @IsString() host!: string;
  @IsInt() pid!: number;
  @IsNumber() startedAt!: number;
  @IsNumber() sentAt!: number;
  @IsNumber() intervalMs!: number;
  @IsBoolean() draining!: boolean;
  /**
   * The worker's goodbye: its last beat, sent once a graceful stop has drained it. Routers forget it
   * at once (it left on purpose) instead of declaring it down when its beats stop.
   */
  @IsOptional() @IsBoolean() leaving?: boolean;
  @ValidateNested() @Type(() => DeviceInfo) device!: DeviceInfo;
  @ValidateNested() @Type(() => MemoryInfo) memory!: MemoryInfo;
  @IsArray() @ValidateNested({ each: true }) @Type(() => LoadedModel) models!: LoadedModel[];
}

/** router → worker: how much memory would this model take on you? */
export class EstimateCommand {
  /** The catalogue model, named in errors (absent from older routers). */
  @IsOptional() @IsString() model?: string;
  @IsString() source!: string;
  @IsInt() @Min(128) contextSize!: number;
  @IsInt() @Min(1) slots!: number;
  /** As in LoadCommand: a draft model is estimated with its target. */
  @IsOptional() @IsString() draft?: string;
  /** As in LoadCommand: a projector is estimated with its model, by the vision engine. */
  @IsOptional() @IsString() mmproj?: string;
  /** As in LoadCommand. */
  @IsOptional() @IsIn(MODEL_KINDS) kind?: ModelKind;
  /** As in LoadCommand. */
  @IsOptional() @IsString() sha256?: string;
}

/** router → worker: load a catalogue model. */
/** What started a load: a request for the model, a pin, replication, or an admin (the CLI or the console). */
export const LOAD_TRIGGERS = ['request', 'pin', 'replica', 'admin', 'console'] as const;
export type LoadTrigger = (typeof LOAD_TRIGGERS)[number];

export class LoadCommand {
  @IsString() model!: string;
  /** A file path, `hf:` URI, or `fixture:<id>` for a model the project generates. */
  @IsString() source!: string;
  @IsInt() @Min(128) contextSize!: number;
  @IsInt() @Min(1) slots!: number;
  /** Speculative decoding: a draft model's source (same forms as `source`), or `lookup` for input lookup. */
  @IsOptional() @IsString() draft?: string;
  /** A vision model's projector (same forms as `source`): the model is served by the vision engine. */
  @IsOptional() @IsString() mmproj?: string;
  /** Absent: chat. Embedding and ranking models get contexts of their kind. */
  @IsOptional() @IsIn(MODEL_KINDS) kind?: ModelKind;
  /** The SHA-256 the catalogue pins for a downloaded `source`. */
  @IsOptional() @IsString() sha256?: string;
  /** The catalogue's chat template, rendering prompts instead of the GGUF's own. */
  @IsOptional() @IsString() @MaxLength(262144) chatTemplate?: string;
  /** The catalogue's output format, instead of the one the template's fingerprint says. */
  @IsOptional() @IsString() @MaxLength(64) format?: string;
  /** Why the router loads it, for the console and the logs. */
  @IsOptional() @IsIn(LOAD_TRIGGERS) trigger?: LoadTrigger;
  /** A model served from an upstream instead of a GGUF (`source` is then its URL): only a remote worker loads it. */
  @IsOptional() @ValidateNested() @Type(() => UpstreamSpec) upstream?: UpstreamSpec;
}

/** Stops a load in progress on one worker; the router waiting for it hears `model_load_failed`. */
export class CancelLoadCommand {
  @IsString() model!: string;
  @IsOptional() @IsString() reason?: string;
}

/** `spare`: a copy of a model that others still serve, retired once its requests would not wait without it. */
export const UNLOAD_REASONS = ['admin', 'idle', 'lru', 'priority', 'drain', 'spare'] as const;
export type UnloadReason = (typeof UNLOAD_REASONS)[number];

export class UnloadCommand {
  @IsString() model!: string;
  /** Why, for logs and `cortex_evictions_total{reason}`. */
  @IsOptional() @IsIn(UNLOAD_REASONS) reason?: UnloadReason;
  /** Let requests in flight finish first (default); false cancels them. */
  @IsOptional() @IsBoolean() drain?: boolean;
}

export class WatchMessage {
  @IsArray() @IsString({ each: true }) runIds!: string[];
}

/** worker → everyone while a model is fetched and loaded. */
export interface LoadProgress {
  workerId: string;
  model: string;
  fraction: number;
  /** `downloading`: fetching the file (a URL or `hf:` source); `loading` (or absent, from older workers): reading it into memory. */
  phase?: 'downloading' | 'loading';
  /** Why the router loads it (the load command's trigger). */
  trigger?: LoadTrigger;
  /** While downloading: bytes on disk so far and the file's full size (all split parts). */
  bytes?: number;
  totalBytes?: number;
}

/** What a model's GGUF header says, read before any weights are fetched (remotely, for a URL). */
export interface ModelFacts {
  architecture?: string;
  /** Parameter count, where the header or the tensors say it. */
  parameters?: number;
  /** The file type, e.g. `MOSTLY_Q4_K_M`. */
  quantization?: string;
  /** The file's size, all split parts together. */
  fileBytes?: number;
  /** The context length the model was trained with. */
  trainedContextLength?: number;
  /** Whether the chat template mentions tools / reasoning (a cheap look at its text). */
  tools?: boolean;
  reasoning?: boolean;
  /** The maker's sampling defaults (`general.sampling.*`), applied to requests that leave them out. */
  sampling?: SamplingDefaults;
  /**
   * The output format its chat template is recognised as, and whether a model of it calls tools and
   * reasons (as a load would find; absent where the template is not recognised by its text alone).
   */
  chatFormat?: { id: string; tools: boolean; reasoning: boolean };
}

/** A worker's answer to `estimate`. */
export interface EstimateReply {
  bytes: number;
  /** Absent from older workers. */
  facts?: ModelFacts;
}

export interface UnloadResult {
  model: string;
  workerId: string;
  cancelled: number;
  reason: UnloadReason;
}

/** Lifecycle facts on `llm.evt.v1.*`, kept in JetStream. */
export interface WorkerLifecycleEvent {
  workerId: string;
  at: number;
  /**
   * `llm.evt.v1.worker.down` only: `left` when the worker said goodbye (a graceful stop: it is
   * forgotten at once), `silent` when its heartbeats stopped (absent from routers before this field).
   */
  reason?: WorkerDownReason;
}

/** Why a worker is no longer up: it said goodbye, or it stopped heartbeating. */
export const WORKER_DOWN_REASONS = ['left', 'silent'] as const;
export type WorkerDownReason = (typeof WORKER_DOWN_REASONS)[number];

export interface DefragEvent extends WorkerLifecycleEvent {
  cycles: number;
  /** Models the worker held and dropped; the router reloads the pinned ones. */
  dropped: string[];
}

export const REPLICA_ADD_REASONS = ['queue_wait', 'min_replicas'] as const;
export const REPLICA_RETIRE_REASONS = ['idle', 'max_replicas'] as const;
export const REPLICA_BLOCK_REASONS = ['no_room', 'max_replicas'] as const;

/**
 * router → metrics on `llm.evt.v1.replica.{added,retired,blocked}`: a copy of a model was loaded on
 * another worker (`queue_wait`: its requests waited; `min_replicas`), a spare copy retired (`idle`;
 * `max_replicas` lowered), or a copy was wanted and none could be made (`no_room`: no worker without
 * the model can take it without evicting a busy model — what more workers relieve; `max_replicas`).
 * `workerId` is absent on `blocked`.
 */
export interface ReplicaEvent {
  model: string;
  workerId?: string;
  reason: string;
  at: number;
}

export interface LoadFailedEvent extends WorkerLifecycleEvent {
  model: string;
  error: string;
  /** Stopped by a `cancel_load` command: requests that waited on it fail rather than load it again. */
  cancelled?: boolean;
}

export interface LoadResult {
  model: string;
  workerId: string;
  loadMs: number;
  sizeBytes: number;
}

/** admin → router: load a model (on one worker, or wherever placement picks). */
export class AdminModelCommand {
  @IsString() model!: string;
  @IsOptional() @IsString() worker?: string;
  /** Set by the web console, so a load it starts says so. */
  @IsOptional() @IsIn(['console']) from?: 'console';
}

/** admin → router: put a model's file on one worker (`worker`) or on every worker up (`all`). */
export class AdminPullCommand {
  @IsString() model!: string;
  @IsOptional() @IsString() worker?: string;
  @IsOptional() @IsBoolean() all?: boolean;
}

/** router → worker: download a model's file into the models directory, without loading it. */
export class PullCommand {
  @IsString() model!: string;
  @IsString() source!: string;
  @IsOptional() @IsString() sha256?: string;
}

/** A worker's answer to `pull`: where the file is and how large (all parts of a split file, the first's path). */
export interface PullResult {
  model: string;
  workerId: string;
  path: string;
  bytes: number;
}

/** The router's answer to `cortex pull --worker|--all` (POST /admin/pull): the model and each worker's result. */
export interface PullReply {
  model: string;
  pulled: PullResult[];
}

/** How long a pull onto a worker may take: a large file on a slow link, bounded; a worker that dies ends it at once. */
export const PULL_TIMEOUT_MS = 6 * 60 * 60 * 1000;
/**
 * What the router's callers wait for a pull: the router's bound, a little longer, so the router's answer (or its error)
 * is what arrives.
 */
export const PULL_REPLY_TIMEOUT_MS = PULL_TIMEOUT_MS + 10_000;

/** admin → router: `{"model": {…}}` adds a model, `{"id", "fields"}` changes one, `{"id"}` removes one. */
export class CatalogueAddCommand {
  @IsObject() model!: Record<string, unknown>;
}

export class CatalogueSetCommand {
  @IsString() id!: string;
  @IsObject() fields!: Record<string, unknown>;
}

export class CatalogueRemoveCommand {
  @IsString() id!: string;
}

/** A model of the catalogue as written in YAML, and whether it comes from the config file or was added or changed at run time. */
export interface CatalogueModelReply {
  model: Record<string, unknown>;
  origin: 'config' | 'added' | 'changed';
  /** Workers a removed model was drained and unloaded from. */
  unloaded?: string[];
}

export class PinCommand {
  @IsString() model!: string;
  @IsBoolean() pinned!: boolean;
}

/** gateway → router: where should this model run? */
export interface PlaceRequest {
  model: string;
  /** Workers not to use (a retry after one of them failed). */
  exclude?: string[];
  /** The request's conversation (CanonicalRequest.affinityKey): prefer the worker that served it. At most 512 characters. */
  affinity?: string;
  /**
   * Digests of the prompt at its message boundaries, the whole prompt first (see the wire library's
   * `promptPrefixes`): without an affinity binding, prefer the worker that served a request whose
   * whole prompt is one of them. At most 32, each at most 64 characters.
   */
  prefixes?: string[];
  /** The gateway's run: a try sent again after a router did not answer joins the run's placement. At most 64 characters. */
  runId?: string;
  /** How many tries of this placement went unanswered before this one (0: the first). */
  attempt?: number;
  /** What the request needs the model to be (absent: chat); a model of another kind is a 400. */
  kind?: ModelKind;
  /**
   * Answer only with a worker that has the model ready now, else `model_not_ready` at once: never
   * waits, never loads. The gateway asks this while the translator still decodes the body, so a
   * request that turns out to be invalid cannot start a load.
   */
  readyOnly?: boolean;
}

/** Checks a `place` request. By hand, like `generate`: it is on every request's path. */
export function decodePlaceRequest(value: unknown): PlaceRequest {
  const place = object(value, 'place');
  string(place.model, 'model');
  optionalArray(place.exclude, 'exclude')?.forEach((id, i) => string(id, `exclude[${i}]`));
  maxLength(optionalString(place.affinity, 'affinity'), 512, 'affinity');
  const prefixes = optionalArray(place.prefixes, 'prefixes');
  if (prefixes && prefixes.length > 32) fail('prefixes', `has ${prefixes.length} entries; at most 32`);
  prefixes?.forEach((prefix, i) => maxLength(string(prefix, `prefixes[${i}]`), 64, `prefixes[${i}]`));
  maxLength(optionalString(place.runId, 'runId'), 64, 'runId');
  optionalInteger(place.attempt, 'attempt', 0);
  if (place.kind !== undefined && place.kind !== null) oneOf(place.kind, 'kind', MODEL_KINDS);
  optionalBoolean(place.readyOnly, 'readyOnly');
  return place as unknown as PlaceRequest;
}

export interface Placement {
  model: string;
  workerId: string;
  /** True when the router had to load the model for this request. */
  coldStart: boolean;
  /**
   * For this many milliseconds the gateway may place the same model, kind and conversation on this
   * worker again without asking: the router sets it only when this worker is the one that could serve
   * the model (see the planner's `soleServer`). Absent: ask every time.
   */
  reuseMs?: number;
}

export interface ModelLocation {
  workerId: string;
  state: ModelState;
  inFlight: number;
  queued: number;
  /** While its file is being fetched for the load. */
  download?: { bytes: number; totalBytes: number };
  /** Its upstream does not answer (an upstream model on a remote worker). */
  unreachable?: UnreachableUpstream;
}

export interface CatalogueEntry {
  id: string;
  ownedBy: string;
  created: number;
  contextSize: number;
  pinned: boolean;
  priority: number;
  loaded: boolean;
  locations: ModelLocation[];
  /** Copies ready to serve, and the bounds replication keeps them in (`maxReplicas` 0: one per worker). Absent from older routers. */
  replicas?: { ready: number; min: number; max: number };
  /** Known once the model has been loaded somewhere. */
  capabilities: ModelCapabilities | null;
  /** What the model serves, from the catalogue (absent from older routers: chat). */
  kind?: ModelKind;
  /** Its GGUF header's facts, read by a worker when the model entered the catalogue (before any download). */
  facts?: ModelFacts;
  /** The memory a copy takes, as a worker estimated it from the header (absent until one did). */
  memoryBytes?: number;
  /** Why the header could not be read, while no read of the model's current source has succeeded. */
  factsError?: string;
  /** The catalogue's sampling defaults for the model (over its GGUF's). */
  sampling?: SamplingDefaults;
  /** Served by an upstream: its format and host (never its path, key or headers). */
  upstream?: { api: UpstreamApi; host: string };
  /** The models that serve a request this one cannot, in turn (the catalogue's `fallback`). */
  fallback?: string[];
}

export interface WorkerView {
  memory: MemoryInfo;
  workerId: string;
  host: string;
  pid: number;
  up: boolean;
  lastSeenMs: number;
  /**
   * A worker that is down (its heartbeats stopped): how long until routers forget it
   * (`router.forget_worker_after_ms` after its last beat), unless it beats again. Absent while up.
   */
  forgetInMs?: number;
  draining: boolean;
  device: DeviceInfo;
  models: LoadedModel[];
}

export interface FleetView {
  routerId: string;
  workers: WorkerView[];
  catalogue: CatalogueEntry[];
  /** Requests waiting in the answering router for a model to load, by model (absent: none). */
  waiting?: Record<string, number>;
}

/** A request a gateway runs, as it answers the console's `llm.gateway.v1.runs` ask. */
export interface PendingRun {
  requestId: string;
  /** The current try's run id: its token stream is `llm.stream.v1.<workerId>.<runId>`. */
  runId: string;
  model: string;
  /** Null until a router placed it. */
  workerId: string | null;
  /** When its placement began (epoch ms). */
  since: number;
  /** The stored key it was made with, and its account; absent for a config-file key or none. */
  keyId?: string;
  account?: string;
  /** The MCP tool it waits on between model turns (`<server> · <tool>`); absent while a model runs it. */
  tool?: string;
}
