import { Inject, Injectable } from '@nestjs/common';
import websocket from '@fastify/websocket';
import type { FastifyInstance } from 'fastify';
import { BusClient } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { CortexError, hashSecret, PRIORITY_HEADER } from '@cortex/contracts';
import { sessionFromHeaders } from '@cortex/wire';
import { presentedKey } from '../../http/access.js';
import { sendError } from '../../http/error-response.js';
import { KeyDirectory } from '../../keys/key-directory.js';
import { KeyAdmission } from '../../limits/key-admission.js';
import { InferenceResponder } from '../../inference/inference.responder.js';
import { InferenceService } from '../../inference/inference.service.js';
import { responsesAdapterFor } from '../responses.adapter.js';
import { McpLoops } from '../../mcp/mcp-loops.js';
import { ResponsesConnection, type ConnectionDeps } from './responses.connection.js';
import { RefusalCounter } from '../../http/refusals.js';
import { ClientCounts, clientOf, HeldBytes } from '../../http/upload-slots.js';
import { TurnAdmission } from './turn-admission.js';
import { contextOf } from '../../http/request-context.js';

/**
 * The Responses API's WebSocket mode: `GET /v1/responses` with `Upgrade: websocket`. The upgrade
 * request passes the same `onRequest` hooks as every HTTP request (API keys, endpoint switches), so a
 * refused one is answered with the HTTP status it would get on POST, before any upgrade. Each turn of
 * a stored key's socket then passes that key's model and limit checks (turn-admission.ts).
 */
@Injectable()
export class ResponsesSocket {
  private readonly deps: ConnectionDeps;
  private readonly connections = new Set<ResponsesConnection>();
  /** Sockets open per client (see clientOf), against `gateway.max_websockets_per_key`. */
  private readonly perClient = new ClientCounts();

  constructor(
    inference: InferenceService,
    responder: InferenceResponder,
    bus: BusClient,
    @Inject(CONFIG) private readonly config: CortexConfig,
    private readonly directory: KeyDirectory,
    private readonly admission: KeyAdmission,
    refusals: RefusalCounter,
    held: HeldBytes,
    loops: McpLoops,
  ) {
    this.deps = {
      inference,
      responder,
      adapter: responsesAdapterFor(bus, config),
      limitMs: config.responses.websocketConnectionLimitMs,
      refusals,
      held,
      loops,
    };
  }

  install(fastify: FastifyInstance): void {
    // The largest message is one create body; the HTTP body limit applies to it as well.
    // On close (SIGTERM), each connection finishes the turns it has received before its socket closes
    // (the plugin's default closes every socket at once, cutting turns mid-stream on every rollout).
    const preClose = async (): Promise<void> => {
      await Promise.all([...this.connections].map((connection) => connection.drain()));
    };
    void fastify.register(websocket, { options: { maxPayload: this.config.gateway.bodyLimitBytes }, preClose });
    void fastify.register(async (scope) => {
      for (const url of ['/v1/responses', '/responses']) {
        scope.route({
          method: 'GET',
          url,
          // A plain GET (no upgrade) is told what this URL is for.
          handler: (request, reply) => {
            const error = new CortexError(
              'not_found',
              `GET ${url} is the Responses WebSocket: connect with "Upgrade: websocket", or create a response with POST ${url}`,
            );
            sendError(reply, request.url, error, contextOf(request).id);
          },
          // Before the upgrade: a client holding its share of sockets is answered 429 (a socket may hold a
          // message of up to body_limit_bytes while it arrives; 96 stalled ones held ~915 MB).
          preHandler: (request, reply, done) => {
            const cap = this.config.gateway.maxWebsocketsPerKey;
            const open = this.perClient.of(clientOf(request));
            if (cap <= 0 || open < cap || !request.headers.upgrade) return done();
            this.deps.refusals.count('too_many_websockets');
            const error = new CortexError(
              'rate_limit_exceeded',
              `this key holds ${open} Responses WebSockets on this ` +
                'gateway already (gateway.max_websockets_per_key is ' +
                `${cap}): send more turns on an open one, or close one first`,
              { retryAfter: 1 },
            );
            sendError(reply, request.url, error, contextOf(request).id);
          },
          wsHandler: (socket, request) => {
            const client = clientOf(request);
            this.perClient.add(client);
            socket.on('close', () => this.perClient.add(client, -1));
            // The upgrade passed the key checks (http/access.ts); a stored key is checked again on every turn.
            const secret = contextOf(request).principal ? presentedKey(request) : undefined;
            const context = {
              client,
              request: contextOf(request),
              session: sessionFromHeaders(request.headers, this.config.gateway.sessionHeaders),
              gate:
                secret === undefined
                  ? null
                  : new TurnAdmission(
                      hashSecret(secret),
                      this.directory,
                      this.admission,
                      request.headers[PRIORITY_HEADER],
                    ),
            };
            const connection = new ResponsesConnection(socket, context, this.deps);
            this.connections.add(connection);
            socket.on('close', () => this.connections.delete(connection));
          },
        });
      }
    });
  }
}
