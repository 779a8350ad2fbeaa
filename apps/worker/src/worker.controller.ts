import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import type { BusContext } from '@cortex/bus';
import { performance } from 'node:perf_hooks';
import {
  CancelCommand,
  CancelLoadCommand,
  decodeEmbedCommand,
  decodeGenerateCommand,
  decodeRankCommand,
  decodeMessage,
  decodeTokenizeCommand,
  EstimateCommand,
  LoadCommand,
  PullCommand,
  Subjects,
  UnloadCommand,
  WatchMessage,
  type GenerateAccepted,
} from '@cortex/contracts';
import { WorkerService } from './worker.service.js';

/** Bus handlers addressed to this worker (`llm.worker.v1.<id>.*`); every payload is validated first. */
@Controller()
export class WorkerController {
  constructor(private readonly worker: WorkerService) {}

  @MessagePattern(Subjects.workerGenerate)
  generate(@Payload() payload: unknown, @Ctx() context: BusContext) {
    const receivedAt = performance.now();
    const accepted = this.worker.generate(decodeGenerateCommand(payload), receivedAt, context.requestId);
    // Acknowledged on the next turn of the event loop: by then the run has reached its first step that
    // waits (the model evaluating its prompt, or a free slot), so encoding and writing the reply overlap
    // the evaluation instead of delaying its start.
    return new Promise<GenerateAccepted>((resolve) => setImmediate(() => resolve(accepted)));
  }

  @MessagePattern(Subjects.workerTokenize)
  tokenize(payload: unknown) {
    return this.worker.tokenize(decodeTokenizeCommand(payload).request);
  }

  @MessagePattern(Subjects.workerEmbed)
  embed(@Payload() payload: unknown, @Ctx() context: BusContext) {
    return this.worker.embed(decodeEmbedCommand(payload), context.requestId);
  }

  @MessagePattern(Subjects.workerRank)
  rank(@Payload() payload: unknown, @Ctx() context: BusContext) {
    return this.worker.rank(decodeRankCommand(payload), context.requestId);
  }

  @MessagePattern(Subjects.workerCancel)
  cancel(payload: unknown) {
    const command = decodeMessage(CancelCommand, payload);
    return { cancelled: this.worker.cancel(command.runId, command.reason, true) };
  }

  @MessagePattern(Subjects.workerLoad)
  load(payload: unknown) {
    return this.worker.load(decodeMessage(LoadCommand, payload));
  }

  @MessagePattern(Subjects.workerCancelLoad)
  cancelLoad(payload: unknown) {
    const command = decodeMessage(CancelLoadCommand, payload);
    return this.worker.cancelLoad(command.model, command.reason ?? 'cancelled by an admin');
  }

  @MessagePattern(Subjects.workerEstimate)
  estimate(payload: unknown) {
    return this.worker.estimate(decodeMessage(EstimateCommand, payload));
  }

  @MessagePattern(Subjects.workerPull)
  pull(payload: unknown) {
    return this.worker.pull(decodeMessage(PullCommand, payload));
  }

  @MessagePattern(Subjects.workerUnload)
  unload(payload: unknown) {
    const command = decodeMessage(UnloadCommand, payload);
    return this.worker.unload(command.model, command.drain ?? true, command.reason ?? 'admin');
  }

  @EventPattern(Subjects.workerWatch)
  watch(payload: unknown) {
    this.worker.watch(decodeMessage(WatchMessage, payload).runIds);
  }
}
