import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  encodeFixtureModel,
  encodeSplitGguf,
  fixtureGguf,
  fixtureModel,
  ModelHub,
  type HubRequest,
} from '@cortex/fixtures';
import { Subjects } from '@cortex/contracts';
import { postJson, startStack, waitFor, type TestStack } from '@cortex/testing';

const CLI = resolve(fileURLToPath(new URL('../../../apps/cli/dist/main.js', import.meta.url)));
const HELLO = fixtureModel('cortex-chat').expected.text;
const CHAT = encodeFixtureModel('cortex-chat');
const SPLIT = encodeSplitGguf(fixtureGguf('cortex-chat'), 2);
const user = [{ role: 'user' as const, content: 'Hi.' }];

/** A reader's header range (`bytes=A-B`), as opposed to a request for the file's body (none, or `bytes=N-`). */
const isHeaderRange = (r: HubRequest): boolean => /^bytes=\d+-\d+$/.test(r.range ?? '');
const file = (name: string): string => `/org/models/resolve/main/${name}`;
const MANIFEST = '/v2/org/models/manifests/Q4_K_M';

describe('model sources e2e (a local model hub)', () => {
  let hub: ModelHub;
  let stack: TestStack;
  let modelsDir: string;

  before(async () => {
    hub = await ModelHub.start();
    // As a hub sends its files from a CDN: every request to 127.0.0.1 goes on to localhost.
    hub.redirect(true);
    for (const name of [
      'remote.gguf',
      'pulled.gguf',
      'shared.gguf',
      'prepulled.gguf',
      'slow.gguf',
      'unauthorized.gguf',
      'broken.gguf',
      'dropped.gguf',
      'truncated.gguf',
    ])
      hub.serve(file(name), CHAT);
    SPLIT.forEach((bytes, i) => hub.serve(file(`split-0000${i + 1}-of-00002.gguf`), bytes));
    // A quant tag: the hub's manifest names its file (what Hugging Face answers llama.cpp's user agent).
    hub.serve(
      MANIFEST,
      Buffer.from(JSON.stringify({ ggufFile: { rfilename: 'tagged.Q4_K_M.gguf', size: CHAT.length } })),
    );
    hub.serve(file('tagged.Q4_K_M.gguf'), CHAT);
    hub.fault(file('unauthorized.gguf'), 401, { times: 1_000 });
    hub.fault(file('broken.gguf'), 500, { times: 1_000 });
    hub.fault(file('dropped.gguf'), 'drop', { times: 1_000, downloads: true });
    hub.fault(file('truncated.gguf'), 'truncate', { times: 1_000, downloads: true });
    const remote = (id: string, source: string): Record<string, unknown> => ({
      id,
      file: source,
      context_size: 512,
      slots: 1,
    });
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true, slots: 1 },
        remote('remote-chat', hub.url(file('remote.gguf'))),
        remote('pulled-chat', hub.url(file('pulled.gguf'))),
        remote('shared-chat', hub.url(file('shared.gguf'))),
        remote('prepulled-chat', hub.url(file('prepulled.gguf'))),
        remote('slow-chat', hub.url(file('slow.gguf'))),
        // hf: URIs go to HF_ENDPOINT, here the local hub (see the workers' environment).
        remote('hf-split', 'hf:org/models/split-00001-of-00002.gguf'),
        remote('hf-unauthorized', 'hf:org/models/unauthorized.gguf'),
        remote('hf-tag', 'hf:org/models:Q4_K_M'),
        remote('hf-tag-missing', 'hf:org/models:Q3_K_S'),
        remote('missing', hub.url(file('missing.gguf'))),
        remote('broken', hub.url(file('broken.gguf'))),
        remote('dropped', hub.url(file('dropped.gguf'))),
        remote('truncated', hub.url(file('truncated.gguf'))),
      ],
      serviceEnv: { worker: { HF_ENDPOINT: hub.url('/') } },
    });
    modelsDir = (JSON.parse(readFileSync(stack.configPath, 'utf8')) as { worker: { models_dir: string } }).worker
      .models_dir;
    await stack.workersUp(1);
  });

  after(async () => {
    await stack?.stop();
    await hub?.close();
  });

  const chat = async (
    model: string,
  ): Promise<{
    status: number;
    body: { error?: { message: string }; choices?: Array<{ message: { content: string } }> };
  }> => {
    const response = await postJson(`${stack.baseUrl}/v1/chat/completions`, { model, messages: user });
    return { status: response.status, body: (await response.json()) as never };
  };
  const cli = (...args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> =>
    new Promise((resolve) => {
      const child = spawn(process.execPath, [CLI, ...args], {
        env: {
          ...process.env,
          CORTEX_CONFIG: stack.configPath,
          CORTEX_NATS_URL: stack.nats.url,
          HF_ENDPOINT: hub.url('/'),
        },
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.on('close', (status) => resolve({ status, stdout, stderr }));
    });
  const requestsFor = (name: string): HubRequest[] => hub.requests.filter((r) => r.path === file(name));
  const served = (name: string): HubRequest[] => requestsFor(name).filter((r) => r.status !== 302);

  it('model sources - a model defined by URL is placed from its remote header: only header ranges are fetched before its load, and /v1/models shows the header', async () => {
    const answer = await chat('remote-chat');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(answer.body.choices?.[0]?.message.content, HELLO);
    const requests = served('remote.gguf');
    const firstBody = requests.findIndex((r) => !isHeaderRange(r));
    assert.ok(firstBody > 0, `header ranges come first: ${JSON.stringify(requests)}`);
    assert.ok(
      requests.slice(0, firstBody).every((r) => r.status === 206),
      'the estimate read ranges only',
    );
    assert.deepEqual(
      requests.slice(firstBody).map((r) => `${r.status} ${r.sent}`),
      [`200 ${CHAT.length}`],
      'the load downloaded the file once',
    );
    // Redirected to another host name, as a hub sends its files from a CDN.
    assert.ok(requestsFor('remote.gguf').some((r) => r.host === '127.0.0.1' && r.status === 302));
    assert.ok(requests.every((r) => r.host === 'localhost'));
    const listed = (await (await fetch(`${stack.baseUrl}/v1/models/remote-chat`)).json()) as {
      gguf?: Record<string, unknown>;
    };
    assert.deepEqual(listed.gguf, {
      architecture: 'llama',
      parameters: listed.gguf?.parameters,
      quantization: 'ALL_F32',
      size_bytes: CHAT.length,
      trained_context_length: 32768,
      template_tools: true,
      template_reasoning: true,
    });
    assert.ok(Number(listed.gguf?.parameters) > 0);
  });

  it('model sources - a download under way is load progress (phase, bytes) and a `downloading` location with a percentage in /v1/models', async () => {
    hub.throttle(file('slow.gguf'), Math.ceil(CHAT.length / 4));
    const events: Array<{ phase?: string; bytes?: number; totalBytes?: number }> = [];
    const subscription = stack.nc.subscribe(Subjects.modelProgressed, {
      callback: (_error, message) => {
        const event = message.json<{ model: string; phase?: string; bytes?: number; totalBytes?: number }>();
        if (event.model === 'slow-chat') events.push(event);
      },
    });
    const seen: Array<Record<string, unknown>> = [];
    try {
      const answer = chat('slow-chat');
      let settled = false;
      void answer.finally(() => (settled = true));
      await waitFor(
        async () => {
          const listed = (await (await fetch(`${stack.baseUrl}/v1/models/slow-chat`)).json()) as {
            locations: Array<Record<string, unknown>>;
          };
          const downloading = listed.locations.find((l) => l.state === 'downloading');
          if (downloading) seen.push(downloading);
          return downloading !== undefined || settled;
        },
        60_000,
        50,
      );
      const done = await answer;
      assert.equal(done.status, 200, JSON.stringify(done.body));
    } finally {
      subscription.unsubscribe();
    }
    assert.ok(seen.length > 0, 'a location read downloading while the file came');
    assert.equal(seen[0]?.total_bytes, CHAT.length);
    assert.ok(Number(seen[0]?.progress) >= 0 && Number(seen[0]?.progress) < 100, JSON.stringify(seen[0]));
    const downloads = events.filter((e) => e.phase === 'downloading');
    assert.ok(downloads.length >= 2, JSON.stringify(events));
    assert.ok(downloads.every((e) => e.totalBytes === CHAT.length));
    assert.equal(downloads.at(-1)?.bytes, CHAT.length);
    assert.ok(
      events.some((e) => e.phase === 'loading'),
      'the load follows as its own phase',
    );
  });

  it('model sources - a `cortex pull` interrupted by dropped connections says so; pulled again it resumes, and the model loads without fetching more', async () => {
    hub.fault(file('pulled.gguf'), 'drop', { times: 3, downloads: true });
    const first = await cli('pull', 'pulled-chat');
    assert.notEqual(first.status, 0);
    assert.match(
      first.stderr,
      /pulled-chat: the connection to .*pulled\.gguf dropped after \d+ of \d+ bytes.*the next attempt resumes from there/,
    );
    assert.ok(existsSync(join(modelsDir, 'pulled.gguf.part')), 'the part file stays for the next pull');
    const before = served('pulled.gguf').length;
    const second = await cli('pull', 'pulled-chat', '--json');
    assert.equal(second.status, 0, second.stderr);
    const lines = second.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    assert.deepEqual(lines.at(-1), {
      source: hub.url(file('pulled.gguf')),
      path: join(modelsDir, 'pulled.gguf'),
      done: true,
    });
    assert.ok(
      lines.some((line) => line.totalBytes === CHAT.length),
      second.stdout,
    );
    const resumed = served('pulled.gguf').slice(before);
    assert.equal(resumed.length, 1);
    assert.equal(resumed[0]?.status, 206);
    assert.ok(
      (resumed[0]?.sent ?? 0) < CHAT.length,
      `the resumed pull fetched ${resumed[0]?.sent} of ${CHAT.length} bytes`,
    );
    const afterPull = served('pulled.gguf').length;
    const answer = await chat('pulled-chat');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(answer.body.choices?.[0]?.message.content, HELLO);
    assert.equal(served('pulled.gguf').length, afterPull, 'the worker estimated and loaded the pulled file from disk');
  });

  it('model sources - two workers sharing a models directory download a file once', async () => {
    stack.spawnService('worker', { CORTEX_WORKER_ID: 'w2' });
    await stack.workersUp(2);
    const workers = (await stack.fleet())?.workers.map((w) => w.workerId) ?? [];
    assert.equal(workers.length, 2);
    const loads = await Promise.all(workers.map((worker) => cli('load', 'shared-chat', '--worker', worker)));
    for (const load of loads) assert.equal(load.status, 0, load.stderr);
    const fleet = await stack.fleet();
    assert.equal(
      fleet?.workers.filter((w) => w.models.some((m) => m.id === 'shared-chat' && m.state === 'ready')).length,
      2,
      'both workers hold it',
    );
    const bodies = served('shared.gguf').filter((r) => !isHeaderRange(r));
    assert.deepEqual(
      bodies.map((r) => `${r.status} ${r.sent}`),
      [`200 ${CHAT.length}`],
    );
  });

  it('model sources - `cortex pull --all` has every worker fetch a model ahead of its load (once for a shared directory); POST /admin/pull does it for one worker', async () => {
    const pulled = await cli('pull', 'prepulled-chat', '--all', '--json');
    assert.equal(pulled.status, 0, pulled.stderr);
    const reply = JSON.parse(pulled.stdout) as {
      model: string;
      pulled: Array<{ workerId: string; path: string; bytes: number }>;
    };
    assert.equal(reply.model, 'prepulled-chat');
    assert.deepEqual(
      reply.pulled.map((p) => [p.path, p.bytes]),
      [
        [join(modelsDir, 'prepulled.gguf'), CHAT.length],
        [join(modelsDir, 'prepulled.gguf'), CHAT.length],
      ],
    );
    assert.equal(new Set(reply.pulled.map((p) => p.workerId)).size, 2);
    assert.deepEqual(
      served('prepulled.gguf')
        .filter((r) => !isHeaderRange(r))
        .map((r) => `${r.status} ${r.sent}`),
      [`200 ${CHAT.length}`],
      "one download (the header ranges are the catalogue's read of its facts, at start)",
    );
    const one = await postJson(`${stack.baseUrl}/admin/pull`, {
      model: 'prepulled-chat',
      worker: reply.pulled[0]!.workerId,
    });
    assert.equal(one.status, 200, await one.clone().text());
    assert.equal(((await one.json()) as { pulled: unknown[] }).pulled.length, 1);
    const neither = await postJson(`${stack.baseUrl}/admin/pull`, { model: 'prepulled-chat' });
    assert.equal(neither.status, 400);
    assert.equal(((await neither.json()) as { error: { param?: string } }).error.param, 'worker');
    const beforeLoad = served('prepulled.gguf').length;
    const answer = await chat('prepulled-chat');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(served('prepulled.gguf').length, beforeLoad, 'the load used the pulled file');
  });

  it('model sources - a quant tag (hf:<user>/<repo>:<quant>) is the file its manifest names, fetched once for a shared directory; an unreachable hub falls back to the last answer', async () => {
    // The catalogue's read of the tag's facts at start asked the manifest too.
    const manifests = (): HubRequest[] => hub.requests.filter((r) => r.path === MANIFEST && r.status === 200);
    const askedBefore = manifests().length;
    const pulled = await cli('pull', 'hf-tag', '--all', '--json');
    assert.equal(pulled.status, 0, pulled.stderr);
    const path = join(modelsDir, 'hf_org_models_tagged.Q4_K_M.gguf');
    const reply = JSON.parse(pulled.stdout) as { pulled: Array<{ workerId: string; path: string; bytes: number }> };
    assert.deepEqual(
      reply.pulled.map((p) => [p.path, p.bytes]),
      [
        [path, CHAT.length],
        [path, CHAT.length],
      ],
      'both workers have the file',
    );
    assert.deepEqual(
      served('tagged.Q4_K_M.gguf')
        .filter((r) => !isHeaderRange(r))
        .map((r) => `${r.status} ${r.sent}`),
      [`200 ${CHAT.length}`],
      'one download for the shared directory',
    );
    const asked = manifests().slice(askedBefore);
    assert.equal(asked.length, 2, 'each worker asked the manifest');
    assert.deepEqual(
      [...new Set(asked.map((r) => r.userAgent))],
      ['llama-cpp'],
      'asked as llama.cpp asks it, the user agent the hub answers with the GGUF file',
    );
    assert.equal(
      readFileSync(join(modelsDir, 'hf_org_models_Q4_K_M.tag'), 'utf8').trim(),
      'hf:org/models/tagged.Q4_K_M.gguf',
    );
    // The hub fails: the answer remembered beside the file stands in, and nothing is fetched again.
    hub.fault(MANIFEST, 500, { times: 1_000 });
    const beforeLoad = served('tagged.Q4_K_M.gguf').length;
    const answer = await chat('hf-tag');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(answer.body.choices?.[0]?.message.content, HELLO);
    assert.ok(
      hub.requests.some((r) => r.path === MANIFEST && r.status === 500),
      'the manifest was asked and failed',
    );
    assert.equal(served('tagged.Q4_K_M.gguf').length, beforeLoad, 'the load used the file on disk');
    const missing = await chat('hf-tag-missing');
    assert.equal(missing.status, 503, JSON.stringify(missing.body));
    assert.match(
      missing.body.error?.message ?? '',
      /hf-tag-missing: .*manifest for hf:org\/models:Q3_K_S .*answered 404: no repository org\/models with a tag Q3_K_S/,
    );
  });

  it('model sources - hf: URIs resolve against HF_ENDPOINT through the same path, a split GGUF in parts included', async () => {
    const answer = await chat('hf-split');
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(answer.body.choices?.[0]?.message.content, HELLO);
    for (const [i, bytes] of SPLIT.entries()) {
      const name = `split-0000${i + 1}-of-00002.gguf`;
      assert.deepEqual(
        served(name)
          .filter((r) => !isHeaderRange(r))
          .map((r) => r.sent),
        [bytes.length],
        name,
      );
      assert.ok(existsSync(join(modelsDir, `hf_org_models_${name}`)));
    }
    const listed = (await (await fetch(`${stack.baseUrl}/v1/models/hf-split`)).json()) as {
      gguf?: Record<string, unknown>;
    };
    assert.equal(listed.gguf?.size_bytes, SPLIT[0]!.length + SPLIT[1]!.length);
  });

  it('model sources - each fault is an error naming the model and the cause, while another model keeps serving', async () => {
    const faults: Array<[string, RegExp]> = [
      ['hf-unauthorized', /hf-unauthorized: .*unauthorized\.gguf answered 401 \(unauthorized\): set HF_TOKEN/],
      ['missing', /missing: .*missing\.gguf answered 404: no such file/],
      ['broken', /broken: .*broken\.gguf answered 500: the server failed/],
      ['dropped', /dropped: the connection to .*dropped\.gguf dropped after \d+ of \d+ bytes/],
      ['truncated', /truncated: the downloaded file is not a usable GGUF .*truncated/],
    ];
    for (const [model, cause] of faults) {
      const answer = await chat(model);
      assert.equal(answer.status, 503, `${model}: ${JSON.stringify(answer.body)}`);
      assert.match(answer.body.error?.message ?? '', cause);
      const other = await chat('cortex-chat');
      assert.equal(other.status, 200, `cortex-chat after ${model}: ${JSON.stringify(other.body)}`);
      assert.equal(other.body.choices?.[0]?.message.content, HELLO);
    }
    assert.equal(existsSync(join(modelsDir, 'truncated.gguf')), false, 'a truncated file is never left to load');
  });
});
