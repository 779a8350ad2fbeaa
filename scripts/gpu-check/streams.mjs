// scripts/gpu-check.sh's own measurements on one model file, on the GPU (or the CPU in a dry run):
// aggregate decode throughput at 1–64 streams, raw node-llama-cpp loop vs the worker (at its bus
// output) vs through the gateway (SSE on the client socket); VRAM node-llama-cpp reports vs the
// worker's estimate (GgufInsights, as LlamaEngine.readEstimate); a stream migration's pause (the
// serving worker SIGKILLed mid-stream); speculative decoding with a draft model against plain.
// Options (env): GC_MODEL, GC_DRAFT, GC_GPU (cuda | cpu), GC_LEVELS (1,2,4,8,16,32,64), GC_TOKENS (128),
// GC_CONTEXT (per sequence, 512), GC_THREADS (cpu threads, 2), GC_SKIP (comma list: raw,worker,gateway,migration,spec).
import 'reflect-metadata';
import { cpus, totalmem } from 'node:os';
import { performance } from 'node:perf_hooks';
import {
  DraftSequenceTokenPredictor,
  getLlama,
  getModuleVersion,
  GgufInsights,
  LlamaLogLevel,
  readGgufFileInfo,
} from 'node-llama-cpp';
import { BusClient } from '@cortex/bus';
import { Subjects, WORKER_ID_TOKEN } from '@cortex/contracts';
import { startStack, waitFor } from '@cortex/testing';
import { streamChat } from '../../bench/dist/sse-load.js';
import { WorkerClient } from '../../bench/dist/worker-client.js';

const MODEL = process.env.GC_MODEL;
const DRAFT = process.env.GC_DRAFT;
const GPU = process.env.GC_GPU ?? 'cuda';
const LEVELS = (process.env.GC_LEVELS ?? '1,2,4,8,16,32,64').split(',').map(Number);
const TOKENS = Number(process.env.GC_TOKENS ?? 128);
const CONTEXT = Number(process.env.GC_CONTEXT ?? 512);
const THREADS = Number(process.env.GC_THREADS ?? 2);
const SKIP = new Set((process.env.GC_SKIP ?? '').split(',').filter(Boolean));
const SLOTS = Math.max(...LEVELS);
const PROMPT = 'Once upon a time';
if (!MODEL) throw new Error('GC_MODEL: a GGUF path');
const log = (line) => console.log(line);
const mib = (bytes) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)] ?? 0;
const row = (...cells) => `| ${cells.join(' | ')} |`;
const gpuOption = GPU === 'cpu' ? false : GPU;

log(`cortex gpu-check streams — ${new Date().toISOString()}`);
log(
  `machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}, node-llama-cpp ${await getModuleVersion()}`,
);
log(
  `settings: ${MODEL.split('/').pop()}, gpu ${GPU}, levels ${LEVELS.join(',')}, ${TOKENS} tokens per stream, context ${CONTEXT} × ${SLOTS} sequences, threads ${THREADS}\n`,
);

const results = { raw: new Map(), worker: new Map(), gateway: new Map() };

// 1. Raw loop and VRAM: one context of SLOTS sequences, N of them decoding at once.
{
  const llama = await getLlama({ gpu: gpuOption, build: 'never', logLevel: LlamaLogLevel.error });
  log(`backend: ${llama.gpu || 'cpu'}; devices: ${(await llama.getGpuDeviceNames()).join(', ') || '—'}`);
  const before = await llama.getVramState();
  const insights = await GgufInsights.from(await readGgufFileInfo(MODEL), llama);
  const gpuLayers = llama.gpu === false ? 0 : insights.totalLayers;
  const modelEstimate = await insights.estimateModelResourceRequirementsV2({ gpuLayers });
  const contextEstimate = await insights.estimateContextResourceRequirementsV2({
    contextSize: CONTEXT,
    modelGpuLayers: gpuLayers,
    sequences: SLOTS,
  });
  const model = await llama.loadModel({ modelPath: MODEL });
  const afterModel = await llama.getVramState();
  const context = await model.createContext({ contextSize: CONTEXT, sequences: SLOTS, threads: THREADS });
  const afterContext = await llama.getVramState();
  const key = llama.gpu === false ? 'cpuRam' : 'gpuVram';
  log(
    "\nmemory: reported by node-llama-cpp (getVramState used, delta) vs the worker's estimate (GgufInsights, as LlamaEngine.readEstimate)",
  );
  log(row('part', 'reported', 'estimated'));
  log(row('---', '---', '---'));
  log(row('model', mib(afterModel.used - before.used), mib(modelEstimate[key])));
  log(
    row(
      `context (${CONTEXT} × ${SLOTS} sequences)`,
      mib(afterContext.used - afterModel.used),
      mib(contextEstimate[key]),
    ),
  );
  log(row('total', mib(afterContext.used - before.used), mib(modelEstimate[key] + contextEstimate[key])));
  log(
    `device total ${mib(afterContext.total)}, free ${mib(afterContext.free)}${llama.gpu === false ? ' (cpu: getVramState reports nothing useful)' : ''}`,
  );
  const prompt = model.tokenize(PROMPT);
  const sequences = Array.from({ length: SLOTS }, () => context.getSequence());
  const decode = async (sequence) => {
    await sequence.clearHistory();
    let tokens = 0;
    // Only the count of tokens matters.
    const generated = sequence.evaluate(prompt, { temperature: 0, yieldEogToken: true })[Symbol.asyncIterator]();
    while (tokens < TOKENS && !(await generated.next()).done) tokens++;
    await generated.return?.();
    return tokens;
  };
  if (!SKIP.has('raw')) {
    await decode(sequences[0]);
    for (const n of LEVELS) {
      const started = performance.now();
      const counts = await Promise.all(sequences.slice(0, n).map(decode));
      const seconds = (performance.now() - started) / 1000;
      results.raw.set(n, counts.reduce((a, b) => a + b, 0) / seconds);
      log(`  raw ${n} stream(s): ${results.raw.get(n).toFixed(0)} tok/s`);
    }
  }
  // 2. Speculative decoding: one sequence, plain vs a draft model (same vocabulary, about a tenth the size).
  if (DRAFT && !SKIP.has('spec')) {
    const draftModel = await llama.loadModel({ modelPath: DRAFT });
    const draftContext = await draftModel.createContext({ contextSize: CONTEXT, sequences: 1, threads: THREADS });
    const targetContext = await model.createContext({ contextSize: CONTEXT, sequences: 2, threads: THREADS });
    const plain = targetContext.getSequence();
    const drafted = targetContext.getSequence({
      tokenPredictor: new DraftSequenceTokenPredictor(draftContext.getSequence(), { minTokens: 1 }),
    });
    const run = async (sequence) => {
      await sequence.clearHistory();
      const before = sequence.tokenPredictions;
      const out = [];
      const started = performance.now();
      for await (const t of sequence.evaluate(prompt, { temperature: 0, yieldEogToken: true }))
        if (out.push(t) >= TOKENS) break;
      const after = sequence.tokenPredictions;
      return {
        rate: out.length / ((performance.now() - started) / 1000),
        text: model.detokenize(out),
        accepted: after.validated - before.validated,
        drafted: after.validated + after.refuted - before.validated - before.refuted,
      };
    };
    await run(plain);
    await run(drafted);
    const p = [];
    const d = [];
    for (let i = 0; i < 5; i++) {
      p.push(await run(plain));
      d.push(await run(drafted));
    }
    log(`\nspeculative decoding, one stream, ${TOKENS} tokens, 5 alternating runs (draft ${DRAFT.split('/').pop()})`);
    log(row('case', 'tok/s median', 'ratio', 'drafted / accepted', 'same text'));
    log(row('---', '---', '---', '---', '---'));
    log(row('plain', median(p.map((r) => r.rate)).toFixed(1), '1', '—', '—'));
    log(
      row(
        'draft',
        median(d.map((r) => r.rate)).toFixed(1),
        median(d.map((r, i) => r.rate / p[i].rate)).toFixed(2),
        `${median(d.map((r) => r.drafted))} / ${median(d.map((r) => r.accepted))}`,
        d.every((r, i) => r.text === p[i].text) ? 'yes' : 'NO',
      ),
    );
    await draftContext.dispose();
    await targetContext.dispose();
    await draftModel.dispose();
  }
  await context.dispose();
  await model.dispose();
  await llama.dispose();
}

// 3. Worker (bus output) and gateway (SSE), then a migration: one stack, the model pinned with SLOTS slots.
if (!(SKIP.has('worker') && SKIP.has('gateway') && SKIP.has('migration'))) {
  log('\nstarting NATS and every service…');
  const stack = await startStack({
    models: [{ id: 'target', file: MODEL, context_size: CONTEXT, slots: SLOTS, pinned: true }],
    config: {
      worker: { gpu: GPU, threads: THREADS, heartbeat_ms: 200, max_queue: 1024 },
      gateway: { stream_idle_timeout_ms: 5_000 },
    },
  });
  try {
    const view = await stack.fleet();
    const workerId = view?.workers.find((w) => w.up)?.workerId;
    if (!workerId) throw new Error('no worker up');
    const client = new WorkerClient(stack.nc, workerId);
    for (const [kind, one] of [
      ['worker', () => client.generate('target', PROMPT, TOKENS)],
      ['gateway', () => streamChat(stack.baseUrl, 'target', TOKENS)],
    ]) {
      if (SKIP.has(kind)) continue;
      await one();
      for (const n of LEVELS) {
        const started = performance.now();
        const runs = await Promise.all(Array.from({ length: n }, one));
        const seconds = (performance.now() - started) / 1000;
        results[kind].set(n, runs.reduce((sum, r) => sum + r.tokens, 0) / seconds);
        log(`  ${kind} ${n} stream(s): ${results[kind].get(n).toFixed(0)} tok/s`);
      }
    }
    log(`\naggregate decode throughput (tok/s), ${TOKENS} tokens per stream, all streams started at once`);
    log(row('streams', 'raw loop', 'worker (bus)', 'gateway (SSE)', 'worker / raw', 'gateway / raw'));
    log(row('---', '---', '---', '---', '---', '---'));
    const cell = (v) => (v === undefined ? '—' : v.toFixed(0));
    const ratio = (a, b) => (a === undefined || !b ? '—' : (a / b).toFixed(2));
    for (const n of LEVELS)
      log(
        row(
          n,
          cell(results.raw.get(n)),
          cell(results.worker.get(n)),
          cell(results.gateway.get(n)),
          ratio(results.worker.get(n), results.raw.get(n)),
          ratio(results.gateway.get(n), results.raw.get(n)),
        ),
      );

    if (!SKIP.has('migration')) {
      // A second worker holding the model; the stream's worker is SIGKILLed after 5 chunks.
      const generates = [];
      stack.nc.subscribe(Subjects.workerGenerate.replace(WORKER_ID_TOKEN, '*'), {
        callback: (_e, msg) => void generates.push(msg.subject.split('.')[3] ?? ''),
      });
      const second = stack.spawnService('worker', { CORTEX_WORKER_ID: 'gpu-check-2' });
      await stack.workersUp(2);
      await new BusClient(stack.nc, 120_000).request(Subjects.routerLoad, { model: 'target', worker: 'gpu-check-2' });
      const byId = new Map([
        [workerId, stack.processes.get('worker')],
        ['gpu-check-2', second],
      ]);
      const body = JSON.stringify({
        model: 'target',
        messages: [{ role: 'user', content: PROMPT }],
        stream: true,
        temperature: 0,
        max_tokens: 2000,
      });
      const response = await fetch(new URL('/v1/chat/completions', stack.baseUrl), {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
      const decoder = new globalThis.TextDecoder();
      let chunks = 0;
      let killedAt = 0;
      let killed = '';
      let last = 0;
      const gaps = [];
      for await (const part of response.body) {
        const now = performance.now();
        const text = decoder.decode(part, { stream: true });
        chunks += (text.match(/^data: /gm) ?? []).length;
        if (killedAt) gaps.push({ at: now - killedAt, gap: now - last });
        last = now;
        if (!killedAt && chunks >= 5 && generates.length > 0) {
          killed = generates.at(-1);
          byId.get(killed)?.kill('SIGKILL');
          killedAt = performance.now();
        }
      }
      // The pause: the longest silence after the kill (chunks already in flight from the dead worker may come first).
      const worst = gaps.reduce((a, g) => (g.gap > a.gap ? g : a), { at: 0, gap: 0 });
      log(
        `\nmigration: SIGKILLed ${killed} after ${5} chunks; ${chunks} chunks in all, generate commands sent to ${generates.join(' → ')}`,
      );
      log(
        `migration pause (longest silence after the kill): ${worst.gap.toFixed(0)} ms, ending ${worst.at.toFixed(0)} ms after the kill`,
      );
      await waitFor(() => true, 10);
    }
  } finally {
    await stack.stop();
  }
}
log('\nstreams: done');
