import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { NatsConnection } from '@nats-io/transport-node';
import { BusClient, StreamReader } from '@cortex/bus';
import {
  decodeLoadResult,
  streamSubject,
  Subjects,
  workerSubject,
  type CanonicalRequest,
  type GenerateCommand,
  type LoadResult,
} from '@cortex/contracts';
import type { DecodeRun } from './raw-baseline.js';

/** Drives one worker directly over the bus, as the gateway does, and times its stream at the bus. */
export class WorkerClient {
  private readonly bus: BusClient;

  constructor(
    private readonly nc: NatsConnection,
    private readonly workerId: string,
  ) {
    this.bus = new BusClient(nc, 60_000);
  }

  load(model: string, source: string, contextSize: number, slots: number): Promise<LoadResult> {
    return this.bus.request(
      workerSubject(Subjects.workerLoad, this.workerId),
      { model, source, contextSize, slots },
      { decode: decodeLoadResult },
    );
  }

  /** One request; times from the first token event to the finish event as received on the bus. */
  async generate(
    model: string,
    prompt: string,
    maxTokens: number,
    extra: Partial<CanonicalRequest> = {},
  ): Promise<
    DecodeRun & {
      wallMs: number;
      reportedTokensPerSecond: number;
      promptMs: number;
      promptTokens: number;
      cachedTokens: number;
    }
  > {
    const runId = randomBytes(8).toString('hex');
    const subject = streamSubject(this.workerId, runId);
    const reader = new StreamReader(this.nc, subject, { idleTimeoutMs: 30_000 });
    const request: CanonicalRequest = {
      model,
      messages: [{ role: 'user', content: prompt }],
      sampling: { temperature: 0, maxTokens },
      stream: true,
      ...extra,
    };
    const command: GenerateCommand = { runId, streamSubject: subject, request };
    const started = performance.now();
    await this.bus.request(workerSubject(Subjects.workerGenerate, this.workerId), command);
    reader.arm();
    let first = 0;
    let tokens = 0;
    let reported = 0;
    let ttft = 0;
    let promptMs = 0;
    let promptTokens = 0;
    let cachedTokens = 0;
    for await (const event of reader) {
      if ((event.type === 'text' || event.type === 'reasoning') && first === 0) first = performance.now();
      if (event.type === 'error') throw new Error(event.error.message);
      if (event.type === 'finish') {
        tokens = event.usage.completionTokens;
        reported = event.timings.decodeTokensPerSecond;
        ttft = event.timings.ttftMs;
        promptMs = event.timings.promptMs;
        promptTokens = event.usage.promptTokens;
        cachedTokens = event.usage.cachedPromptTokens;
      }
    }
    const end = performance.now();
    return {
      tokens,
      tokensPerSecond: tokens > 1 ? ((tokens - 1) * 1000) / (end - first) : 0,
      wallMs: end - started,
      reportedTokensPerSecond: reported,
      ttftMs: ttft,
      promptMs,
      promptTokens,
      cachedTokens,
    };
  }
}
