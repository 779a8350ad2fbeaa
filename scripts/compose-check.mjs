#!/usr/bin/env node
// The checks of scripts/test-compose.sh against a running compose stack, through its published ports
// and the official `openai` client. Each command prints what it saw and exits non-zero with a sentence
// saying what went wrong.
//
//   node scripts/compose-check.mjs ready <gateway url>
//   node scripts/compose-check.mjs api <gateway url> <metrics url>
//   node scripts/compose-check.mjs workers <count> <status command…>   (a command printing `cortex status --json`)
//   node scripts/compose-check.mjs failover <gateway url> <docker> <compose project>
//   node scripts/compose-check.mjs traffic <gateway url>            (one round of the dashboard's traffic)
//   node scripts/compose-check.mjs dashboard <prometheus url> <dashboard json> <rate interval> <report file>
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { allValues, dashboardQueries, judge } from './compose/dashboard-queries.mjs';

const run = promisify(execFile);
const say = (line) => console.log(`compose test:   ${line}`);

function check(condition, message) {
  if (!condition) throw new Error(message);
}

/** `promise`, or a rejection after `ms`. The timer is referenced: it keeps the process alive meanwhile. */
async function within(ms, promise) {
  const timer = new AbortController();
  const timeout = sleep(ms, undefined, { signal: timer.signal }).then(() => {
    throw new Error(`no answer within ${ms / 1000} s`);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    timer.abort();
    timeout.catch(() => {});
  }
}

/** Calls `probe` every second until it returns a value, for at most `seconds`; the last error explains a timeout. */
async function waitFor(what, seconds, probe) {
  const deadline = Date.now() + seconds * 1000;
  let last = 'no answer yet';
  for (;;) {
    try {
      const value = await within(65_000, probe());
      if (value) return value;
    } catch (error) {
      last = error.message;
    }
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${seconds} s (last: ${last})`);
    await sleep(1000);
  }
}

// The gateway's API key: scripts/test-compose.sh sets one for the stack.
const API_KEY = process.env.CORTEX_API_KEYS?.split(',')[0] ?? 'cortex-dev-key';
const ADMIN_KEY = process.env.CORTEX_ADMIN_KEYS?.split(',')[0] ?? 'cortex-dev-admin-key';

async function getJson(url) {
  const response = await within(10_000, fetch(url, { headers: { authorization: `Bearer ${API_KEY}` } }));
  if (!response.ok) throw new Error(`GET ${url} answered ${response.status}: ${await response.text()}`);
  return response.json();
}

const client = (gateway) => new OpenAI({ baseURL: `${gateway}/v1`, apiKey: API_KEY, timeout: 120_000, maxRetries: 0 });

/** One streamed chat completion; resolves with its text, finish reason and usage. */
async function streamChat(gateway, request, onFirstChunk) {
  const stream = await client(gateway).chat.completions.create({
    ...request,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (choice?.delta?.content) {
      if (!text) onFirstChunk?.();
      text += choice.delta.content;
    }
    if (choice?.finish_reason) finish = choice.finish_reason;
    if (chunk.usage) usage = chunk.usage;
  }
  return { text, finish, usage };
}

const modelsOf = async (gateway) => (await getJson(`${gateway}/v1/models`)).data;

async function ready(gateway) {
  await waitFor('the gateway getting ready', 300, async () => (await fetch(`${gateway}/readyz`)).ok);
  const models = await waitFor('a worker loading the pinned model cortex-chat', 240, async () => {
    const data = await modelsOf(gateway);
    return data.find((m) => m.id === 'cortex-chat')?.loaded ? data : null;
  });
  say(`the gateway is ready and lists ${models.length} models; cortex-chat is loaded`);
}

async function api(gateway, metricsUrl) {
  const models = await modelsOf(gateway);
  const ids = models.map((m) => m.id);
  for (const id of ['cortex-chat', 'cortex-reasoning', 'cortex-tools'])
    check(ids.includes(id), `/v1/models lacks ${id}: ${ids.join(', ')}`);
  say(`GET /v1/models lists ${ids.join(', ')}`);
  const anonymous = await within(10_000, fetch(`${gateway}/v1/models`));
  check(anonymous.status === 401, `GET /v1/models without an API key answered ${anonymous.status}, not 401`);
  say('without an API key the gateway answers 401');

  const reply = await streamChat(gateway, { model: 'cortex-chat', messages: [{ role: 'user', content: 'Hi!' }] });
  check(
    reply.text === 'Hello from a tiny model.',
    `the streamed reply was ${JSON.stringify(reply.text)}, not the fixture's "Hello from a tiny model."`,
  );
  check(reply.finish === 'stop', `the stream ended with finish_reason ${reply.finish}, not stop`);
  check(reply.usage?.completion_tokens > 0, `the stream carried no usage: ${JSON.stringify(reply.usage)}`);
  say(
    `a streamed chat completion with the openai client answered "${reply.text}" (${reply.usage.completion_tokens} tokens)`,
  );

  // The metrics service counts from the event stream, so the request shows up shortly after it ended.
  const line = await waitFor('the request being counted on /metrics', 30, async () => {
    const response = await fetch(`${metricsUrl}/metrics`);
    check(response.ok, `GET /metrics answered ${response.status}`);
    return (await response.text())
      .split('\n')
      .find((l) => l.startsWith('cortex_requests_total{') && l.includes('model="cortex-chat"'));
  });
  say(`GET /metrics counts it: ${line}`);
}

async function workers(count, command) {
  const up = await waitFor(`${count} workers up in cortex status`, 180, async () => {
    const { stdout } = await run(command[0], command.slice(1), { timeout: 60_000 });
    const report = JSON.parse(stdout);
    const list = (report.fleet?.workers ?? []).filter((w) => w.up && !w.draining);
    if (list.length !== count)
      throw new Error(
        `cortex status shows ${list.length} workers up: ${list.map((w) => w.workerId).join(', ') || 'none'}`,
      );
    return list;
  });
  say(`cortex status shows ${count} workers up: ${up.map((w) => w.workerId).join(', ')}`);
}

/**
 * Stops the worker that is streaming, while its streams are in flight, and sends more requests during
 * and after the stop: every one must be answered whole. A stopped worker drains (finishes what it
 * runs and takes nothing new) and the router places the rest on the other worker.
 */
async function failover(gateway, docker, project) {
  const messages = [{ role: 'user', content: 'Go!' }];
  // cortex-loop repeats one sentence until max_tokens. Size the in-flight streams to about two
  // seconds of this machine's decoding, well inside the worker's 10 s drain.
  const started = Date.now();
  const probe = await streamChat(gateway, { model: 'cortex-loop', messages, max_tokens: 40 });
  const perToken = (Date.now() - started) / 40;
  const maxTokens = Math.max(10, Math.min(4000, Math.round(2000 / perToken)));
  check(
    probe.usage?.completion_tokens === 40,
    `a 40-token cortex-loop stream gave ${probe.usage?.completion_tokens} tokens`,
  );

  const serving = (await modelsOf(gateway)).find((m) => m.id === 'cortex-loop')?.locations ?? [];
  check(serving.length === 1, `cortex-loop should be on one worker, found ${JSON.stringify(serving)}`);
  const victim = serving[0].worker;
  const { stdout } = await run(docker, [
    'ps',
    '-q',
    '--no-trunc',
    '--filter',
    `label=com.docker.compose.project=${project}`,
    '--filter',
    'label=com.docker.compose.service=worker',
  ]);
  // A worker's id is its container's host name (the short container id) plus `-cpu`.
  const container = stdout.split('\n').find((id) => id && victim.startsWith(id.slice(0, 12)));
  check(container, `no worker container of project ${project} matches worker ${victim}`);

  let firstChunks = 0;
  let allStarted;
  const started2 = new Promise((resolve) => (allStarted = resolve));
  const inFlight = [1, 2].map(() =>
    streamChat(gateway, { model: 'cortex-loop', messages, max_tokens: maxTokens }, () => {
      firstChunks += 1;
      if (firstChunks === 2) allStarted();
    }),
  );
  await Promise.race([started2, Promise.all(inFlight)]);
  check(firstChunks === 2, 'the two streams ended before both had started; nothing was in flight to stop');
  say(`2 streams of ${maxTokens} tokens are in flight on worker ${victim}; stopping its container`);
  const stopped = run(docker, ['stop', '--time', '30', container]);
  const during = [1, 2].map(() =>
    streamChat(gateway, { model: 'cortex-chat', messages: [{ role: 'user', content: 'Hi!' }] }),
  );
  const results = await Promise.all([...inFlight, ...during]);
  await stopped;
  for (const [i, result] of results.entries()) {
    const expected = i < 2 ? { finish: 'length', tokens: maxTokens } : { finish: 'stop' };
    check(
      result.finish === expected.finish,
      `request ${i + 1} ended with finish_reason ${result.finish}, not ${expected.finish}`,
    );
    if (expected.tokens)
      check(
        result.usage?.completion_tokens === expected.tokens,
        `stream ${i + 1} gave ${result.usage?.completion_tokens} of ${expected.tokens} tokens`,
      );
  }
  say('both in-flight streams finished whole, and 2 requests sent during the stop were answered');

  const after = await streamChat(gateway, { model: 'cortex-loop', messages, max_tokens: 20 });
  check(
    after.finish === 'length' && after.usage?.completion_tokens === 20,
    `a request after the stop ended with ${after.finish}`,
  );
  const now = (await modelsOf(gateway)).find((m) => m.id === 'cortex-loop')?.locations ?? [];
  check(
    now.length > 0 && now.every((l) => l.worker !== victim),
    `cortex-loop should now be on the other worker only, found ${JSON.stringify(now)}`,
  );
  say(`after the stop, cortex-loop answers from worker ${now.map((l) => l.worker).join(', ')}`);
}

/**
 * One round of traffic that every panel of the Grafana dashboard has something to show for: streamed
 * and non-streamed requests on two APIs, the same conversation again (a cached prefix), a cold load
 * of the reasoning model (reasoning tokens, a cold start, a load time), a stream the client abandons
 * (a cancellation), a model whose file is missing (an error and a rejection), and an admin unload of
 * the reasoning model (an eviction, and the next round's cold load). scripts/test-compose.sh runs two
 * rounds with a scrape between them, so each counter has grown between two samples.
 */
async function traffic(gateway) {
  const openai = client(gateway);
  const messages = [{ role: 'user', content: 'Hi!' }];
  for (let i = 0; i < 3; i += 1) {
    const reply = await streamChat(gateway, { model: 'cortex-chat', messages });
    check(reply.usage?.completion_tokens > 0, `a cortex-chat stream carried no usage: ${JSON.stringify(reply.usage)}`);
  }
  const response = await openai.responses.create({ model: 'cortex-chat', input: 'Hi!' });
  check(response.status === 'completed', `a Responses request ended ${response.status}`);

  const reasoning = await streamChat(gateway, { model: 'cortex-reasoning', messages });
  check(
    reasoning.usage?.completion_tokens > 0,
    `a cortex-reasoning stream carried no usage: ${JSON.stringify(reasoning.usage)}`,
  );

  // The client goes away after the first chunk of a long stream.
  const stream = await openai.chat.completions.create({
    model: 'cortex-loop',
    messages,
    max_tokens: 2000,
    stream: true,
  });
  let chunks = 0;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content) chunks += 1;
    if (chunks > 0) break; // leaving the loop aborts the HTTP request
  }
  check(chunks > 0, 'the cortex-loop stream ended before its first chunk');

  let failed = null;
  try {
    await openai.chat.completions.create({ model: 'cortex-missing', messages });
  } catch (error) {
    failed = error;
  }
  check(
    failed?.status === 503,
    `a request for cortex-missing (no model file) answered ${failed?.status ?? 'with a completion'}, not 503`,
  );

  const unload = await within(
    130_000,
    fetch(`${gateway}/admin/unload`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'cortex-reasoning' }),
    }),
  );
  check(unload.ok, `POST /admin/unload answered ${unload.status}: ${await unload.text()}`);
  say(
    `a round of dashboard traffic: 4 cortex-chat requests (chat stream, Responses), a cold cortex-reasoning stream (${reasoning.usage.completion_tokens_details?.reasoning_tokens ?? '?'} reasoning tokens), an abandoned cortex-loop stream, a 503 for cortex-missing (${failed.error?.code ?? failed.code ?? '?'}), cortex-reasoning unloaded`,
  );
}

/**
 * Every PromQL expression of the Grafana dashboard, with "All" for its variables and `rateInterval`
 * for Grafana's interval macros, as an instant query through Prometheus's HTTP API. Each must return
 * a finite value; the panels, queries and values seen go to `reportFile` (Markdown).
 */
async function dashboard(prometheus, file, rateInterval, reportFile) {
  const json = JSON.parse(readFileSync(file, 'utf8'));
  const queries = dashboardQueries(json, {
    variables: allValues(json),
    macros: { __rate_interval: rateInterval, __interval: rateInterval, __range: rateInterval },
  });
  check(queries.length > 0, `${file} has no queries`);
  await waitFor('Prometheus scraping the metrics service', 60, async () => {
    const body = await (
      await within(10_000, fetch(`${prometheus}/api/v1/query?query=${encodeURIComponent('up{job="cortex"} == 1')}`))
    ).json();
    return judge(body).data;
  });
  const rows = [];
  for (const q of queries) {
    const response = await within(30_000, fetch(`${prometheus}/api/v1/query?query=${encodeURIComponent(q.query)}`));
    rows.push({ ...q, verdict: judge(await response.json()) });
  }
  const empty = rows.filter((r) => !r.verdict.data);
  const escape = (text) => text.replaceAll('|', '\\|');
  const lines = [
    '| panel | query | value seen |',
    '|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${escape(r.panel)} | \`${escape(r.expr)}\` | ${escape(r.verdict.data ? r.verdict.shown : `NO DATA: ${r.verdict.shown}`)} |`,
    ),
  ];
  writeFileSync(reportFile, `${lines.join('\n')}\n`);
  for (const r of rows) say(`${r.verdict.data ? 'ok     ' : 'NO DATA'} ${r.panel} [${r.refId}]: ${r.verdict.shown}`);
  check(
    empty.length === 0,
    `${empty.length} of ${rows.length} dashboard queries returned no data:\n${empty.map((r) => `    ${r.panel} [${r.refId}]: ${r.query} (${r.verdict.shown})`).join('\n')}`,
  );
  say(
    `all ${rows.length} queries of ${new Set(rows.map((r) => r.panel)).size} panels returned data (rate interval ${rateInterval})`,
  );
}

/**
 * Prometheus loaded deploy/prometheus/alerts.yml and evaluates it without error, none fires, and the
 * fleet's verdict it alerts on (cortex_fleet_health, asked for every 5 s) is not degraded.
 */
async function alerts(prometheus) {
  const rules = await waitFor('Prometheus evaluating deploy/prometheus/alerts.yml', 60, async () => {
    const body = await (await within(10_000, fetch(`${prometheus}/api/v1/rules`))).json();
    const loaded = (body.data?.groups ?? []).flatMap((group) => group.rules);
    return loaded.length > 0 && loaded.every((rule) => rule.health === 'ok') ? loaded : null;
  });
  const names = rules.map((rule) => rule.name);
  for (const alert of ['CortexFleetDegraded', 'CortexFleetImpaired', 'CortexNoWorkerUp'])
    check(names.includes(alert), `alerts.yml does not define ${alert} (Prometheus has ${names.join(', ')})`);
  const firing = rules.filter((rule) => rule.state === 'firing').map((rule) => rule.name);
  check(firing.length === 0, `alerts firing on a healthy stack: ${firing.join(', ')}`);
  // The worker stopped by the failover step may still be known as down (impaired): every model is served, so not degraded.
  const verdict = await waitFor('the fleet reading ok or impaired in cortex_fleet_health', 60, async () => {
    const query = encodeURIComponent('cortex_fleet_health == 1');
    const body = await (await within(10_000, fetch(`${prometheus}/api/v1/query?query=${query}`))).json();
    const status = body.data?.result?.[0]?.metric?.status;
    return status === 'ok' || status === 'impaired' ? status : null;
  });
  say(
    `Prometheus evaluates ${rules.length} alert rules (${names.join(', ')}), none firing; the fleet reads ${verdict}`,
  );
}

const [command, ...args] = process.argv.slice(2);
const commands = {
  ready: () => ready(args[0]),
  api: () => api(args[0], args[1]),
  workers: () => workers(Number(args[0]), args.slice(1)),
  failover: () => failover(args[0], args[1], args[2]),
  traffic: () => traffic(args[0]),
  dashboard: () => dashboard(args[0], args[1], args[2], args[3]),
  alerts: () => alerts(args[0]),
};
try {
  check(commands[command], `unknown check ${command}; use ${Object.keys(commands).join(', ')}`);
  await commands[command]();
} catch (error) {
  console.error(`compose test: FAILED: ${error.message}`);
  process.exit(1);
}
