import { Objm, type ObjectStore } from '@nats-io/obj';
import { StorageType } from '@nats-io/jetstream';
import {
  Empty,
  headers as natsHeaders,
  nanos,
  nuid,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
} from '@nats-io/transport-node';
import { CortexError, PAYLOAD_BUCKET, PAYLOAD_HEADER } from '@cortex/contracts';
import { decodeJson, encodeJson } from './envelope.js';
import { streamReplicas } from './replicas.js';

/** Room kept under `max_payload` for headers, which count towards it. */
const HEADROOM = 16 * 1024;

/** Objects are deleted once read; this only bounds the ones whose reader never came (a crash in between). */
const ORPHAN_TTL_MS = 10 * 60_000;

/** NATS servers default to 1 MiB; `nc.info` is there once connected. */
const DEFAULT_MAX_PAYLOAD = 1024 * 1024;

const stores = new WeakMap<NatsConnection, Promise<ObjectStore>>();

function storeOf(nc: NatsConnection): Promise<ObjectStore> {
  let store = stores.get(nc);
  if (!store) {
    store = new Objm(nc).create(PAYLOAD_BUCKET, {
      ttl: nanos(ORPHAN_TTL_MS),
      storage: StorageType.File,
      replicas: streamReplicas(nc),
      description: 'cortex: bodies over max_payload, deleted once read',
    });
    // A failed open (no JetStream yet) is tried again by the next large message, not remembered.
    store.catch(() => stores.delete(nc));
    stores.set(nc, store);
  }
  return store;
}

/** The largest message body this connection's server accepts. */
export function maxPayload(nc: NatsConnection): number {
  return nc.info?.max_payload ?? DEFAULT_MAX_PAYLOAD;
}

/**
 * Encodes a request or reply body. One that fits the server's `max_payload` goes as it is; a larger
 * one is put in the JetStream object store and the message carries only its name, so bodies up to
 * the gateway's HTTP limit work on a NATS server with the default 1 MiB limit. Only for messages
 * with one reader (requests and their replies): the reader deletes the object.
 */
export async function encodeLarge(
  nc: NatsConnection,
  payload: unknown,
  headers?: MsgHdrs,
): Promise<{ data: Uint8Array; headers?: MsgHdrs }> {
  const data = encodeJson(payload);
  const limit = maxPayload(nc);
  if (data.length <= limit - HEADROOM) return { data, headers };
  const name = nuid.next();
  try {
    await (await storeOf(nc)).putBlob({ name }, data);
  } catch (error) {
    throw new CortexError(
      'payload_too_large',
      `a message of ${data.length} bytes is over the NATS server's ` +
        `max_payload (${limit}) and could not be put in the ` +
        `${PAYLOAD_BUCKET} object store: ${(error as Error).message}`,
      { cause: error },
    );
  }
  const out = headers ?? natsHeaders();
  out.set(PAYLOAD_HEADER, name);
  return { data: Empty, headers: out };
}

/** Decodes a message encoded by `encodeLarge`, fetching (and deleting) its body from the object store when it was put there. */
export async function decodeLarge(nc: NatsConnection, msg: Msg): Promise<unknown> {
  const name = msg.headers?.get(PAYLOAD_HEADER);
  if (!name) return decodeJson(msg.data);
  const store = await storeOf(nc);
  const data = await store.getBlob(name);
  if (!data)
    throw new CortexError(
      'internal',
      `message body ${name} is not in the ${PAYLOAD_BUCKET} object store (expired or already read)`,
    );
  // Deleting is housekeeping (the TTL covers a failure): the reader need not wait for it.
  store.delete(name).catch(() => undefined);
  return decodeJson(data);
}
