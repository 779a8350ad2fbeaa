import type { BusClient, StreamReader } from '@cortex/bus';
import type { CortexConfig, ModelConfig } from '@cortex/config';
import type { ResponsesAssembly } from '@cortex/wire';
import type { RequestFinishedEvent, UsageOwner } from '@cortex/contracts';
import type { Logger } from '@nestjs/common';
import type { PendingRuns } from '../console/pending-runs.js';
import type { PlacementClient } from './placement-client.js';

/** What a run needs from the gateway's inference service (InferenceService). */
export interface RunServices {
  readonly bus: BusClient;
  readonly config: CortexConfig;
  readonly logger: Pick<Logger, 'log' | 'warn'>;
  readonly placer: PlacementClient;
  /** Assembles Responses bodies that continue no stored state here, without the translator (see decodeForRun). */
  readonly responses: ResponsesAssembly;
  /** A stream now read from `workerId`: told to the worker in watch messages, ended if the worker goes down. */
  watch(runId: string, workerId: string, reader: StreamReader): void;
  unwatch(runId: string): void;
  recordFinished(event: RequestFinishedEvent, runId: string, payer: UsageOwner | null): void;
  /** The console's rows of requests that wait for a placement or run (see PendingRuns). */
  readonly pending: Pick<PendingRuns, 'placing' | 'placed' | 'done'>;
  /** The catalogue entry a model name (id or alias) has in the live catalogue now. */
  modelConfig(name: string): ModelConfig | undefined;
}
