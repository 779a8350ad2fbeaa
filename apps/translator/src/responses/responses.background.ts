import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type ConsumerMessages } from '@nats-io/jetstream';
import { BusClient, ensureBackgroundStream, LIVE_PULL, readBackgroundEvents } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { BACKGROUND_STREAM, CortexError, livenessWindowMs, Subjects } from '@cortex/contracts';
import {
  BackgroundReplay,
  isTerminalStatus,
  replayOptions,
  type ResponseResource,
  type BackgroundSource,
  type ResponsesState,
  type StoredResponse,
} from '@cortex/wire';
import { notFound, ResponsesService } from './responses.service.js';
import { ResponsesStore } from './responses.store.js';

/** The translators' shared durable consumer of background events: each terminal event reaches one replica. */
const FINALISER = 'translator-background';

/** A background response as it stands, and the run that holds it (for cancel). */
export interface BackgroundState {
  resource: ResponseResource;
  /** Present for background responses: what renders their events (the gateway streams them). */
  background?: BackgroundSource;
  run: { runId: string; workerId: string } | null;
}

/**
 * Background responses (`background: true`) seen from the store. The run lives on a worker and its
 * events in the `CORTEX_BACKGROUND` stream; the stored resource says `queued` until the run's terminal
 * event is stored, then the finished resource is stored like any response. Whichever translator
 * replica reads a terminal event first (a shared durable consumer) stores it; a read by id also
 * rebuilds the resource from the events, so any replica answers with the current state, and ends a run
 * whose worker fell silent (`worker_lost`) with no gateway moving it, or that no gateway ever placed.
 */
@Injectable()
export class BackgroundResponses implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('responses');
  private messages: ConsumerMessages | null = null;

  constructor(
    private readonly bus: BusClient,
    private readonly store: ResponsesStore,
    private readonly responses: ResponsesService,
    @Inject(CONFIG) private readonly config: CortexConfig,
  ) {}

  async onModuleInit(): Promise<void> {
    await ensureBackgroundStream(
      this.bus.nc,
      this.config.responses.backgroundEventsTtlS,
      this.config.responses.backgroundMaxBytes,
    );
    const jsm = await jetstreamManager(this.bus.nc);
    await jsm.consumers
      .add(BACKGROUND_STREAM, {
        durable_name: FINALISER,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.New,
        filter_subject: Subjects.backgroundAll,
      })
      .catch((error: Error) => this.logger.warn(`consumer ${FINALISER} kept as it is: ${error.message}`));
    this.messages = await (await jetstream(this.bus.nc).consumers.get(BACKGROUND_STREAM, FINALISER)).consume(LIVE_PULL);
    void this.finalise(this.messages);
  }

  async onModuleDestroy(): Promise<void> {
    await this.messages?.close();
  }

  /** Stores each background response whose run has ended. */
  private async finalise(messages: ConsumerMessages): Promise<void> {
    for await (const message of messages) {
      try {
        const { type } = message.json<{ type?: string }>();
        if (type === 'finish' || type === 'error') await this.state(message.subject.split('.')[3] ?? '');
      } catch (error) {
        this.logger.warn(`background event ${message.seq} on ${message.subject}: ${(error as Error).message}`);
      }
      message.ack();
    }
  }

  /** The response by id: a background one rebuilt from its events while it runs (and stored once it has ended). */
  async state(id: string): Promise<BackgroundState> {
    const read = await this.store.read(id);
    if (!read) throw notFound(id);
    const { stored, revision } = read;
    const record = stored.background;
    if (!record) return { resource: stored.resource, run: null };
    const background = { id, createdAt: stored.resource.created_at, record };
    if (isTerminalStatus(stored.resource.status)) return { resource: stored.resource, background, run: null };
    const replay = new BackgroundReplay(
      replayOptions(background, this.config.responses.reasoningEvents, this.responses.seal),
    );
    for await (const event of readBackgroundEvents(this.bus.nc, id, {
      follow: false,
      idleMs: this.config.gateway.streamIdleTimeoutMs,
    }))
      replay.add(event);
    const failure = replay.ended ? null : this.stalled(replay, stored.resource.created_at);
    if (failure) replay.fail(failure.toBody());
    // Stored over the revision read: of two replicas finishing it at once, one writes (and appends to its conversation).
    if (replay.ended) await this.responses.save(stateOf(stored, record), replay.resource(), revision);
    return { resource: replay.resource(), background, run: replay.run };
  }

  /**
   * A run that will never end by itself: its worker stopped sending (keep-alives come every second
   * while it lives), or no run started within the time a gateway may take to place it (that gateway died).
   */
  private stalled(replay: BackgroundReplay, createdAt: number): CortexError | null {
    const { streamIdleTimeoutMs, placementTimeoutMs, workerWaitMs } = this.config.gateway;
    if (replay.run) {
      // The gateway following the run notices a lost worker within the idle timeout and, while it moves
      // the run to another worker, sends keep-alives in its place: a liveness window more covers the gap.
      const silent = Date.now() - replay.lastAt;
      return silent > streamIdleTimeoutMs + livenessWindowMs(this.config.worker.heartbeatMs)
        ? new CortexError(
            'worker_lost',
            `worker ${replay.run.workerId} stopped sending events of this response ${Math.round(silent / 1000)} s ago`,
          )
        : null;
    }
    const waited = Date.now() - createdAt * 1000;
    return waited > placementTimeoutMs + workerWaitMs + streamIdleTimeoutMs
      ? new CortexError(
          'service_unavailable',
          `no worker started this response in ${Math.round(waited / 1000)} s (the gateway placing it is gone); create it again`,
        )
      : null;
  }
}

/** The state a stored response was saved from, to save it again finished. */
function stateOf(stored: StoredResponse, record: NonNullable<StoredResponse['background']>): ResponsesState {
  return {
    responseId: stored.resource.id,
    createdAt: stored.resource.created_at,
    echo: record.echo,
    store: true,
    input: stored.input,
    chain: stored.chain ?? [],
    ...(stored.conversation && { conversation: stored.conversation, conversationItems: stored.conversationItems }),
    ...(stored.affinityKey && { affinityKey: stored.affinityKey }),
    ...(record.sealReasoning !== undefined && { sealReasoning: record.sealReasoning }),
    ...(record.toolNamespaces && { toolNamespaces: record.toolNamespaces }),
  };
}
