import {
  BUILTIN_SAMPLING,
  seedFor,
  withSamplingDefaults,
  type CanonicalRequest,
  type ModelCapabilities,
  type SamplingDefaults,
  type Usage,
} from '@cortex/contracts';
import type { EngineModel, GenerateJob, ModelSpec } from '../engine.types.js';
import { chargedTokens, ticketOf } from '../fair-queue.js';
import { SlotPool } from '../slot-pool.js';
import { OutputCheck } from '../output-check.js';
import { OutputProcessor } from '../output-processor.js';
import type { ChosenFormat } from '../formats/choose-format.js';
import { promptReasoning, type ChatFormat } from '../formats/chat-format.js';
import type { LlamaNodeContext, LlamaNodeParallelResult } from './llama-node.types.js';
import { heldOutput, llamaNodeTools, mediaMessages, refusal, type Defuse } from './mtmd-request.js';
import { formatCapabilities } from '../formats/format-capabilities.js';
import { promptTooLong } from '../prompt-bound.js';

/** A prompt as the model's template and tokenizer render it, images included. */
interface Rendered {
  prompt: string;
  /** The images as data URLs, in prompt order. */
  media: string[];
  /** The template's own stop strings: they end the output but are not a user's stop sequence. */
  stops: string[];
  /** Prompt tokens, each image counted as the embeddings it takes. */
  tokens: number;
  /** The prompt ends inside the reasoning block (the template's generation prompt opened it). */
  startInReasoning: boolean;
  /** What holds the output (a JSON response format, a forced call whose opening ends the prompt); null: nothing. */
  held: { schema: Record<string, unknown>; opening: string } | null;
}

/**
 * One model with its projector on llama.node: `slots` parallel sequences of llama.node's slot API
 * (its single `completion()` has a race that leaves it refusing every later call), queued by
 * cortex's own SlotPool so that priorities and the queue limit hold as on the text path.
 * llama.node keeps each slot's evaluated prompt and reuses its prefix, comparing images by the hash
 * of their bitmaps, so a prefix is never reused across different images.
 */
export class MtmdEngineModel implements EngineModel {
  readonly id: string;
  readonly slots: number;
  /** How it writes reasoning and calls, and how that was chosen (see chooseFormat). */
  readonly format: string;
  readonly capabilities: ModelCapabilities;
  private readonly chatFormat: ChatFormat;
  /** What the projector takes, as llama.node reports it; audio is not yet accepted by any dialect. */
  readonly media: { vision: boolean; audio: boolean };
  private readonly pool: SlotPool<number>;

  constructor(
    spec: ModelSpec,
    private readonly context: LlamaNodeContext,
    readonly sizeBytes: number,
    /** Tokens one slot holds: llama.node divides its context evenly between the slots. */
    private readonly slotContext: number,
    private readonly samplingDefaults: SamplingDefaults,
    dialect: ChosenFormat & { source: string; vocabulary?: readonly string[] },
    /** Breaks the model's special tokens in a client's text (see mediaMessages). */
    private readonly defuse: Defuse,
  ) {
    this.id = spec.id;
    this.slots = spec.slots;
    this.pool = new SlotPool(
      Array.from({ length: spec.slots }, (_, i) => i),
      spec.maxQueue,
      spec.queueOrder,
    );
    this.media = context.getMultimodalSupport();
    const { format } = dialect;
    this.chatFormat = format;
    this.format = `${format.id} (${dialect.chosenBy})`;
    this.capabilities = {
      ...formatCapabilities(format, dialect.source, dialect.vocabulary),
      vision: this.media.vision,
      completions: false,
      fim: false,
    };
    this.chatTemplate = spec.chatTemplate;
  }

  private readonly chatTemplate: string | undefined;

  get inFlight(): number {
    return this.pool.inUse;
  }

  get queued(): number {
    return this.pool.queued;
  }

  /** The prompt's tokens as they will be evaluated: each image counts the embeddings it takes. */
  async countTokens(request: CanonicalRequest): Promise<number> {
    return (await this.render(request)).tokens;
  }

  private async render(request: CanonicalRequest): Promise<Rendered> {
    const { messages, media } = mediaMessages(request.messages, this.defuse);
    const chat = this.context.getFormattedChat(messages, this.chatTemplate, {
      jinja: true,
      add_generation_prompt: true,
      ...(request.tools?.length && { tools: llamaNodeTools(request.tools, this.defuse) }),
      ...(request.templateOptions && { chat_template_kwargs: request.templateOptions }),
    });
    const reasoning = promptReasoning(this.chatFormat, chat.prompt, request.prefill !== undefined);
    // An answer already begun (`prefill`) goes on from its text, after the block the generation prompt opened.
    const begun =
      request.prefill === undefined ? chat.prompt : chat.prompt + reasoning.close + this.defuse(request.prefill);
    // A forced call's opening is written for the model: it starts inside the call, its JSON held by the schema.
    const held = heldOutput(request, this.chatFormat, this.id);
    const prompt = held?.opening ? begun + (reasoning.startInReasoning ? reasoning.close : '') + held.opening : begun;
    const counted = await this.context.tokenize(prompt, { media_paths: media });
    return {
      prompt,
      media,
      stops: chat.additional_stops ?? [],
      tokens: counted.tokens.length,
      startInReasoning: reasoning.startInReasoning && !held?.opening,
      held,
    };
  }

  async generate(job: GenerateJob): Promise<void> {
    const { request, signal } = job;
    const refused = refusal(request, this.id, job.resume !== undefined);
    if (refused) throw refused;
    const rendered = await this.render(request);
    if (rendered.tokens >= this.slotContext) {
      const { tokens } = rendered;
      throw promptTooLong({ model: this.id, tokens, contextSize: this.slotContext, param: 'messages', images: true });
    }
    const slot = await this.pool.acquire(signal, undefined, ticketOf(job.priority, rendered.tokens));
    let charged: number | undefined;
    try {
      // A call the model chose is not held to its schema here (no lazy grammar): a strict tool's is checked at the end.
      const check = new OutputCheck(request, job.emit, job.warn);
      charged = chargedTokens(await this.run({ ...job, emit: check.active ? check.emit : job.emit }, rendered));
    } finally {
      this.pool.release(slot, charged);
    }
  }

  private async run(job: GenerateJob, rendered: Rendered): Promise<Usage> {
    const { request, signal } = job;
    const sampling = withSamplingDefaults(request.sampling, this.samplingDefaults, BUILTIN_SAMPLING);
    // llama.node sends a token before it checks the stop strings: the processor holds the answer that may be one.
    const output = new OutputProcessor({
      job,
      model: this.id,
      format: this.chatFormat,
      startInReasoning: rendered.startInReasoning,
      hiddenStops: rendered.stops,
      room: this.slotContext - rendered.tokens,
      emit: job.emit,
    });
    output.start(rendered.tokens);
    // The forced call's opening, written for the model at the prompt's end, is read as the output's start.
    if (rendered.held?.opening) output.open(rendered.held.opening, 0);
    // Cancelled before anything was handed to llama.node: nothing was evaluated.
    if (signal.aborted) return output.finish({ reason: 'cancelled', promptTokens: 0, cachedPromptTokens: 0 });
    let stopAsked = false;
    const stopOnce = (): void => {
      if (stopAsked) return;
      stopAsked = true;
      stop();
    };
    const { promise, stop } = await this.context.parallel.completion(
      {
        prompt: rendered.prompt,
        media_paths: rendered.media,
        n_predict: output.maxTokens,
        temperature: sampling.temperature,
        top_p: sampling.topP,
        top_k: sampling.topK,
        min_p: sampling.minP,
        seed: seedFor(sampling),
        stop: [...(sampling.stop ?? []), ...rendered.stops],
        // llama.cpp's grammar from the schema, as llama.node's queued completions read it.
        ...(rendered.held && {
          response_format: { type: 'json_schema', json_schema: { schema: rendered.held.schema } },
        }),
        penalty_repeat: sampling.repetitionPenalty,
        penalty_last_n: sampling.repeatLastN,
        penalty_present: sampling.presencePenalty ?? 0,
        penalty_freq: sampling.frequencyPenalty ?? 0,
        ...(sampling.xtc && { xtc_probability: sampling.xtc.probability, xtc_threshold: sampling.xtc.threshold }),
        ...(sampling.dry && {
          dry_multiplier: sampling.dry.multiplier,
          ...(sampling.dry.base !== undefined && { dry_base: sampling.dry.base }),
          ...(sampling.dry.allowedLength !== undefined && { dry_allowed_length: sampling.dry.allowedLength }),
          dry_penalty_last_n: sampling.dry.lastN ?? -1,
          ...(sampling.dry.sequenceBreakers && { dry_sequence_breakers: sampling.dry.sequenceBreakers }),
        }),
      },
      (_requestId, data) => {
        // A cancel is sent once the slot generates: llama.node 1.7.15 aborts the whole process
        // (std::length_error) when a request is cancelled while its images are still being prepared.
        if (signal.aborted) return stopOnce();
        if (output.ended) return;
        output.arrived();
        // A stop string ends llama.node's run too (it was given the same ones), and so does its n_predict;
        // the last call allowed is ended here.
        if (output.push(data.token) === 'tool_calls') stopOnce();
      },
    );
    // A cancel reaches llama.node's slot at its next step; its promise then rejects. Before the first
    // token the token callback sends it (see above): the prompt is evaluated, never cut short there.
    const cancel = (): void => {
      if (output.completionTokens > 0) stopOnce();
    };
    signal.addEventListener('abort', cancel, { once: true });
    let result: LlamaNodeParallelResult | null = null;
    try {
      result = await promise;
    } catch (error) {
      if (!signal.aborted && !output.ended) throw error;
    } finally {
      signal.removeEventListener('abort', cancel);
    }
    const cancelled = signal.aborted && !output.ended;
    // A cancelled run's held output is dropped; otherwise it goes out.
    if (!cancelled) output.end();
    const stopped = result?.stopped_eos || result?.stopped_word;
    return output.finish({
      reason: cancelled ? 'cancelled' : stopped ? 'stop' : 'length',
      promptTokens: rendered.tokens,
      cachedPromptTokens: Math.min(result?.timings.cache_n ?? 0, rendered.tokens),
      // llama.node counts the tokens it generated; a cancelled run counts those read.
      ...(!cancelled && result && { completionTokens: result.tokens_predicted }),
    });
  }

  async dispose(): Promise<void> {
    this.context.parallel.disable();
    this.context.releaseMultimodal();
    await this.context.release();
  }
}
