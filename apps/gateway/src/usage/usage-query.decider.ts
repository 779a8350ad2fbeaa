import { CortexError, toBillionth, type UsageRecord } from '@cortex/contracts';

export const USAGE_GROUPS = ['account', 'key', 'model', 'api', 'day'] as const;
export type UsageGroup = (typeof USAGE_GROUPS)[number];

/** `GET /admin/usage`: filters, a time range `[from, to)` in ms, and the columns rows are summed by. */
export interface UsageQuery {
  account: string | null;
  key: string | null;
  model: string | null;
  from: number;
  to: number;
  groupBy: UsageGroup[];
}

export interface UsageRow {
  account?: string | null;
  key_id?: string | null;
  model?: string;
  api?: string;
  /** UTC day, YYYY-MM-DD. */
  day?: string;
  requests: number;
  prompt_tokens: number;
  cached_prompt_tokens: number;
  completion_tokens: number;
  reasoning_tokens: number;
  total_tokens: number;
  /** What the priced requests' tokens cost, in `billing.currency` (each at its price when recorded). */
  cost: number;
  /** Requests whose model had no price when they were recorded: in the tokens, not in `cost`. */
  unpriced_requests: number;
}

const DEFAULT_GROUPS: UsageGroup[] = ['account', 'key', 'model'];

/**
 * Reads the query string of `GET /admin/usage`. `from`/`to` are RFC 3339 times or UTC days
 * (`2026-11-24`, a `to` day counts whole); `from` defaults to the epoch, `to` to now. `group_by` is a
 * comma list of account, key, model, api, day. A bad field is an `invalid_request` naming it.
 */
export function parseUsageQuery(query: Record<string, unknown>, now: number): UsageQuery {
  const text = (name: string): string | null => {
    const value = query[name];
    if (value === undefined || value === '') return null;
    if (typeof value !== 'string')
      throw new CortexError('invalid_request', `${name}: give it once, as text`, { param: name });
    return value;
  };
  const from = time(text('from'), 'from', false) ?? 0;
  const to = time(text('to'), 'to', true) ?? now + 1;
  if (to <= from)
    throw new CortexError(
      'invalid_request',
      `to: ${new Date(to).toISOString()} is not after from (${new Date(from).toISOString()})`,
      { param: 'to' },
    );
  const groups = text('group_by');
  let groupBy = DEFAULT_GROUPS;
  if (groups !== null) {
    const names = groups.split(',').map((g) => g.trim());
    const bad = names.find((g) => !(USAGE_GROUPS as readonly string[]).includes(g));
    if (bad !== undefined)
      throw new CortexError('invalid_request', `group_by: '${bad}' is not one of ${USAGE_GROUPS.join(', ')}`, {
        param: 'group_by',
      });
    groupBy = [...new Set(names as UsageGroup[])];
  }
  return { account: text('account'), key: text('key'), model: text('model'), from, to, groupBy };
}

function time(value: string | null, name: string, endOfDay: boolean): number | null {
  if (value === null) return null;
  const day = /^\d{4}-\d{2}-\d{2}$/.test(value);
  const ms = day ? Date.parse(`${value}T00:00:00Z`) : /^\d{4}-\d{2}-\d{2}T/.test(value) ? Date.parse(value) : NaN;
  if (Number.isNaN(ms))
    throw new CortexError(
      'invalid_request',
      `${name}: '${value}' is not a UTC day (2026-11-24) or an RFC 3339 time (2026-11-24T10:00:00Z)`,
      { param: name },
    );
  return day && endOfDay ? ms + 86_400_000 : ms;
}

/** Whether a record is in the query's range and matches its filters. */
export function matches(record: UsageRecord, query: UsageQuery): boolean {
  return (
    record.at >= query.from &&
    record.at < query.to &&
    (query.account === null || record.account === query.account) &&
    (query.key === null || record.key_id === query.key) &&
    (query.model === null || record.model === query.model)
  );
}

/** Sums matching records into one row per distinct value of the query's groups, sorted by those values. */
export function summarize(records: Iterable<UsageRecord>, query: UsageQuery): UsageRow[] {
  const summary = new UsageSummary(query);
  for (const record of records) summary.add(record);
  return summary.rows();
}

/**
 * The rows of a usage query, summed one record at a time as the records stream in: what it holds
 * grows with the rows (distinct groups), never with the records read.
 */
export class UsageSummary {
  private readonly byGroup = new Map<string, UsageRow>();

  constructor(private readonly query: UsageQuery) {}

  add(record: UsageRecord): void {
    const { query, byGroup: rows } = this;
    if (!matches(record, query)) return;
    const columns: Partial<UsageRow> = {};
    for (const group of query.groupBy) {
      if (group === 'account') columns.account = record.account;
      else if (group === 'key') columns.key_id = record.key_id;
      else if (group === 'model') columns.model = record.model;
      else if (group === 'api') columns.api = record.api;
      else columns.day = new Date(record.at).toISOString().slice(0, 10);
    }
    const id = JSON.stringify(columns);
    const row = rows.get(id) ?? {
      ...columns,
      requests: 0,
      prompt_tokens: 0,
      cached_prompt_tokens: 0,
      completion_tokens: 0,
      reasoning_tokens: 0,
      total_tokens: 0,
      cost: 0,
      unpriced_requests: 0,
    };
    row.requests++;
    row.prompt_tokens += record.prompt_tokens;
    row.cached_prompt_tokens += record.cached_prompt_tokens;
    row.completion_tokens += record.completion_tokens;
    row.reasoning_tokens += record.reasoning_tokens;
    row.total_tokens += record.prompt_tokens + record.completion_tokens;
    if (record.cost === undefined) row.unpriced_requests++;
    // Kept to the billionth, as each record's cost is: a sum of many does not drift into float noise.
    else row.cost = toBillionth(row.cost + record.cost);
    rows.set(id, row);
  }

  /** The rows so far, sorted by their groups' values. */
  rows(): UsageRow[] {
    return [...this.byGroup.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, row]) => row);
  }
}
