import { IsBoolean, IsIn, IsInt, IsObject, IsOptional, IsString, Matches, Max, MaxLength, Min } from 'class-validator';

/** The wire formats a remote worker speaks to an upstream: OpenAI Chat Completions, OpenAI Responses, Anthropic Messages. */
export const UPSTREAM_APIS = ['chat', 'responses', 'messages'] as const;
export type UpstreamApi = (typeof UPSTREAM_APIS)[number];

/**
 * An inference server or API a catalogue model is served from instead of a local GGUF (the catalogue's
 * `upstream`): a llama.cpp server, vLLM, Ollama, another cortex, OpenAI or Anthropic. A remote worker
 * (`worker.engine: remote`) serves it. The credential is named, never written: the environment variable
 * or file is read on the remote worker's host, so no key crosses the bus or reaches a log.
 */
export class UpstreamSpec {
  /** The API's base URL, up to and with its version (`https://api.openai.com/v1`, `http://gpu-box:8080/v1`). */
  @Matches(/^https?:\/\/[^\s/?#]+(\/[^\s?#]*)?$/, { message: 'must be an http(s) URL without a query' })
  url!: string;
  @IsIn(UPSTREAM_APIS) api!: UpstreamApi;
  /** The model's name at the upstream; absent: the catalogue id. */
  @IsOptional() @IsString() @MaxLength(256) model?: string;
  /** The environment variable holding the key (sent as `Authorization: Bearer`, or `x-api-key` to a `messages` upstream). */
  @IsOptional()
  @Matches(/^[A-Za-z_][A-Za-z0-9_]{0,127}$/, { message: 'must be the name of an environment variable' })
  apiKeyEnv?: string;
  /** A file holding the key (its first line), read at load: a mounted secret. */
  @IsOptional() @IsString() apiKeyFile?: string;
  /** Headers sent with every request, names in lower case (`openai-organization`, `anthropic-beta`). */
  @IsOptional() @IsObject() headers?: Record<string, string>;
  /** Until the upstream answers with its status and headers; then every event must follow within `idle_timeout_ms`. */
  @IsInt() @Min(100) @Max(600_000) connectTimeoutMs = 10_000;
  /** The longest silence between two events of a streamed answer (a prompt being evaluated counts as silence). */
  @IsInt() @Min(100) @Max(3_600_000) idleTimeoutMs = 60_000;
  /** The whole request, first byte to last. */
  @IsInt() @Min(1_000) @Max(86_400_000) timeoutMs = 600_000;
  /** Requests sent to the upstream at once from one remote worker: its capacity, as slots are a GPU worker's; the rest queue. */
  @IsInt() @Min(1) @Max(4_096) maxConcurrency = 8;
  /** The upstream model takes images (parts are sent as base64 data). */
  @IsBoolean() vision = false;
  /** The upstream model reasons: its reasoning is asked for (Anthropic `thinking`, Responses `reasoning.summary`) and passed on. */
  @IsBoolean() reasoning = false;
}

/** The device kind a remote worker's heartbeat reports: placement sends it upstream models, and only those. */
export const REMOTE_DEVICE = 'remote';

/** Header names an upstream's `headers` may not set: they are the transport's or the credential's. */
export const RESERVED_UPSTREAM_HEADERS: ReadonlySet<string> = new Set([
  'authorization',
  'x-api-key',
  'content-type',
  'content-length',
  'host',
  'connection',
  'transfer-encoding',
  'accept',
]);

/** Checks an upstream's `headers`: lower-case names (RFC 9110 tokens) with string values, none reserved; the first problem, or null. */
export function upstreamHeadersProblem(headers: Record<string, unknown> | undefined): string | null {
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (!/^[a-z0-9!#$%&'*+.^_`|~-]+$/.test(name)) return `${name}: header names are written in lower case`;
    if (RESERVED_UPSTREAM_HEADERS.has(name)) return `${name}: set by cortex itself and cannot be overridden`;
    if (typeof value !== 'string' || /[\r\n]/.test(value)) return `${name}: must be a string on one line`;
  }
  return null;
}

/**
 * What a model served by `upstream` can do, known from the catalogue before any worker loads it: calls
 * in every upstream format, reasoning and images as the catalogue says, no raw completions.
 */
export function upstreamCapabilities(upstream: Pick<UpstreamSpec, 'api' | 'reasoning' | 'vision'>): {
  tools: boolean;
  reasoning: boolean;
  vision: boolean;
  format: string;
  completions: boolean;
} {
  return {
    tools: true,
    reasoning: upstream.reasoning,
    vision: upstream.vision,
    format: `upstream ${upstream.api}`,
    completions: false,
  };
}

/** Where an upstream is, for people: its host (and port), never its path, credentials or headers. */
export function upstreamHost(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return '';
  }
}
