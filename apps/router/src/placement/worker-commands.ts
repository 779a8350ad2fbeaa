import { Inject, Injectable } from '@nestjs/common';
import { BusClient } from '@cortex/bus';
import { CONFIG, type CortexConfig, type ModelConfig } from '@cortex/config';
import { CortexError, Subjects, workerSubject, type Decoder } from '@cortex/contracts';
import { FleetRegistry } from '../fleet/fleet.registry.js';

/**
 * Commands to one worker that end when the worker is dead, not when the placement times out, and
 * the test that tells a dead worker from a stalled one: a killed process's subjects have no
 * responders at once, while a worker whose event loop is busy (setting up a model) keeps them.
 */
@Injectable()
export class WorkerCommands {
  constructor(
    @Inject(CONFIG) private readonly config: CortexConfig,
    private readonly fleet: FleetRegistry,
    private readonly bus: BusClient,
  ) {}

  /**
   * A command to one worker, answered by the worker or ended as soon as the worker is known dead,
   * whichever comes first: a worker killed mid-load never replies, and waiting out the placement
   * timeout would hold every request that shares the load. Ends as `service_unavailable`, which
   * callers treat as "try another worker".
   */
  async ask<T>(
    workerId: string,
    subject: string,
    payload: unknown,
    decode: Decoder<T>,
    timeoutMs = this.config.gateway.placementTimeoutMs,
  ): Promise<T> {
    const target = workerSubject(subject, workerId);
    let answered = false;
    const gone = this.untilGone(workerId, target, payload, () => answered);
    // The race below handles a rejection that wins; one that comes later has no one left to hear it.
    gone.catch(() => undefined);
    try {
      return await Promise.race([this.bus.request(target, payload, { decode, timeoutMs }), gone]);
    } finally {
      answered = true;
    }
  }

  /**
   * Rejects once the worker is dead: after its heartbeats stop, the same command is sent again (every
   * worker command is safe to repeat: a second load joins the first) and "no responders" is proof —
   * a killed process's connection is gone at once. A timeout is not: a worker whose event loop stalls
   * while it sets up a model misses heartbeats too, and is still loading.
   */
  private async untilGone(workerId: string, target: string, payload: unknown, answered: () => boolean): Promise<never> {
    while (!answered()) {
      await this.fleet.changed(PROBE_MS);
      // Only silence is a sign of death: a draining worker still heartbeats and still answers.
      if (answered() || this.fleet.heartbeating(workerId)) continue;
      const unreachable = await this.bus.unreachable(target, payload, PROBE_MS);
      if (unreachable && !answered())
        throw new CortexError('service_unavailable', `worker ${workerId} went down before it answered ${target}`);
    }
    return new Promise<never>(() => undefined);
  }

  /**
   * Whether a worker that stopped heartbeating lately still holds its subscriptions (it answers, or
   * only times out): stalled, not dead. A killed worker's subject has no responders at once.
   */
  async anyStalled(model: ModelConfig, exclude: readonly string[]): Promise<boolean> {
    const silent = this.fleet.silent(STALL_GRACE_MS).filter((id) => !exclude.includes(id));
    const probes = silent.map((workerId) =>
      this.bus
        .unreachable(
          workerSubject(Subjects.workerEstimate, workerId),
          { source: model.file ?? model.upstream?.url, contextSize: model.contextSize, slots: model.slots },
          PROBE_MS,
        )
        .then((gone) => !gone),
    );
    return (await Promise.all(probes)).some(Boolean);
  }
}

/** How often a command's worker is looked at for signs of death while the command waits (and how long a probe waits). */
const PROBE_MS = 1_000;
/** A worker silent for longer than this is not waited for, stalled or not. */
export const STALL_GRACE_MS = 30_000;
