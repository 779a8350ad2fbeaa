/**
 * `npm run bench:prompt`: what the worker spends turning an agent's conversation into tokens, turn
 * after turn, before any prompt evaluation. Each turn adds a user message, a tool call and its result
 * to a long system prompt with tool schemas, the shape coding agents send. For every turn it times the
 * worker's rendering (the model's own chat template, `formats/template-prompt.ts`; node-llama-cpp's
 * chat wrapper for a model without one), tokenizing the rendered prompt whole (node-llama-cpp's
 * tokenizer, as before the memo), and tokenizing it through the worker's memo (`token-memo.ts`), which
 * saw the earlier turns; the two token lists must be equal. Both run in this process, alternating.
 *
 * Options (env): BENCH_TURNS (20), BENCH_SYSTEM_KB (40: the system prompt's size).
 */
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  getLlama,
  getModuleVersion,
  LlamaLogLevel,
  resolveChatWrapper,
  type LlamaModel,
  type Token,
  type Tokenizer,
} from 'node-llama-cpp';
import type { CanonicalMessage, ToolDefinition } from '@cortex/contracts';
import { AGENT_SYSTEM_PROMPT, ensureFamilyFixtures, ensureFixtureModels } from '@cortex/fixtures';
import { TemplatePrompt } from '../../apps/worker/dist/engine/formats/template-prompt.js';
import { SHARED_MODELS } from '@cortex/testing';
import { toChatHistory, toFunctions } from '../../apps/worker/dist/engine/prompt.js';
import { memoTokenizer } from '../../apps/worker/dist/engine/token-memo.js';

const TURNS = Number(process.env.BENCH_TURNS ?? 20);
const SYSTEM_KB = Number(process.env.BENCH_SYSTEM_KB ?? 40);
const log = (line: string): void => console.log(line);
const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;

const TOOLS: ToolDefinition[] = Array.from({ length: 12 }, (_, i) => ({
  name: `tool_${i}`,
  description: 'Runs one step of the task in the workspace and returns what it printed. '.repeat(4),
  parameters: {
    type: 'object',
    properties: { path: { type: 'string', description: 'A path in the workspace.' }, limit: { type: 'integer' } },
    required: ['path'],
  },
}));

function systemPrompt(): string {
  let text = AGENT_SYSTEM_PROMPT;
  while (text.length < SYSTEM_KB * 1024) text += `\n${AGENT_SYSTEM_PROMPT}`;
  return text;
}

async function main(): Promise<void> {
  log(`cortex prompt bench — ${new Date().toISOString()}`);
  log(
    `machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}, node-llama-cpp ${await getModuleVersion()}`,
  );
  log(
    `settings: a ${SYSTEM_KB} KB system prompt, ${TOOLS.length} tools, ${TURNS} turns (each a user message, a tool call and its result)\n`,
  );
  const dir = mkdtempSync(join(tmpdir(), 'cortex-bench-prompt-'));
  const llama = await getLlama({ gpu: false, logLevel: LlamaLogLevel.error, build: 'never' });
  try {
    const fixtures = {
      ...(await ensureFixtureModels(dir)),
      ...(await ensureFamilyFixtures(dir, { ids: ['cortex-gpt-oss', 'cortex-qwen3-coder'] })),
    };
    const models = [
      { id: 'cortex-tools', path: fixtures['cortex-tools'] },
      { id: 'cortex-gpt-oss', path: fixtures['cortex-gpt-oss'] },
      { id: 'cortex-qwen3-coder', path: fixtures['cortex-qwen3-coder'] },
      { id: 'stories260K', path: join(SHARED_MODELS, 'stories260K.gguf') },
      { id: 'llama-2-tiny-random', path: join(SHARED_MODELS, 'llama-2-tiny-random.gguf') },
    ].filter((m): m is { id: string; path: string } => m.path !== undefined && existsSync(m.path));
    log(
      'per turn, medians over the turns after the first (ms); "whole" tokenizes the rendered prompt whole, "memo" as the worker does',
    );
    log('model                 renderer                     tokens (last)   render   whole    memo   whole/memo');
    for (const { id, path } of models) {
      const model = await llama.loadModel({ modelPath: path });
      try {
        const renderer = rendererOf(model);
        // As the worker sizes it for a model with a 32k context and 4 slots.
        const memo = memoTokenizer(model.tokenizer, 32_768 * 4 * 4);
        const messages: CanonicalMessage[] = [{ role: 'system', content: systemPrompt() }];
        const render: number[] = [];
        const whole: number[] = [];
        const viaMemo: number[] = [];
        let tokens = 0;
        for (let turn = 0; turn < TURNS; turn++) {
          messages.push({
            role: 'user',
            content: `Turn ${turn}: look at src/module-${turn}.ts and fix the failing test there. `.repeat(6),
          });
          messages.push({
            role: 'assistant',
            content: 'Reading the file first.',
            toolCalls: [
              { id: `call_${turn}`, name: 'tool_1', arguments: JSON.stringify({ path: `src/module-${turn}.ts` }) },
            ],
          });
          messages.push({
            role: 'tool',
            toolCallId: `call_${turn}`,
            content: JSON.stringify({ output: `export const value${turn} = compute(${turn});\n`.repeat(40) }),
          });
          const started = performance.now();
          const prompt = renderer.render(messages);
          const rendered = performance.now() - started;
          // Which goes first alternates, so neither always finds the tokenizer's caches warm.
          const timed = (tokenizer: typeof memo): { tokens: number[]; ms: number } => {
            const at = performance.now();
            const out = prompt(tokenizer);
            return { tokens: out, ms: performance.now() - at };
          };
          let plain: { tokens: number[]; ms: number };
          let memoed: { tokens: number[]; ms: number };
          if (turn % 2 === 0) {
            plain = timed(model.tokenizer);
            memoed = timed(memo);
          } else {
            memoed = timed(memo);
            plain = timed(model.tokenizer);
          }
          if (
            plain.tokens.length !== memoed.tokens.length ||
            plain.tokens.some((token, i) => token !== memoed.tokens[i])
          ) {
            throw new Error(`${id}, turn ${turn + 1}: the memo's tokens differ from the tokenizer's`);
          }
          tokens = plain.tokens.length;
          // The first turn fills the memo: it is the tokenizer's cost plus the memo's own.
          if (turn === 0) continue;
          render.push(rendered);
          whole.push(plain.ms);
          viaMemo.push(memoed.ms);
        }
        log(
          `${id.padEnd(21)} ${renderer.name.padEnd(28)} ${String(tokens).padStart(13)}   ${median(render).toFixed(2).padStart(6)}   ${median(whole).toFixed(2).padStart(6)}   ${median(viaMemo).toFixed(2).padStart(5)}   ${(median(whole) / median(viaMemo)).toFixed(1).padStart(10)}`,
        );
      } finally {
        await model.dispose();
      }
    }
  } finally {
    await llama.dispose();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The worker's renderer for a model: its own template, or node-llama-cpp's wrapper for a GGUF without one. */
function rendererOf(model: LlamaModel): {
  name: string;
  render(messages: CanonicalMessage[]): (tokenizer: Tokenizer) => Token[];
} {
  const source = model.fileInfo.metadata.tokenizer?.chat_template;
  if (source) {
    const template = TemplatePrompt.checked(source, model);
    return {
      name: 'its chat template',
      render: (messages) => {
        const text = template.text(messages, TOOLS);
        return (tokenizer) => template.tokens(text, tokenizer);
      },
    };
  }
  const wrapper = resolveChatWrapper(model);
  return {
    name: wrapper.constructor.name,
    render: (messages) => {
      const { contextText } = wrapper.generateContextState({
        chatHistory: toChatHistory(messages),
        availableFunctions: toFunctions(TOOLS),
      });
      return (tokenizer) => contextText.tokenize(tokenizer);
    },
  };
}

main().catch((error: Error) => {
  console.error(`bench failed: ${error.stack ?? error.message}`);
  process.exit(1);
});
