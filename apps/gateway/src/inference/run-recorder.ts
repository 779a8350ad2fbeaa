import type { Logger } from '@nestjs/common';
import { EventPublisher, type BusClient, type ModelCatalogue } from '@cortex/bus';
import { Subjects, type RequestFinishedEvent, type UsageOwner } from '@cortex/contracts';
import type { UsageRecorder } from '../usage/usage-recorder.js';

/**
 * Where a run's end is written: its request-finished event (stored in JetStream under the run id, so a
 * retry is stored once; metrics count from it), its usage record billed to its payer at the model's
 * price now, and its log line.
 */
export class RunRecorder {
  private readonly events: EventPublisher;

  constructor(
    bus: BusClient,
    private readonly usage: UsageRecorder,
    private readonly catalogue: Pick<ModelCatalogue, 'find'>,
    private readonly logger: Pick<Logger, 'log' | 'warn'>,
  ) {
    this.events = new EventPublisher(bus.nc);
  }

  record(event: RequestFinishedEvent, runId: string, payer: UsageOwner | null): void {
    this.usage.record(event, runId, payer, this.catalogue.find(event.model)?.cost);
    this.logger.log({
      msg: `${event.dialect} ${event.model}: ${event.status}${event.errorCode ? ` ${event.errorCode}` : ''} in ${event.durationMs} ms`,
      requestId: event.requestId,
      runId,
      worker: event.workerId,
      status: event.status,
      finishReason: event.finishReason,
      promptTokens: event.usage?.promptTokens,
      completionTokens: event.usage?.completionTokens,
      ttftMs: event.timings ? Math.round(event.timings.ttftMs) : undefined,
      coldStart: event.coldStart,
    });
    this.events
      .publish(Subjects.requestFinished, event, runId)
      .catch((error: Error) => this.logger.warn(`${event.requestId}: request-finished event lost: ${error.message}`));
  }
}
