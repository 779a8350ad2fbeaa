import { Kvm, type KV, type KvOptions } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';

const replicasOf = new WeakMap<NatsConnection, number>();

/**
 * Sets how many copies of each stream, KV bucket and object store this connection creates (`nats.replicas`).
 * One on a single server; three on a NATS cluster, so cortex's state survives losing a server.
 */
export function setStreamReplicas(nc: NatsConnection, replicas: number): void {
  replicasOf.set(nc, replicas);
}

/** The replica count for streams this connection creates: `nats.replicas`, 1 when unset. */
export function streamReplicas(nc: NatsConnection): number {
  return replicasOf.get(nc) ?? 1;
}

/**
 * Opens a KV bucket, creating it with this connection's replica count when it does not exist. An
 * existing bucket keeps its replicas (changing them is `nats stream edit KV_<bucket> --replicas N`).
 */
export function openKv(nc: NatsConnection, bucket: string, options: Partial<KvOptions> = {}): Promise<KV> {
  return new Kvm(nc).create(bucket, { replicas: streamReplicas(nc), ...options });
}
