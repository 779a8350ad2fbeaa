import { Injectable, Logger, type OnApplicationBootstrap, type OnModuleDestroy } from '@nestjs/common';
import type { ModelConfig } from '@cortex/config';
import { CortexError, decodeEstimate, mib, Subjects, type StoredFacts } from '@cortex/contracts';
import { FleetRegistry } from '../fleet/fleet.registry.js';
import { LoadLease } from '../placement/load-lease.js';
import { WorkerCommands } from '../placement/worker-commands.js';
import { CatalogueService } from './catalogue.service.js';
import { afterRead, factsStep, retryDelayMs, FACTS_MAX_FAILURES, type ReadOutcome } from './facts.decider.js';

/** How often every model's facts are looked at (a worker came up, a failed read's wait ran out). */
const SWEEP_MS = 1_000;

/**
 * Reads each catalogue model's GGUF header into the catalogue bucket when the model enters the
 * catalogue — at start for the config file's models, and when a model is added or its source changes
 * — so every router and gateway knows its size, architecture and memory before anyone asks for it.
 * A worker reads the header (the estimate command: range requests for a remote file, nothing
 * downloaded). Routers share the work through a `facts` lease per model in the leases bucket: one
 * reads, the others find the record written. A read that fails is recorded with its error and tried
 * again with a growing wait, at most FACTS_MAX_FAILURES times in a row; nothing here holds up start.
 */
@Injectable()
export class FactsService implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger('catalogue');
  /** Models this router is reading now. */
  private readonly reading = new Set<string>();
  private timer: NodeJS.Timeout | null = null;
  private stopWatch: (() => void) | null = null;

  constructor(
    private readonly catalogue: CatalogueService,
    private readonly fleet: FleetRegistry,
    private readonly lease: LoadLease,
    private readonly workers: WorkerCommands,
  ) {}

  onApplicationBootstrap(): void {
    this.stopWatch = this.catalogue.store.onChange(() => this.sweep());
    this.timer = setInterval(() => this.sweep(), SWEEP_MS);
    this.timer.unref();
    this.sweep();
  }

  onModuleDestroy(): void {
    this.stopWatch?.();
    if (this.timer) clearInterval(this.timer);
  }

  /** One look at every model: a read is started for each that needs one and is not being read here. */
  sweep(): void {
    const now = Date.now();
    const workersUp = this.fleet.available().length;
    for (const model of this.catalogue.models()) {
      if (this.reading.has(model.id) || model.upstream) continue;
      const stored = this.catalogue.store.facts.get(model.id);
      const step = factsStep({ source: this.catalogue.factsSourceOf(model), stored, now, workersUp });
      if (step.kind !== 'read') continue;
      this.reading.add(model.id);
      this.read(model)
        .catch((error: Error) => this.logger.warn(`could not read the header of ${model.id}: ${error.message}`))
        .finally(() => this.reading.delete(model.id));
    }
  }

  private async read(model: ModelConfig): Promise<void> {
    // Another router reads it now; its record arrives through the watch.
    if (!(await this.lease.acquire(model.id, 'facts'))) return;
    try {
      const source = this.catalogue.source(model);
      const key = this.catalogue.factsSourceOf(model);
      // The watch may lag a record another router wrote just before this one took the lease.
      const current = await this.catalogue.store.facts.fresh(model.id);
      const step = factsStep({ source: key, stored: current, now: Date.now(), workersUp: 1 });
      if (step.kind !== 'read') return;
      const outcome = await this.ask(model, source);
      let written: StoredFacts | undefined;
      await this.catalogue.store.facts.write(model.id, (now) => (written = afterRead(now, key, outcome, Date.now())));
      if (written) this.report(model, written);
    } finally {
      await this.lease
        .release(model.id, 'facts')
        .catch((error: Error) => this.logger.warn(`facts lease for ${model.id}: ${error.message}`));
    }
  }

  /** The estimate from the first worker that answers; a worker gone before it answered passes to the next. */
  private async ask(model: ModelConfig, source: ReturnType<CatalogueService['source']>): Promise<ReadOutcome> {
    let gone = 'no worker is up';
    for (const { workerId } of this.fleet.available()) {
      try {
        const { bytes, facts } = await this.workers.ask(
          workerId,
          Subjects.workerEstimate,
          { model: model.id, ...source },
          decodeEstimate,
        );
        return { bytes, ...(facts && { facts }), workerId };
      } catch (error) {
        if (error instanceof CortexError && error.code === 'service_unavailable') {
          gone = error.message;
          continue;
        }
        return { error: (error as Error).message };
      }
    }
    return { error: gone };
  }

  private report(model: ModelConfig, stored: StoredFacts): void {
    if (stored.error === undefined) {
      const { architecture, fileBytes } = stored.facts ?? {};
      const what = [architecture, fileBytes !== undefined && `a ${mib(fileBytes)} file`].filter(Boolean).join(', ');
      const where = `${model.id} on ${stored.workerId ?? 'a worker'}${what ? ` (${what})` : ''}`;
      this.logger.log(`read the header of ${where}: a copy needs about ${mib(stored.bytes ?? 0)}`);
      return;
    }
    const next =
      stored.failures >= FACTS_MAX_FAILURES
        ? 'no more tries until its file, context or slots change; its first request reads it again'
        : `trying again in ${Math.round(retryDelayMs(stored.failures) / 1000)} s`;
    this.logger.warn(`could not read the header of ${model.id} (try ${stored.failures}): ${stored.error}; ${next}`);
  }
}
