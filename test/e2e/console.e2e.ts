import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { freePort } from '@cortex/bus';
import { encodeFixtureModel } from '@cortex/fixtures';
import { decodeLoadProgress, decodeMessage, heartbeatSubject, Heartbeat, Subjects } from '@cortex/contracts';
import { FIXTURE_CATALOGUE, startStack, startTestNats, waitFor, type TestStack } from '@cortex/testing';

const EVERYTHING = join(
  dirname(createRequire(import.meta.url).resolve('@modelcontextprotocol/server-everything/package.json')),
  'dist/index.js',
);

/**
 * The web console in a real headless Chromium (Debian's `chromium-headless-shell`, which `.ci/run`
 * installs; `CORTEX_CHROMIUM` names another binary) against a real stack: separate service processes,
 * a real NATS, node-llama-cpp on fixture models.
 */
const CHROMIUM = [
  process.env.CORTEX_CHROMIUM,
  '/usr/lib/chromium/chromium-headless-shell',
  '/usr/bin/chromium-headless-shell',
  '/usr/lib/chromium/chromium',
  '/usr/bin/chromium',
].find((path): path is string => Boolean(path && existsSync(path)));
const ROOT = resolve(fileURLToPath(new URL('../../..', import.meta.url)));
/** Where the screenshots go: docs/console when CORTEX_CONSOLE_SCREENSHOTS=1, else a temp dir. */
const SHOTS =
  process.env.CORTEX_CONSOLE_SCREENSHOTS === '1'
    ? join(ROOT, 'docs/console')
    : mkdtempSync(join(tmpdir(), 'cortex-console-'));
const ADMIN = 'sk-admin';
const user = [{ role: 'user' as const, content: 'Hi' }];

describe(
  'console e2e',
  {
    skip: CHROMIUM
      ? false
      : 'no Chromium binary found (apt-get install chromium-headless-shell, or set CORTEX_CHROMIUM)',
  },
  () => {
    let stack: TestStack;
    let monitor: string;
    let browser: Browser;
    let context: BrowserContext;
    let page: Page;
    let client: OpenAI;
    let files: Server;

    before(async () => {
      // A model behind a slow download: ranged reads (its header, to size it) at once, the file itself at
      // 1% every 200 ms, so its load runs for 20 s unless cancelled.
      const gguf = encodeFixtureModel('cortex-chat');
      files = createServer((req, res) => {
        const range = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
        if (req.method === 'HEAD' || range) {
          const [start, end] = range
            ? [Number(range[1]), Math.min(Number(range[2]), gguf.length - 1)]
            : [0, gguf.length - 1];
          res.writeHead(range ? 206 : 200, {
            'content-type': 'application/octet-stream',
            'content-length': end - start + 1,
            ...(range && { 'content-range': `bytes ${start}-${end}/${gguf.length}` }),
          });
          res.end(req.method === 'HEAD' ? undefined : gguf.subarray(start, end + 1));
          return;
        }
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': gguf.length });
        const step = Math.ceil(gguf.length / 100);
        let sent = 0;
        const timer = setInterval(() => {
          const chunk = gguf.subarray(sent, sent + step);
          sent += chunk.length;
          res.write(chunk);
          if (sent >= gguf.length) {
            clearInterval(timer);
            res.end();
          }
        }, 200);
        res.on('close', () => clearInterval(timer));
      });
      const filesPort = await freePort();
      await new Promise<void>((done) => files.listen(filesPort, '127.0.0.1', done));
      // NATS with its monitoring port, to see which subscriptions the gateway holds.
      const port = await freePort();
      monitor = `http://127.0.0.1:${port}`;
      const dir = mkdtempSync(join(tmpdir(), 'cortex-console-nats-'));
      writeFileSync(join(dir, 'nats.conf'), `http: "127.0.0.1:${port}"\n`);
      stack = await startStack({
        nats: await startTestNats({ configFile: join(dir, 'nats.conf') }),
        models: [
          ...FIXTURE_CATALOGUE.filter((m) => m.id !== 'cortex-reasoning'),
          { id: 'cortex-reasoning', file: 'fixture:cortex-reasoning', context_size: 512, slots: 2 },
          { id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 8192, slots: 2, pinned: true },
          { id: 'cortex-embed', file: 'fixture:cortex-embed', kind: 'embedding', context_size: 128, slots: 1 },
          { id: 'cortex-rank', file: 'fixture:cortex-rank', kind: 'ranking', context_size: 256, slots: 1 },
          { id: 'cortex-tools-wait', file: 'fixture:cortex-tools-wait', context_size: 4096, slots: 1 },
          { id: 'cortex-slow', file: `http://127.0.0.1:${filesPort}/cortex-slow.gguf`, context_size: 512, slots: 1 },
        ],
        config: {
          auth: { api_keys: ['sk-user'], admin_keys: [ADMIN] },
          worker: { id: 'w1', heartbeat_ms: 100 },
          gateway: { console_title: 'lab fleet' },
          // Its long operation outlasts the call's 3 s: long enough to be seen waiting.
          mcp: {
            servers: [
              { label: 'everything', command: process.execPath, args: [EVERYTHING, 'stdio'], timeout_ms: 3_000 },
            ],
          },
        },
      });
      client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'sk-user', maxRetries: 0 });
      // gw.test is this machine: a host that is not localhost, over plain http (where a browser sends no Sec-Fetch-*).
      browser = await chromium.launch({
        executablePath: CHROMIUM,
        args: ['--no-sandbox', '--host-resolver-rules=MAP gw.test 127.0.0.1'],
      });
    });

    after(async () => {
      await browser?.close();
      await stack?.stop();
      files?.closeAllConnections();
      await new Promise((done) => files?.close(done));
    });

    /** Subjects the server holds subscriptions on, from its monitoring endpoint. */
    const subscribed = async (): Promise<string[]> => {
      const body = (await (await fetch(`${monitor}/subsz?subs=1&limit=10000`)).json()) as {
        subscriptions_list?: Array<{ subject: string }>;
      };
      return (body.subscriptions_list ?? []).map((s) => s.subject);
    };

    /** The worker's own word on a model: its next heartbeat. */
    const heartbeatModel = async (model: string) => {
      const sub = stack.nc.subscribe(heartbeatSubject('w1'), { max: 1 });
      for await (const message of sub)
        return decodeMessage(Heartbeat, message.json(), 'heartbeat').models.find((m) => m.id === model);
      return undefined;
    };

    it('console - without the admin key the page and its feed are refused', async () => {
      for (const [path, headers] of [
        ['/console', {}],
        ['/console', { authorization: 'Bearer sk-user' }],
        ['/console?key=sk-user', {}],
        ['/console/console.js', {}],
        ['/admin/console/feed', {}],
        ['/admin/console/feed', { authorization: 'Bearer sk-user' }],
      ] as const) {
        const response = await fetch(`${stack.baseUrl}${path}`, { headers, redirect: 'manual' });
        assert.equal(response.status, 401, `${path} ${JSON.stringify(headers)}`);
        assert.match(((await response.json()) as { error: { message: string } }).error.message, /admin key/);
      }
      const anonymous = await browser.newPage();
      const refused = await anonymous.goto(`${stack.baseUrl}/console`);
      assert.equal(refused?.status(), 401);
      await anonymous.close();
      const bad = await fetch(`${stack.baseUrl}/admin/requests/cancel`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: '{"workerId":"w1"}',
      });
      assert.equal(bad.status, 400);
      assert.equal(((await bad.json()) as { error: { param: string } }).error.param, 'runId');
    });

    it('console - nothing subscribes for the console until a page opens', async () => {
      assert.ok(!(await subscribed()).includes('llm.stream.v1.>'), 'no token stream subscription with no page open');
      context = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: 'light' });
      page = await context.newPage();
      const opened = await page.goto(`${stack.baseUrl}/console?key=${ADMIN}`);
      assert.equal(opened?.status(), 200);
      assert.equal(new URL(page.url()).search, '', 'the key leaves the address bar');
      await page.locator('[data-test=connection]', { hasText: 'live' }).waitFor({ timeout: 5_000 });
      await waitFor(async () => (await subscribed()).includes('llm.stream.v1.>'), 3_000);
    });

    it('console - the workers and models appear', async () => {
      assert.equal(await page.locator('[data-test=title]').textContent(), 'lab fleet');
      assert.equal(await page.locator('[data-test=heading]').innerText(), 'cortex lab fleet');
      await page.locator('[data-test=worker][data-worker=w1]').waitFor({ timeout: 5_000 });
      await page
        .locator('[data-test=worker-model][data-worker=w1][data-model=cortex-chat][data-state=ready]')
        .waitFor({ timeout: 5_000 });
      await page
        .locator('[data-test=worker-model][data-worker=w1][data-model=cortex-loop][data-state=ready]')
        .waitFor({ timeout: 5_000 });
      // The worker's prompt cache beyond its slots (worker.prompt_cache_mb, 1024 by default).
      assert.match(
        (await page.locator('[data-test=worker][data-worker=w1] [data-test=prompt-cache]').textContent()) ?? '',
        /^prompt cache memory \d+ MiB of 1\.0 GiB$/,
      );
      const catalogue = await page
        .locator('[data-test=catalogue-model]')
        .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-model')));
      assert.deepEqual(catalogue.sort(), [
        'cortex-chat',
        'cortex-embed',
        'cortex-loop',
        'cortex-rank',
        'cortex-reasoning',
        'cortex-slow',
        'cortex-tools',
        'cortex-tools-wait',
      ]);
      // The fleet's verdict in the header, the one GET /health answers.
      await page.locator('[data-test=health].ok', { hasText: 'ok' }).waitFor({ timeout: 10_000 });
      const verdict = (await (await fetch(`${stack.baseUrl}/health`)).json()) as { status: string };
      assert.equal(verdict.status, 'ok');
      assert.equal(
        await page.locator('[data-test=health]').getAttribute('title'),
        'every worker up; every model can be served',
      );
      await page.screenshot({ path: join(SHOTS, 'fleet-light.png') });
      await page.locator('#theme').click();
      await page.screenshot({ path: join(SHOTS, 'fleet-dark.png') });
      await page.locator('#theme').click();
    });

    it('console - a fleet titled with the product name reads "cortex" once in the header, "cortex · console" in the tab', async () => {
      const address = `127.0.0.1:${await freePort()}`;
      const gateway = stack.spawnService('gateway', { CORTEX_LISTEN: address, CORTEX_CONSOLE_TITLE: 'cortex' });
      const other = await browser.newContext({ viewport: { width: 1280, height: 800 } });
      try {
        await waitFor(async () => {
          if (gateway.exitCode !== null) throw new Error(`the gateway on ${address} exited`);
          return (await fetch(`http://${address}/healthz`).catch(() => null))?.ok === true;
        }, 60_000);
        const named = await other.newPage();
        assert.equal((await named.goto(`http://${address}/console?key=${ADMIN}`))?.status(), 200);
        await named.locator('[data-test=connection]', { hasText: 'live' }).waitFor({ timeout: 5_000 });
        assert.equal(await named.locator('[data-test=heading]').innerText(), 'cortex');
        assert.equal(await named.locator('[data-test=title]').isHidden(), true);
        assert.equal(await named.title(), 'cortex · console');
      } finally {
        await other.close();
        gateway.kill('SIGTERM');
      }
    });

    it('console - a request sent through the API shows in live with a growing token count, then in activity', async () => {
      await page.locator('#tabs button[data-tab=live]').click();
      const stream = await client.chat.completions.create({
        model: 'cortex-loop',
        messages: user,
        stream: true,
        max_tokens: 6000,
      });
      const row = page.locator('[data-test=live-row][data-model=cortex-loop]');
      let chunks = 0;
      const reading = (async () => {
        for await (const chunk of stream) if (chunk.choices[0]?.delta.content) chunks++;
      })();
      await waitFor(() => chunks > 0, 5_000);
      const firstSeen = Date.now();
      await row.first().waitFor({ timeout: 2_000 });
      const seenAfterMs = Date.now() - firstSeen;
      const first = Number(await row.first().getAttribute('data-tokens'));
      await waitFor(async () => Number(await row.first().getAttribute('data-tokens')) > first, 3_000, 50);
      await page.screenshot({ path: join(SHOTS, 'live-light.png') });
      await page.locator('#theme').click();
      await page.screenshot({ path: join(SHOTS, 'live-dark.png') });
      await page.locator('#theme').click();
      await reading;
      assert.ok(seenAfterMs < 1_000, `the row showed ${seenAfterMs} ms after the first token reached the client`);
      await row.first().waitFor({ state: 'detached', timeout: 5_000 });
      await page.locator('#tabs button[data-tab=activity]').click();
      await page.locator('[data-test=activity-row][data-model=cortex-loop]').first().waitFor({ timeout: 5_000 });
      // The request is counted in the chart's last minute (or the one before, across a minute's turn).
      const perMinute = JSON.parse(
        (await page.locator('[data-test=chart-rpm]').getAttribute('data-values')) ?? '[]',
      ) as number[];
      assert.equal(perMinute.length, 30);
      assert.ok(
        (perMinute.at(-1) ?? 0) + (perMinute.at(-2) ?? 0) >= 1,
        `requests per minute: ${JSON.stringify(perMinute.slice(-3))}`,
      );
      await page.screenshot({ path: join(SHOTS, 'activity-light.png') });
      await page.locator('#theme').click();
      await page.screenshot({ path: join(SHOTS, 'activity-dark.png') });
      await page.locator('#theme').click();
    });

    it('console - a response waiting on an MCP tool between its model turns shows the tool it waits on', async () => {
      await page.locator('#tabs button[data-tab=live]').click();
      const answered = client.responses.create({
        model: 'cortex-tools-wait',
        input: 'Wait.',
        tools: [
          {
            type: 'mcp',
            server_label: 'everything',
            allowed_tools: ['trigger-long-running-operation'],
            require_approval: 'never',
          },
        ],
      } as never);
      const row = page.locator('[data-test=live-row][data-state=tool]');
      await row.first().waitFor({ timeout: 5_000 });
      assert.equal(
        await row.first().locator('[data-test=live-state]').textContent(),
        'tool everything · trigger-long-running-operation',
      );
      assert.equal(await row.first().getAttribute('data-model'), 'cortex-tools-wait');
      const response = (await answered) as OpenAI.Responses.Response;
      assert.equal(response.output[1]?.type, 'mcp_call');
      await row.first().waitFor({ state: 'detached', timeout: 5_000 });
    });

    it('console - cancelling a generation from the page frees the worker slot', async () => {
      await page.locator('#tabs button[data-tab=live]').click();
      const stream = await client.chat.completions.create({
        model: 'cortex-loop',
        messages: user,
        stream: true,
        max_tokens: 8000,
      });
      let finish: string | null = null;
      const reading = (async () => {
        for await (const chunk of stream) finish = chunk.choices[0]?.finish_reason ?? finish;
      })();
      const row = page.locator('[data-test=live-row][data-model=cortex-loop]').first();
      await row.waitFor({ timeout: 5_000 });
      assert.equal((await heartbeatModel('cortex-loop'))?.inFlight, 1, 'the worker runs it');
      // The row re-renders with every token count; its button must stay the element a press began on.
      const button = await row.locator('[data-test=cancel]').elementHandle({ timeout: 5_000 });
      const tokens = Number(await row.getAttribute('data-tokens'));
      await page.waitForFunction(
        (before) =>
          Number(document.querySelector('[data-test=live-row][data-model=cortex-loop]')?.getAttribute('data-tokens')) >
          before,
        tokens,
        { timeout: 5_000 },
      );
      assert.ok(await button.evaluate((node) => node.isConnected), 'the cancel button outlived a re-render of its row');
      await button.click();
      await row.waitFor({ state: 'detached', timeout: 5_000 });
      await reading.catch(() => undefined);
      await waitFor(async () => (await heartbeatModel('cortex-loop'))?.inFlight === 0, 5_000);
      assert.notEqual(finish, 'length', 'the generation ended before max_tokens');
    });

    it('console - a load started from the page shows progress and ends ready', async () => {
      await page.locator('#tabs button[data-tab=fleet]').click();
      // Fixture models load in milliseconds: record every progress the page renders, however briefly.
      await page.evaluate(() => {
        const seen: string[] = [];
        (window as unknown as { progressSeen: string[] }).progressSeen = seen;
        new MutationObserver(() => {
          document
            .querySelectorAll('[data-test=loading], [data-test=load-progress]')
            .forEach((node) => seen.push(node.textContent ?? ''));
        }).observe(document.body, { subtree: true, childList: true, characterData: true });
      });
      const row = page.locator('[data-test=catalogue-model][data-model=cortex-reasoning]');
      await row.locator('[data-test=load-worker]').selectOption('w1');
      await row.locator('[data-test=load]').click();
      await page
        .locator('[data-test=worker-model][data-worker=w1][data-model=cortex-reasoning][data-state=ready]')
        .waitFor({ timeout: 10_000 });
      const seen = await page.evaluate(() => (window as unknown as { progressSeen: string[] }).progressSeen);
      assert.ok(
        seen.some((text) => /cortex-reasoning on w1.*\d+%|loading \d+%/.test(text)),
        `progress shown: ${JSON.stringify(seen.slice(0, 5))}`,
      );
      await page.locator('#tabs button[data-tab=activity]').click();
      await page
        .locator('[data-test=timeline-entry][data-kind=loaded]', { hasText: 'cortex-reasoning loaded on w1' })
        .first()
        .waitFor({ timeout: 5_000 });
      await page.locator('#tabs button[data-tab=fleet]').click();
    });

    it('console - a load in progress shows what started it, who waits, its progress and time left; cancelling it stops it', async () => {
      await page.locator('#tabs button[data-tab=fleet]').click();
      const row = page.locator('[data-test=catalogue-model][data-model=cortex-slow]');
      // Every load's first word is a progress of 0 in its load phase: count how many loads begin.
      let starts = 0;
      let progressed = 0;
      const progressSub = stack.nc.subscribe(Subjects.modelProgressed, {
        callback: (_, message) => {
          const event = decodeLoadProgress(message.json());
          if (event.model === 'cortex-slow') progressed++;
          if (event.model === 'cortex-slow' && event.fraction === 0 && event.phase === 'loading') starts++;
        },
      });
      await row.locator('[data-test=load-worker]').selectOption('w1');
      await row.locator('[data-test=load]').click();
      const progress = page.locator('[data-test=load-progress][data-model=cortex-slow]');
      await progress.waitFor({ timeout: 10_000 });
      // A request for the model, with a stored key, waits on the same load.
      const created = await fetch(`${stack.baseUrl}/admin/keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'console-wait', account: 'team-w' }),
      });
      const key = (await created.json()) as { id: string; secret: string };
      const keyed = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: key.secret, maxRetries: 0 });
      const waiting = keyed.chat.completions.create({ model: 'cortex-slow', messages: user, max_tokens: 5 }).then(
        () => null,
        (error: Error & { status?: number }) => error,
      );
      await progress
        .locator('[data-test=load-facts][data-trigger=console][data-waiting="1"]')
        .waitFor({ timeout: 10_000 });
      // Live shows it before it generates: waiting on the load, with its key and account.
      const waitingRow = page.locator('[data-test=live-row][data-model=cortex-slow][data-state=loading]');
      await waitingRow.waitFor({ state: 'attached', timeout: 5_000 });
      assert.equal(await waitingRow.locator('[data-test=live-owner]').textContent(), `${key.id} · team-w`);
      assert.match(
        (await progress.locator('[data-test=load-facts]').textContent()) ?? '',
        /for the console · 1 waiting/,
      );
      // The download's real percentage, then an estimate of the time left once it has moved.
      await page
        .locator('[data-test=load-progress][data-model=cortex-slow]', {
          hasText: /downloading [1-9]\d?% · ~[\d.]+ m?s left/,
        })
        .waitFor({ timeout: 10_000 });
      await page
        .locator('[data-test=worker-model][data-worker=w1][data-model=cortex-slow][data-state=loading]')
        .waitFor({ timeout: 5_000 });
      await page.screenshot({ path: join(SHOTS, 'fleet-loading-light.png') });
      // A press held while the load's progress goes on: the view re-renders behind it, and the release still clicks.
      const box = await progress.locator('[data-test=cancel-load]').boundingBox();
      assert.ok(box, 'the cancel button is on screen');
      await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
      const pressedAt = progressed;
      await page.mouse.down();
      await waitFor(() => progressed >= pressedAt + 2, 5_000, 20);
      await new Promise((done) => setTimeout(done, 300)); // the feed brings the page those events too
      await page.mouse.up();
      const error = await waiting;
      assert.equal(
        error?.status,
        503,
        `the waiting request is answered with the cancel: ${String(error)}; the page said: ${await page.locator('#toast').textContent()}`,
      );
      assert.match(error?.message ?? '', /load of cortex-slow on w1 was cancelled/);
      await progress.waitFor({ state: 'detached', timeout: 5_000 });
      await page
        .locator('[data-test=worker-model][data-model=cortex-slow]')
        .waitFor({ state: 'detached', timeout: 5_000 });
      assert.equal(await heartbeatModel('cortex-slow'), undefined, 'the worker holds nothing of it');
      progressSub.unsubscribe();
      assert.equal(starts, 1, 'the waiting request did not start the load again');
      await page.locator('#tabs button[data-tab=activity]').click();
      await page
        .locator('[data-test=timeline-entry][data-kind=load_failed]', {
          hasText: /cortex-slow failed to load on w1 \(.*cancelled/,
        })
        .first()
        .waitFor({ timeout: 5_000 });
      await page.locator('#tabs button[data-tab=fleet]').click();
    });

    it('console - unloading from the page unloads', async () => {
      const row = page.locator('[data-test=worker-model][data-worker=w1][data-model=cortex-reasoning]');
      await row.locator('[data-test=unload]').click();
      await row.waitFor({ state: 'detached', timeout: 10_000 });
      // The router's view (which the page shows) can drop the model a heartbeat before the worker's own word does.
      await waitFor(async () => (await heartbeatModel('cortex-reasoning')) === undefined, 5_000);
    });

    it('console - the playground streams an answer with its reasoning apart, and tool calls as calls', async () => {
      await page.locator('#tabs button[data-tab=playground]').click();
      await page.locator('#chat-model').selectOption('cortex-reasoning');
      await page.locator('#chat-send').click();
      const answer = page.locator('[data-test=chat-answer]').first();
      await page
        .locator('[data-test=chat-answer]', { hasText: 'Hello after thinking.' })
        .first()
        .waitFor({ timeout: 15_000 });
      assert.equal(await answer.textContent(), 'Hello after thinking.');
      assert.equal(
        await page.locator('[data-test=chat-reasoning]').first().textContent(),
        'The user wants a greeting.',
      );
      await page.locator('#chat-model').selectOption('cortex-tools');
      await page.locator('#chat-tools').check();
      await page.locator('#chat-input').fill('Weather in Paris?');
      await page.locator('#chat-send').click();
      // The call's arguments stream into the page: wait for them whole, not for the call's first piece.
      const call = 'call get_weather({"city": "Paris"})';
      await page.locator('[data-test=chat-tool-call]', { hasText: call }).first().waitFor({ timeout: 15_000 });
      assert.equal(await page.locator('[data-test=chat-tool-call]').first().textContent(), call);
    });

    it('console - queue depth per model is charted from the fleet view', async () => {
      await page.locator('#tabs button[data-tab=activity]').click();
      // Two slots: the third stream waits in the worker's queue until one ends (or is aborted below).
      const controller = new AbortController();
      const streams = await Promise.all(
        [1, 2, 3].map(() =>
          client.chat.completions.create(
            { model: 'cortex-loop', messages: user, stream: true, max_tokens: 8000 },
            { signal: controller.signal },
          ),
        ),
      );
      const reading = streams.map(async (stream) => {
        for await (const chunk of stream) void chunk;
      });
      try {
        await waitFor(
          async () =>
            ((
              JSON.parse((await page.locator('[data-test=chart-queue]').getAttribute('data-max')) ?? '{}') as Record<
                string,
                number
              >
            )['cortex-loop'] ?? 0) >= 1,
          15_000,
          100,
        );
        // Live shows the third as queued on its worker, with no tokens yet.
        const queued = page.locator('[data-test=live-row][data-model=cortex-loop][data-state=queued]');
        await queued.first().waitFor({ state: 'attached', timeout: 5_000 });
        assert.equal(await queued.first().getAttribute('data-tokens'), '0');
        await waitFor(
          async () =>
            (await page.locator('[data-test=live-row][data-model=cortex-loop][data-state=generating]').count()) === 2,
          5_000,
        );
      } finally {
        controller.abort();
        await Promise.allSettled(reading);
      }
      await waitFor(async () => (await heartbeatModel('cortex-loop'))?.inFlight === 0, 10_000);
    });

    it('console - the playground embeds texts and reranks documents on their models', async () => {
      await page.locator('#tabs button[data-tab=playground]').click();
      await page.locator('[data-test=play-mode]').selectOption('embeddings');
      await page.locator('#embed-model').selectOption('cortex-embed');
      await page.locator('#embed-send').click();
      await page.locator('[data-test=embed-similarity]').waitFor({ timeout: 20_000 });
      // Each text is most like itself; the two about a cat on a mat are nearer than either to the markets.
      assert.equal(await page.locator('[data-test=sim-0-0]').textContent(), '1.000');
      const sim = async (i: number, j: number) => Number(await page.locator(`[data-test=sim-${i}-${j}]`).textContent());
      assert.ok((await sim(0, 1)) > (await sim(0, 2)), `cat/cat ${await sim(0, 1)} vs cat/markets ${await sim(0, 2)}`);
      await page.locator('[data-test=play-mode]').selectOption('rerank');
      await page.locator('#rerank-model').selectOption('cortex-rank');
      await page.locator('#rerank-send').click();
      await page.locator('[data-test=rerank-row]').first().waitFor({ timeout: 20_000 });
      const order = await page
        .locator('[data-test=rerank-row]')
        .evaluateAll((rows) => rows.map((r) => r.getAttribute('data-index')));
      assert.equal(order.length, 3);
      assert.equal(order[0], '1', `the document about the cat ranks first: ${JSON.stringify(order)}`);
      await page.locator('[data-test=play-mode]').selectOption('chat');
    });

    it('console - the keys view shows each key and account with its use against its limits', async () => {
      // A price, so the key's money budget may use the model: 0.001 USD a prompt token, 0.002 an output token.
      const priced = await fetch(`${stack.baseUrl}/admin/models/cortex-chat`, {
        method: 'PATCH',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ cost: { input: 1000, output: 2000 } }),
      });
      assert.equal(priced.status, 200);
      const created = await fetch(`${stack.baseUrl}/admin/keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          name: 'console-test',
          account: 'team-c',
          limits: {
            requests_per_minute: 5,
            concurrent_requests: 2,
            token_budget: { tokens: 100000, window: 'day' },
            money_budget: { amount: 5, window: 'month' },
          },
        }),
      });
      assert.equal(created.status, 200);
      const key = (await created.json()) as { id: string; secret: string };
      const keyed = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: key.secret, maxRetries: 0 });
      const answer = await keyed.chat.completions.create({ model: 'cortex-chat', messages: user });
      const used = answer.usage?.total_tokens ?? 0;
      assert.ok(used > 0);
      const cost = ((answer.usage?.prompt_tokens ?? 0) * 1000 + (answer.usage?.completion_tokens ?? 0) * 2000) / 1e6;
      const shownCost = cost
        .toFixed(9)
        .replace(/0+$/, '')
        .replace(/\.$/, '.00')
        .replace(/\.\d$/, (c) => `${c}0`);
      await page.locator('#tabs button[data-tab=keys]').click();
      const row = page.locator(`[data-test=key-row][data-key=${key.id}]`);
      // Usage records reach the stream after the answer: refresh until this one is counted.
      await waitFor(
        async () => {
          await page.locator('#keys-refresh').click();
          return (
            (await row
              .locator('[data-test=key-requests]')
              .textContent({ timeout: 2_000 })
              .catch(() => null)) === '1'
          );
        },
        10_000,
        250,
      );
      assert.equal(await row.locator('[data-test=requests-left]').textContent(), '4 / 5');
      assert.equal(await row.locator('[data-test=running]').textContent(), '0 / 2');
      assert.equal(await row.locator('[data-test=budget]').textContent(), `${used} / 100000`);
      assert.equal(await row.locator('[data-test=money-budget]').textContent(), `${shownCost} / 5.00 USD`);
      assert.equal(await row.locator('[data-test=key-cost]').textContent(), `${shownCost} USD`);
      assert.equal(await row.locator('[data-test=key-tokens]').textContent(), String(used));
      assert.equal(
        await page.locator('[data-test=account-row][data-account=team-c] [data-test=account-tokens]').textContent(),
        String(used),
      );
      await page.screenshot({ path: join(SHOTS, 'keys-light.png') });
      await page.locator('#theme').click();
      await page.screenshot({ path: join(SHOTS, 'keys-dark.png') });
      await page.locator('#theme').click();
    });

    it('console - the timeline marks a model swapped in and out repeatedly, and not one loaded and unloaded by an admin', async () => {
      await page.locator('#tabs button[data-tab=activity]').click();
      // The page's own rule on a timeline as the feed would send it: three loads in ten minutes with
      // evictions between mark the model; the same cycle done by an admin does not.
      await page.evaluate(`(() => {
      const at = Date.now() - 60_000;
      const cycle = (model, reason) => [0, 1, 2].flatMap((i) => [
        { at: at + i * 10_000, kind: 'loaded', workerId: 'w1', model, detail: 'in 5 ms' },
        { at: at + i * 10_000 + 5_000, kind: 'unloaded', workerId: 'w1', model, detail: reason },
      ]);
      state.timeline.push(...cycle('swapped-model', 'lru'), ...cycle('admin-model', 'admin'));
      renderTimeline();
    })()`);
      const marked = await page
        .locator('[data-test=timeline-entry] .thrash')
        .evaluateAll((nodes) => nodes.map((n) => n.parentElement?.textContent ?? ''));
      assert.ok(marked.length > 0 && marked.every((text) => text.includes('swapped-model')), JSON.stringify(marked));
      await page.evaluate(`(() => {
      state.timeline = state.timeline.filter((e) => e.model !== 'swapped-model' && e.model !== 'admin-model');
      renderTimeline();
    })()`);
    });

    it('console - a remote worker and its upstream model show as such, and its requests as a local one’s do', async () => {
      await page.locator('#tabs button[data-tab=fleet]').click();
      // The upstream is this stack's own gateway, a real cortex server, asked in Anthropic Messages.
      const added = await fetch(`${stack.baseUrl}/admin/models`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          id: 'cortex-upstream',
          upstream: { url: `${stack.baseUrl}/v1`, api: 'messages', model: 'cortex-chat', api_key_env: 'UPSTREAM_KEY' },
          fallback: ['cortex-chat'],
        }),
      });
      assert.equal(added.status, 200, await added.text());
      const row = page.locator('[data-test=catalogue-model][data-model=cortex-upstream]');
      await row.waitFor({ timeout: 10_000 });
      assert.equal(
        await row.locator('[data-test=upstream]').textContent(),
        `messages upstream at ${new URL(stack.baseUrl).host}`,
      );
      assert.equal(await row.locator('[data-test=fallback]').textContent(), 'falls back to cortex-chat');
      // It stays up to the end: the later tests see a fleet with a remote worker in it.
      stack.spawnService('worker', {
        CORTEX_WORKER_ENGINE: 'remote',
        CORTEX_WORKER_ID: 'remote-1',
        UPSTREAM_KEY: 'sk-user',
      });
      const card = page.locator('[data-test=worker][data-worker=remote-1]');
      await card.waitFor({ timeout: 30_000 });
      assert.equal(
        await card.locator('[data-test=worker-memory]').textContent(),
        'serves its models from their upstreams: no device memory',
      );
      assert.equal(await card.locator('.mem').count(), 0, 'no memory bar for a worker without a device');
      const answer = await client.chat.completions.create({ model: 'cortex-upstream', messages: user, max_tokens: 8 });
      assert.equal(answer.model, 'cortex-upstream');
      assert.ok(answer.choices[0]?.message.content, 'the upstream answered');
      await page
        .locator('[data-test=worker-model][data-worker=remote-1][data-model=cortex-upstream][data-state=ready]')
        .waitFor({ timeout: 10_000 });
      assert.match((await row.locator('td').nth(2).textContent()) ?? '', /^remote-1:ready$/);
      await page.screenshot({ path: join(SHOTS, 'fleet-remote-light.png'), fullPage: true });
      await page.locator('#tabs button[data-tab=activity]').click();
      await page.locator('[data-test=activity-row][data-model=cortex-upstream]').first().waitFor({ timeout: 5_000 });
      await page.locator('#tabs button[data-tab=fleet]').click();
    });

    it('console - every tab fits a laptop screen without scrolling sideways', async () => {
      for (const width of [1280, 1024]) {
        await page.setViewportSize({ width, height: 700 });
        for (const tab of ['fleet', 'live', 'activity', 'keys', 'playground']) {
          await page.locator(`#tabs button[data-tab=${tab}]`).click();
          const [scroll, inner, widest] = await page.evaluate(() => {
            // What sticks out, to say in the failure.
            const out = Array.from(document.querySelectorAll(`#${location.hash.slice(1)} *`)).filter(
              (n) => n.getBoundingClientRect().right > window.innerWidth,
            );
            const name = out
              .map((n) => `${n.tagName.toLowerCase()}${n.id ? `#${n.id}` : ''}.${n.className}`)
              .slice(0, 3)
              .join(' ');
            return [document.documentElement.scrollWidth, window.innerWidth, name] as const;
          });
          assert.ok(scroll <= inner, `${tab} at ${width} px is ${scroll} px wide: ${widest}`);
        }
      }
      await page.setViewportSize({ width: 1280, height: 800 });
    });

    it('console - a page that reconnects is replayed what it missed, or resynced', async () => {
      const open = async (lastEventId?: string) => {
        const controller = new AbortController();
        const response = await fetch(`${stack.baseUrl}/admin/console/feed`, {
          headers: { authorization: `Bearer ${ADMIN}`, ...(lastEventId && { 'last-event-id': lastEventId }) },
          signal: controller.signal,
        });
        assert.equal(response.status, 200);
        const reader = response.body!.getReader();
        let text = '';
        const frames = async (count: number): Promise<Array<{ id?: string; event?: string }>> => {
          for (;;) {
            const parsed = text
              .split('\n\n')
              .slice(0, -1)
              .map(
                (frame) =>
                  Object.fromEntries(
                    frame
                      .split('\n')
                      .filter((l) => /^(id|event): /.test(l))
                      .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 2)]),
                  ) as { id?: string; event?: string },
              )
              .filter((f) => f.event);
            if (parsed.length >= count) return parsed;
            const { value, done } = await reader.read();
            if (done) return parsed;
            text += new TextDecoder().decode(value);
          }
        };
        return { frames, close: () => controller.abort() };
      };
      const first = await open();
      const [snapshot] = await first.frames(1);
      assert.equal(snapshot?.event, 'snapshot');
      first.close();
      // A request while this reader is away: its events are kept for the reconnect.
      await client.chat.completions.create({ model: 'cortex-chat', messages: user });
      const again = await open(snapshot?.id);
      const [resumed] = await again.frames(1);
      assert.notEqual(resumed?.event, 'snapshot', 'replayed, not resynced');
      again.close();
      const stale = await open('0000.1');
      assert.equal((await stale.frames(1))[0]?.event, 'snapshot');
      stale.close();
    });

    it("console - a page on another origin of the same site cannot open a WebSocket with the console's cookie; the console's own origin can", async () => {
      const port = new URL(stack.baseUrl).port;
      // Another service on the same host name (another port): same site, so the SameSite cookie goes along.
      const evil = createServer(
        (_req, res) =>
          void res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>other</title>'),
      );
      const evilPort = await freePort();
      await new Promise<void>((done) => evil.listen(evilPort, '127.0.0.1', done));
      const own = await browser.newContext();
      try {
        const page = await own.newPage();
        await page.goto(`http://gw.test:${port}/console?key=${ADMIN}`);
        assert.ok(
          (await own.cookies()).some((cookie) => cookie.name === 'cortex_console' && cookie.domain === 'gw.test'),
          'the console keeps its key in a cookie for gw.test',
        );
        /** Opens a Responses WebSocket to the gateway from the page's origin: whether it opened. */
        const opens = (from: Page): Promise<boolean> =>
          from.evaluate(
            (url) =>
              new Promise<boolean>((done) => {
                const socket = new WebSocket(url);
                socket.onopen = () => (socket.close(), done(true));
                socket.onerror = () => done(false);
                // Neither within 10 s: it did not open.
                setTimeout(() => done(false), 10_000);
              }),
            `ws://gw.test:${port}/v1/responses`,
          );
        assert.equal(await opens(page), true, "the console's own origin opens it");
        const other = await own.newPage();
        await other.goto(`http://gw.test:${evilPort}/`);
        assert.equal(await opens(other), false, 'a page of another origin does not');
        // What the gateway answers such an upgrade, as a browser sends it (no Sec-Fetch-* over plain http to gw.test).
        const cookie = (await own.cookies()).find((c) => c.name === 'cortex_console')?.value ?? '';
        const upgrade = (origin: string): Promise<number> =>
          new Promise((resolve, reject) => {
            const asked = httpRequest({
              agent: false,
              host: '127.0.0.1',
              port: Number(port),
              path: '/v1/responses',
              headers: {
                connection: 'Upgrade',
                upgrade: 'websocket',
                'sec-websocket-version': '13',
                'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
                origin,
                host: `gw.test:${port}`,
                cookie: `cortex_console=${cookie}`,
              },
            });
            asked.on('upgrade', (_response, socket) => (socket.destroy(), resolve(101)));
            asked.on('response', (response) => (response.resume(), resolve(response.statusCode ?? 0)));
            asked.on('error', reject);
            asked.end();
          });
        assert.equal(await upgrade(`http://gw.test:${evilPort}`), 401);
        assert.equal(await upgrade(`http://gw.test:${port}`), 101);
      } finally {
        await own.close();
        // The browser may keep its connection to the other origin alive.
        evil.closeAllConnections();
        await new Promise((done) => evil.close(done));
      }
    });

    it('console - once the last page closes, the gateway drops its console subscriptions', async () => {
      await context.close();
      await waitFor(async () => !(await subscribed()).includes('llm.stream.v1.>'), 10_000, 250);
    });
  },
);
