import type { BusClient } from '@cortex/bus';
import type { CortexConfig, ModelConfig } from '@cortex/config';
import type { ResponsesAssembly } from '@cortex/wire';
import type { Logger } from '@nestjs/common';
import type { PendingRuns } from '../console/pending-runs.js';
import type { PlacementClient } from './placement-client.js';
import type { RunRecorder } from './run-recorder.js';
import type { StreamWatch } from './stream-watch.js';

/**
 * The collaborators every run of this gateway works with, made once (see InferenceService) and handed
 * to each run: none of them is the service that creates runs.
 */
export interface RunServices {
  readonly bus: BusClient;
  readonly config: CortexConfig;
  readonly logger: Pick<Logger, 'log' | 'warn'>;
  readonly placer: PlacementClient;
  /** Assembles Responses bodies that continue no stored state here, without the translator (see decodeForRun). */
  readonly responses: ResponsesAssembly;
  /** The streams being read, told to their workers and ended when a worker goes down. */
  readonly streams: Pick<StreamWatch, 'watch' | 'unwatch'>;
  /** Writes a run's end: request-finished event, usage record, log line. */
  readonly recorder: Pick<RunRecorder, 'record'>;
  /** The console's rows of requests that wait for a placement or run (see PendingRuns). */
  readonly pending: Pick<PendingRuns, 'placing' | 'placed' | 'done'>;
  /** The live catalogue: the entry a model name (id or alias) has now. */
  readonly catalogue: { find(name: string): ModelConfig | undefined };
}
