import { Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { Subscription } from '@nats-io/transport-node';
import { BusClient } from '@cortex/bus';
import { decodeMessage, Heartbeat, Subjects, type RequestFinishedEvent } from '@cortex/contracts';
import { CortexMetrics } from './request.metrics.js';

@Injectable()
export class MetricsService implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('metrics');
  readonly metrics = new CortexMetrics();
  private readonly subs: Subscription[] = [];
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly bus: BusClient) {}

  onModuleInit(): void {
    const onBad = (error: Error): void => this.logger.warn(`dropped an event: ${error.message}`);
    this.subs.push(
      this.bus.subscribe(Subjects.requestFinished, (data) => this.metrics.recordRequest(data as RequestFinishedEvent), onBad),
      this.bus.subscribe(Subjects.heartbeatAll, (data) => this.metrics.recordHeartbeat(decodeMessage(Heartbeat, data, 'heartbeat')), onBad),
    );
    this.timer = setInterval(() => this.metrics.expireWorkers(), 1_000);
  }

  onModuleDestroy(): void {
    if (this.timer) clearInterval(this.timer);
    for (const sub of this.subs) sub.unsubscribe();
  }
}
