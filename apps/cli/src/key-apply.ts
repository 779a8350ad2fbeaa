import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { KeyStore } from '@cortex/bus';
import {
  accountPatch,
  CortexError,
  parseKeyFile,
  planKeyApply,
  type KeyApplyPlan,
  type KeyFile,
} from '@cortex/contracts';
import { UsageError, type OptionValues } from './args.js';
import { withBus } from './bus.js';
import { describeLimits } from './keys.js';

interface ApplyOptions {
  dryRun: boolean;
  prune: boolean;
  json: boolean;
}

/**
 * `cortex keys apply <file>`: the file is read and checked before NATS is asked anything, then its
 * accounts and keys are made so, account limits first (a key's account may be new). Keys the file
 * does not name are listed and left as they are, or revoked with `--prune`.
 */
export async function applyCommand(path: string, values: OptionValues): Promise<void> {
  const options: ApplyOptions = {
    dryRun: values['dry-run'] === true,
    prune: values.prune === true,
    json: values.json === true,
  };
  const content = readKeyFile(path);
  const file = parseKeyFile(content, process.env);
  // An empty list by accident (a pipe that failed) must not revoke every key: pruning needs the list written out.
  if (options.prune && !(content !== null && typeof content === 'object' && 'keys' in content)) {
    throw new UsageError(
      `cortex keys apply --prune: ${path} has no keys: list, so every stored key would be revoked; write keys: [] to mean that`,
    );
  }
  await withBus('keys', async (_bus, { nc }) => applyKeyFile(await KeyStore.open(nc), file, options, Date.now()));
}

/** A key file's content (`-`: standard input): YAML, or JSON, which YAML reads too; an unreadable file says which and why. */
function readKeyFile(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path === '-' ? 0 : path, 'utf8');
  } catch (error) {
    throw new CortexError('invalid_request', `cannot read the key file ${path}: ${(error as Error).message}`);
  }
  try {
    return parseYaml(text);
  } catch (error) {
    throw new CortexError('invalid_request', `${path} is not YAML or JSON: ${(error as Error).message.split('\n')[0]}`);
  }
}

/**
 * Makes the changes one by one. A person sees each as it is made; a script gets the JSON answer at the
 * end, or, when a change fails, what was done up to it (new secrets included) with the error, so a
 * secret made before the failure is never lost.
 */
async function applyKeyFile(store: KeyStore, file: KeyFile, options: ApplyOptions, now: number): Promise<void> {
  const { dryRun, prune, json } = options;
  const plan = planKeyApply(file, await store.list(), await store.listAccounts());
  const created: Record<string, { id: string; secret: string | null }> = {};
  const say = (line: string): void => {
    if (!json) console.log(line);
  };
  try {
    for (const account of plan.accounts) {
      if (account.action === 'set' && !dryRun) await store.putAccount(account.name, accountPatch(account.limits), now);
      say(
        account.action === 'unchanged'
          ? `Account ${account.name}: unchanged.`
          : `Account ${account.name}: ${dryRun ? 'would set' : 'set'} ${describeLimits(account.limits)}.`,
      );
    }
    for (const change of plan.keys) {
      if (change.action === 'unchanged') {
        say(`Key ${change.id} "${change.name}": unchanged.`);
      } else if (change.action === 'update') {
        if (!dryRun) await store.declare(change.id, change.declared, now);
        say(`Key ${change.id} "${change.name}": ${dryRun ? 'would change' : 'changed'} ${change.fields.join(', ')}.`);
      } else if (dryRun) {
        say(
          `Key "${change.name}": would be created` +
            `${change.declared.secret ? ' with its declared secret' : ', with a new secret printed once'}.`,
        );
      } else if (change.declared.secret) {
        const key = await store.createDeclared(change.declared.input, change.declared.secret, now);
        created[change.name] = { id: key.id, secret: null };
        say(`Key ${key.id} "${change.name}": created, opened by its declared secret.`);
      } else {
        const { key, secret } = await store.create(change.declared.input, now);
        created[change.name] = { id: key.id, secret };
        say(`Key ${key.id} "${change.name}": created. Its secret, shown this once (store it now):\n\n  ${secret}\n`);
      }
    }
    for (const key of plan.notInFile) {
      if (!prune) {
        say(`Key ${key.id} "${key.name}": not in the file, left as it is (--prune revokes it).`);
        continue;
      }
      if (!dryRun) await store.revoke(key.id, now);
      say(`Key ${key.id} "${key.name}": not in the file, ${dryRun ? 'would be revoked' : 'revoked'}.`);
    }
  } catch (error) {
    if (json)
      console.log(JSON.stringify({ ...applyAnswer(plan, created, options), error: (error as Error).message }, null, 2));
    else console.log('Stopped: the changes above were made; the rest were not.');
    throw error;
  }
  if (json) console.log(JSON.stringify(applyAnswer(plan, created, options), null, 2));
  else if (dryRun) say('Nothing was written (--dry-run).');
  else if (
    plan.keys.some((k) => k.action !== 'unchanged') ||
    plan.accounts.some((a) => a.action === 'set') ||
    (prune && plan.notInFile.length > 0)
  ) {
    say('Every gateway applies the changes within a second.');
  }
}

function applyAnswer(
  plan: KeyApplyPlan,
  created: Record<string, { id: string; secret: string | null }>,
  options: ApplyOptions,
): Record<string, unknown> {
  return {
    dry_run: options.dryRun,
    accounts: plan.accounts.map(({ action, name, limits }) => ({ action, name, limits })),
    keys: plan.keys.map((change) =>
      change.action === 'create'
        ? {
            action: 'create',
            name: change.name,
            id: created[change.name]?.id ?? null,
            ...(created[change.name]?.secret && { secret: created[change.name]?.secret }),
          }
        : {
            action: change.action,
            name: change.name,
            id: change.id,
            ...(change.action === 'update' && { fields: change.fields }),
          },
    ),
    not_in_file: plan.notInFile.map((key) => ({ ...key, action: options.prune ? 'revoke' : 'keep' })),
  };
}
