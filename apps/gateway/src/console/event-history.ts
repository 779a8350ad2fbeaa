import { DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { EVENTS_STREAM } from '@cortex/contracts';

export interface StoredEvent {
  subject: string;
  data: unknown;
  /** When the stream stored it (epoch ms). */
  at: number;
}

export type History =
  { source: 'events-stream'; events: StoredEvent[] } | { source: 'none'; reason: string; events: [] };

/**
 * The last `count` events of the events stream (`CORTEX_EVENTS`, which the metrics service reads
 * too), oldest first: what the console shows as recent activity when a page opens, so it survives a
 * gateway restart. Read once per feed start with an ordered consumer; bounded by `count` and `maxMs`.
 */
export async function readRecentEvents(nc: NatsConnection, count: number, maxMs: number): Promise<History> {
  let first: number;
  let last: number;
  try {
    const info = await (await jetstreamManager(nc, { timeout: maxMs })).streams.info(EVENTS_STREAM);
    ({ first_seq: first, last_seq: last } = info.state);
    if (info.state.messages === 0) return { source: 'events-stream', events: [] };
  } catch (error) {
    return { source: 'none', reason: `no events stream (${(error as Error).message})`, events: [] };
  }
  const from = Math.max(first, last - count + 1);
  const consumer = await jetstream(nc, { timeout: maxMs }).consumers.get(EVENTS_STREAM, {
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: from,
  });
  const events: StoredEvent[] = [];
  const batch = await consumer.fetch({ max_messages: last - from + 1, expires: maxMs });
  for await (const message of batch) {
    try {
      events.push({
        subject: message.subject,
        data: message.json(),
        at: Math.round(message.info.timestampNanos / 1e6),
      });
    } catch {
      // Not JSON: not an event anyone could show.
    }
    if (message.seq >= last || message.info.pending === 0) break;
  }
  return { source: 'events-stream', events };
}
