import { jetstream, jetstreamManager, type DiscardPolicy, type JetStreamClient } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { EVENTS_STREAM, Subjects, USAGE_STREAM } from '@cortex/contracts';
import { encodeJson } from './envelope.js';
import { streamReplicas } from './replicas.js';
import { currentTraceHeaders } from './bus-trace.js';

export interface EventsStreamLimits {
  retentionS: number;
  maxEvents: number;
}

const DUPLICATE_WINDOW_NS = 2 * 60 * 1e9;

/**
 * For a long-lived `consume()`: its pulls expire every 5 s, with an idle heartbeat every 2.5 s. After
 * a NATS restart that lost the pull (or the consumer), two missed heartbeats make it again, so the
 * reader goes on seconds later instead of after the client's default 30 s.
 */
export const LIVE_PULL = { expires: 5_000 } as const;

/** Creates (or updates the limits and replica count of) the JetStream stream that keeps `llm.evt.v1.>`; idempotent. */
export function ensureEventsStream(nc: NatsConnection, limits: EventsStreamLimits): Promise<void> {
  return ensureStream(nc, {
    name: EVENTS_STREAM,
    subjects: [Subjects.eventsAll],
    max_age: limits.retentionS * 1e9,
    max_msgs: limits.maxEvents,
    duplicate_window: DUPLICATE_WINDOW_NS,
  });
}

/**
 * Creates (or updates the retention and replica count of) the stream of usage records; idempotent.
 * No count limit: a bill must not lose lines to newer ones. `retentionS` 0 keeps them for ever.
 */
export function ensureUsageStream(nc: NatsConnection, retentionS: number): Promise<void> {
  return ensureStream(nc, {
    name: USAGE_STREAM,
    subjects: [Subjects.usageRecorded],
    max_age: retentionS * 1e9,
    duplicate_window: DUPLICATE_WINDOW_NS,
  });
}

type StreamLimits = {
  name: string;
  subjects: string[];
  max_age: number;
  max_msgs?: number;
  max_bytes?: number;
  discard?: DiscardPolicy;
  duplicate_window?: number;
};

/**
 * Creates a stream, or updates an existing one whose limits or replica count (`nats.replicas`) differ;
 * idempotent, so every service that publishes into or reads a stream calls it at start.
 */
export async function ensureStream(nc: NatsConnection, limits: StreamLimits): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const config = { ...limits, num_replicas: streamReplicas(nc) };
  try {
    const info = await jsm.streams.info(config.name);
    const differs =
      info.config.max_age !== config.max_age ||
      info.config.num_replicas !== config.num_replicas ||
      (config.max_msgs !== undefined && info.config.max_msgs !== config.max_msgs) ||
      (config.max_bytes !== undefined && info.config.max_bytes !== config.max_bytes) ||
      (config.discard !== undefined && info.config.discard !== config.discard);
    if (differs) await jsm.streams.update(config.name, { ...info.config, ...config });
  } catch {
    await jsm.streams.add(config);
  }
}

/**
 * Publishes facts that must not be lost (request finished, model loaded…) to JetStream with a message
 * id, so a retried publish is stored once and a metrics service that starts later still sees it.
 */
export class EventPublisher {
  private readonly js: JetStreamClient;

  constructor(nc: NatsConnection) {
    this.js = jetstream(nc);
  }

  async publish(subject: string, payload: unknown, messageId: string): Promise<void> {
    const headers = currentTraceHeaders();
    await this.js.publish(subject, encodeJson(payload), { msgID: messageId, ...(headers && { headers }) });
  }
}
