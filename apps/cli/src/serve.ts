import { spawn, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  connectBus,
  ensureNatsServer,
  startTracing,
  natsConnectOptions,
  natsReachable,
  NatsServerInstallError,
  redactNatsUrl,
  startNatsServer,
  type LocalNatsServer,
} from '@cortex/bus';
import { DRAIN_EXIT_MARGIN_MS, loadConfig, type CortexConfig } from '@cortex/config';
import { formatBanner } from './banner.js';
import { createLogger, isPretty } from './logger.js';
import { APP_SERVICES, isAppService, loadService, type AppService } from './services.js';
import { collectStatus } from './status.js';

/** `cortex serve <service>`: one service in this process, until SIGINT/SIGTERM. */
export async function serveOne(name: AppService): Promise<void> {
  const { config } = loadConfig();
  const logger = createLogger(name, config.logLevel, config.logFormat);
  // OpenTelemetry traces when the OTEL_* variables ask for them; nothing is loaded otherwise.
  const stopTracing = await startTracing(name);
  if (stopTracing)
    logger.log(
      'tracing: spans go to ' +
        `${process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? process.env.OTEL_EXPORTER_OTLP_ENDPOINT ?? 'the OTLP default endpoint'}`,
    );
  const nc = await connectBus({
    url: config.nats.url,
    auth: config.nats,
    replicas: config.nats.replicas,
    name: `cortex-${name}`,
    log: (line) => logger.warn(line),
    waitForServer: true,
  });
  const start = await loadService(name);
  const running = await start({ config, nc, logger });
  let stopping = false;
  const stop = async (signal: string): Promise<void> => {
    if (stopping) return;
    stopping = true;
    // In-flight work gets drain_timeout_ms (the worker cancels what still runs then); cancelling,
    // freeing models and closing NATS get the margin after it.
    const graceMs = config.drainTimeoutMs + DRAIN_EXIT_MARGIN_MS;
    logger.log(`${signal}: draining (up to ${config.drainTimeoutMs} ms)`);
    const timer = setTimeout(() => {
      logger.error(`did not stop within ${graceMs} ms; exiting`);
      process.exit(1);
    }, graceMs).unref();
    try {
      await running.close();
      await nc.drain();
      // The spans still held go out before the process does.
      await stopTracing?.();
    } catch (error) {
      logger.error(`shutdown: ${(error as Error).message}`);
    }
    clearTimeout(timer);
    process.exit(0);
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
}

/**
 * `cortex serve` with no or several names: make sure NATS is there (starting a local nats-server when
 * the configured URL is local and silent), then run each service as its own process.
 */
export async function serveMany(names: AppService[]): Promise<void> {
  const { config, path } = loadConfig();
  const logger = createLogger('launcher', config.logLevel, config.logFormat);
  logger.log(`config: ${path ?? 'built-in defaults'}`);
  let nats: LocalNatsServer | null = null;
  const env = { ...process.env };
  // A missing creds or seed file must say so, not read as "NATS does not answer".
  natsConnectOptions(config.nats.url, config.nats);
  if (!(await natsReachable(config.nats.url, 1_000, config.nats))) {
    const url = new URL(config.nats.url);
    if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) {
      throw new Error(
        `NATS at ${redactNatsUrl(config.nats.url)} does not answer or refuses ` +
          'the credentials; start it or check CORTEX_NATS_URL and CORTEX_NATS_*',
      );
    }
    // Fetches Debian's nats-server into .cortex/bin when none is installed, or says what to run.
    try {
      ensureNatsServer(undefined, (line) => logger.log(line));
    } catch (error) {
      if (!(error instanceof NatsServerInstallError)) throw error;
      throw new Error(`no NATS at ${redactNatsUrl(config.nats.url)} and ${error.message}`, { cause: error });
    }
    nats = await startNatsServer({
      port: Number(url.port || 4222),
      storeDir: resolve('.cortex/nats'),
      log: (line) => logger.log(line),
    });
    env.CORTEX_NATS_URL = nats.url;
  }

  const cli = fileURLToPath(new URL('./main.js', import.meta.url));
  const children = new Map<AppService, ChildProcess>();
  let stopping = false;
  const stopAll = async (code: number): Promise<never> => {
    stopping = true;
    const exits = [...children.values()].map(
      (child) =>
        new Promise<void>((done) =>
          child.exitCode !== null || child.signalCode !== null ? done() : child.once('exit', () => done()),
        ),
    );
    for (const child of children.values()) child.kill('SIGTERM');
    const killer = setTimeout(
      () => {
        for (const child of children.values()) child.kill('SIGKILL');
      },
      config.drainTimeoutMs + DRAIN_EXIT_MARGIN_MS + 2_000,
    );
    await Promise.all(exits);
    clearTimeout(killer);
    await nats?.stop();
    logger.log('stopped');
    process.exit(code);
  };
  process.on('SIGINT', () => void stopAll(0));
  process.on('SIGTERM', () => void stopAll(0));

  for (const name of names) {
    const child = spawn(process.execPath, [cli, 'serve', name], { env, stdio: ['ignore', 'inherit', 'inherit'] });
    children.set(name, child);
    child.on('exit', (code, signal) => {
      if (stopping) return;
      logger.error(`${name} exited (${signal ?? `code ${code}`}); stopping the rest`);
      void stopAll(1);
    });
  }
  await announceWhenReady(env.CORTEX_NATS_URL ?? config.nats.url, config, path, names, logger);
}

/** On a terminal (or with log_format: pretty) a banner for people; otherwise one log line for programs. */
async function announceWhenReady(
  url: string,
  config: CortexConfig,
  configPath: string | null,
  names: AppService[],
  logger: ReturnType<typeof createLogger>,
): Promise<void> {
  const nc = await connectBus({ url, auth: config.nats, name: 'cortex-launcher' });
  const deadline = Date.now() + 120_000;
  try {
    while (Date.now() < deadline) {
      const status = await collectStatus(nc, 500).catch(() => null);
      const up = new Set(status?.services.map((s) => s.service));
      const modelsReady =
        !names.includes('worker') ||
        (status?.fleet?.catalogue.some((m) => m.pinned && m.loaded) ?? false) ||
        status?.fleet?.catalogue.every((m) => !m.pinned);
      if (names.every((name) => up.has(name)) && modelsReady) {
        const catalogue = status?.fleet?.catalogue ?? [];
        if (isPretty(config.logFormat)) {
          console.log(
            formatBanner({
              listen: config.gateway.listen,
              metricsListen: names.includes('metrics') ? config.metrics.listen : null,
              configPath,
              catalogue,
            }),
          );
          return;
        }
        const models =
          catalogue
            .filter((m) => m.loaded)
            .map((m) => m.id)
            .join(', ') || 'none loaded yet';
        logger.log(`cortex is ready on http://${config.gateway.listen} (models: ${models}); Ctrl-C stops everything`);
        return;
      }
      await new Promise((done) => setTimeout(done, 500));
    }
    logger.warn('services did not all report ready within 120 s; `cortex status` shows which are missing');
  } finally {
    await nc.close();
  }
}

export function parseServiceNames(args: string[]): AppService[] {
  if (args.length === 0) return [...APP_SERVICES];
  for (const name of args) {
    if (!isAppService(name)) throw new Error(`unknown service "${name}"; choose from ${APP_SERVICES.join(', ')}`);
  }
  return args as AppService[];
}
