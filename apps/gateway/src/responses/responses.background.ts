import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { Subscription } from '@nats-io/transport-node';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { backgroundRoom, BusClient, ensureBackgroundStream, readBackgroundEvents } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import {
  backgroundSubject,
  CortexError,
  NO_WORKER,
  decodeBackgroundState,
  decodeResponseId,
  decodeStored,
  Subjects,
  workerSubject,
  livenessWindowMs,
} from '@cortex/contracts';
import {
  BackgroundReplay,
  isTerminalStatus,
  type ReasoningSeal,
  replayOptions,
  sessionFromHeaders,
  withOutputText,
  type BackgroundSource,
  type ResponseResource,
  type ResponsesState,
} from '@cortex/wire';
import { sendError, toCortexError } from '../http/error-response.js';
import { SseWriter } from '../http/sse.writer.js';
import type { InferenceRun } from '../inference/inference-run.js';
import { InferenceService } from '../inference/inference.service.js';
import { BackgroundFollow } from './background-follow.js';
import { responsesStateOf } from './responses.state.js';
import { backgroundRefusal } from './background-room.js';
import { ClientCounts, clientOf } from '../http/upload-slots.js';
import { contextOf } from '../http/request-context.js';

/** How long `POST …/cancel` waits for a cancelled run to be stored as ended, polling every POLL_MS. */
const CANCEL_WAIT_MS = 10_000;
const POLL_MS = 500;

/**
 * `background: true` on the gateway side. Create: decode, store the response `queued`, answer at once,
 * then place and start the run like any other (failover before the first token included): the worker
 * runs it to the end, its events kept in `CORTEX_BACKGROUND`, and a translator stores the finished
 * response. This gateway follows the run (BackgroundFollow), and moves it to another worker if its
 * worker is lost, like a stream. Streaming (`stream: true`, or `GET …?stream=true
 * &starting_after=N`) replays those events from JetStream through the same encoder, so any gateway,
 * restarted or not, serves them with the same sequence numbers. Cancel stops the run on its worker.
 */
@Injectable()
export class BackgroundResponder implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('responses');
  /** Runs this gateway is still placing, by response id (a cancel must stop them before they start). */
  private readonly launching = new Map<string, InferenceRun>();
  /** Background responses running from this gateway per client (see clientOf), against `responses.background_max_per_key`. */
  private readonly perClient = new ClientCounts();
  /** Started runs this gateway follows to their end, by response id (a cancel during a move stops the move). */
  private readonly following = new Map<string, BackgroundFollow>();
  private readonly cancelled = new Set<string>();
  private readonly seal: ReasoningSeal | undefined;
  private sub: Subscription | null = null;

  constructor(
    private readonly inference: InferenceService,
    private readonly bus: BusClient,
    @Inject(CONFIG) private readonly config: CortexConfig,
  ) {
    this.seal = inference.responses.seal;
  }

  async onModuleInit(): Promise<void> {
    this.sub = this.bus.subscribe(Subjects.backgroundCancel, (data) => {
      const { id } = decodeResponseId(data);
      const reason = 'cancelled by POST /v1/responses/{id}/cancel';
      // A run moving to another worker has no worker to hear the cancel: the move stops here.
      if (this.following.get(id)?.cancelMove(reason)) return;
      const run = this.launching.get(id);
      if (!run) return;
      this.cancelled.add(id);
      run.cancel(reason);
    });
    await ensureBackgroundStream(
      this.bus.nc,
      this.config.responses.backgroundEventsTtlS,
      this.config.responses.backgroundMaxBytes,
    );
  }

  onModuleDestroy(): void {
    this.sub?.unsubscribe();
  }

  async create(req: FastifyRequest, reply: FastifyReply): Promise<void> {
    const requestId = contextOf(req).id;
    const run = this.inference.open('openai.responses', contextOf(req));
    const client = clientOf(req);
    // Counted from here, before the awaits below, so requests arriving together cannot all pass the cap.
    let counted = false;
    let launched = false;
    const ended = (): void => {
      if (!counted) return;
      counted = false;
      this.perClient.add(client, -1);
    };
    try {
      const cap = this.config.responses.backgroundMaxPerKey;
      const running = this.perClient.of(client);
      if (cap > 0 && running >= cap) {
        throw new CortexError(
          'rate_limit_exceeded',
          `this key has ${running} background responses running from this gateway ` +
            `(responses.background_max_per_key is ${cap}): wait for one to end, or cancel one`,
          { retryAfter: 1 },
        );
      }
      this.perClient.add(client);
      counted = true;
      // Its events need room in CORTEX_BACKGROUND; a stream that cannot be read now is found out by the store below.
      const room = await backgroundRoom(this.bus.nc).catch(() => null);
      const full = room && backgroundRefusal(room);
      if (full) throw full;
      const request = await run.decode(req.body, sessionFromHeaders(req.headers, this.config.gateway.sessionHeaders));
      const state = responsesStateOf(run.state);
      const source: BackgroundSource = {
        id: state.responseId,
        createdAt: state.createdAt,
        record: {
          echo: state.echo,
          ...(state.sealReasoning !== undefined && { sealReasoning: state.sealReasoning }),
          ...(state.toolNamespaces && { toolNamespaces: state.toolNamespaces }),
        },
      };
      const queued = new BackgroundReplay(this.options(source)).resource();
      await this.bus.request(Subjects.responsesStore, { state, resource: queued }, { requestId, decode: decodeStored });
      launched = true;
      void this.launch(run, state, source).then(ended, ended);
      if (request.stream) return await this.replay(req, reply, source, -1, true);
      void reply.status(200).header('x-request-id', requestId).type('application/json').send(withOutputText(queued));
    } catch (thrown) {
      const error = toCortexError(thrown);
      // Not launched: it runs nowhere. (A launched run's own end frees its count; a failure replaying it to the client does not.)
      if (!launched) ended();
      run.fail(error, false);
      run.finish();
      if (!reply.sent) sendError(reply, req.url, error, requestId);
    }
  }

  /** `GET /v1/responses/{id}?stream=true&starting_after=N`: the events after N, live while the run goes on. */
  async stream(req: FastifyRequest, reply: FastifyReply, id: string, startingAfter: string | undefined): Promise<void> {
    const requestId = contextOf(req).id;
    try {
      const after = startingAfter === undefined ? -1 : Number(startingAfter);
      if (!Number.isInteger(after) || after < -1 || startingAfter === '') {
        throw new CortexError('invalid_request', 'starting_after: must be a sequence number (an integer from 0)', {
          param: 'starting_after',
        });
      }
      const state = await this.current(id, requestId);
      if (!state.background)
        throw new CortexError(
          'invalid_request',
          `Response ${id} did not run in the background; only background responses can be streamed again`,
          { param: 'stream' },
        );
      await this.replay(
        req,
        reply,
        state.background as unknown as BackgroundSource,
        after,
        !isTerminalStatus(state.resource.status),
      );
    } catch (thrown) {
      if (!reply.sent) sendError(reply, req.url, toCortexError(thrown), requestId);
    }
  }

  /** `POST /v1/responses/{id}/cancel`: stops the run (on its worker, or before it is placed) and answers once it has ended. */
  async cancel(id: string, requestId: string): Promise<unknown> {
    const state = await this.current(id, requestId);
    if (!state.background)
      throw new CortexError(
        'invalid_request',
        `Response ${id} is not a background response; only background responses can be cancelled`,
        { param: 'response_id' },
      );
    if (isTerminalStatus(state.resource.status)) return state.resource;
    this.bus.publish(Subjects.backgroundCancel, { id }, requestId);
    if (state.run) {
      this.bus.publish(
        workerSubject(Subjects.workerCancel, state.run.workerId),
        { runId: state.run.runId, reason: 'cancelled by POST /v1/responses/{id}/cancel' },
        requestId,
      );
    }
    // Each poll has a translator replay the response's events: the first waits like the rest.
    const deadline = Date.now() + CANCEL_WAIT_MS;
    for (;;) {
      await new Promise((done) => setTimeout(done, POLL_MS));
      const now = await this.current(id, requestId);
      if (isTerminalStatus(now.resource.status) || Date.now() >= deadline) return now.resource;
    }
  }

  /** A translator's view of the response: as it stands, how to render it, and its current run. */
  private current(id: string, requestId: string) {
    return this.bus.request(Subjects.responsesBackground, { id }, { requestId, decode: decodeBackgroundState });
  }

  private options(source: BackgroundSource) {
    return replayOptions(source, this.config.responses.reasoningEvents, this.seal);
  }

  /**
   * Places and starts the run, then follows it (BackgroundFollow): to record how it ended, and to keep
   * the response alive while a lost worker's run moves to another. A run that never got a first token
   * (no worker, a load that failed, cancelled while placed) is stored as ended here; one that started is
   * its worker's to end.
   */
  private async launch(run: InferenceRun, state: ResponsesState, source: BackgroundSource): Promise<void> {
    run.inBackground(state.responseId);
    this.launching.set(state.responseId, run);
    try {
      const events = await run.start();
      // Started: a cancel now goes to its worker, not to the placement.
      this.launching.delete(state.responseId);
      const follow = new BackgroundFollow(
        run,
        (subject, event, requestId) => this.bus.publish(subject, event, requestId),
        this.config.gateway.keepAliveMs,
      );
      this.following.set(state.responseId, follow);
      await follow.follow(events);
    } catch (thrown) {
      const error = toCortexError(thrown);
      run.fail(error, false);
      // Kept with the run's events, so a client following the response (`stream=true`) ends now.
      const body = this.cancelled.has(state.responseId)
        ? new CortexError('cancelled', 'cancelled by POST /v1/responses/{id}/cancel').toBody()
        : error.toBody();
      this.bus.publish(
        backgroundSubject(state.responseId, NO_WORKER, run.runId),
        { type: 'error', error: body, seq: 0 },
        run.requestId,
      );
      const replay = new BackgroundReplay(this.options(source));
      replay.fail(error.toBody());
      const ended: ResponseResource = this.cancelled.has(state.responseId)
        ? { ...replay.resource(), status: 'cancelled', error: null }
        : replay.resource();
      await this.bus
        .request(
          Subjects.responsesStore,
          { state, resource: ended },
          { requestId: run.requestId, decode: decodeStored },
        )
        .catch((cause: Error) => {
          this.logger.warn(`${state.responseId}: could not store its failure (${error.message}): ${cause.message}`);
        });
    } finally {
      this.launching.delete(state.responseId);
      this.following.delete(state.responseId);
      this.cancelled.delete(state.responseId);
      run.finish();
    }
  }

  /**
   * Writes the stored events' frames after sequence number `after` as SSE; with `follow`, live until the
   * run ends. A finished response whose events have aged out (`responses.background_events_ttl_s`) ends
   * with an error frame that says so.
   */
  private async replay(
    req: FastifyRequest,
    reply: FastifyReply,
    source: BackgroundSource,
    after: number,
    follow: boolean,
  ): Promise<void> {
    const { gateway } = this.config;
    const sse = new SseWriter(reply, contextOf(req).id, gateway.stallTimeoutMs);
    const replay = new BackgroundReplay(this.options(source));
    const write = (frames: ReturnType<BackgroundReplay['add']>) => {
      for (const frame of frames) if (frame.data.sequence_number > after) sse.data(frame.data, frame.event);
    };
    sse.start();
    const keepAlive = setInterval(() => sse.comment('keep-alive'), gateway.keepAliveMs);
    // Before a run starts the wait is a placement's (a cold load); after, a worker sends keep-alives every
    // second, and a gateway moving the run from a lost worker does (BackgroundFollow) once it has noticed,
    // which takes it up to the idle timeout: a reader gives it a liveness window more.
    const moveGraceMs = livenessWindowMs(this.config.worker.heartbeatMs);
    const idleMs = () =>
      replay.run ? gateway.streamIdleTimeoutMs + moveGraceMs : gateway.placementTimeoutMs + gateway.workerWaitMs;
    try {
      for await (const event of readBackgroundEvents(this.bus.nc, source.id, { follow, idleMs })) {
        write(replay.add(event));
        if (replay.ended || sse.closed) break;
        if (sse.needsDrain) await sse.drained();
      }
      if (!replay.ended && !sse.closed) {
        const kept = this.config.responses.backgroundEventsTtlS;
        throw new CortexError(
          'not_found',
          `the events of ${source.id} are no longer kept (they are kept ${kept} s); GET it without stream for the finished response`,
        );
      }
    } catch (thrown) {
      write(replay.fail(toCortexError(thrown).toBody()));
    } finally {
      clearInterval(keepAlive);
    }
    sse.done();
  }
}
