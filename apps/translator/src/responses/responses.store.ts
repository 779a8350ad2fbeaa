import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { jetstreamManager } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { BusClient, maxPayload, openKv } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { array, Buckets, CortexError, object, optionalArray, string } from '@cortex/contracts';
import type { ResponsesItem, StoredResponse } from '@cortex/wire';

const RESPONSES_BUCKET = Buckets.responses;
const CONVERSATIONS_BUCKET = Buckets.conversations;
const KEY = /^[-_=.A-Za-z0-9]{1,200}$/;

interface StoredConversation {
  items: ResponsesItem[];
}

/**
 * Stored responses and conversations in JetStream KV: shared by every translator replica and kept
 * across restarts of any service. Bounded by a TTL and a count (the bucket streams discard their
 * oldest entries), both from `responses` in the config.
 */
@Injectable()
export class ResponsesStore implements OnModuleInit {
  private readonly logger = new Logger('responses');
  private responses!: KV;
  private conversations!: KV;

  constructor(
    @Inject(CONFIG) private readonly config: CortexConfig,
    private readonly bus: BusClient,
  ) {}

  async onModuleInit(): Promise<void> {
    const { ttlS, maxStored, maxBytes } = this.config.responses;
    const max_bytes = maxBytes > 0 ? maxBytes : -1;
    const options = { ttl: ttlS * 1000, history: 1 };
    this.responses = await openKv(this.bus.nc, RESPONSES_BUCKET, options);
    this.conversations = await openKv(this.bus.nc, CONVERSATIONS_BUCKET, options);
    // KV buckets refuse writes when full; a store of past responses should forget the oldest instead.
    const jsm = await jetstreamManager(this.bus.nc);
    for (const bucket of [RESPONSES_BUCKET, CONVERSATIONS_BUCKET]) {
      const stream = `KV_${bucket}`;
      const info = await jsm.streams.info(stream);
      if (info.config.max_msgs !== maxStored || info.config.max_bytes !== max_bytes || info.config.discard !== 'old') {
        await jsm.streams.update(stream, { ...info.config, max_msgs: maxStored, max_bytes, discard: 'old' as never });
      }
    }
    this.logger.log(
      `responses kept ${Math.round(ttlS / 3600)} h, at most ${maxStored}${maxBytes > 0 ? ` and ${maxBytes} bytes` : ''}`,
    );
  }

  async get(id: string): Promise<StoredResponse | null> {
    return (await this.read(id))?.stored ?? null;
  }

  /** A stored response with its KV revision, for a write that must not overwrite a newer one (`put`). */
  async read(id: string): Promise<{ stored: StoredResponse; revision: number } | null> {
    if (!KEY.test(id)) return null;
    const entry = await reach(RESPONSES_BUCKET, () => this.responses.get(id));
    return entry && entry.operation === 'PUT'
      ? { stored: storedResponse(entry.json<unknown>(), id), revision: entry.revision }
      : null;
  }

  /** Stores a response; with `revision`, only over that revision (false when another write came first). */
  async put(stored: StoredResponse, revision?: number): Promise<boolean> {
    const value = this.fitting(JSON.stringify(stored), `response ${stored.resource.id}`);
    if (revision === undefined) {
      await reach(RESPONSES_BUCKET, () => this.responses.put(stored.resource.id, value));
      return true;
    }
    try {
      await this.responses.update(stored.resource.id, value, revision);
      return true;
    } catch {
      return false;
    }
  }

  /**
   * A KV value is one NATS message: past the server's max_payload the put fails with a bare protocol
   * error. Say what is too large and what to do instead.
   */
  private fitting(value: string, what: string): string {
    const size = Buffer.byteLength(value);
    const limit = maxPayload(this.bus.nc);
    if (size > limit) {
      throw new CortexError(
        'payload_too_large',
        `${what} would be ${size} bytes stored, over the NATS server's max_payload (${limit}); send "store": false, or raise max_payload`,
        { param: 'store' },
      );
    }
    return value;
  }

  async delete(id: string): Promise<boolean> {
    if (!(await this.get(id))) return false;
    await reach(RESPONSES_BUCKET, () => this.responses.delete(id));
    return true;
  }

  async conversation(id: string): Promise<ResponsesItem[]> {
    assertKey(id, 'conversation');
    const entry = await reach(CONVERSATIONS_BUCKET, () => this.conversations.get(id));
    return entry && entry.operation === 'PUT' ? entry.json<StoredConversation>().items : [];
  }

  /** Appends items to a conversation; concurrent appends retry on the revision, so none is lost. */
  async appendToConversation(id: string, items: readonly ResponsesItem[]): Promise<void> {
    assertKey(id, 'conversation');
    for (let attempt = 0; attempt < 10; attempt++) {
      const entry = await reach(CONVERSATIONS_BUCKET, () => this.conversations.get(id));
      const current = entry && entry.operation === 'PUT' ? entry.json<StoredConversation>().items : [];
      const value = this.fitting(
        JSON.stringify({ items: [...current, ...items] } satisfies StoredConversation),
        `conversation ${id}`,
      );
      try {
        if (entry && entry.operation === 'PUT') await this.conversations.update(id, value, entry.revision);
        else await this.conversations.create(id, value);
        return;
      } catch {
        // Someone else wrote first: read again and retry.
      }
    }
    throw new CortexError('internal', `conversation ${id}: too many concurrent writers`);
  }
}

/**
 * A JetStream error here (no stream leader while a NATS cluster elects a new one, a timeout) means the
 * store is briefly out of reach: 503 with a retry hint, not a 500.
 */
async function reach<T>(bucket: string, operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    if (error instanceof CortexError) throw error;
    throw new CortexError(
      'service_unavailable',
      `the JetStream KV bucket ${bucket} did not answer (${(error as Error).message}); ` +
        'retry in a few seconds (a NATS cluster that lost a server first elects a new leader)',
      { retryAfter: 2, cause: error },
    );
  }
}

function assertKey(id: string, param: string): void {
  if (!KEY.test(id))
    throw new CortexError('invalid_request', `${param}: ids are 1-200 letters, digits, '-', '_', '=' or '.'`, {
      param,
    });
}

/**
 * A stored value is read like a bus message: checked, not cast. Written by this or an earlier version
 * (`history` instead of `chain`), so only what every version wrote is required. One that does not
 * match is this service's fault, `internal`, naming the field.
 */
function storedResponse(value: unknown, id: string): StoredResponse {
  try {
    const stored = object(value, 'stored');
    string(object(stored.resource, 'resource').id, 'resource.id');
    array(stored.input, 'input').forEach((item, i) => object(item, `input[${i}]`));
    optionalArray(stored.chain, 'chain')?.forEach((link, i) => string(link, `chain[${i}]`));
    optionalArray(stored.history, 'history');
    return stored as unknown as StoredResponse;
  } catch (error) {
    throw new CortexError('internal', `stored response ${id} is malformed: ${(error as Error).message}`, {
      cause: error,
    });
  }
}
