import { DiscardPolicy, jetstream, jetstreamManager, type ConsumerMessages } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { ensureStream, LIVE_PULL } from './events.js';
import {
  BACKGROUND_STREAM,
  backgroundResponseSubjects,
  CortexError,
  decodeStreamEvent,
  Subjects,
  type StreamEvent,
} from '@cortex/contracts';

/**
 * Creates (or re-limits, and sets the replica count of) the stream that keeps background runs' events: every `llm.background.v1.>`
 * message a worker publishes is stored for `maxAgeS`, so any gateway or translator can replay a run
 * that another process started. At most `maxBytes`: a full stream takes no new event (gateways refuse
 * new background responses before it is full, by backgroundRoom), so it never crowds the other streams
 * out of the server's store. Idempotent; every service that publishes into it or reads it calls it.
 */
export function ensureBackgroundStream(nc: NatsConnection, maxAgeS: number, maxBytes: number): Promise<void> {
  return ensureStream(nc, {
    name: BACKGROUND_STREAM,
    subjects: [Subjects.backgroundAll],
    max_age: maxAgeS * 1e9,
    max_bytes: maxBytes,
    discard: DiscardPolicy.New,
  });
}

/** How full the background stream is: its bytes and its limit (-1: none). */
export async function backgroundRoom(nc: NatsConnection): Promise<{ bytes: number; maxBytes: number }> {
  const info = await (await jetstreamManager(nc)).streams.info(BACKGROUND_STREAM);
  return { bytes: info.state.bytes, maxBytes: info.config.max_bytes };
}

/** One stored event of a background run. */
export interface StoredRunEvent {
  /** The run (one per placement try) that published it: the subject's last token. */
  runId: string;
  event: StreamEvent;
  /** When the stream stored it, in milliseconds since the epoch. */
  at: number;
}

export interface BackgroundReadOptions {
  /** Keep waiting for new events after the stored ones (until the caller stops iterating). */
  follow: boolean;
  /** No event for this long → `worker_lost` (keep-alives arrive every second while a run lives); read before each wait. */
  idleMs: number | (() => number);
}

/**
 * The stored events of one background response, oldest first, through an ordered consumer (nothing to
 * clean up: the server drops it when it goes idle). Without `follow` it ends at the last stored event.
 * A stored event that does not decode fails the read with `internal`, naming it.
 */
export async function* readBackgroundEvents(
  nc: NatsConnection,
  responseId: string,
  options: BackgroundReadOptions,
): AsyncGenerator<StoredRunEvent> {
  const consumer = await jetstream(nc).consumers.get(BACKGROUND_STREAM, {
    filter_subjects: backgroundResponseSubjects(responseId),
  });
  if (!options.follow && (await consumer.info()).num_pending === 0) return;
  const messages: ConsumerMessages = await consumer.consume(LIVE_PULL);
  let idle = false;
  let timer: NodeJS.Timeout | undefined;
  const arm = (): void => {
    clearTimeout(timer);
    timer = setTimeout(
      () => {
        idle = true;
        void messages.close();
      },
      typeof options.idleMs === 'number' ? options.idleMs : options.idleMs(),
    );
  };
  try {
    arm();
    for await (const message of messages) {
      arm();
      let event: StreamEvent;
      try {
        event = decodeStreamEvent(message.json());
      } catch (cause) {
        throw new CortexError(
          'internal',
          `stored event ${message.seq} on ${message.subject}: ${(cause as Error).message}`,
          { cause },
        );
      }
      yield { runId: message.subject.slice(message.subject.lastIndexOf('.') + 1), event, at: message.time.getTime() };
      if (!options.follow && message.info.pending === 0) return;
    }
    if (idle)
      throw new CortexError(
        'worker_lost',
        `no event of background response ${responseId} came in time: its worker is gone`,
      );
  } finally {
    clearTimeout(timer);
    await messages.close();
  }
}
