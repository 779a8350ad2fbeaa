import { BaseRpcContext, Server, type CustomTransportStrategy, type MessageHandler } from '@nestjs/microservices';
import { lastValueFrom, isObservable } from 'rxjs';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import { WORKER_ID_TOKEN } from '@cortex/contracts';
import { encodeJson, errorReply, REQUEST_ID_HEADER } from './envelope.js';
import { decodeLarge, encodeLarge } from './payload.js';
import { tracedHandler } from './bus-trace.js';

export interface BusServerOptions {
  nc: NatsConnection;
  /** Queue group: replicas of one service share the work of a subject. */
  queue?: string;
  /** Fills `{worker}` in handler patterns, for subjects addressed to one worker. */
  workerId?: string;
}

/** What a handler receives beside the payload (`@Ctx()`), like Nest's own `NatsContext`. */
export class BusContext extends BaseRpcContext<[string, string | undefined]> {
  get subject(): string {
    return this.args[0];
  }

  get requestId(): string | undefined {
    return this.args[1];
  }
}

/**
 * A Nest transport strategy over cortex's plain JSON bus protocol: `@MessagePattern(subject)` handlers
 * reply with a `{ok, data}` / `{ok: false, error}` envelope, `@EventPattern` handlers get fire-and-forget
 * messages. Unlike Nest's own NATS transport it adds no packet framing, so the CLI, tests and other
 * tools can talk to services with a bare NATS client.
 */
export class BusServer extends Server implements CustomTransportStrategy {
  private readonly subscriptions: Subscription[] = [];
  private readonly pending = new Set<Promise<void>>();

  constructor(private readonly options: BusServerOptions) {
    super();
  }

  listen(callback: (...optionalParams: unknown[]) => void): void {
    for (const [pattern, handler] of this.messageHandlers) {
      const subject = this.subjectOf(pattern);
      const queue = handler.isEventHandler ? undefined : this.options.queue;
      const sub = this.options.nc.subscribe(subject, {
        queue,
        callback: (error, msg) => {
          if (error) return this.logger.error(`subscription ${subject} failed: ${error.message}`);
          // Handlers run concurrently; a slow one must not hold up the next message.
          const done = this.dispatch(handler, msg).finally(() => this.pending.delete(done));
          this.pending.add(done);
        },
      });
      this.subscriptions.push(sub);
    }
    // Report "listening" only once the server has our subscriptions, or early requests find no responders.
    this.options.nc.flush().then(
      () => callback(),
      (error: Error) => callback(error),
    );
  }

  /** Stops taking messages, then waits for handlers already running so their replies go out. */
  async close(): Promise<void> {
    await Promise.allSettled(this.subscriptions.map((sub) => sub.drain()));
    await Promise.allSettled([...this.pending]);
  }

  on(): never {
    throw new Error('BusServer does not emit events; watch the NATS connection status instead');
  }

  unwrap<T>(): T {
    return this.options.nc as T;
  }

  private subjectOf(pattern: string): string {
    if (!pattern.includes(WORKER_ID_TOKEN)) return pattern;
    if (!this.options.workerId) throw new Error(`pattern ${pattern} needs a workerId`);
    return pattern.replace(WORKER_ID_TOKEN, this.options.workerId);
  }

  /** Handles one message under its `process <subject>` span (see tracedHandler); a failed handler fails the span. */
  private dispatch(handler: MessageHandler, msg: Msg): Promise<void> {
    return tracedHandler(msg.subject, msg.headers, Boolean(msg.reply), () => this.handle(handler, msg)).catch(
      () => undefined,
    );
  }

  private async handle(handler: MessageHandler, msg: Msg): Promise<void> {
    const context = new BusContext([msg.subject, msg.headers?.get(REQUEST_ID_HEADER) || undefined]);
    try {
      const data = await decodeLarge(this.options.nc, msg);
      let result: unknown = await handler(data, context);
      if (isObservable(result)) result = await lastValueFrom(result, { defaultValue: undefined });
      if (msg.reply) {
        const out = await encodeLarge(this.options.nc, { ok: true, data: result ?? null });
        msg.respond(out.data, { headers: out.headers });
      }
    } catch (error) {
      if (msg.reply) msg.respond(encodeJson(errorReply(error)));
      else this.logger.error(`event ${msg.subject} failed: ${(error as Error).message}`);
      // Answered above; thrown again only to mark the message's span failed (dispatch drops it).
      throw error;
    }
  }
}
