import { decodeCatalogue, Subjects, type CatalogueEntry, type Placement } from '@cortex/contracts';
import { print, withBus } from './bus.js';
import { formatModels } from './status.js';

export type AdminCommand = 'models' | 'load' | 'unload' | 'pin' | 'unpin';

/** Fleet operations, sent to a router over the bus. People get a sentence; `--json` gives the router's answer as it is. */
export async function admin(
  command: AdminCommand,
  args: { model?: string; worker?: string; json: boolean },
): Promise<void> {
  const { model, worker, json } = args;
  await withBus('admin', async (bus) => {
    const catalogue = (): Promise<CatalogueEntry[]> =>
      bus.request(Subjects.routerModels, {}, { decode: decodeCatalogue });
    if (command === 'models') {
      const models = await catalogue();
      print(json, models, () => formatModels(models));
      return;
    }
    // The command line parser has made sure a model is named.
    if (!model) throw new Error(`cortex ${command} needs <model>`);
    if (command === 'pin' || command === 'unpin') {
      const reply = await bus.request(Subjects.routerPin, { model, pinned: command === 'pin' });
      print(json, reply, () => pinSentence(reply as { model: string; pinned: boolean }));
      return;
    }
    // Whether it is pinned decides what follows an unload, so ask before.
    const pinned = command === 'unload' && !json && (await catalogue()).find((m) => m.id === model)?.pinned === true;
    const subject = command === 'load' ? Subjects.routerLoad : Subjects.routerUnload;
    const reply = await bus.request(subject, { model, ...(worker && { worker }) });
    print(json, reply, () =>
      command === 'load'
        ? loadSentence(reply as Placement)
        : unloadSentence(reply as { model: string; unloaded: string[] }, pinned),
    );
  });
}

function loadSentence(placement: Placement): string {
  return placement.coldStart
    ? `Loaded ${placement.model} on worker ${placement.workerId}.`
    : `${placement.model} is already loaded on worker ${placement.workerId}.`;
}

function unloadSentence(reply: { model: string; unloaded: string[] }, pinned: boolean): string {
  const done = `Unloaded ${reply.model} from ${reply.unloaded.length === 1 ? 'worker' : 'workers'} ${reply.unloaded.join(', ')}.`;
  if (!pinned) return done;
  return (
    `${done} ${reply.model} is pinned, so the router loads it again on a worker ` +
    `within seconds; run \`cortex unpin ${reply.model}\` first to keep it unloaded.`
  );
}

function pinSentence(reply: { model: string; pinned: boolean }): string {
  return reply.pinned
    ? `Pinned ${reply.model}: it is loaded now if no worker has it, and is never evicted or unloaded when idle.`
    : `Unpinned ${reply.model}: it stays loaded for now, and may be evicted to make room or unloaded when idle.`;
}
