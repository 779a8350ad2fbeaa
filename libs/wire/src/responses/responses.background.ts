import type { ErrorBody, StreamEvent } from '@cortex/contracts';
import type { ReasoningSeal } from './reasoning-seal.js';
import type { ReasoningEventFamily, ResponsesEncoderOptions } from './responses.resource.js';
import { ResponsesStreamEncoder } from './responses.encoder.js';
import type { ResponseEcho, ResponseResource, ResponsesFrame } from './responses.types.js';

/** What a background response needs stored to render its events again, on any replica. */
export interface BackgroundRecord {
  echo: ResponseEcho;
  /** The request included `reasoning.encrypted_content`. */
  sealReasoning?: boolean;
  toolNamespaces?: Record<string, string>;
}

/** A background response's id, creation time and record: all that renders its events. */
export interface BackgroundSource {
  id: string;
  createdAt: number;
  record: BackgroundRecord;
}

/** Encoder options of a background response, the same on every replica (reasoning sealed only with the shared key). */
export function replayOptions(
  source: BackgroundSource,
  reasoningEvents: ReasoningEventFamily,
  seal: ReasoningSeal | undefined,
): Omit<ResponsesEncoderOptions, 'now'> {
  const { echo, sealReasoning, toolNamespaces } = source.record;
  const sealer = sealReasoning ? seal : undefined;
  return {
    id: source.id,
    createdAt: source.createdAt,
    echo,
    reasoningEvents,
    ...(sealer && { sealReasoning: (text: string) => sealer.seal(text) }),
    ...(toolNamespaces && { toolNamespaces }),
  };
}

/** One stored event of a background run (see `readBackgroundEvents` in @cortex/bus). */
export interface RunEvent {
  runId: string;
  event: StreamEvent;
  /** Milliseconds since the epoch, when the stream stored it. */
  at: number;
}

const TERMINAL = new Set(['completed', 'incomplete', 'failed', 'cancelled']);

/** Whether a response's status is final. */
export function isTerminalStatus(status: string): boolean {
  return TERMINAL.has(status);
}

/**
 * A background response rebuilt from its stored run events: the same frames, numbered the same, as the
 * run's first reader saw, whoever replays them and whenever (`completed_at` is the time the finish
 * event was stored, not the time of the replay). A placement that failed over before the first token
 * left a run that only started, and a run moved from a lost worker leaves its output before the next
 * run's start: the run of the latest `start` event is the one that counts from then on (the next run
 * goes on from the output so far, so the encoder goes on too). The gateway that moves a run marks the
 * lost run's subject (a `moving` keep-alive) where the output it goes on from ends: what the lost
 * worker still sends after the mark (a frozen worker that wakes, then hears its cancel or fails) is
 * left out, but for that gateway's own error, marked `moving` too, which ends a move that failed.
 * A run stopped by `cancel` ends `cancelled`, as OpenAI's background responses do.
 */
export class BackgroundReplay {
  private readonly encoder: ResponsesStreamEncoder;
  private current: { runId: string; workerId: string } | null = null;
  private at = 0;
  private cancelled = false;
  /** Runs moved away from a lost worker (see the class comment). */
  private readonly abandoned = new Set<string>();
  /** When the last event (of any run) was stored, in milliseconds since the epoch; 0 before any. */
  lastAt = 0;

  constructor(options: Omit<ResponsesEncoderOptions, 'now'>) {
    this.encoder = new ResponsesStreamEncoder({ ...options, now: () => Math.floor(this.at / 1000) });
  }

  /** The run that holds the response now, once one has started. */
  get run(): { runId: string; workerId: string } | null {
    return this.current;
  }

  get ended(): boolean {
    return this.encoder.isEnded;
  }

  /** Frames for one stored event; events of an abandoned run make none. */
  add({ runId, event, at }: RunEvent): ResponsesFrame[] {
    this.lastAt = Math.max(this.lastAt, at);
    if (event.type === 'keepalive' && event.moving) this.abandoned.add(runId);
    // The gateway's own events on a run carry seq 0 (a worker's are numbered from its start): an error
    // of a gateway that does not mark it `moving` yet is still the gateway's.
    if (this.abandoned.has(runId) && !(event.type === 'error' && (event.moving || event.seq === 0))) return [];
    // A run replaces one that only started (the gateway commits to a run at its first token) or one whose
    // worker was lost (the next goes on where its output ends), so the encoder goes on:
    // `response.created`/`in_progress` went out once, and the numbering continues.
    if (event.type === 'start' && this.current?.runId !== runId) this.current = { runId, workerId: event.workerId };
    // A run refused before it started (its prompt over the context, no worker, a load that failed,
    // cancelled while placed) ends the response: nothing else will.
    if (event.type === 'error' && !this.current && !this.ended) {
      this.at = at;
      this.cancelled = event.error.code === 'cancelled';
      return this.encoder.fail(event.error).map((frame) => this.cancelledFrame(frame));
    }
    if (this.current?.runId !== runId) return [];
    this.at = at;
    if (event.type === 'finish' && !this.ended) this.cancelled = event.reason === 'cancelled';
    // A cancel that stopped a run while it moved to another worker (its gateway ends the response).
    if (event.type === 'error' && !this.ended) this.cancelled = event.error.code === 'cancelled';
    return this.encoder.encode(event).map((frame) => this.cancelledFrame(frame));
  }

  /** Ends the response with an error the run never sent (its worker went silent). */
  fail(error: ErrorBody): ResponsesFrame[] {
    this.at = Date.now();
    return this.encoder.fail(error);
  }

  /** The resource as it stands: `queued` until a run starts (or it fails without one). */
  resource(): ResponseResource {
    const resource = this.cancelledResource(this.encoder.resource());
    return this.current || this.ended ? resource : { ...resource, status: 'queued' };
  }

  private cancelledFrame(frame: ResponsesFrame): ResponsesFrame {
    if (!this.cancelled || !('response' in frame.data) || frame.data.type !== 'response.failed') return frame;
    return { ...frame, data: { ...frame.data, response: this.cancelledResource(frame.data.response) } };
  }

  private cancelledResource(resource: ResponseResource): ResponseResource {
    return this.cancelled && resource.status === 'failed'
      ? { ...resource, status: 'cancelled', error: null }
      : resource;
  }
}
