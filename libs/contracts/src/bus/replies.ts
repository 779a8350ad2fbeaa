import {
  array,
  boolean,
  defined,
  fail,
  integer,
  number,
  object,
  oneOf,
  optionalBoolean,
  optionalInteger,
  optionalNumber,
  optionalObject,
  optionalString,
  string,
} from '../fields.js';
import type { ErrorBody } from '../errors/error-codes.js';
import { modelKindOf } from '../retrieval/retrieval.messages.js';
import { UPSTREAM_APIS } from '../fleet/upstream.js';
import {
  decodeCanonicalRequest,
  decodeSamplingDefaults,
  type CanonicalRequest,
} from '../generate/canonical-request.js';
import type { DecodedRequest, GenerateAccepted, TokenCount } from '../generate/generate.messages.js';
import {
  MODEL_STATES,
  UNLOAD_REASONS,
  type CatalogueEntry,
  type CatalogueModelReply,
  type EstimateReply,
  type FleetView,
  type ModelFacts,
  type PullReply,
  type PullResult,
  type LoadResult,
  type PendingRun,
  type Placement,
  type UnloadResult,
} from '../fleet/fleet.messages.js';
import type { Reply, ServicePing } from './bus.contract.js';

/**
 * Readers for bus replies. Each checks what its callers read and returns the value typed; a field
 * that is wrong throws `invalid_request` naming it, which `BusClient.request` reports as the
 * replying service's fault.
 */
export type Decoder<T> = (value: unknown) => T;

/** The reply envelope: `{ ok: true, data }` or `{ ok: false, error: { code, message } }`. */
export function decodeReply(value: unknown): Reply<unknown> {
  const reply = object(value, 'reply');
  if (boolean(reply.ok, 'ok')) return { ok: true, data: reply.data };
  const error = object(reply.error, 'error');
  if (!isErrorBody(error)) fail('error', 'must have a string code and message');
  return { ok: false, error };
}

/** The translator's decoded request; its dialect `state` is read by the dialect's own reader (see DecodedRequest). */
export function decodeDecodedRequest(value: unknown): DecodedRequest {
  const decoded = object(value, 'decoded');
  return {
    request: decodeCanonicalRequest(decoded.request, 'request'),
    ...(decoded.state === undefined ? {} : { state: decoded.state }),
  };
}

/** The translator's compaction plan: the summarisation request (null when nothing is older than the latest turn) and the items kept. */
export function decodeCompactionPlan(value: unknown): {
  request: CanonicalRequest | null;
  recent: Record<string, unknown>[];
} {
  const plan = object(value, 'plan');
  return {
    request: plan.request === null ? null : decodeCanonicalRequest(plan.request, 'request'),
    recent: array(plan.recent, 'recent').map((item, i) => object(item, `recent[${i}]`)),
  };
}

/** The translator's view of a response that may run in the background (`responses.background`). */
export function decodeBackgroundState(value: unknown): {
  resource: { id: string; status: string } & Record<string, unknown>;
  background?: { id: string; createdAt: number; record: { echo: Record<string, unknown> } & Record<string, unknown> };
  run: { runId: string; workerId: string } | null;
} {
  const state = object(value, 'state');
  const resource = object(state.resource, 'resource');
  string(resource.id, 'resource.id');
  string(resource.status, 'resource.status');
  if (state.background !== undefined) {
    const background = object(state.background, 'background');
    string(background.id, 'background.id');
    integer(background.createdAt, 'background.createdAt', 0);
    object(object(background.record, 'background.record').echo, 'background.record.echo');
  }
  if (state.run !== null) {
    const run = object(state.run, 'run');
    string(run.runId, 'run.runId');
    string(run.workerId, 'run.workerId');
  }
  return state as ReturnType<typeof decodeBackgroundState>;
}

export function decodeTokenCount(value: unknown): TokenCount {
  const count = object(value, 'tokenCount');
  return { model: string(count.model, 'model'), inputTokens: integer(count.inputTokens, 'inputTokens', 0) };
}

export function decodePlacement(value: unknown): Placement {
  const placement = object(value, 'placement');
  const reuseMs = optionalInteger(placement.reuseMs, 'reuseMs', 1);
  return {
    model: string(placement.model, 'model'),
    workerId: string(placement.workerId, 'workerId'),
    coldStart: boolean(placement.coldStart, 'coldStart'),
    ...(reuseMs !== undefined && { reuseMs }),
  };
}

export function decodeGenerateAccepted(value: unknown): GenerateAccepted {
  const accepted = object(value, 'accepted');
  return {
    runId: string(accepted.runId, 'runId'),
    workerId: string(accepted.workerId, 'workerId'),
    queuePosition: integer(accepted.queuePosition, 'queuePosition', 0),
  };
}

export function decodeLoadResult(value: unknown): LoadResult {
  const result = object(value, 'loadResult');
  return {
    model: string(result.model, 'model'),
    workerId: string(result.workerId, 'workerId'),
    loadMs: number(result.loadMs, 'loadMs', 0),
    sizeBytes: number(result.sizeBytes, 'sizeBytes', 0),
  };
}

export function decodeUnloadResult(value: unknown): UnloadResult {
  const result = object(value, 'unloadResult');
  return {
    model: string(result.model, 'model'),
    workerId: string(result.workerId, 'workerId'),
    cancelled: integer(result.cancelled, 'cancelled', 0),
    reason: oneOf(result.reason, 'reason', UNLOAD_REASONS),
  };
}

/** A worker's estimate of a model's memory, and what the GGUF header says of it. */
export function decodeEstimate(value: unknown): EstimateReply {
  const estimate = object(value, 'estimate');
  const facts = decodeFacts(estimate.facts, 'facts');
  return { bytes: number(estimate.bytes, 'bytes', 0), ...(facts && { facts }) };
}

export function decodePullResult(value: unknown): PullResult {
  const result = object(value, 'pullResult');
  return {
    model: string(result.model, 'model'),
    workerId: string(result.workerId, 'workerId'),
    path: string(result.path, 'path'),
    bytes: number(result.bytes, 'bytes', 0),
  };
}

/** The router's combined pull reply. */
export function decodePullReply(value: unknown): PullReply {
  const reply = object(value, 'pullReply');
  return { model: string(reply.model, 'model'), pulled: array(reply.pulled, 'pulled').map(decodePullResult) };
}

export function decodeFacts(value: unknown, at: string): ModelFacts | undefined {
  const facts = optionalObject(value, at);
  if (!facts) return undefined;
  const max = Number.MAX_SAFE_INTEGER;
  return defined({
    architecture: optionalString(facts.architecture, `${at}.architecture`),
    parameters: optionalNumber(facts.parameters, `${at}.parameters`, 0, max),
    quantization: optionalString(facts.quantization, `${at}.quantization`),
    fileBytes: optionalNumber(facts.fileBytes, `${at}.fileBytes`, 0, max),
    trainedContextLength: optionalInteger(facts.trainedContextLength, `${at}.trainedContextLength`, 0),
    tools: optionalBoolean(facts.tools, `${at}.tools`),
    reasoning: optionalBoolean(facts.reasoning, `${at}.reasoning`),
    sampling: decodeSamplingDefaults(facts.sampling, `${at}.sampling`),
    chatFormat: decodeChatFormat(facts.chatFormat, `${at}.chatFormat`),
  });
}

function decodeChatFormat(value: unknown, at: string): ModelFacts['chatFormat'] {
  const format = optionalObject(value, at);
  if (!format) return undefined;
  return {
    id: string(format.id, `${at}.id`),
    tools: boolean(format.tools, `${at}.tools`),
    reasoning: boolean(format.reasoning, `${at}.reasoning`),
  };
}

/** The translator's answer to `responses.store`. */
export function decodeStored(value: unknown): { stored: boolean } {
  return { stored: boolean(object(value, 'stored').stored, 'stored') };
}

export function decodeCatalogue(value: unknown): CatalogueEntry[] {
  return array(value, 'catalogue').map((entry, i) => catalogueEntry(entry, `catalogue[${i}]`));
}

/** A worker's answer to `cancel_load`: whether a load of the model was running there and is now stopped. */
export interface CancelLoadReply {
  model: string;
  workerId: string;
  cancelled: boolean;
}

export function decodeCancelLoadReply(value: unknown): CancelLoadReply {
  const answer = object(value, 'answer');
  return {
    model: string(answer.model, 'model'),
    workerId: string(answer.workerId, 'workerId'),
    cancelled: boolean(answer.cancelled, 'cancelled'),
  };
}

/** A router's answer to `catalogue.add|set|remove`: the model as written in YAML and where it comes from. */
export function decodeCatalogueModelReply(value: unknown): CatalogueModelReply {
  const reply = object(value, 'reply');
  const model = object(reply.model, 'model');
  string(model.id, 'model.id');
  // A model has a file or an upstream.
  if (model.upstream === undefined) string(model.file, 'model.file');
  else object(model.upstream, 'model.upstream');
  return {
    model,
    origin: oneOf(reply.origin, 'origin', ['config', 'added', 'changed'] as const),
    ...(reply.unloaded !== undefined && {
      unloaded: array(reply.unloaded, 'unloaded').map((id, i) => string(id, `unloaded[${i}]`)),
    }),
  };
}

export function decodeFleetView(value: unknown): FleetView {
  const fleet = object(value, 'fleet');
  string(fleet.routerId, 'routerId');
  array(fleet.workers, 'workers').forEach((worker, i) => {
    const at = `workers[${i}]`;
    const w = object(worker, at);
    string(w.workerId, `${at}.workerId`);
    string(w.host, `${at}.host`);
    integer(w.pid, `${at}.pid`);
    boolean(w.up, `${at}.up`);
    boolean(w.draining, `${at}.draining`);
    number(w.lastSeenMs, `${at}.lastSeenMs`);
    if (w.forgetInMs !== undefined) number(w.forgetInMs, `${at}.forgetInMs`);
    const device = object(w.device, `${at}.device`);
    string(device.name, `${at}.device.name`);
    number(device.totalBytes, `${at}.device.totalBytes`);
    const memory = object(w.memory, `${at}.memory`);
    for (const key of ['budgetBytes', 'usedBytes', 'freeBytes']) number(memory[key], `${at}.memory.${key}`);
    array(w.models, `${at}.models`).forEach((model, j) => {
      const m = object(model, `${at}.models[${j}]`);
      string(m.id, `${at}.models[${j}].id`);
      oneOf(m.state, `${at}.models[${j}].state`, MODEL_STATES);
    });
  });
  decodeCatalogue(fleet.catalogue);
  return fleet as unknown as FleetView;
}

export function decodeServicePing(value: unknown): ServicePing {
  const ping = object(value, 'ping');
  return {
    service: string(ping.service, 'service'),
    id: string(ping.id, 'id'),
    host: string(ping.host, 'host'),
    pid: integer(ping.pid, 'pid'),
    uptimeS: number(ping.uptimeS, 'uptimeS', 0),
    ready: boolean(ping.ready, 'ready'),
    ...(ping.detail == null ? {} : { detail: optionalString(ping.detail, 'detail') }),
  };
}

function catalogueEntry(value: unknown, at: string): CatalogueEntry {
  const entry = object(value, at);
  string(entry.id, `${at}.id`);
  string(entry.ownedBy, `${at}.ownedBy`);
  number(entry.created, `${at}.created`);
  integer(entry.contextSize, `${at}.contextSize`, 0);
  boolean(entry.pinned, `${at}.pinned`);
  number(entry.priority, `${at}.priority`);
  boolean(entry.loaded, `${at}.loaded`);
  array(entry.locations, `${at}.locations`).forEach((location, i) => {
    const l = object(location, `${at}.locations[${i}]`);
    string(l.workerId, `${at}.locations[${i}].workerId`);
    oneOf(l.state, `${at}.locations[${i}].state`, MODEL_STATES);
    integer(l.inFlight, `${at}.locations[${i}].inFlight`, 0);
    integer(l.queued, `${at}.locations[${i}].queued`, 0);
    if (l.unreachable !== undefined) {
      const u = object(l.unreachable, `${at}.locations[${i}].unreachable`);
      number(u.since, `${at}.locations[${i}].unreachable.since`);
      string(u.error, `${at}.locations[${i}].unreachable.error`);
    }
  });
  if (entry.replicas !== undefined) {
    const r = object(entry.replicas, `${at}.replicas`);
    for (const key of ['ready', 'min', 'max']) integer(r[key], `${at}.replicas.${key}`, 0);
  }
  modelKindOf(entry.kind, `${at}.kind`);
  if (entry.capabilities !== null) {
    const caps = object(entry.capabilities, `${at}.capabilities`);
    for (const key of ['tools', 'reasoning', 'vision']) boolean(caps[key], `${at}.capabilities.${key}`);
  }
  decodeFacts(entry.facts, `${at}.facts`);
  optionalNumber(entry.memoryBytes, `${at}.memoryBytes`, 0, Number.MAX_SAFE_INTEGER);
  optionalString(entry.factsError, `${at}.factsError`);
  decodeSamplingDefaults(entry.sampling, `${at}.sampling`);
  if (entry.upstream !== undefined) {
    const upstream = object(entry.upstream, `${at}.upstream`);
    oneOf(upstream.api, `${at}.upstream.api`, UPSTREAM_APIS);
    string(upstream.host, `${at}.upstream.host`);
  }
  if (entry.fallback !== undefined)
    array(entry.fallback, `${at}.fallback`).forEach((id, i) => string(id, `${at}.fallback[${i}]`));
  return entry as unknown as CatalogueEntry;
}

function isErrorBody(value: Record<string, unknown>): value is ErrorBody & Record<string, unknown> {
  return typeof value.code === 'string' && typeof value.message === 'string';
}

/** One gateway's answer to `llm.gateway.v1.runs`. */
export function decodeGatewayRuns(value: unknown): PendingRun[] {
  const answer = object(value, 'answer');
  return array(answer.runs, 'runs').map((item, i) => {
    const at = `runs[${i}]`;
    const run = object(item, at);
    const workerId = run.workerId === null ? null : string(run.workerId, `${at}.workerId`);
    const keyId = optionalString(run.keyId, `${at}.keyId`);
    const account = optionalString(run.account, `${at}.account`);
    const tool = optionalString(run.tool, `${at}.tool`);
    return {
      requestId: string(run.requestId, `${at}.requestId`),
      runId: string(run.runId, `${at}.runId`),
      model: string(run.model, `${at}.model`),
      workerId,
      since: number(run.since, `${at}.since`),
      ...(keyId !== undefined && { keyId }),
      ...(account !== undefined && { account }),
      ...(tool !== undefined && { tool }),
    };
  });
}
