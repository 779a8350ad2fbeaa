import { decodeCatalogueModelReply, Subjects, type CatalogueModelReply } from '@cortex/contracts';
import { listOption, stringOption, UsageError, type OptionValues } from './args.js';
import { print, withBus } from './bus.js';

/** Command line flags and the model fields they set, with how each value is read. */
const FIELDS: ReadonlyArray<{ flag: string; field: string; read: 'integer' | 'string' | 'boolean' | 'list' }> = [
  { flag: 'file', field: 'file', read: 'string' },
  { flag: 'context-size', field: 'context_size', read: 'integer' },
  { flag: 'slots', field: 'slots', read: 'integer' },
  { flag: 'kind', field: 'kind', read: 'string' },
  { flag: 'alias', field: 'aliases', read: 'list' },
  { flag: 'priority', field: 'priority', read: 'integer' },
  { flag: 'pinned', field: 'pinned', read: 'boolean' },
  { flag: 'draft', field: 'draft', read: 'string' },
  { flag: 'idle-ttl', field: 'idle_ttl', read: 'integer' },
  { flag: 'min-replicas', field: 'min_replicas', read: 'integer' },
  { flag: 'max-replicas', field: 'max_replicas', read: 'integer' },
  { flag: 'worker', field: 'workers', read: 'list' },
];

/**
 * `cortex models add|set|remove`: changes to the live catalogue, sent to a router over the bus (the
 * router checks the model as it checks one in the config file, and writes `cortex_catalogue`).
 */
export async function catalogueCommand(command: string, values: OptionValues, positionals: string[]): Promise<void> {
  const body = command === 'models remove' ? {} : modelFields(command, values, command === 'models set');
  if (command === 'models set' && Object.keys(body).length === 0)
    throw usage(command, 'name at least one field to change');
  const [id = '', source] = positionals;
  await withBus('models', async (bus) => {
    let reply: CatalogueModelReply;
    let sentence: string;
    if (command === 'models add') {
      reply = await bus.request(
        Subjects.routerCatalogueAdd,
        { model: { id, file: source, ...body } },
        { decode: decodeCatalogueModelReply },
      );
      sentence =
        `Added ${id} (${source}) to the catalogue: every router and gateway ` +
        'serves it from the next request; it loads on its first request' +
        `${reply.model.pinned === true ? ', or now, as it is pinned' : ''}.`;
    } else if (command === 'models set') {
      reply = await bus.request(
        Subjects.routerCatalogueSet,
        { id, fields: body },
        { decode: decodeCatalogueModelReply },
      );
      sentence =
        `Changed ${Object.keys(body).join(', ')} of ${id}. Copies loaded now keep ` +
        `their settings until they load again (\`cortex unload ${id}\` applies it now).`;
    } else {
      reply = await bus.request(
        Subjects.routerCatalogueRemove,
        { id },
        { timeoutMs: 120_000, decode: decodeCatalogueModelReply },
      );
      const where =
        reply.unloaded && reply.unloaded.length > 0
          ? ` It was drained and unloaded from ${reply.unloaded.join(', ')}.`
          : '';
      const seed = reply.origin === 'added' ? '' : ' It stays out even though the config file lists it.';
      sentence = `Removed ${id} from the catalogue: requests for it are refused with 404 on every gateway.${where}${seed}`;
    }
    print(values.json === true, reply, sentence);
  });
}

/** The fields the flags set; with `clearable`, "none" sends null (back to the default). */
function modelFields(command: string, values: OptionValues, clearable: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  for (const { flag, field, read } of FIELDS) {
    const raw = read === 'list' ? listOption(values, flag) : stringOption(values, flag);
    if (raw === undefined) continue;
    if (clearable && (raw === 'none' || (Array.isArray(raw) && raw.length === 1 && raw[0] === 'none'))) {
      body[field] = null;
      continue;
    }
    if (read === 'integer') {
      if (typeof raw !== 'string' || !/^\d+$/.test(raw))
        throw usage(command, `--${flag} must be a whole number${clearable ? ' or "none"' : ''} (got "${String(raw)}")`);
      body[field] = Number(raw);
    } else if (read === 'boolean') {
      if (raw !== 'true' && raw !== 'false')
        throw usage(command, `--${flag} must be true or false (got "${String(raw)}")`);
      body[field] = raw === 'true';
    } else body[field] = raw;
  }
  return body;
}

function usage(command: string, problem: string): UsageError {
  return new UsageError(`cortex ${command}: ${problem}; run "cortex ${command} --help" to see its usage`);
}
