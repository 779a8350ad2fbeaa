import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { freePort } from '@cortex/bus';
import { decodeMessage, heartbeatSubject, Heartbeat } from '@cortex/contracts';
import { FIXTURE_CATALOGUE, startStack, startTestNats, waitFor, type TestStack } from '@cortex/testing';

/**
 * The web console in a real headless Chromium (Debian's `chromium-headless-shell`, which `.ci/run`
 * installs; `CORTEX_CHROMIUM` names another binary) against a real stack: separate service processes,
 * a real NATS, node-llama-cpp on fixture models.
 */
const CHROMIUM = [process.env.CORTEX_CHROMIUM, '/usr/lib/chromium/chromium-headless-shell', '/usr/bin/chromium-headless-shell', '/usr/lib/chromium/chromium', '/usr/bin/chromium'].find(
  (path): path is string => Boolean(path && existsSync(path)),
);
const ROOT = resolve(fileURLToPath(new URL('../../..', import.meta.url)));
/** Where the screenshots go: docs/console when CORTEX_CONSOLE_SCREENSHOTS=1, else a temp dir. */
const SHOTS = process.env.CORTEX_CONSOLE_SCREENSHOTS === '1' ? join(ROOT, 'docs/console') : mkdtempSync(join(tmpdir(), 'cortex-console-'));
const ADMIN = 'sk-admin';
const user = [{ role: 'user' as const, content: 'Hi' }];

describe('console e2e', { skip: CHROMIUM ? false : 'no Chromium binary found (apt-get install chromium-headless-shell, or set CORTEX_CHROMIUM)' }, () => {
  let stack: TestStack;
  let monitor: string;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let client: OpenAI;

  before(async () => {
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
      ],
      config: { auth: { api_keys: ['sk-user'], admin_keys: [ADMIN] }, worker: { id: 'w1', heartbeat_ms: 100 }, gateway: { console_title: 'lab fleet' } },
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'sk-user', maxRetries: 0 });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  });

  after(async () => {
    await browser?.close();
    await stack?.stop();
  });

  /** Subjects the server holds subscriptions on, from its monitoring endpoint. */
  const subscribed = async (): Promise<string[]> => {
    const body = (await (await fetch(`${monitor}/subsz?subs=1&limit=10000`)).json()) as { subscriptions_list?: Array<{ subject: string }> };
    return (body.subscriptions_list ?? []).map((s) => s.subject);
  };

  /** The worker's own word on a model: its next heartbeat. */
  const heartbeatModel = async (model: string) => {
    const sub = stack.nc.subscribe(heartbeatSubject('w1'), { max: 1 });
    for await (const message of sub) return decodeMessage(Heartbeat, message.json(), 'heartbeat').models.find((m) => m.id === model);
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
    const bad = await fetch(`${stack.baseUrl}/admin/requests/cancel`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: '{"workerId":"w1"}' });
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
    await page.locator('[data-test=worker][data-worker=w1]').waitFor({ timeout: 5_000 });
    await page.locator('[data-test=worker-model][data-worker=w1][data-model=cortex-chat][data-state=ready]').waitFor({ timeout: 5_000 });
    await page.locator('[data-test=worker-model][data-worker=w1][data-model=cortex-loop][data-state=ready]').waitFor({ timeout: 5_000 });
    const catalogue = await page.locator('[data-test=catalogue-model]').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-model')));
    assert.deepEqual(catalogue.sort(), ['cortex-chat', 'cortex-loop', 'cortex-reasoning', 'cortex-tools']);
    await page.screenshot({ path: join(SHOTS, 'fleet-light.png') });
    await page.locator('#theme').click();
    await page.screenshot({ path: join(SHOTS, 'fleet-dark.png') });
    await page.locator('#theme').click();
  });

  it('console - a request sent through the API shows in live with a growing token count, then in activity', async () => {
    await page.locator('#tabs button[data-tab=live]').click();
    const stream = await client.chat.completions.create({ model: 'cortex-loop', messages: user, stream: true, max_tokens: 6000 });
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
    await reading;
    assert.ok(seenAfterMs < 1_000, `the row showed ${seenAfterMs} ms after the first token reached the client`);
    await row.first().waitFor({ state: 'detached', timeout: 5_000 });
    await page.locator('#tabs button[data-tab=activity]').click();
    await page.locator('[data-test=activity-row][data-model=cortex-loop]').first().waitFor({ timeout: 5_000 });
    await page.screenshot({ path: join(SHOTS, 'activity-light.png') });
    await page.locator('#theme').click();
    await page.screenshot({ path: join(SHOTS, 'activity-dark.png') });
    await page.locator('#theme').click();
  });

  it('console - cancelling a generation from the page frees the worker slot', async () => {
    await page.locator('#tabs button[data-tab=live]').click();
    const stream = await client.chat.completions.create({ model: 'cortex-loop', messages: user, stream: true, max_tokens: 8000 });
    let finish: string | null = null;
    const reading = (async () => {
      for await (const chunk of stream) finish = chunk.choices[0]?.finish_reason ?? finish;
    })();
    const row = page.locator('[data-test=live-row][data-model=cortex-loop]').first();
    await row.waitFor({ timeout: 5_000 });
    assert.equal((await heartbeatModel('cortex-loop'))?.inFlight, 1, 'the worker runs it');
    await page.locator('#theme').click();
    await page.screenshot({ path: join(SHOTS, 'live-dark.png') });
    await page.locator('#theme').click();
    await row.locator('[data-test=cancel]').click();
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
        document.querySelectorAll('[data-test=loading], [data-test=load-progress]').forEach((node) => seen.push(node.textContent ?? ''));
      }).observe(document.body, { subtree: true, childList: true, characterData: true });
    });
    const row = page.locator('[data-test=catalogue-model][data-model=cortex-reasoning]');
    await row.locator('[data-test=load-worker]').selectOption('w1');
    await row.locator('[data-test=load]').click();
    await page.locator('[data-test=worker-model][data-worker=w1][data-model=cortex-reasoning][data-state=ready]').waitFor({ timeout: 10_000 });
    const seen = await page.evaluate(() => (window as unknown as { progressSeen: string[] }).progressSeen);
    assert.ok(seen.some((text) => /cortex-reasoning on w1.*\d+%|loading \d+%/.test(text)), `progress shown: ${JSON.stringify(seen.slice(0, 5))}`);
    await page.locator('#tabs button[data-tab=activity]').click();
    await page.locator('[data-test=timeline-entry][data-kind=loaded]', { hasText: 'cortex-reasoning loaded on w1' }).first().waitFor({ timeout: 5_000 });
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
    await page.locator('[data-test=chat-answer]', { hasText: 'Hello after thinking.' }).first().waitFor({ timeout: 15_000 });
    assert.equal(await answer.textContent(), 'Hello after thinking.');
    assert.equal(await page.locator('[data-test=chat-reasoning]').first().textContent(), 'The user wants a greeting.');
    await page.locator('#chat-model').selectOption('cortex-tools');
    await page.locator('#chat-tools').check();
    await page.locator('#chat-input').fill('Weather in Paris?');
    await page.locator('#chat-send').click();
    await page.locator('[data-test=chat-tool-call]').first().waitFor({ timeout: 15_000 });
    assert.equal(await page.locator('[data-test=chat-tool-call]').first().textContent(), 'call get_weather({"city": "Paris"})');
  });

  it('console - every tab fits a laptop screen without scrolling sideways', async () => {
    for (const width of [1280, 1024]) {
      await page.setViewportSize({ width, height: 700 });
      for (const tab of ['fleet', 'live', 'activity', 'playground']) {
        await page.locator(`#tabs button[data-tab=${tab}]`).click();
        const [scroll, inner] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
        assert.ok(scroll <= inner, `${tab} at ${width} px is ${scroll} px wide`);
      }
    }
    await page.setViewportSize({ width: 1280, height: 800 });
  });

  it('console - a page that reconnects is replayed what it missed, or resynced', async () => {
    const open = async (lastEventId?: string) => {
      const controller = new AbortController();
      const response = await fetch(`${stack.baseUrl}/admin/console/feed`, { headers: { authorization: `Bearer ${ADMIN}`, ...(lastEventId && { 'last-event-id': lastEventId }) }, signal: controller.signal });
      assert.equal(response.status, 200);
      const reader = response.body!.getReader();
      let text = '';
      const frames = async (count: number): Promise<Array<{ id?: string; event?: string }>> => {
        for (;;) {
          const parsed = text
            .split('\n\n')
            .slice(0, -1)
            .map((frame) => Object.fromEntries(frame.split('\n').filter((l) => /^(id|event): /.test(l)).map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 2)])) as { id?: string; event?: string })
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

  it('console - once the last page closes, the gateway drops its console subscriptions', async () => {
    await context.close();
    await waitFor(async () => !(await subscribed()).includes('llm.stream.v1.>'), 10_000, 250);
  });
});
