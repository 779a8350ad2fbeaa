import type { ServerResponse } from 'node:http';
import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { Subscription } from '@nats-io/transport-node';
import { BusClient } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { Subjects, type PendingRun } from '@cortex/contracts';
import { InferenceService } from '../inference/inference.service.js';
import { consoleHeading } from './console-title.js';
import { ConsoleFeed } from './console.feed.js';
import { decideResume, tooFarBehind, type FeedEvent } from './feed-state.js';

/** A page may fall this far behind (bytes its socket has not sent) before it is dropped and resynced. */
export const CLIENT_BUFFER_LIMIT = 1024 * 1024;
/** After the last page leaves, the feed stays up this long, so a reload resumes instead of resyncing. */
const LINGER_MS = 5_000;
const KEEPALIVE_MS = 15_000;
/** A request tracked longer than this ended without a word (its end is what removes it): dropped. */
const RUN_MAX_AGE_MS = 30 * 60_000;

/** One page's feed connection. */
export class FeedClient {
  /** False until the page got its snapshot or replay; events before that are in the snapshot. */
  synced = false;

  constructor(
    readonly raw: ServerResponse,
    private readonly epoch: string,
  ) {}

  get closed(): boolean {
    return this.raw.destroyed || this.raw.writableEnded;
  }

  /** Writes one frame, or drops the page when it is too far behind; false when it is gone. */
  write(frame: string): boolean {
    if (this.closed) return false;
    if (tooFarBehind(this.raw.writableLength, CLIENT_BUFFER_LIMIT)) {
      // Its browser reconnects with Last-Event-ID and is replayed or sent a fresh snapshot.
      this.raw.destroy();
      return false;
    }
    this.raw.write(frame);
    return true;
  }

  send(event: FeedEvent): boolean {
    return this.write(`id: ${this.epoch}.${event.seq}\nevent: ${event.event}\ndata: ${event.data}\n\n`);
  }
}

/**
 * The pages watching the console. The first one starts the feed (its subscriptions and timers), the
 * last one to leave stops it after a short linger: with no page open the gateway subscribes to
 * nothing for the console and computes nothing.
 */
@Injectable()
export class ConsoleHub implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('console');
  private readonly clients = new Set<FeedClient>();
  private feed: ConsoleFeed | null = null;
  private linger: NodeJS.Timeout | null = null;
  private keepalive: NodeJS.Timeout | null = null;
  private runsAsked: Subscription | null = null;

  constructor(
    private readonly bus: BusClient,
    @Inject(CONFIG) private readonly config: CortexConfig,
    private readonly inference: InferenceService,
  ) {}

  /**
   * Every gateway answers the console's ask for the requests it runs (a page may watch another
   * gateway): the registry's rows with their stored key and account. Nothing runs until asked.
   */
  onModuleInit(): void {
    this.runsAsked = this.bus.nc.subscribe(Subjects.gatewayRuns, {
      callback: (error, message) => {
        if (error) return;
        const now = Date.now();
        this.inference.pending.sweep(now, RUN_MAX_AGE_MS);
        const runs: PendingRun[] = this.inference.pending.list();
        message.respond(JSON.stringify({ runs }));
      },
    });
  }

  /** Whether the feed runs (someone watches, or did within the linger). */
  get running(): boolean {
    return this.feed !== null;
  }

  get title(): string {
    return this.config.gateway.consoleTitle;
  }

  /** What the header shows after the product name (see consoleHeading). */
  get heading(): string {
    return consoleHeading(this.title);
  }

  /** Ask the fleet view again now: a page changed something. */
  refresh(): void {
    this.feed?.refresh();
  }

  /** Serves one page's feed on `raw` until the page goes away. */
  async attach(raw: ServerResponse, lastEventId: string | undefined): Promise<void> {
    const feed = this.start();
    const client = new FeedClient(raw, feed.epoch);
    this.clients.add(client);
    raw.on('close', () => this.detach(client));
    raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    // A dropped page comes back after a second.
    raw.write('retry: 1000\n\n');
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([feed.ready, new Promise((done) => (timer = setTimeout(done, 5_000)))]).finally(() =>
      clearTimeout(timer),
    );
    if (client.closed || this.feed !== feed) return;
    const resume = decideResume(lastEventId, feed.epoch, feed.oldestSeq, feed.nextSeq);
    if (resume.kind === 'replay') {
      for (const event of feed.after(resume.after)) if (!client.send(event)) return;
    } else {
      client.write(
        `id: ${feed.epoch}.${feed.nextSeq - 1}\nevent: snapshot\ndata: ${JSON.stringify({ ...feed.snapshot(), resync: resume.why })}\n\n`,
      );
    }
    client.synced = true;
  }

  private start(): ConsoleFeed {
    if (this.linger) clearTimeout(this.linger);
    this.linger = null;
    if (this.feed) return this.feed;
    this.logger.log('a console page is watching: starting the feed');
    const feed = new ConsoleFeed(
      this.bus,
      { title: this.heading, fleetIntervalMs: 1_000, liveIntervalMs: 250 },
      (event) => {
        for (const client of this.clients) if (client.synced) client.send(event);
      },
      (message) => this.logger.warn(message),
    );
    this.feed = feed;
    this.keepalive = setInterval(() => {
      for (const client of this.clients) client.write(': keepalive\n\n');
    }, KEEPALIVE_MS);
    return feed;
  }

  private detach(client: FeedClient): void {
    this.clients.delete(client);
    if (this.clients.size > 0 || this.linger) return;
    this.linger = setTimeout(() => this.stop(), LINGER_MS);
    // Pages closed by the gateway's own shutdown land here too: the timer must not hold the process.
    this.linger.unref();
  }

  private stop(): void {
    this.linger = null;
    if (this.clients.size > 0) return;
    if (this.keepalive) clearInterval(this.keepalive);
    this.keepalive = null;
    this.feed?.stop();
    this.feed = null;
    this.logger.log('no console page is watching: feed stopped');
  }

  onModuleDestroy(): void {
    this.runsAsked?.unsubscribe();
    for (const client of this.clients) client.raw.destroy();
    this.clients.clear();
    if (this.linger) clearTimeout(this.linger);
    this.stop();
  }
}
