import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { LoggerService } from '@nestjs/common';
import { splitHostPort } from '@cortex/bus';
import type { CortexConfig } from '@cortex/config';
import { CortexError, modelAllowed, type KeyRecord } from '@cortex/contracts';
import type { Identification, KeyDirectory } from '../keys/key-directory.js';
import { sendError } from './error-response.js';
import { requestPath } from './request-path.js';
import { browserKey, isConsolePath } from '../console/console-access.js';
import { contextOf } from './request-context.js';

// The root is a reachability probe (`HEAD /`); it says nothing a caller without a key should not know.
const PUBLIC = new Set(['/', '/healthz', '/readyz', '/health']);
const FAMILIES = [
  {
    pattern: /^\/(v1\/)?chat\/completions(\/|\?|$)/,
    key: 'chatCompletions',
    name: 'Chat Completions',
    setting: 'chat_completions',
  },
  { pattern: /^\/(v1\/)?responses(\/|\?|$)/, key: 'responses', name: 'Responses', setting: 'responses' },
  { pattern: /^\/(v1\/)?messages(\/|\?|$)/, key: 'messages', name: 'Anthropic Messages', setting: 'messages' },
  { pattern: /^\/(v1\/)?completions(\/|\?|$)/, key: 'completions', name: 'legacy Completions', setting: 'completions' },
  { pattern: /^\/(v1\/)?embeddings(\/|\?|$)/, key: 'embeddings', name: 'Embeddings', setting: 'embeddings' },
  { pattern: /^\/(v1\/)?rerank(ing)?(\/|\?|$)/, key: 'rerank', name: 'Rerank', setting: 'rerank' },
] as const;

const digest = (key: string): Buffer => createHash('sha256').update(key).digest();

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

/**
 * API keys and endpoint families, checked before routing. Keys come as `Authorization: Bearer` or
 * `x-api-key` on every route; admin routes (`/admin/…`) need an admin key from the config. A key that
 * is not in the config is looked up among the stored keys (`directory`): revoked or expired is a 401
 * saying so, and a stored key's `models` limit what its requests may name (403). Without keys the
 * gateway refuses to listen beyond loopback unless `auth: none` says that is intended.
 */
export function installAccess(
  fastify: FastifyInstance,
  config: CortexConfig,
  logger: LoggerService,
  directory: KeyDirectory,
): void {
  const { auth, gateway } = config;
  const apiKeys = [...auth.apiKeys, ...auth.adminKeys].map(digest);
  const adminKeys = auth.adminKeys.map(digest);
  // Keys the config declares with limits (auth.keys) are keys too: with any, a request needs one.
  const anyKeys = apiKeys.length + auth.keys.length > 0;
  const { host } = splitHostPort(gateway.listen);
  if (auth.mode === 'keys' && !anyKeys) {
    if (!isLoopback(host)) {
      throw new Error(
        `gateway.listen is ${gateway.listen} but no API keys are configured: set auth.api_keys ` +
          '(or CORTEX_API_KEYS), or set "auth: none" to serve without authentication',
      );
    }
    logger.warn(
      `no API keys configured: serving without authentication, on loopback (${gateway.listen}) only`,
      'gateway',
    );
  }
  if (auth.mode === 'none') logger.warn(`auth: none — anyone who reaches ${gateway.listen} can use the API`, 'gateway');
  if (gateway.endpoints.chatCompletions) {
    logger.log(
      'Chat Completions (/v1/chat/completions) is enabled: a legacy API kept for existing clients; new clients should use /v1/responses',
      'gateway',
    );
  }

  const matches = (presented: string | undefined, keys: Buffer[]): boolean => {
    if (!presented) return false;
    const candidate = digest(presented);
    let found = false;
    for (const key of keys) found = timingSafeEqual(candidate, key) || found;
    return found;
  };

  fastify.addHook('onRequest', (request, reply, done) => {
    const path = requestPath(request);
    if (PUBLIC.has(path)) return done();
    const family = FAMILIES.find((f) => f.pattern.test(path));
    if (family && !gateway.endpoints[family.key]) {
      sendError(
        reply,
        request.url,
        new CortexError(
          'not_found',
          `the ${family.name} API is disabled on this gateway (gateway.endpoints.${family.setting})`,
        ),
        contextOf(request).id,
      );
      return;
    }
    if (auth.mode === 'none') return done();
    const presented = presentedKey(request) ?? browserKey(request, path, config.gateway.allowedOrigins);
    const admin = path.startsWith('/admin/') || path === '/admin' || isConsolePath(path);
    const decide = (identity: Identification | null): void => {
      if (identity?.kind === 'refused') {
        sendError(reply, request.url, identity.error, contextOf(request).id);
        return;
      }
      if (identity?.kind === 'key') {
        contextOf(request).admitKey(identity.principal);
        return done();
      }
      // No keys in the config: the loopback development mode, where any key (or none) passes.
      if (!anyKeys) return done();
      if (!matches(presented, admin ? adminKeys : apiKeys)) {
        const what = presented ? 'is not valid' : 'is missing';
        const how = admin ? 'an admin key' : 'an API key';
        sendError(
          reply,
          request.url,
          new CortexError(
            'unauthorized',
            `the API key ${what}: send ${how} as "Authorization: Bearer <key>" or "x-api-key: <key>"`,
          ),
          contextOf(request).id,
        );
        return;
      }
      done();
    };
    if (admin || !presented || matches(presented, apiKeys)) return decide(null);
    const identity = directory.identify(presented);
    // Unknown here, but perhaps made a moment ago through another gateway: look again once this view has caught up.
    const later = identity.kind === 'unknown' ? directory.identifyAfterCatchUp(presented) : null;
    if (later) {
      later.then(decide).catch((error: Error) => {
        logger.error(`${contextOf(request).id}: the key check failed: ${error.message}`, 'gateway');
        if (!reply.sent)
          sendError(
            reply,
            request.url,
            new CortexError('internal', 'the API key could not be checked; try again'),
            contextOf(request).id,
          );
      });
    } else decide(identity);
  });
}

/**
 * A stored key's `models`: a request naming another model is a 403 in the route's dialect. Runs once
 * the body is parsed; `GET /v1/models` shows such a key only its own models.
 */
export function installModelAccess(fastify: FastifyInstance): void {
  fastify.addHook('preValidation', (request, reply, done) => {
    const principal = contextOf(request).principal;
    if (!principal || principal.key.models === null) return done();
    const error = modelRefusal(principal.key, (request.body as { model?: unknown } | null | undefined)?.model);
    if (!error) return done();
    sendError(reply, request.url, error, contextOf(request).id);
  });
}

/** The 403 for a body naming a model the stored key may not use; null when it may (or names none). */
export function modelRefusal(key: KeyRecord, model: unknown): CortexError | null {
  if (key.models === null || typeof model !== 'string' || modelAllowed(key, model)) return null;
  return new CortexError(
    'permission_denied',
    `the API key ${key.id} ("${key.name}") may not use the model '${model}'; it may use: ${key.models.join(', ')}`,
    { param: 'model' },
  );
}

/** The key a request presents: `Authorization: Bearer <key>` or `x-api-key`. */
export function presentedKey(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (typeof header === 'string') {
    const match = /^Bearer\s+(.+)$/i.exec(header.trim());
    if (match?.[1]) return match[1].trim();
  }
  const apiKey = request.headers['x-api-key'];
  return typeof apiKey === 'string' && apiKey ? apiKey : undefined;
}
