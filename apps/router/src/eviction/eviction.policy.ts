import type { LoadedModel } from '@cortex/contracts';

export type EvictionStrategy = 'lru' | 'priority';

export interface ResidentModel extends LoadedModel {
  pinned: boolean;
  priority: number;
  /** Another worker holds enough ready copies of the model without this one (see the planner's `resident`). */
  spare?: boolean;
}

/**
 * Which models to unload from one worker so `needed` bytes fit, or null when no allowed choice frees
 * enough. Only ready, unpinned models may go; idle ones (nothing in flight or queued) before busy ones,
 * which the worker drains before it unloads them, and spare copies of a model before its last copies
 * (evicting a spare costs no request a load). `lru`: least recently used first. `priority`: only
 * models of priority ≤ the incoming one, lowest priority first, least recently used within a priority.
 */
export function chooseVictims(
  resident: readonly ResidentModel[],
  free: number,
  needed: number,
  strategy: EvictionStrategy,
  incomingPriority: number,
): ResidentModel[] | null {
  if (needed <= free) return [];
  const candidates = resident
    .filter((m) => m.state === 'ready' && !m.pinned)
    .filter((m) => strategy === 'lru' || m.priority <= incomingPriority)
    .sort(
      (a, b) =>
        busy(a) - busy(b) ||
        Number(b.spare ?? false) - Number(a.spare ?? false) ||
        (strategy === 'priority' ? a.priority - b.priority : 0) ||
        a.lastUsedAt - b.lastUsedAt,
    );
  const victims: ResidentModel[] = [];
  let available = free;
  for (const model of candidates) {
    if (available >= needed) break;
    victims.push(model);
    available += model.sizeBytes ?? 0;
  }
  return available >= needed ? victims : null;
}

const busy = (m: ResidentModel): number => (m.inFlight > 0 || m.queued > 0 ? 1 : 0);
