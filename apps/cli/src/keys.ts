import { KeyStore } from '@cortex/bus';
import {
  keyView,
  parseAccountPut,
  parseKeyCreate,
  parseKeyUpdate,
  parseRotate,
  type KeyView,
  type Limits,
} from '@cortex/contracts';
import { listOption, stringOption, UsageError, type OptionValues } from './args.js';
import { print, withBus } from './bus.js';
import { applyCommand } from './key-apply.js';

const LIMIT_FLAGS = {
  rpm: 'requests_per_minute',
  tpm: 'tokens_per_minute',
  concurrency: 'concurrent_requests',
} as const;

/**
 * `cortex keys …` and `cortex accounts …`: the stored keys, straight in the `cortex_keys` bucket (the
 * same store and the same checks as the gateway's admin API). Sentences for people, `--json` for scripts.
 */
export async function keysCommand(command: string, values: OptionValues, positionals: string[]): Promise<void> {
  const json = values.json === true;
  if (command === 'keys apply') return applyCommand(positionals[0] ?? '', values);
  await withBus('keys', async (_bus, { nc, config }) => {
    const store = await KeyStore.open(nc);
    const currency = config.billing.currency;
    const now = Date.now();
    const id = positionals[0] ?? '';
    switch (command) {
      case 'keys create': {
        const { key, secret } = await store.create(parseKeyCreate(keyBody(command, values, false), now), now);
        const view = keyView(key, now);
        print(
          json,
          { ...view, secret },
          `Created key ${key.id} "${key.name}" in account ${key.account}: ${describeKey(view, currency)}.\n` +
            `Its secret, shown this once (store it now):\n\n  ${secret}\n`,
        );
        return;
      }
      case 'keys list': {
        const account = stringOption(values, 'account');
        const views = (await store.list())
          .filter((k) => account === undefined || k.account === account)
          .map((k) => keyView(k, now));
        print(
          json,
          { object: 'list', data: views },
          views.length === 0
            ? `No stored keys${account ? ` in account ${account}` : ''} (\`cortex keys create --name <name>\` makes one).`
            : keyTable(views, currency),
        );
        return;
      }
      case 'keys show': {
        const view = keyView(await store.get(id), now);
        print(json, view, showKey(view, currency));
        return;
      }
      case 'keys update': {
        const key = await store.update(id, parseKeyUpdate(keyBody(command, values, true), now), now);
        const view = keyView(key, now);
        print(
          json,
          view,
          `Updated key ${key.id} "${key.name}" (account ${key.account}): ${describeKey(view, currency)}. ` +
            'Every gateway applies it within a second.',
        );
        return;
      }
      case 'keys rotate': {
        const grace = stringOption(values, 'grace');
        if (grace !== undefined && !/^\d+$/.test(grace))
          throw new UsageError(
            `cortex keys rotate: --grace must be a whole number of seconds (got "${grace}"); ` +
              'run "cortex keys rotate --help" to see its usage',
          );
        const { grace_s } = parseRotate(grace === undefined ? {} : { grace_s: Number(grace) });
        const { key, secret } = await store.rotate(id, grace_s, now);
        const view = keyView(key, now);
        const old = view.previous_secret_valid_until
          ? `the old secret keeps working until ${view.previous_secret_valid_until}`
          : 'the old secret no longer works';
        print(
          json,
          { ...view, secret },
          `Rotated key ${key.id} "${key.name}": ${old}. The new secret, shown this once (store it now):\n\n  ${secret}\n`,
        );
        return;
      }
      case 'keys revoke': {
        const key = await store.revoke(id, now);
        const when =
          Date.parse(key.revoked_at ?? '') < now - 1_000
            ? `was already revoked at ${key.revoked_at}`
            : 'is revoked: every gateway refuses it within a second';
        print(json, keyView(key, now), `Key ${key.id} "${key.name}" ${when}.`);
        return;
      }
      case 'accounts list': {
        const accounts = await store.listAccounts();
        print(
          json,
          { object: 'list', data: accounts },
          accounts.length === 0
            ? 'No account has limits (`cortex accounts set <name> --rpm <n>` sets some).'
            : accounts.map((a) => `${a.name}\t${describeLimits(a.limits, currency)}`).join('\n'),
        );
        return;
      }
      case 'accounts set': {
        const { name, limits } = parseAccountPut(id, { limits: limitsBody(command, values, true) });
        const account = await store.putAccount(name, limits, now);
        print(
          json,
          account,
          `Account ${account.name}: ${describeLimits(account.limits, currency)}. Its keys get the tighter of their own limits and these.`,
        );
        return;
      }
      default:
        throw new UsageError(`"${command}" has no handler`);
    }
  });
}

/** The admin API body for the command line's options; the same parser then checks it. */
function keyBody(command: string, values: OptionValues, update: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  const name = stringOption(values, 'name');
  if (name !== undefined) body.name = name;
  else if (!update)
    throw new UsageError(`cortex ${command} needs --name <name>; run "cortex ${command} --help" to see its usage`);
  const account = stringOption(values, 'account');
  if (account !== undefined) body.account = account;
  const limits = limitsBody(command, values, update);
  if (Object.keys(limits).length > 0) body.limits = limits;
  const models = listOption(values, 'model');
  if (models !== undefined) body.models = update && models.length === 1 && models[0] === 'none' ? null : models;
  const servers = listOption(values, 'mcp-server');
  if (servers !== undefined)
    body.mcp_servers = update && servers.length === 1 && servers[0] === 'none' ? null : servers;
  const expires = stringOption(values, 'expires');
  if (expires !== undefined) body.expires_at = update && expires === 'none' ? null : expires;
  const tier = stringOption(values, 'tier');
  if (tier !== undefined) body.tier = /^\d+$/.test(tier) ? Number(tier) : tier;
  return body;
}

function limitsBody(command: string, values: OptionValues, clearable: boolean): Record<string, unknown> {
  const limits: Record<string, unknown> = {};
  const number = (flag: string): number | null | undefined => {
    const raw = stringOption(values, flag);
    if (raw === undefined) return undefined;
    if (clearable && raw === 'none') return null;
    if (!/^\d+$/.test(raw) || Number(raw) < 1) {
      throw new UsageError(
        `cortex ${command}: --${flag} must be a whole number of at least 1${clearable ? ', or "none" to remove it' : ''} ` +
          `(got "${raw}"); run "cortex ${command} --help" to see its usage`,
      );
    }
    return Number(raw);
  };
  for (const [flag, field] of Object.entries(LIMIT_FLAGS)) {
    const value = number(flag);
    if (value !== undefined) limits[field] = value;
  }
  const budget = number('budget');
  const window = stringOption(values, 'budget-window');
  if (window !== undefined && budget === undefined)
    throw new UsageError(
      `cortex ${command}: --budget-window goes with --budget <tokens>; run "cortex ${command} --help" to see its usage`,
    );
  if (budget === null) limits.token_budget = null;
  else if (budget !== undefined) limits.token_budget = { tokens: budget, window: window ?? 'balance' };
  const money = stringOption(values, 'money-budget');
  const moneyWindow = stringOption(values, 'money-window');
  if (moneyWindow !== undefined && money === undefined)
    throw new UsageError(
      `cortex ${command}: --money-window goes with --money-budget <amount>; run "cortex ${command} --help" to see its usage`,
    );
  if (clearable && money === 'none') limits.money_budget = null;
  else if (money !== undefined) {
    // The amount itself (above 0, at most MAX_MONEY_BUDGET) is checked where the admin API checks it.
    if (!/^\d+(\.\d+)?$/.test(money))
      throw new UsageError(
        `cortex ${command}: --money-budget must be an amount such as 50 or 0.25` +
          `${clearable ? ', or "none" to remove it' : ''} (got "${money}"); run "cortex ${command} --help" to see its usage`,
      );
    limits.money_budget = { amount: Number(money), window: moneyWindow ?? 'balance' };
  }
  return limits;
}

/** A key's or account's limits in a few words; `currency` is `billing.currency`, which a money budget is in. */
export function describeLimits(limits: Limits, currency = ''): string {
  const parts: string[] = [];
  if (limits.requests_per_minute !== undefined) parts.push(`${limits.requests_per_minute} requests/min`);
  if (limits.tokens_per_minute !== undefined) parts.push(`${limits.tokens_per_minute} tokens/min`);
  if (limits.concurrent_requests !== undefined) parts.push(`${limits.concurrent_requests} at once`);
  if (limits.token_budget)
    parts.push(
      `${limits.token_budget.tokens} tokens ${limits.token_budget.window === 'balance' ? 'in all' : `a ${limits.token_budget.window}`}`,
    );
  if (limits.money_budget)
    parts.push(
      `${limits.money_budget.amount}${currency ? ` ${currency}` : ''} ` +
        `${limits.money_budget.window === 'balance' ? 'in all' : `a ${limits.money_budget.window}`}`,
    );
  return parts.length === 0 ? 'no limits' : parts.join(', ');
}

function describeKey(view: KeyView, currency: string): string {
  const models = view.models === null ? 'every model' : `models ${view.models.join(', ')}`;
  const servers = view.mcp_servers == null ? '' : `; MCP servers ${view.mcp_servers.join(', ')}`;
  const expiry = view.expires_at ? `, expires ${view.expires_at}` : '';
  return `${describeLimits(view.limits, currency)}; ${models}${servers}; tier ${view.tier}${expiry}`;
}

function keyTable(views: KeyView[], currency: string): string {
  const rows = [
    ['id', 'name', 'account', 'state', 'prefix', 'limits', 'models', 'expires'],
    ...views.map((v) => [
      v.id,
      v.name,
      v.account,
      v.state,
      v.prefix,
      describeLimits(v.limits, currency),
      v.models?.join(',') ?? 'all',
      v.expires_at ?? '-',
    ]),
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows
    .map((r) =>
      r
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

function showKey(view: KeyView, currency: string): string {
  const lines = [
    `Key ${view.id} "${view.name}", account ${view.account}: ${view.state}${view.revoked_at ? ` (revoked at ${view.revoked_at})` : ''}.`,
    `  secret:  ${view.prefix}` +
      `${view.previous_secret_valid_until ? ` (the previous one works until ${view.previous_secret_valid_until})` : ''}`,
    `  limits:  ${describeLimits(view.limits, currency)}`,
    `  models:  ${view.models?.join(', ') ?? 'every model'}`,
    `  mcp:     ${view.mcp_servers?.join(', ') ?? 'every server'}`,
    `  tier:    ${view.tier}`,
    `  expires: ${view.expires_at ?? 'never'}`,
    `  created: ${view.created_at}, updated ${view.updated_at}`,
  ];
  return lines.join('\n');
}
