import 'reflect-metadata';
import { Type } from 'class-transformer';
import { MCP_SERVER_LABEL, SAMPLING_DEFAULT_RANGES as RANGES, UpstreamSpec } from '@cortex/contracts';
import {
  IsArray,
  IsBoolean,
  IsIn,
  IsInt,
  IsNumber,
  IsObject,
  IsOptional,
  IsString,
  Matches,
  Max,
  MaxLength,
  Min,
  ValidateNested,
  ArrayUnique,
} from 'class-validator';

const HOST_PORT = /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}$/;

/** The HTTP status `GET /health` answers with, per verdict. */
export class HealthStatusConfig {
  @IsInt() @Min(200) @Max(599) ok = 200;
  @IsInt() @Min(200) @Max(599) impaired = 200;
  @IsInt() @Min(200) @Max(599) degraded = 503;
}

export class GatewayConfig {
  @Matches(HOST_PORT, { message: 'must be host:port' }) listen = '127.0.0.1:31313';
  @IsInt() @Min(1024) bodyLimitBytes = 8 * 1024 * 1024;
  /**
   * How long a client has to send a whole request, headers and body; past it the connection is
   * answered 408 and closed, so a body stalled short of its end holds nothing for long. 0: no limit.
   */
  @IsInt() @Min(0) requestTimeoutMs = 60_000;
  /** Connections the gateway holds at once; past it a new one is closed at once. 0: no cap. */
  @IsInt() @Min(0) maxConnections = 10_000;
  /**
   * Connections one client address may hold at once; past it a new one is answered 429 and closed.
   * The proxies in `trust_proxy` are not capped (every client behind them shares their address). 0: no cap.
   */
  @IsInt() @Min(0) maxConnectionsPerAddress = 256;
  /**
   * Request bodies one client (a key, or an address without one) may be sending at once, counted from
   * their first byte; past it a new one is answered 429 before its body is read. 0: no cap.
   */
  @IsInt() @Min(0) maxUploadsPerKey = 32;
  /**
   * Responses WebSockets one client (a key, or an address without one) may hold open on this gateway;
   * past it an upgrade is answered 429. Each may hold one message of up to `body_limit_bytes` while it
   * arrives. 0: no cap.
   */
  @IsInt() @Min(0) maxWebsocketsPerKey = 16;
  /**
   * The bytes those bodies declare and the client's Responses WebSocket messages waiting for their turn hold, together
   * (a chunked body counts as `body_limit_bytes`); the first is always let in. 0: no cap.
   */
  @IsInt() @Min(0) maxUploadBytesPerKey = 64 * 1024 * 1024;
  /**
   * Bytes a second one WebSocket may send (its messages, averaged; a burst of twice
   * `body_limit_bytes` first): past it the gateway stops reading the socket until the average is back
   * under, so one flooding socket cannot take the CPU honest clients need. 0: no cap.
   */
  @IsInt() @Min(0) wsBytesPerSecond = 8 * 1024 * 1024;
  /** How long a request may wait for translation, placement and a cold load before 504. */
  @IsInt() @Min(100) placementTimeoutMs = 120_000;
  /** A stream that sees no event (tokens or keep-alive) for this long is failed as `worker_lost`. */
  @IsInt() @Min(500) streamIdleTimeoutMs = 10_000;
  /** SSE comment frames while waiting, so proxies and clients keep the connection. */
  @IsInt() @Min(100) keepAliveMs = 5_000;
  /** A streaming client that takes nothing of what was written for this long is cut off, and its generation cancelled. */
  @IsInt() @Min(100) stallTimeoutMs = 30_000;
  /** A request that finds no worker up (just after start-up) waits this long for one to join before 503 `no_worker`. */
  @IsInt() @Min(0) workerWaitMs = 30_000;
  /**
   * How a stream that waits for a cold load shows its progress: `comments` (SSE comment lines, which
   * every client ignores), or `reasoning` (also as reasoning text in Chat Completions streams, which
   * chat UIs display). A request can choose with the header `x-cortex-load-progress`.
   */
  @IsIn(['comments', 'reasoning']) loadProgress: 'comments' | 'reasoning' = 'comments';
  /**
   * Headers that name a client's session, first match wins (Claude Code, Codex, generic); requests of
   * one session go to the worker that holds its prompt prefix (see `router.affinity`).
   */
  @IsArray() @IsString({ each: true }) sessionHeaders: string[] = [
    'x-claude-code-session-id',
    'session-id',
    'session_id',
    'x-session-id',
    'x-session-affinity',
  ];
  /**
   * Tools only the provider's servers can run (OpenAI hosted tools such as `web_search`, Anthropic server
   * tools): `drop` leaves them out of the request and logs it, so agents that always offer them work;
   * `reject` answers 400 naming the tool.
   */
  @IsIn(['drop', 'reject']) hostedTools: 'drop' | 'reject' = 'drop';
  /**
   * Origins (`https://console.example.com`) besides the gateway's own whose pages may use the console's
   * cookie (a WebSocket upgrade or a fetch naming another origin never does). The gateway's own origin
   * is the one the request's `Host` names; list the public URL here when a proxy changes `Host`.
   */
  @IsArray() @IsString({ each: true }) allowedOrigins: string[] = [];
  /**
   * Addresses or CIDR ranges (`10.0.0.0/8`) of the reverse proxies in front of the gateway, whose
   * `X-Forwarded-Proto`, `-Host` and `-For` it believes: the console's cookie is then `Secure` behind a
   * proxy that ends TLS, and the origin check compares with the host the browser used. Empty: none.
   */
  @IsArray() @IsString({ each: true }) trustProxy: string[] = [];
  /**
   * The deployment's name, the title of the web console's tab (`/console`); its header shows it after
   * the product name, less a leading "cortex" (the default, `cortex`, shows the product name alone).
   */
  @IsString() @MaxLength(80) consoleTitle = 'cortex';
  /** Which API families this gateway serves. */
  @ValidateNested() @Type(() => EndpointsConfig) endpoints = new EndpointsConfig();
  /** Streams whose worker is lost after the first token go on on another worker (see docs/operations.md). */
  @ValidateNested() @Type(() => MigrationConfig) migration = new MigrationConfig();
  /** `GET /health`'s status code per verdict (200, 200, 503): a balancer that only reads codes can treat impaired as down too. */
  @ValidateNested() @Type(() => HealthStatusConfig) healthStatus = new HealthStatusConfig();
  /**
   * What a stored key's request gets while its limits cannot be counted (NATS unreachable, its store full), per check
   * (see docs/keys.md).
   */
  @ValidateNested() @Type(() => LimitsUnavailableConfig) limitsUnavailable = new LimitsUnavailableConfig();
  /** What one request's images may take, and how image URLs are fetched (see docs/compatibility.md). */
  @ValidateNested() @Type(() => ImagesConfig) images = new ImagesConfig();
}

/**
 * Bounds on a request's images. Base64 images arrive in the body, so `body_limit_bytes` bounds them
 * first (raise it to take large ones); URLs are fetched by the gateway within these limits.
 */
export class ImagesConfig {
  /** Images in one request (every message and tool result together). */
  @IsInt() @Min(1) @Max(1_000) maxPerRequest = 16;
  /** Bytes of one image, decoded (OpenAI's limit: 20 MiB). */
  @IsInt() @Min(1024) maxBytes = 20 * 1024 * 1024;
  /** Bytes of all of one request's images together, decoded. */
  @IsInt() @Min(1024) maxRequestBytes = 64 * 1024 * 1024;
  /** How long fetching one image URL may take, redirects included. */
  @IsInt() @Min(100) fetchTimeoutMs = 10_000;
  /**
   * Fetch URLs whose host resolves to loopback, private, link-local or other non-public addresses. Off:
   * a client could otherwise make the gateway read the network it runs in (cloud metadata included).
   */
  @IsBoolean() allowPrivateUrls = false;
}

/**
 * Per check of a stored key's limits, when the check cannot be made (its KV bucket cannot be read or
 * written): `refuse` answers 503 with `retry-after` (the key cannot go past its limits, fail-closed);
 * `admit` serves the request without counting it against that limit and logs it (fail-open).
 */
export class LimitsUnavailableConfig {
  /** `requests_per_minute` and `concurrent_requests`. */
  @IsIn(['refuse', 'admit']) requests: LimitsPolicy = 'refuse';
  /** `tokens_per_minute`. */
  @IsIn(['refuse', 'admit']) tokens: LimitsPolicy = 'refuse';
  /** `token_budget`. */
  @IsIn(['refuse', 'admit']) budget: LimitsPolicy = 'refuse';
}

export type LimitsPolicy = 'refuse' | 'admit';

export class MigrationConfig {
  /** How many times one stream may move to another worker; 0 turns migration off. */
  @IsInt() @Min(0) @Max(16) maxAttempts = 2;
  /**
   * A stream whose prompt and output so far are more tokens than this is not migrated: the next
   * worker would evaluate them all again before the client sees the next token.
   */
  @IsInt() @Min(1) maxTokens = 32_768;
}

export class EndpointsConfig {
  @IsBoolean() chatCompletions = true;
  @IsBoolean() responses = true;
  @IsBoolean() messages = true;
  /** Legacy text completions (`/v1/completions`), which code-completion clients still use. */
  @IsBoolean() completions = true;
  /** `/v1/embeddings`. */
  @IsBoolean() embeddings = true;
  /** `/v1/rerank` (also `/rerank` and `/v1/reranking`). */
  @IsBoolean() rerank = true;
}

export class ResponsesConfig {
  /** How long stored responses and conversations live, in seconds. */
  @IsInt() @Min(60) ttlS = 30 * 24 * 3600;
  /** At most this many stored responses (and as many conversations); the oldest go first. */
  @IsInt() @Min(1) maxStored = 100_000;
  /**
   * At most this many bytes in each of the two stores (responses, conversations), per NATS server that
   * holds a copy; the oldest go first. 0: no byte limit (only `max_stored`). Keep both stores together
   * well below the NATS server's JetStream `max_file_store`, which every other stream shares.
   */
  @IsInt() @Min(0) maxBytes = 0;
  /**
   * Reasoning stream event names: `openai` (`response.reasoning_text.*`, which the official openai
   * client accepts) or `openresponses` (the spec's `response.reasoning.*`, which that client rejects).
   */
  @IsIn(['openai', 'openresponses']) reasoningEvents: 'openai' | 'openresponses' = 'openai';
  /**
   * Secret every gateway and translator share: reasoning items of requests that include
   * `reasoning.encrypted_content` carry the reasoning sealed with it (AES-256-GCM), and a stateless
   * (`store: false`) client that sends them back gets that reasoning restored into the prompt. Unset:
   * no `encrypted_content` is returned.
   */
  @IsOptional() @IsString() reasoningKey?: string;
  /**
   * How long the events of a background response (`background: true`) are kept in JetStream, in
   * seconds: `GET /v1/responses/{id}?stream=true` replays them within this time. The finished
   * response itself is stored like any other (`ttl_s`).
   */
  @IsInt() @Min(60) backgroundEventsTtlS = 3600;
  /**
   * At most this many bytes of background responses' events in JetStream (`CORTEX_BACKGROUND`), per
   * NATS server that holds a copy. Past 90 % of it a new background response is refused with a 503 that
   * names the stream, so the runs already going still have room; runs that end free it as their events
   * age out. Keep it well below the NATS server's JetStream `max_file_store`, which every stream shares.
   */
  @IsInt() @Min(1024 * 1024) backgroundMaxBytes = 512 * 1024 * 1024;
  /**
   * Background responses one client (a key, or an address without one) may have running from one
   * gateway; past it a new one is a 429 (a key's `concurrent_requests` caps them too, fleet-wide). 0: no cap.
   */
  @IsInt() @Min(0) backgroundMaxPerKey = 16;
  /**
   * How long one WebSocket connection on `/v1/responses` may stay open (the spec's 60 minutes); then it
   * ends with `websocket_connection_limit_reached` and the client opens a new one.
   */
  @IsInt() @Min(1000) websocketConnectionLimitMs = 60 * 60 * 1000;
}

export class AuthConfig {
  /** `keys`: requests need one of `api_keys` (when any are set). `none`: no authentication, on any address. */
  @IsIn(['keys', 'none']) mode: 'keys' | 'none' = 'keys';
  @IsArray() @IsString({ each: true }) apiKeys: string[] = [];
  /** Keys for admin routes (load, unload, pin); they also work as API keys. */
  @IsArray() @IsString({ each: true }) adminKeys: string[] = [];
  /**
   * Keys with an account, limits, models and a tier, each declared as a `cortex keys apply` file
   * declares one (`name`, `account`, `tier`, `models`, `limits`, `expires_at`, and `secret_env` or
   * `secret_sha256`; never the secret itself). Each gateway checks them at start as `POST /admin/keys`
   * checks a body, holds them in memory (not in the keys bucket) and counts their limits in the same
   * buckets as a stored key's, under an id made from the name. Kept as written (snake_case).
   */
  @IsArray() keys: unknown[] = [];
  /** The limits of the accounts those keys name: `<account>: { limits: {...} }`, as in a key file. */
  @IsObject() accounts: Record<string, unknown> = {};
}

/**
 * TLS to NATS: on when any file is set or the URL is `tls://`; the server's certificate is checked against `ca_file`
 * (or the system CAs).
 */
export class NatsTlsConfig {
  @IsOptional() @IsString() caFile?: string;
  /** A client certificate and its key, for servers that verify clients (`verify: true`). */
  @IsOptional() @IsString() certFile?: string;
  @IsOptional() @IsString() keyFile?: string;
}

/**
 * How this process proves who it is to NATS: at most one of `user`/`password`, `token`, `creds_file`
 * (a JWT `.creds` file) or `nkey_seed_file`. Credentials in the URL (`nats://user:pass@host`,
 * `nats://token@host`) work too.
 */
export class NatsConfig {
  @IsString() url = 'nats://127.0.0.1:4222';
  /** Bound on every bus request/reply that is not a cold load. */
  @IsInt() @Min(50) requestTimeoutMs = 5_000;
  @IsOptional() @IsString() user?: string;
  @IsOptional() @IsString() password?: string;
  @IsOptional() @IsString() token?: string;
  @IsOptional() @IsString() credsFile?: string;
  @IsOptional() @IsString() nkeySeedFile?: string;
  /**
   * Subject prefix of this process's reply inboxes. A server config that gives each role its own
   * prefix (`_INBOX.worker`, …) keeps one role from reading the replies sent to another.
   */
  @Matches(/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/, {
    message: 'must be dot-separated tokens of letters, digits, _ or -',
  })
  inboxPrefix = '_INBOX';
  @ValidateNested() @Type(() => NatsTlsConfig) tls = new NatsTlsConfig();
  /**
   * Copies JetStream keeps of each stream, KV bucket and object store cortex creates: 1 on a single
   * server, 3 on a NATS cluster (state then survives losing a server). Buckets that already exist keep theirs.
   */
  @IsInt() @Min(1) @Max(5) replicas = 1;
  /**
   * With several servers in `url`: try them in random order (spreads clients over a cluster), or, when
   * false, in the order listed (e.g. each service's nearest server first).
   */
  @IsBoolean() randomize = true;
}

export class MetricsConfig {
  @Matches(HOST_PORT, { message: 'must be host:port' }) listen = '127.0.0.1:31314';
  /**
   * How long request and lifecycle events stay in JetStream. The metrics service rebuilds its counters
   * from them when it starts, so this is also how far back a restarted metrics service can count.
   */
  @IsInt() @Min(60) retentionS = 7 * 24 * 3600;
  @IsInt() @Min(1000) maxEvents = 1_000_000;
  /**
   * How long usage records (what each key and account spent, for billing) stay in the `CORTEX_USAGE`
   * stream; 0 keeps them for ever. Spend metrics and `GET /admin/usage` count what is kept.
   */
  @IsInt() @Min(0) usageRetentionS = 0;
}

export class EvictionConfig {
  @IsIn(['lru', 'priority']) strategy: 'lru' | 'priority' = 'lru';
  /** Seconds a model may sit unused before it is unloaded; 0 keeps it. */
  @IsInt() @Min(0) idleTtl = 0;
  @IsInt() @Min(0) defragAfterCycles = 0;
  /**
   * When a model must make room for another on a worker while it is still serving, it keeps taking
   * new requests for at most this long, then stops, drains and is swapped out. Requests for either
   * model queue meanwhile and run together once their model is in (batching by model, not a swap per
   * request).
   */
  @IsInt() @Min(0) swapHoldMs = 1_000;
}

/**
 * Copies of a busy model on more workers (docs/architecture.md, "Replication"). A model is under
 * pressure while the requests queued for it reach `queue_per_slot` per slot of its ready copies;
 * a copy is loaded once that has lasted `sustain_ms` and the model's measured load time, whichever is
 * longer. A spare copy retires once the model's requests have stayed within `retire_below` of the
 * other copies' slots for `retire_after_s`.
 */
export class ReplicationConfig {
  /** Copies per model unless the model sets `max_replicas`; 0: as many as there are workers, 1: never copy. */
  @IsInt() @Min(0) maxReplicas = 0;
  @IsNumber() @Min(0.1) @Max(1000) queuePerSlot = 1;
  @IsInt() @Min(0) @Max(600_000) sustainMs = 3_000;
  @IsInt() @Min(1) @Max(86_400) retireAfterS = 30;
  @IsNumber() @Min(0) @Max(1) retireBelow = 0.5;
}

export class RouterConfig {
  /**
   * Requests one router lets wait for a model that is loading or waiting for room; past this the
   * next gets `busy` (429 with Retry-After). The wait itself is bounded by `gateway.placement_timeout_ms`.
   */
  @IsInt() @Min(1) maxWaitingPerModel = 256;
  /**
   * Send follow-ups of a conversation (session header, `prompt_cache_key`, `previous_response_id`,
   * `conversation`, else the prompt's prefix) to the worker that served it before, so its cached
   * prompt prefix is reused.
   */
  @IsBoolean() affinity = true;
  /** How long a conversation stays bound to its worker after its last request, in seconds. */
  @IsInt() @Min(1) affinityTtlS = 3_600;
  /**
   * When only one worker could serve a model (it alone holds it, ready, not being swapped out), a
   * gateway may send further requests for that model there without asking a router, for this many
   * milliseconds after the answer; a worker that refuses such a request sends it back through a
   * router. 0: every request asks.
   */
  @IsInt() @Min(0) @Max(60_000) placementReuseMs = 5_000;
  /**
   * How long a worker that stopped heartbeating without saying goodbye (killed, crashed, cut off)
   * stays in the fleet as down, impairing it, before routers and the metrics service forget it. A
   * worker that stops gracefully says goodbye and is forgotten at once. At least 2 s: a worker is
   * only down after 3 missed beats.
   */
  @IsInt() @Min(2_000) forgetWorkerAfterMs = 600_000;
}

/**
 * A model's sampling defaults: what a request that leaves a setting out samples with, over the
 * defaults its GGUF carries (`general.sampling.*`) and cortex's own. The names of the requests'
 * fields (llama.cpp's and vLLM's for those OpenAI lacks).
 */
export class ModelSamplingConfig {
  @IsOptional() @IsNumber() @Min(RANGES.temperature.min) @Max(RANGES.temperature.max) temperature?: number;
  @IsOptional() @IsNumber() @Min(RANGES.topP.min) @Max(RANGES.topP.max) topP?: number;
  /** 0: off (every token). */
  @IsOptional() @IsInt() @Min(RANGES.topK.min) topK?: number;
  @IsOptional() @IsNumber() @Min(RANGES.minP.min) @Max(RANGES.minP.max) minP?: number;
  /** 1: none. */
  @IsOptional()
  @IsNumber()
  @Min(RANGES.repetitionPenalty.min)
  @Max(RANGES.repetitionPenalty.max)
  repetitionPenalty?: number;
  @IsOptional() @IsInt() @Min(RANGES.repeatLastN.min) repeatLastN?: number;
}

/**
 * What a model's tokens cost, per million, in `billing.currency`: usage records carry the cost of
 * their tokens at the price of the moment they were recorded.
 */
export class ModelCostConfig {
  @IsNumber() @Min(0) input!: number;
  /** Prompt tokens served from a reused prefix; unset: `input`. */
  @IsOptional() @IsNumber() @Min(0) cachedInput?: number;
  /** Generated tokens, reasoning included. */
  @IsNumber() @Min(0) output!: number;
}

/** Money, for models with a `cost`. */
export class BillingConfig {
  /** The one currency every `cost` is in and every spend is shown in (a code such as USD, or a unit of your own). */
  @Matches(/^[A-Za-z]{1,16}$/, { message: 'must be 1-16 letters (USD, EUR, credits)' }) currency = 'USD';
}

export class ModelConfig {
  @Matches(/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/, { message: 'must be 1-128 letters, digits or . _ : / -' })
  id!: string;
  /**
   * A GGUF path (relative to the config file), an `http(s)://` URL, an `hf:<user>/<repo>/<file>` or
   * `hf:<user>/<repo>:<quant>` URI, or `fixture:<name>[:bytes]` for a generated model. A model with an
   * `upstream` has none.
   */
  @IsOptional() @IsString() file?: string;
  /** Served from an inference server or API instead of a GGUF, by a remote worker (see UpstreamSpec); exclusive with `file`. */
  @IsOptional() @ValidateNested() @Type(() => UpstreamSpec) upstream?: UpstreamSpec;
  /**
   * Other catalogue models that serve a request this one cannot before its first token (no place for
   * it, its places failing, busy or rate limited), tried in order; the answer says which served it.
   */
  @IsOptional() @IsArray() @ArrayUnique() @IsString({ each: true }) fallback?: string[];
  /** The SHA-256 of a downloaded `file` (unsplit): a download that does not match is deleted, never loaded. */
  @IsOptional() @Matches(/^[0-9a-fA-F]{64}$/, { message: 'must be 64 hexadecimal digits' }) sha256?: string;
  @IsInt() @Min(128) contextSize = 2048;
  @IsInt() @Min(0) @Max(1000) priority = 0;
  @IsBoolean() pinned = false;
  /** Parallel sequences in the model's context (continuous batching width). */
  @IsInt() @Min(1) @Max(64) slots = 4;
  @IsOptional() @IsArray() @ArrayUnique() @IsString({ each: true }) aliases?: string[];
  /**
   * Workers this model should live on (e.g. the hosts with the big GPUs), in order of preference: a
   * cold load goes to the first of them where it fits or can make room, before any other worker.
   */
  @IsOptional() @IsArray() @ArrayUnique() @IsString({ each: true }) workers?: string[];
  /** Seconds unused before the model is unloaded; overrides `eviction.idle_ttl`. 0 keeps it. */
  @IsOptional() @IsInt() @Min(0) idleTtl?: number;
  /** Copies kept once the model is loaded: spare copies retire down to this many, and fewer are topped up. */
  @IsInt() @Min(1) @Max(64) minReplicas = 1;
  /** Most copies of the model across workers; overrides `replication.max_replicas`. 1: never copied, 0: one per worker. */
  @IsOptional() @IsInt() @Min(0) @Max(64) maxReplicas?: number;
  @IsString() ownedBy = 'cortex';
  /**
   * Speculative decoding: a draft model that proposes tokens this one checks in one batch — the id
   * of another catalogue model or a source in the forms of `file` (it must share this model's
   * vocabulary) — or `lookup`, which drafts from the prompt itself (input lookup). Unset: none.
   */
  @IsOptional() @IsString() draft?: string;
  /**
   * A vision model's projector (`mmproj` GGUF), in the forms of `file`: the model then takes images,
   * served by the vision engine (llama.cpp's mtmd) instead of node-llama-cpp. Unset: text only.
   */
  @IsOptional() @IsString() mmproj?: string;
  /**
   * The chat template to render prompts with instead of the GGUF's own (a Jinja template, as the
   * model's `tokenizer_config.json` has it): for a GGUF whose template is missing or broken.
   * `chat_template_file` names a file holding it (relative to this file).
   */
  @IsOptional() @IsString() @MaxLength(262144) chatTemplate?: string;
  @IsOptional() @IsString() chatTemplateFile?: string;
  /**
   * The output format (how the model writes reasoning and tool calls), where its template's
   * fingerprint does not say: `hermes`, `qwen3-coder`, `gpt-oss`, … (docs/compatibility.md).
   */
  @IsOptional()
  @Matches(/^[a-z0-9][a-z0-9.-]{0,63}$/, { message: 'must name a format, such as hermes or gpt-oss' })
  format?: string;
  /** Sampling defaults for requests that leave them out, over the GGUF's; live-editable like the rest of the catalogue. */
  @IsOptional() @ValidateNested() @Type(() => ModelSamplingConfig) sampling?: ModelSamplingConfig;
  /** Prices per million tokens (see ModelCostConfig); unset: its use is counted in tokens only. */
  @IsOptional() @ValidateNested() @Type(() => ModelCostConfig) cost?: ModelCostConfig;
  /** `chat` generates; `embedding` serves /v1/embeddings, `ranking` /v1/rerank. */
  @IsIn(['chat', 'embedding', 'ranking']) kind: 'chat' | 'embedding' | 'ranking' = 'chat';
  /**
   * An embedding model trained so that a prefix of its vector is an embedding too (Matryoshka):
   * requests may then ask for fewer `dimensions`, which are cut and renormalized.
   */
  @IsBoolean() matryoshka = false;
}

export class WorkerConfig {
  /** Worker id used in subjects; defaults to the host name plus the device. */
  @IsOptional() @Matches(/^[A-Za-z0-9_-]{1,64}$/, { message: 'must be 1-64 letters, digits, _ or -' }) id?: string;
  /** CPU threads for inference; 0 means every core but one. */
  @IsInt() @Min(0) threads = 0;
  @IsIn(['auto', 'cuda', 'vulkan', 'metal', 'cpu']) gpu: 'auto' | 'cuda' | 'vulkan' | 'metal' | 'cpu' = 'auto';
  /** GPU index this worker owns (sets CUDA_VISIBLE_DEVICES for its process). */
  @IsOptional() @IsInt() @Min(0) device?: number;
  /** Bytes the worker may use for models; 0 means whatever the device reports free. */
  @IsInt() @Min(0) memoryBudget = 0;
  @IsString() modelsDir = '.cortex/models';
  @IsInt() @Min(100) heartbeatMs = 1_000;
  /** Requests waiting for a free sequence per model before `busy` (429). */
  @IsInt() @Min(0) maxQueue = 64;
  /**
   * MiB of conversations' evaluated prompts kept beyond the slots: a sequence about to be overwritten by
   * another conversation is saved, and restored when its conversation comes back instead of evaluated
   * again (least recently used out first). 0: none.
   */
  @IsInt() @Min(0) promptCacheMb = 1024;
  /** Where the kept prompts go: `/dev/shm` (memory) where there is one, else the system's temp directory. */
  @IsOptional() @IsString() promptCacheDir?: string;
  /**
   * MiB of a disk tier for the prompt cache: states pushed out of the memory tier move there instead of
   * being dropped, and are restored from there (slower than memory, far faster than evaluating a long
   * prompt again). 0: none.
   */
  @IsInt() @Min(0) promptCacheDiskMb = 0;
  /** Where the disk tier goes (the system's temp directory by default; point it at a local disk, not a tmpfs). */
  @IsOptional() @IsString() promptCacheDiskDir?: string;
  /**
   * MiB of native memory finished generations may leave (node-llama-cpp keeps a vocabulary-sized
   * array per generation until V8 collects a small object) before the worker asks V8 for a major
   * collection. 0: never ask (under steady load the worker then grows without bound: 4 GB in five minutes).
   */
  @IsInt() @Min(0) nativeGcMb = 64;
  /**
   * The order in which a model's waiting requests get a free sequence: `fair` by priority tier, then
   * across accounts by the tokens they used (deficit round robin); `fifo` first come first served.
   */
  @IsIn(['fair', 'fifo']) queueOrder: 'fair' | 'fifo' = 'fair';
  /**
   * Minimum spacing of token messages per stream. A token is sent at once unless the previous
   * message left less than this long ago; faster tokens are merged into one message. 0 = one
   * message per token. 16 ms is one frame of a 60 Hz display: a reader cannot see the merging, and
   * a fast stream costs the bus, the gateway and the client 60 messages a second instead of hundreds.
   */
  @IsInt() @Min(0) @Max(1000) streamIntervalMs = 16;
  /**
   * `llama`: node-llama-cpp. `synthetic`: no inference at all — every model emits a fixed word at
   * `synthetic_tokens_per_second` per stream, to measure cortex's own pipeline (`npm run bench:pipeline`).
   * `remote`: no local models; serves the catalogue's models that have an `upstream`, over HTTP.
   */
  @IsIn(['llama', 'synthetic', 'remote']) engine: 'llama' | 'synthetic' | 'remote' = 'llama';
  @IsInt() @Min(1) @Max(1_000_000) syntheticTokensPerSecond = 1_000;
}

/**
 * An MCP server the operator registers: reached over HTTP (`url`, Streamable HTTP or the older SSE
 * transport) or started by the gateway as a child process speaking stdio (`command`). A request names
 * it by `label`; its credentials (`headers`, `headers_env`) stay here and never come from a request.
 */
export class McpServerConfig {
  @Matches(MCP_SERVER_LABEL, { message: 'must be 1-64 letters, digits, _ or -' }) label!: string;
  /** The server's endpoint (`https://mcp.example.com/mcp`); exclusive with `command`. */
  @IsOptional()
  @Matches(/^https?:\/\/[^\s/?#]+(\/[^\s#]*)?$/, { message: 'must be an http(s) URL' })
  url?: string;
  /** How `url` is spoken: `streamable_http` (MCP 2025-03-26 and later) or `sse` (the 2024-11-05 transport). */
  @IsOptional() @IsIn(['streamable_http', 'sse']) transport?: 'streamable_http' | 'sse';
  /** A program the gateway starts and speaks to over stdin/stdout; only ever from this file, never from a request. */
  @IsOptional() @IsString() @MaxLength(4096) command?: string;
  @IsOptional() @IsArray() @IsString({ each: true }) args?: string[];
  /** The child's environment besides the few variables it inherits (HOME, LOGNAME, PATH, SHELL, TERM, USER). Kept as written. */
  @IsOptional() @IsObject() env?: Record<string, string>;
  /** The child's working directory (relative to the config file); unset: the gateway's. */
  @IsOptional() @IsString() cwd?: string;
  /** Headers sent with every request to `url` (credentials: `authorization`, `x-api-key`), names in lower case. Kept as written. */
  @IsOptional() @IsObject() headers?: Record<string, string>;
  /** Headers whose values are read from the gateway's environment at start: `{authorization: GITHUB_MCP_AUTH}`. Kept as written. */
  @IsOptional() @IsObject() headersEnv?: Record<string, string>;
  /** Tools of the server that requests may see and call; unset: every tool it lists. */
  @IsOptional() @IsArray() @ArrayUnique() @IsString({ each: true }) allowedTools?: string[];
  /** One tool call's bound; unset: `mcp.call_timeout_ms`. */
  @IsOptional() @IsInt() @Min(100) @Max(3_600_000) timeoutMs?: number;
  /** Bytes of one tool result's text; unset: `mcp.max_output_bytes`. */
  @IsOptional() @IsInt() @Min(256) @Max(64 * 1024 * 1024) maxOutputBytes?: number;
  /** Calls in flight to this server from one gateway; unset: `mcp.max_concurrency`. */
  @IsOptional() @IsInt() @Min(1) @Max(1_024) maxConcurrency?: number;
  /**
   * MCP sessions to a `url` server held at once, one per set of request headers (credentials) in use;
   * the least recently used idle one closes first.
   */
  @IsInt() @Min(1) @Max(1_024) maxSessions = 16;
}

/**
 * MCP: servers whose tools cortex runs itself (OpenAI's `mcp` tool, Anthropic's `mcp_servers`). The
 * gateway holds one client per server, bounded in time, bytes and connections (docs/configuration.md).
 */
export class McpConfig {
  @IsArray() @ValidateNested({ each: true }) @Type(() => McpServerConfig) servers: McpServerConfig[] = [];
  /**
   * Requests may name a server by URL (`server_url`) instead of a registered label. Off: only
   * registered servers are reached. Such URLs are fetched by the public-address rule of image URLs.
   */
  @IsBoolean() allowRequestUrls = false;
  /** Request URLs may resolve to loopback, private, link-local or other non-public addresses. */
  @IsBoolean() allowPrivateUrls = false;
  /** How long one server's tool list is kept, per set of credentials; 0: asked every time. */
  @IsInt() @Min(0) @Max(86_400_000) listCacheMs = 60_000;
  /** One tool call's bound, from the request to the last byte of its answer. */
  @IsInt() @Min(100) @Max(3_600_000) callTimeoutMs = 60_000;
  /** Connecting (the spawn or the first HTTP request, and MCP's `initialize`), and listing tools. */
  @IsInt() @Min(100) @Max(600_000) connectTimeoutMs = 10_000;
  /** Bytes of one tool result's text; past it the text is cut, with a note saying so. */
  @IsInt() @Min(256) @Max(64 * 1024 * 1024) maxOutputBytes = 256 * 1024;
  /** Calls in flight to one server from one gateway; up to 64 more wait (within their timeout), past that a call is refused (429). */
  @IsInt() @Min(1) @Max(1_024) maxConcurrency = 8;
  /** MCP sessions to request URLs held at once, every URL and set of headers together; the least recently used idle one closes first. */
  @IsInt() @Min(1) @Max(4_096) maxRequestUrlSessions = 64;
  /** A session unused this long is closed (a stdio server's child too: it is started again when next needed). */
  @IsInt() @Min(1_000) @Max(86_400_000) sessionIdleMs = 300_000;
  /**
   * Model turns of one response that runs MCP tools: after this many, the last turn's answer (or its
   * calls, unrun) ends the response, so a model that calls tools forever is bounded.
   */
  @IsInt() @Min(1) @Max(64) maxRounds = 8;
  /** Bytes of tool output one response gives its model, every call together; a call past it fails, and the model is told. */
  @IsInt() @Min(1_024) @Max(256 * 1024 * 1024) maxResponseOutputBytes = 4 * 1024 * 1024;
}

/** After `drain_timeout_ms`, the time a service still has to cancel, free its models and close NATS. */
export const DRAIN_EXIT_MARGIN_MS = 5_000;

export class CortexConfig {
  @ValidateNested() @Type(() => GatewayConfig) gateway = new GatewayConfig();
  @ValidateNested() @Type(() => AuthConfig) auth = new AuthConfig();
  @ValidateNested() @Type(() => ResponsesConfig) responses = new ResponsesConfig();
  @ValidateNested() @Type(() => NatsConfig) nats = new NatsConfig();
  @ValidateNested() @Type(() => MetricsConfig) metrics = new MetricsConfig();
  @ValidateNested() @Type(() => BillingConfig) billing = new BillingConfig();
  @ValidateNested() @Type(() => EvictionConfig) eviction = new EvictionConfig();
  @ValidateNested() @Type(() => RouterConfig) router = new RouterConfig();
  @ValidateNested() @Type(() => ReplicationConfig) replication = new ReplicationConfig();
  @IsArray() @ValidateNested({ each: true }) @Type(() => ModelConfig) models: ModelConfig[] = [];
  @ValidateNested() @Type(() => WorkerConfig) worker = new WorkerConfig();
  /** MCP servers whose tools the gateway runs (see McpConfig). */
  @ValidateNested() @Type(() => McpConfig) mcp = new McpConfig();
  /**
   * host:port for HTTP probes (`/healthz`, `/readyz`) of the services that serve no HTTP: router,
   * translator and worker (Kubernetes sets it). Unset: none.
   */
  @IsOptional() @Matches(HOST_PORT, { message: 'must be host:port' }) probeListen?: string;
  /**
   * How long a stopping service (SIGTERM) lets in-flight work finish: a worker's generations, a
   * gateway's open streams. A worker cancels what still runs after it; every service exits at the
   * latest `DRAIN_EXIT_MARGIN_MS` later. Give the process at least that long before a SIGKILL
   * (Kubernetes: terminationGracePeriodSeconds, plus any preStop pause).
   */
  @IsInt() @Min(0) @Max(24 * 3_600_000) drainTimeoutMs = 10_000;
  @IsIn(['trace', 'debug', 'info', 'warn', 'error']) logLevel: 'trace' | 'debug' | 'info' | 'warn' | 'error' = 'info';
  /**
   * `json`: one pino JSON object per line (for log pipelines); `pretty`: one readable line per record
   * (pino-pretty). Unset: pretty when stdout is a terminal, json otherwise.
   */
  @IsOptional() @IsIn(['json', 'pretty']) logFormat?: 'json' | 'pretty';
}
