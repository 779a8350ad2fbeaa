import { once } from 'node:events';
import { createServer } from 'node:http';
import { hostname } from 'node:os';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import type { INestApplicationContext, LoggerService } from '@nestjs/common';
import type { NatsConnection } from '@nats-io/transport-node';
import { Subjects } from '@cortex/contracts';
import type { CortexConfig } from '@cortex/config';
import { BusServer } from './bus.server.js';
import { BusExceptionFilter } from './bus-exception.filter.js';
import { encodeJson } from './envelope.js';
import { busReconnects, isBusConnected } from './connect.js';
import type { BusStatusEvent, ServicePing } from '@cortex/contracts';

/** What the launcher hands each service. */
export interface ServiceContext {
  config: CortexConfig;
  nc: NatsConnection;
  logger: LoggerService;
}

export interface RunningService {
  /** Stops taking work, finishes what is in flight, releases resources. Does not close `nc`. */
  close(): Promise<void>;
}

/** Every app's `main.ts` exports `start` with this type; the CLI imports it by path. */
export type ServiceStart = (context: ServiceContext) => Promise<RunningService>;

export type { ServicePing } from '@cortex/contracts';

interface BusAppOptions {
  service: string;
  context: ServiceContext;
  /** Queue group for the service's request handlers; replicas share the load. */
  queue?: string;
  workerId?: string;
  /** Readiness beyond the bus connection, reported by `cortex status` (e.g. a worker's loaded models). */
  detail?: (app: INestApplicationContext) => { ready: boolean; detail?: string };
  /** What the service turned clients away for so far, by reason (cumulative), sent with its bus status (a gateway's). */
  refusals?: () => Record<string, number>;
}

/** A Nest app with no HTTP: bus handlers only. */
export async function startBusApp(module: unknown, options: BusAppOptions): Promise<RunningService> {
  const app = await NestFactory.createMicroservice(module as never, {
    strategy: new BusServer({ nc: options.context.nc, queue: options.queue, workerId: options.workerId }),
    logger: options.context.logger,
  });
  app.useGlobalFilters(new BusExceptionFilter());
  await app.listen();
  const running = withStatus(app, options);
  const listen = options.context.config.probeListen;
  if (!listen) return running;
  const stopProbes = await startProbeServer(listen, () => readiness(app, options));
  return {
    async close() {
      await stopProbes();
      await running.close();
    },
  };
}

/** Ready: connected to the bus and, where the service says more (a worker that is not draining), that too. */
function readiness(app: INestApplicationContext, options: BusAppOptions): { ready: boolean; detail?: string } {
  const own = options.detail?.(app) ?? { ready: true };
  const bus = isBusConnected(options.context.nc);
  return {
    ready: bus && own.ready,
    detail: [bus ? undefined : 'bus disconnected', own.detail].filter(Boolean).join('; ') || undefined,
  };
}

/**
 * `probe_listen`: HTTP probes for the services that serve no HTTP (router, translator, worker), for
 * Kubernetes. `/healthz` answers 200 while the event loop runs; `/readyz` answers 200 while the service
 * is ready and 503 with the reason when it is not. Nothing else is served there.
 */
async function startProbeServer(
  listen: string,
  state: () => { ready: boolean; detail?: string },
): Promise<() => Promise<void>> {
  const server = createServer((req, res) => {
    const path = req.url?.split('?')[0];
    if (req.method !== 'GET' || (path !== '/healthz' && path !== '/readyz')) {
      res
        .writeHead(404, { 'content-type': 'application/json' })
        .end('{"error":"only GET /healthz and /readyz are served here"}');
      return;
    }
    const { ready, detail } = path === '/healthz' ? { ready: true, detail: undefined } : state();
    res
      .writeHead(ready ? 200 : 503, { 'content-type': 'application/json' })
      .end(JSON.stringify({ status: ready ? 'ok' : 'unavailable', ...(detail && { detail }) }));
  });
  const { host, port } = splitHostPort(listen);
  server.listen(port, host);
  await once(server, 'listening');
  return () => new Promise<void>((done) => server.close(() => done()));
}

/** A Nest app on Fastify that also serves bus handlers. */
export async function startHttpApp(
  module: unknown,
  options: BusAppOptions & {
    listen: string;
    bodyLimit?: number;
    requestTimeoutMs?: number;
    trustProxy?: string[];
    configure?: (app: NestFastifyApplication) => void;
  },
): Promise<RunningService & { app: NestFastifyApplication }> {
  const app = await NestFactory.create<NestFastifyApplication>(
    module as never,
    // requestTimeout: the time a client has to send a whole request, headers and body (408 past it; 0: none).
    // trustProxy: the proxies whose X-Forwarded-* headers request.protocol, .host and .ip take.
    // Node enforces requestTimeout only when the server is created with it (Fastify sets it afterwards,
    // which left a stalled body open for good), and looks for requests past it every
    // connectionsCheckingInterval (30 s by default): a quarter of the timeout, at least 250 ms, at most 5 s.
    // Without one, Node's own default (300 s) stays.
    new FastifyAdapter({
      bodyLimit: options.bodyLimit,
      requestTimeout: options.requestTimeoutMs ?? 0,
      ...(options.requestTimeoutMs !== undefined && {
        http: {
          requestTimeout: options.requestTimeoutMs,
          connectionsCheckingInterval: Math.min(
            5_000,
            Math.max(250, Math.floor((options.requestTimeoutMs || 20_000) / 4)),
          ),
        },
      }),
      return503OnClosing: true,
      ...(options.trustProxy?.length && { trustProxy: options.trustProxy }),
    }),
    { logger: options.context.logger },
  );
  // Global filters must be in place before the microservice is connected to be inherited by it; an
  // HTTP app's filters pass bus (rpc) errors through unchanged (see BusExceptionFilter).
  options.configure?.(app);
  app.connectMicroservice(
    { strategy: new BusServer({ nc: options.context.nc, queue: options.queue, workerId: options.workerId }) },
    { inheritAppConfig: true },
  );
  await app.startAllMicroservices();
  const { host, port } = splitHostPort(options.listen);
  await app.listen(port, host);
  const running = withStatus(app, options);
  return { ...running, app };
}

function withStatus(app: INestApplicationContext, options: BusAppOptions): RunningService {
  const startedAt = Date.now();
  const id = options.workerId ?? `${options.service}-${hostname()}-${process.pid}`;
  const sub = options.context.nc.subscribe(Subjects.serviceStatus, {
    callback: (_error, msg) => {
      const extra = readiness(app, options);
      const ping: ServicePing = {
        service: options.service,
        id,
        host: hostname(),
        pid: process.pid,
        uptimeS: Math.round((Date.now() - startedAt) / 1000),
        ...extra,
      };
      msg.respond(encodeJson(ping));
    },
  });
  // Bus health for the metrics service; a service that cannot publish shows as disconnected there.
  const publishBus = (): void => {
    const nc = options.context.nc;
    if (nc.isClosed() || nc.isDraining()) return;
    const refusals = options.refusals?.();
    const event: BusStatusEvent = {
      service: options.service,
      instance: id,
      connected: isBusConnected(nc),
      reconnects: busReconnects(nc),
      intervalMs: BUS_STATUS_MS,
      ...(refusals && { refusals }),
    };
    nc.publish(Subjects.serviceBus, encodeJson(event));
  };
  const timer = setInterval(publishBus, BUS_STATUS_MS);
  publishBus();
  return {
    async close() {
      clearInterval(timer);
      sub.unsubscribe();
      await app.close();
    },
  };
}

const BUS_STATUS_MS = 5_000;

export function splitHostPort(listen: string): { host: string; port: number } {
  const at = listen.lastIndexOf(':');
  const host = listen.slice(0, at).replace(/^\[(.*)\]$/, '$1');
  return { host, port: Number(listen.slice(at + 1)) };
}
