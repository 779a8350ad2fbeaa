import { Injectable, Logger } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import {
  CortexError,
  mib,
  REQUEST_ID_HEADER,
  SEED_HEADER,
  SERVED_BY_HEADER,
  type LoadProgress,
} from '@cortex/contracts';
import { sessionFromHeaders } from '@cortex/wire';
import { sendError, toCortexError } from '../http/error-response.js';
import { SseWriter } from '../http/sse.writer.js';
import type { DialectAdapter, DialectStream, SseOut } from './dialect.js';
import type { InferenceRun } from './inference-run.js';
import { InferenceService } from './inference.service.js';
import { contextOf } from '../http/request-context.js';

/** What the responder drives: one InferenceRun, or several behind one response (see FanOutRun). */
export type ResponderRun = Pick<
  InferenceRun,
  | 'runId'
  | 'startedAt'
  | 'state'
  | 'seeds'
  | 'listen'
  | 'decode'
  | 'start'
  | 'cancel'
  | 'fail'
  | 'finish'
  | 'firstByteWritten'
  | 'servedBy'
>;

/**
 * The HTTP side of one inference request, for any dialect: decode, place, generate, then either an
 * SSE stream rendered as events arrive or one JSON body. Errors before the first byte are real HTTP
 * statuses; after it, error frames in the dialect.
 */
@Injectable()
export class InferenceResponder {
  private readonly logger = new Logger('inference');

  constructor(private readonly inference: InferenceService) {}

  /** `open` makes the run to drive; by default one InferenceRun of the adapter's dialect. */
  async handle(
    req: FastifyRequest,
    reply: FastifyReply,
    adapter: DialectAdapter,
    open?: () => ResponderRun,
  ): Promise<void> {
    const context = contextOf(req);
    const requestId = context.id;
    const run = open?.() ?? this.inference.open(adapter.dialect, context);
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) run.cancel('client disconnected');
    });
    const sse = new SseWriter(reply, requestId, this.inference.config.gateway.stallTimeoutMs, () =>
      servedByHeader(run),
    );
    let renderer: (() => DialectStream) | null = null;
    try {
      const request = await run.decode(
        req.body,
        sessionFromHeaders(req.headers, this.inference.config.gateway.sessionHeaders),
      );
      // Set on the raw response: both the JSON reply and the SSE stream's head carry it.
      if (run.seeds.length > 0) reply.raw.setHeader(SEED_HEADER, run.seeds.join(','));
      const meta = {
        id: run.runId,
        created: Math.floor(run.startedAt / 1000),
        headers: req.headers,
        servedBy: () => run.servedBy,
      };
      if (request.stream) {
        // Built on first use: by `stream` once the generate command is on its way, or by a load's progress.
        let built: DialectStream | null = null;
        renderer = () => (built ??= adapter.stream(request, meta, run.state));
        this.showLoadProgress(run, sse, renderer, req.headers['x-cortex-load-progress']);
        await this.stream(run, sse, renderer);
        if (!sse.closed) this.finishStream(sse, renderer().terminator);
      } else {
        const body = adapter.complete(request, meta, run.state);
        for await (const event of await run.start()) {
          if (event.type === 'error') throw CortexError.fromBody(event.error);
          body.add(event);
        }
        await body.settle?.();
        if (!reply.raw.destroyed)
          void reply
            .status(200)
            .headers({ [REQUEST_ID_HEADER]: requestId, ...servedByHeader(run) })
            .type('application/json')
            .send(body.body());
      }
    } catch (thrown) {
      const error = toCortexError(thrown);
      run.fail(error, sse.isStarted);
      if (error.code === 'internal') this.logger.error(`${requestId}: ${error.message}`);
      if (sse.isStarted) {
        const rendering = renderer?.() ?? null;
        await this.writeFailure(requestId, sse, rendering, error);
        // A failed stream still ends the way the dialect ends every stream, so clients that wait for
        // `[DONE]` stop at once instead of at the socket's close.
        this.finishStream(sse, rendering?.terminator ?? false);
      } else if (!reply.sent) {
        sendError(reply, req.url, error, requestId);
      }
    } finally {
      run.finish();
    }
  }

  /**
   * Writes a run's events as the dialect renders them, the final event's frames only once `settle` has
   * run (the response is stored). Shared by SSE and the Responses WebSocket. `renderer` is asked for
   * the dialect's renderer at each event; the first ask builds it.
   */
  async stream(
    run: ResponderRun,
    sse: FrameSink,
    renderer: () => Pick<DialectStream, 'frames' | 'settle'>,
  ): Promise<void> {
    const events = run.start();
    // The renderer is built while the worker works, not on the way to the first token: by the check
    // phase of this turn of the event loop the generate command is on the wire (or the router is still
    // asked). One that fails to build fails again, with its error, at the first event.
    const warm = setImmediate(() => {
      try {
        renderer();
      } catch {
        // thrown again where the first event is rendered
      }
    });
    // While a model loads or the request queues, keep the connection visibly alive with comment frames.
    const keepAlive = setInterval(() => sse.comment('keep-alive'), this.inference.config.gateway.keepAliveMs);
    // A stream that moved to another worker says so where the client can see it and ignore it.
    run.listen((notice) => {
      if (notice.type === 'resumed') sse.comment(`resumed on ${notice.workerId}`);
    });
    let waitingForFirstToken = true;
    try {
      for await (const event of await events) {
        if (event.type === 'error') throw CortexError.fromBody(event.error);
        const rendering = renderer();
        const out = rendering.frames(event);
        if (event.type === 'finish') await rendering.settle?.();
        for (const frame of out) write(sse, frame);
        if (waitingForFirstToken && event.type !== 'start' && event.type !== 'keepalive') {
          waitingForFirstToken = false;
          run.firstByteWritten();
        }
        // Take the next event only once the client has taken this one (see SseWriter.drained).
        if (sse.needsDrain) await sse.drained();
      }
    } finally {
      clearImmediate(warm);
      clearInterval(keepAlive);
    }
  }

  /** A stream that failed after its first frame: settle what was rendered, then the dialect's error frames. */
  async writeFailure(
    requestId: string,
    sse: FrameSink,
    renderer: DialectStream | null,
    error: CortexError,
  ): Promise<void> {
    const frames = renderer?.errorFrames(error.toBody()) ?? [];
    await renderer
      ?.settle?.()
      .catch((cause: Error) => this.logger.warn(`${requestId}: could not settle a failed stream: ${cause.message}`));
    for (const frame of frames) write(sse, frame);
  }

  /**
   * While the request waits for a cold load: with `load_progress: reasoning` (config, or the
   * request's `x-cortex-load-progress` header) each progress step as reasoning text where the dialect
   * offers it, and as a comment line once the stream has started (progress alone does not start it, so
   * a load that fails can still be answered with a real HTTP status).
   */
  private showLoadProgress(
    run: ResponderRun,
    sse: SseWriter,
    renderer: () => DialectStream,
    header: string | string[] | undefined,
  ): void {
    const asked = typeof header === 'string' ? header.toLowerCase() : undefined;
    const mode = asked === 'reasoning' || asked === 'comments' ? asked : this.inference.config.gateway.loadProgress;
    run.listen((notice) => {
      if (notice.type !== 'loading') return;
      const { progress } = notice;
      const percent = Math.round(progress.fraction * 100);
      const line = `${progress.phase ?? 'loading'} ${progress.model} on ${progress.workerId}: ${percent}%${downloaded(progress)}`;
      const rendering = mode === 'reasoning' ? renderer() : null;
      if (rendering?.progress) for (const frame of rendering.progress(`${line}\n`)) write(sse, frame);
      if (sse.isStarted) sse.comment(line);
    });
  }

  private finishStream(sse: SseWriter, terminator: boolean): void {
    if (terminator) sse.done();
    else sse.end();
  }
}

/** Where a stream's frames go: an SSE response, or a Responses WebSocket. */
export interface FrameSink {
  data(payload: unknown, event?: string): void;
  /** A keep-alive (an SSE comment line, a WebSocket ping). */
  comment(text: string): void;
  readonly needsDrain: boolean;
  drained(): Promise<void>;
}

function write(sse: FrameSink, frame: SseOut): void {
  sse.data(frame.data, frame.event);
}

/** ` (12.5 of 40.0 MiB)` for a download's progress; nothing for a load's. */
function downloaded(progress: LoadProgress): string {
  if (progress.phase !== 'downloading' || progress.totalBytes === undefined) return '';
  return ` (${mib(progress.bytes ?? 0)} of ${mib(progress.totalBytes)})`;
}

/** `x-cortex-served-by` naming the fallback model that served the request, when one did. */
function servedByHeader(run: Pick<ResponderRun, 'servedBy'>): Record<string, string> {
  const model = run.servedBy;
  return model === null ? {} : { [SERVED_BY_HEADER]: model };
}
