import { CortexError } from '../errors/error-codes.js';
import { MCP_SERVER_LABEL } from '../mcp/mcp-servers.js';
import {
  BUDGET_WINDOWS,
  DEFAULT_TIER,
  LIMIT_FIELDS,
  MAX_MONEY_BUDGET,
  type BudgetWindow,
  type KeyRecord,
  type Limits,
} from './key.record.js';

/** What `POST /admin/keys` (and `cortex keys create`) accepts: a key record's settable fields. */
export type KeyCreateInput = Pick<
  KeyRecord,
  'name' | 'account' | 'limits' | 'models' | 'mcp_servers' | 'expires_at' | 'tier'
>;

/** What `PATCH /admin/keys/{id}` accepts: any of the fields; in `limits` a field set to null is removed. */
export interface KeyUpdateInput {
  name?: string;
  account?: string;
  limits?: LimitsPatch;
  models?: string[] | null;
  mcp_servers?: string[] | null;
  expires_at?: string | null;
  tier?: number;
}

/** The fields a key's create and update bodies take. */
const KEY_FIELDS = ['name', 'account', 'limits', 'models', 'mcp_servers', 'expires_at', 'tier'] as const;

export type LimitsPatch = { [F in keyof Limits]?: Limits[F] | null };

export const ACCOUNT_NAME = /^[A-Za-z0-9_-]{1,64}$/;
export const DEFAULT_ACCOUNT = 'default';
/** A rotation's grace period may be at most 30 days. */
export const MAX_GRACE_S = 30 * 24 * 3600;

/** A 400 naming `param`. */
export const bad = (param: string, message: string): CortexError =>
  new CortexError('invalid_request', `${param}: ${message}`, { param });

export function objectOf(value: unknown, param: string): Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw bad(param, 'must be an object');
  return value as Record<string, unknown>;
}

function onlyFields(body: Record<string, unknown>, fields: readonly string[], prefix = ''): void {
  for (const field of Object.keys(body)) {
    if (!fields.includes(field)) throw bad(`${prefix}${field}`, `is not a known field (known: ${fields.join(', ')})`);
  }
}

function positiveInteger(value: unknown, param: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1)
    throw bad(param, `must be a whole number of at least 1 (got ${JSON.stringify(value)})`);
  return value;
}

function nameOf(value: unknown): string {
  if (typeof value !== 'string' || value.trim() === '' || value.length > 200)
    throw bad('name', 'must be a non-empty string of at most 200 characters');
  return value.trim();
}

function accountOf(value: unknown): string {
  if (typeof value !== 'string' || !ACCOUNT_NAME.test(value))
    throw bad('account', `must be 1-64 letters, digits, "-" or "_" (got ${JSON.stringify(value)})`);
  return value;
}

function modelsOf(value: unknown): string[] | null {
  if (value === null) return null;
  if (!Array.isArray(value) || value.length === 0)
    throw bad('models', 'must be a non-empty array of model ids, or null for every model');
  return value.map((m, i) => {
    if (typeof m !== 'string' || m.trim() === '') throw bad(`models[${i}]`, 'must be a model id');
    return m.trim();
  });
}

/** MCP server labels, as `mcp.servers[].label` writes them (the gateway checks they are registered when a request names one). */
function mcpServersOf(value: unknown): string[] | null {
  if (value === null) return null;
  if (!Array.isArray(value) || value.length === 0)
    throw bad('mcp_servers', 'must be a non-empty array of MCP server labels, or null for every server');
  return value.map((label, i) => {
    if (typeof label !== 'string' || !MCP_SERVER_LABEL.test(label.trim()))
      throw bad(
        `mcp_servers[${i}]`,
        `must be an MCP server's label: 1-64 letters, digits, _ or - (got ${JSON.stringify(label)})`,
      );
    return label.trim();
  });
}

function expiryOf(value: unknown, now: number): string | null {
  if (value === null) return null;
  const at = typeof value === 'string' && /^\d{4}-\d{2}-\d{2}/.test(value) ? Date.parse(value) : Number.NaN;
  if (Number.isNaN(at))
    throw bad(
      'expires_at',
      `must be an ISO 8601 time such as 2027-01-31T00:00:00Z, or null (got ${JSON.stringify(value)})`,
    );
  if (at <= now) throw bad('expires_at', `is in the past (${new Date(at).toISOString()})`);
  return new Date(at).toISOString();
}

function tierOf(value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 9)
    throw bad('tier', `must be a whole number from 1 (lowest) to 9 (got ${JSON.stringify(value)})`);
  return value;
}

function windowOf(value: unknown, param: string): BudgetWindow {
  const window = value ?? 'balance';
  if (!BUDGET_WINDOWS.includes(window as BudgetWindow))
    throw bad(param, `must be one of ${BUDGET_WINDOWS.join(', ')} (got ${JSON.stringify(window)})`);
  return window as BudgetWindow;
}

function budgetOf(value: unknown, param: string): { tokens: number; window: BudgetWindow } {
  const body = objectOf(value, param);
  onlyFields(body, ['tokens', 'window'], `${param}.`);
  return { tokens: positiveInteger(body.tokens, `${param}.tokens`), window: windowOf(body.window, `${param}.window`) };
}

/** An amount of `billing.currency`: above 0 (at least one billionth, the unit spend is counted in) and at most MAX_MONEY_BUDGET. */
function moneyBudgetOf(value: unknown, param: string): { amount: number; window: BudgetWindow } {
  const body = objectOf(value, param);
  onlyFields(body, ['amount', 'window'], `${param}.`);
  const amount = body.amount;
  if (typeof amount !== 'number' || !Number.isFinite(amount) || amount < 1e-9 || amount > MAX_MONEY_BUDGET)
    throw bad(
      `${param}.amount`,
      `must be an amount of billing.currency above 0 and at most ${MAX_MONEY_BUDGET}, such as 50 or 0.25 (got ${JSON.stringify(amount)})`,
    );
  return { amount, window: windowOf(body.window, `${param}.window`) };
}

function limitsPatchOf(value: unknown, param = 'limits'): LimitsPatch {
  const body = objectOf(value, param);
  onlyFields(body, LIMIT_FIELDS, `${param}.`);
  const patch: LimitsPatch = {};
  for (const field of ['requests_per_minute', 'tokens_per_minute', 'concurrent_requests'] as const) {
    if (body[field] === null) patch[field] = null;
    else if (body[field] !== undefined) patch[field] = positiveInteger(body[field], `${param}.${field}`);
  }
  if (body.token_budget === null) patch.token_budget = null;
  else if (body.token_budget !== undefined) patch.token_budget = budgetOf(body.token_budget, `${param}.token_budget`);
  if (body.money_budget === null) patch.money_budget = null;
  else if (body.money_budget !== undefined)
    patch.money_budget = moneyBudgetOf(body.money_budget, `${param}.money_budget`);
  return patch;
}

/** `limits` with `patch` applied: a field set to null is removed. */
export function applyLimitsPatch(limits: Limits, patch: LimitsPatch): Limits {
  const out: Record<string, unknown> = { ...limits };
  for (const [field, value] of Object.entries(patch)) {
    if (value === null) delete out[field];
    else if (value !== undefined) out[field] = value;
  }
  return out as Limits;
}

export function parseKeyCreate(value: unknown, now: number): KeyCreateInput {
  const body = objectOf(value, 'body');
  onlyFields(body, KEY_FIELDS);
  if (body.name === undefined) throw bad('name', 'is required: a name that says whose key it is');
  return {
    name: nameOf(body.name),
    account: body.account === undefined ? DEFAULT_ACCOUNT : accountOf(body.account),
    limits: body.limits === undefined ? {} : applyLimitsPatch({}, limitsPatchOf(body.limits)),
    models: body.models === undefined ? null : modelsOf(body.models),
    mcp_servers: body.mcp_servers === undefined ? null : mcpServersOf(body.mcp_servers),
    expires_at: body.expires_at === undefined ? null : expiryOf(body.expires_at, now),
    tier: body.tier === undefined ? DEFAULT_TIER : tierOf(body.tier),
  };
}

export function parseKeyUpdate(value: unknown, now: number): KeyUpdateInput {
  const body = objectOf(value, 'body');
  onlyFields(body, KEY_FIELDS);
  if (Object.keys(body).length === 0) throw bad('body', `names nothing to change (${KEY_FIELDS.join(', ')})`);
  const input: KeyUpdateInput = {};
  if (body.name !== undefined) input.name = nameOf(body.name);
  if (body.account !== undefined) input.account = accountOf(body.account);
  if (body.limits !== undefined) input.limits = limitsPatchOf(body.limits);
  if (body.models !== undefined) input.models = modelsOf(body.models);
  if (body.mcp_servers !== undefined) input.mcp_servers = mcpServersOf(body.mcp_servers);
  if (body.expires_at !== undefined) input.expires_at = expiryOf(body.expires_at, now);
  if (body.tier !== undefined) input.tier = tierOf(body.tier);
  return input;
}

/** `POST /admin/keys/{id}/rotate`: `{"grace_s": N}`, how long the old secret keeps working (default 0). */
export function parseRotate(value: unknown): { grace_s: number } {
  const body = value === undefined || value === null ? {} : objectOf(value, 'body');
  onlyFields(body, ['grace_s']);
  const grace = body.grace_s ?? 0;
  if (typeof grace !== 'number' || !Number.isSafeInteger(grace) || grace < 0 || grace > MAX_GRACE_S) {
    throw bad('grace_s', `must be a whole number of seconds from 0 to ${MAX_GRACE_S} (got ${JSON.stringify(grace)})`);
  }
  return { grace_s: grace };
}

/** `PUT /admin/accounts/{name}`: `{"limits": {...}}`; a limit set to null is removed. */
export function parseAccountPut(name: string, value: unknown): { name: string; limits: LimitsPatch } {
  const body = objectOf(value, 'body');
  onlyFields(body, ['limits']);
  return { name: accountOf(name), limits: body.limits === undefined ? {} : limitsPatchOf(body.limits) };
}
