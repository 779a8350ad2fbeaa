import { performance } from 'node:perf_hooks';
import type { Llama } from 'node-llama-cpp';
import { promptTokensAtLeast } from '../../apps/worker/dist/engine/prompt-bound.js';

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;

/**
 * Sizing one prompt of 1 to 256 KB: the worker's count in chunks (no limit, so it runs to the end)
 * and tokenizing the text whole, medians of 5, in µs per KB. One repeated letter is tokenized whole
 * only up to 64 KB: it is quadratic (seconds at 256 KB), the reason the worker counts in chunks.
 */
export async function promptSizing(llama: Llama, path: string, log: (line: string) => void): Promise<void> {
  const model = await llama.loadModel({ modelPath: path });
  try {
    log(
      '\nsizing one prompt (cortex-chat\'s tokenizer): µs per KB, medians of 5; "chunked" is the worker\'s count, "whole" one tokenize call',
    );
    log('text           KB   tokens   chunked µs/KB   whole µs/KB');
    const words = 'the agent reads src/index.ts and runs the failing test again before it edits anything; ';
    for (const [name, unit] of [
      ['words', words],
      ['one letter', 'a'],
    ] as const) {
      for (const kb of [1, 4, 16, 64, 256]) {
        const text = unit.repeat(Math.ceil((kb * 1024) / unit.length)).slice(0, kb * 1024);
        const request = {
          model: 'cortex-chat',
          messages: [{ role: 'user' as const, content: text }],
          sampling: {},
          stream: false,
        };
        const time = (work: () => number): { ms: number; tokens: number } => {
          const runs: number[] = [];
          let tokens = 0;
          for (let i = 0; i < 5; i++) {
            const at = performance.now();
            tokens = work();
            runs.push(performance.now() - at);
          }
          return { ms: median(runs), tokens };
        };
        const chunked = time(() => promptTokensAtLeast(model, request, Number.POSITIVE_INFINITY));
        const whole = name === 'one letter' && kb > 64 ? null : time(() => model.tokenize(text).length);
        const perKb = (ms: number): string => ((ms * 1000) / kb).toFixed(0);
        log(
          `${name.padEnd(12)} ${String(kb).padStart(4)}   ${String(whole?.tokens ?? chunked.tokens).padStart(6)}   ${perKb(chunked.ms).padStart(13)}   ${(whole ? perKb(whole.ms) : '-').padStart(11)}`,
        );
      }
    }
  } finally {
    await model.dispose();
  }
}
