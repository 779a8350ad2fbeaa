import { performance } from 'node:perf_hooks';
import {
  getLlama,
  LlamaLogLevel,
  resolveChatWrapper,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaModel,
  type Token,
} from 'node-llama-cpp';

export interface DecodeRun {
  tokens: number;
  /** Tokens per second after the first token (prompt evaluation excluded). */
  tokensPerSecond: number;
  /** From starting the evaluation (prompt included; with `reusePrefix`, the trim too) to the first generated token. */
  ttftMs: number;
}

/**
 * The baseline the worker is held to: node-llama-cpp's own `sequence.evaluate` loop doing nothing
 * per token but counting, on the same model, context size, threads and rendered prompt.
 *
 * By default each run evaluates the whole prompt on a fresh sequence. With `reusePrefix` the loop
 * keeps its sequence and does what the worker does for a prompt it has seen: it trims the tokens
 * after the prompt's last one and evaluates only that one. A worker asked the same prompt again pays
 * only that, so it is the like-for-like baseline for time to first token.
 */
export class RawBaseline {
  private sequence: LlamaContextSequence | null = null;

  private constructor(
    private readonly llama: Llama,
    private readonly model: LlamaModel,
    private readonly context: LlamaContext,
    private readonly prompt: Token[],
    private readonly reusePrefix: boolean,
  ) {}

  /** `gpu` as the worker's `worker.gpu`: `cpu`, `auto`, `cuda`, `vulkan` or `metal`, so both run on the same backend. */
  static async open(options: {
    path: string;
    contextSize: number;
    threads: number;
    prompt: string;
    gpu: string;
    reusePrefix?: boolean;
  }): Promise<RawBaseline> {
    const gpu = options.gpu === 'cpu' ? false : (options.gpu as 'auto' | 'cuda' | 'vulkan' | 'metal');
    const llama = await getLlama({ gpu, logLevel: LlamaLogLevel.error, build: 'never' });
    const model = await llama.loadModel({ modelPath: options.path });
    // The worker turns flash attention off on the CPU for heads under 32 dimensions (llama-engine.ts:
    // 3-12x slower prompts there); the baseline must run the same kernels.
    const heads = (model.fileInfo.architectureMetadata as { attention?: { head_count?: number } }).attention
      ?.head_count;
    const smallHeads = gpu === false && heads !== undefined && model.embeddingVectorSize / heads < 32;
    const context = await model.createContext({
      contextSize: options.contextSize,
      sequences: 1,
      threads: options.threads,
      ...(smallHeads && { flashAttention: false }),
    });
    // The same rendered chat prompt the worker evaluates, so both decode at the same positions.
    const { contextText } = resolveChatWrapper(model).generateContextState({
      chatHistory: [
        { type: 'user', text: options.prompt },
        { type: 'model', response: [] },
      ],
    });
    return new RawBaseline(llama, model, context, contextText.tokenize(model.tokenizer), options.reusePrefix === true);
  }

  async run(maxTokens: number): Promise<DecodeRun> {
    const sequence = this.sequence ?? this.context.getSequence();
    let tokens = 0;
    let first = 0;
    let last = 0;
    const started = performance.now();
    let input = this.prompt;
    if (this.reusePrefix && sequence.nextTokenIndex > 0) {
      // As the worker's Decode.reusePrefix: keep all but the prompt's last token, which yields the first one.
      const keep = Math.min(sequence.compareContextTokens(this.prompt).firstDifferentIndex, this.prompt.length - 1);
      await sequence.eraseContextTokenRanges([{ start: keep, end: sequence.nextTokenIndex }]);
      input = this.prompt.slice(keep);
    }
    try {
      for await (const _token of sequence.evaluate(input, { temperature: 0 })) {
        last = performance.now();
        if (tokens === 0) first = last;
        if (++tokens >= maxTokens) break;
      }
    } finally {
      if (this.reusePrefix) this.sequence = sequence;
      else sequence.dispose();
    }
    return {
      tokens,
      tokensPerSecond: tokens > 1 ? ((tokens - 1) * 1000) / (last - first) : 0,
      ttftMs: first - started,
    };
  }

  async close(): Promise<void> {
    await this.context.dispose();
    await this.model.dispose();
    await this.llama.dispose();
  }
}
