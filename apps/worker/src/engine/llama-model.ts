import {
  TokenBias,
  type ChatWrapper,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaModel,
  type Token,
  type Tokenizer,
} from 'node-llama-cpp';
import { CortexError, requestImages, type CanonicalRequest, type ModelCapabilities } from '@cortex/contracts';
import { Decode, type DecodeModel } from './decode.js';
import type { EngineModel, GenerateJob, ModelSpec } from './engine.types.js';
import { GrammarCache } from './grammars.js';
import { formatMarkers, formatTexts, promptReasoning, RAW_FORMAT, type ChatFormat } from './formats/chat-format.js';
import { TemplatePrompt } from './formats/template-prompt.js';
import { OutputCheck } from './output-check.js';
import {
  PLAUSIBLE_BYTES_PER_TOKEN,
  promptTooLong,
  tokensIfOverContext,
  tokensIfOverContextAsync,
} from './prompt-bound.js';
import { toChatHistory, toFunctions } from './prompt.js';
import { fimTokens, rawPromptText, renderRawPrompt } from './raw-prompt.js';
import { chargedTokens, ticketOf } from './fair-queue.js';
import { ResumeReplay } from './resume-replay.js';
import { SlotPool } from './slot-pool.js';
import { chooseSlot, longestPrefix, type SlotView } from './slot-choice.decider.js';
import { lookUpIn, type Speculation } from './speculative.js';
import { stopTexts } from './stop-texts.js';
import { memoTokenizer } from './token-memo.js';
import { NativeGarbage, samplerBytes } from './native-garbage.js';
import { vocabulary, vocabularySize } from './vocabulary.js';
import { checkLogitBias } from './token-bias.js';
import { ggufSamplingDefaults } from './sampling-defaults.js';
import type { PromptCache } from './prompt-cache.js';
import { formatCapabilities } from './formats/format-capabilities.js';
import { wholeCallMarkers } from './whole-call-grammar.js';
import {
  callHoldOf,
  callKeys,
  forcedStart,
  forcedTools,
  singleToken,
  wholeAnswerCall,
  type CallHolding,
} from './call-hold.js';

/**
 * How a loaded model renders prompts and reads its output: its own chat template (or, for a GGUF
 * without one, node-llama-cpp's chat wrapper) and the format of its family (see ChatFormat).
 */
export interface ModelDialect {
  /** The model's chat template; node-llama-cpp's chat wrapper for a GGUF without one. */
  prompt: TemplatePrompt | ChatWrapper;
  format: ChatFormat;
  /** How the format was chosen, for the load log (`the template's fingerprint`, `the catalogue`). */
  chosenBy: string;
}

/**
 * One loaded model: a context with `slots` sequences and cortex's own decode loop (`decode.ts`). The
 * prompt is rendered by the model's chat template; a request waits for a free sequence (the one that
 * holds its conversation, else the one whose loss costs least: see chooseSlot) and is decoded there.
 */
export class LlamaEngineModel implements EngineModel {
  readonly id: string;
  readonly slots: number;
  readonly format: string;
  readonly capabilities: ModelCapabilities;
  private readonly pool: SlotPool<LlamaContextSequence>;
  /** When each sequence was last released, for the choice of a slot (least recently used goes first). */
  private readonly lastUsed = new Map<LlamaContextSequence, number>();
  /** Whether the request that last ran on each sequence asked for its prompt to be kept longer (CanonicalRequest.keepPromptLonger). */
  private readonly keptLonger = new Map<LlamaContextSequence, boolean>();
  private readonly slotChoice: (free: readonly SlotView[]) => number;
  private readonly dialect: ModelDialect;
  /**
   * Tokenizes rendered prompts, remembering each message's tokens for the conversation's next turn.
   * It keeps as much text as the model's sequences hold tokens, at a plausible 4 bytes per token.
   */
  private readonly promptTokenizer: Tokenizer;
  /** What every decode on this model reads: the model, its batch size, its marker tokens. */
  private readonly decodeModel: DecodeModel;
  /** A raw completion's decode: the model's markers are plain text there. */
  private readonly rawDecodeModel: DecodeModel;
  private readonly grammars: GrammarCache;
  /** How a grammar holds this model's calls (see callHoldOf). */
  private readonly holding: CallHolding;
  /** What each generation's sampler keeps natively until it is collected (see NativeGarbage). */
  /** Null when the model's header does not list its tokens. */
  private readonly vocabularySize: number | null;
  private readonly samplerBytes: number;

  constructor(
    spec: ModelSpec,
    private readonly model: LlamaModel,
    private readonly context: LlamaContext,
    dialect: ModelDialect,
    private readonly speculation: Speculation | null = null,
    private readonly garbage: NativeGarbage = new NativeGarbage(0),
    /** The worker's store of prompts kept beyond the slots; null when it has none. */
    private readonly promptCache: PromptCache | null = null,
  ) {
    this.id = spec.id;
    this.slots = spec.slots;
    const sequences = Array.from({ length: spec.slots }, () =>
      context.getSequence(speculation ? { tokenPredictor: speculation.predictor() } : undefined),
    );
    this.pool = new SlotPool(sequences, spec.maxQueue, spec.queueOrder);
    this.slotChoice = spec.slotChoice === 'longest' ? longestPrefix : chooseSlot;
    this.dialect = dialect;
    this.format = `${dialect.format.id} (${dialect.chosenBy})`;
    this.promptTokenizer = memoTokenizer(model.tokenizer, spec.contextSize * spec.slots * PLAUSIBLE_BYTES_PER_TOKEN);
    const { format } = dialect;
    this.holding = callHoldOf(format, (text) => singleToken(model, text) !== null);
    const callHold = this.holding.hold;
    // Marker tokens banned while a grammar holds the output: a marker's text can fit inside a JSON
    // string, and read as a marker it would open a new call (or reasoning) inside the one being written.
    const markers = formatMarkers(format).flatMap((marker) => singleToken(model, marker) ?? []);
    const markerBias = markers.length > 0 ? new TokenBias(model.tokenizer).set(markers, 'never') : undefined;
    // Inside a whole call its grammar writes the call's own markers; the others (a new call's opening, reasoning) stay banned.
    const own = new Set(callHold === 'whole' ? wholeCallMarkers(format.tools) : []);
    const callMarkerTokens = formatMarkers(format)
      .filter((marker) => !own.has(marker))
      .flatMap((marker) => singleToken(model, marker) ?? []);
    const shownSpecials = new Set(
      formatTexts(format).flatMap((text) =>
        model.tokenize(text, true).filter((token) => model.tokenizer.isSpecialToken(token)),
      ),
    );
    const samplingDefaults = ggufSamplingDefaults(model.fileInfo.metadata.general);
    this.decodeModel = {
      id: this.id,
      model,
      batchSize: context.batchSize,
      format,
      callHold,
      markerBias,
      markerTokens: markers,
      callMarkerTokens,
      callMarkerBias:
        callHold !== 'whole'
          ? markerBias
          : callMarkerTokens.length > 0
            ? new TokenBias(model.tokenizer).set(callMarkerTokens, 'never')
            : undefined,
      shownSpecials,
      samplingDefaults,
    };
    this.rawDecodeModel = {
      ...this.decodeModel,
      format: RAW_FORMAT,
      callHold: null,
      markerBias: undefined,
      markerTokens: [],
      callMarkerBias: undefined,
      callMarkerTokens: [],
      shownSpecials: new Set(),
    };
    this.grammars = new GrammarCache(model.llama);
    this.vocabularySize = vocabularySize(model);
    this.samplerBytes = samplerBytes(this.vocabularySize ?? 0);
    this.capabilities = {
      ...formatCapabilities(
        format,
        dialect.prompt instanceof TemplatePrompt ? dialect.prompt.source : '',
        vocabulary(model),
      ),
      vision: false,
      completions: true,
      fim: fimTokens(model) !== null,
      ...(speculation && { speculative: speculation.kind }),
    };
  }

  get sizeBytes(): number {
    return this.model.size;
  }

  get inFlight(): number {
    return this.pool.inUse;
  }

  get queued(): number {
    return this.pool.queued;
  }

  /**
   * The prompt's length in tokens. Past the context it may be the lower bound the chunked count
   * reached (never less than the context): such a prompt cannot run here.
   */
  countTokens(request: CanonicalRequest): number {
    const atLeast = tokensIfOverContext(this.model, request, this.context.contextSize);
    return atLeast ?? this.render(request).prompt.length;
  }

  private render(request: CanonicalRequest): { prompt: Token[]; stops: string[]; startInReasoning: boolean } {
    // The gateway refuses images for a model that takes none; a request that reaches a text engine with
    // one anyway is refused too, never answered as if the image were not there.
    const image = requestImages(request)[0];
    if (image)
      throw new CortexError(
        'invalid_request',
        `${image.part}: model ${this.id} takes text only (it has no projector)`,
        {
          param: image.part,
        },
      );
    if (request.raw)
      return { prompt: renderRawPrompt(this.model, this.id, request.raw), stops: [], startInReasoning: false };
    const { prompt: template, format } = this.dialect;
    if (template instanceof TemplatePrompt) {
      const text = template.text(request.messages, request.tools, request.templateOptions);
      const { startInReasoning, close } = promptReasoning(format, text, request.prefill !== undefined);
      // An answer already begun is its text: the block the generation prompt opened is closed before it.
      const prompt = request.prefill === undefined ? text : template.continued(text + close, request.prefill);
      return { prompt: template.tokens(prompt, this.promptTokenizer), stops: [], startInReasoning };
    }
    const { contextText, stopGenerationTriggers } = template.generateContextState({
      chatHistory: toChatHistory(request.messages, request.prefill),
      availableFunctions: toFunctions(request.tools),
    });
    return {
      prompt: contextText.tokenize(this.promptTokenizer),
      stops: stopTexts(stopGenerationTriggers),
      startInReasoning: false,
    };
  }

  async generate(job: GenerateJob): Promise<void> {
    const { request, signal } = job;
    const check = new OutputCheck(request, job.emit, job.warn);
    const emit = check.active ? check.emit : job.emit;
    const contextSize = this.context.contextSize;
    const atLeast = await tokensIfOverContextAsync(this.model, request, contextSize);
    const rendered = atLeast === null ? this.render(request) : null;
    const length = atLeast ?? rendered?.prompt.length ?? 0;
    if (!rendered || length >= contextSize) {
      const param = request.raw ? 'prompt' : 'messages';
      throw promptTooLong({ model: this.id, tokens: length, contextSize, param, atLeast: atLeast !== null });
    }
    const { prompt, stops, startInReasoning } = rendered;
    checkLogitBias(request, this.vocabularySize, this.id);
    const forced = forcedTools(request, {
      id: this.id,
      format: this.decodeModel.format,
      holding: this.holding,
      callsTools: this.capabilities.tools === true,
    });
    const resume = job.resume ? this.resumeOf(job, prompt.length) : undefined;
    // A JSON response format holds the whole output (no call can start); otherwise the declared tools'
    // grammar holds each call from its opening marker (a forced call from the first token).
    // A format whose call is the whole answer (Llama 3's bare JSON) has a forced call held as the whole output.
    const whole = forced && wholeAnswerCall(this.decodeModel.format);
    const grammar = whole
      ? await this.grammars.forToolCall(forced, false, whole)
      : !forced && request.responseFormat
        ? await this.grammars.forResponseFormat(request.responseFormat)
        : null;
    const hold = this.holding.hold;
    const start = forced ? forcedStart(forced, request, this.decodeModel.format, hold, startInReasoning) : null;
    // A call the model opens by itself is held where the format allows (CallHolding.auto); a forced one always.
    const chosen = grammar || request.raw || !this.holding.auto ? null : request.tools;
    const callable = whole ? null : (forced ?? chosen);
    const syntax = this.decodeModel.format.tools;
    // A forced call, or one at most: a list of calls is held to one.
    const oneCall = forced !== null || request.maxToolCalls === 1;
    const callGrammar = !callable?.length
      ? null
      : hold === 'call'
        ? await this.grammars.forToolCall(
            callable,
            syntax?.body.kind === 'json' && syntax.body.list === true,
            callKeys(syntax) ?? undefined,
            oneCall,
          )
        : hold === 'whole' && syntax
          ? await this.grammars.forWholeCall(syntax, callable, {
              from: start?.from ?? 'call',
              oneCall,
            })
          : null;
    const argumentGrammars =
      hold === 'arguments' && callable?.length
        ? new Map(
            await Promise.all(
              callable.map(async (tool) => [tool.name, await this.grammars.forArguments(tool)] as const),
            ),
          )
        : null;
    const forcedOpening = start?.text ? this.model.tokenize(start.text, true) : null;
    const forcedAfterReasoning = !whole && start?.from === 'answer';
    const context = resume ? resume.context(prompt) : prompt;
    const sharedPrefix = (candidate: LlamaContextSequence): number =>
      candidate.compareContextTokens(context).firstDifferentIndex;
    // The free sequence that holds this prompt's conversation, else one whose loss costs least (see chooseSlot).
    const choose = (free: readonly LlamaContextSequence[]): number =>
      this.slotChoice(
        free.map((sequence) => ({
          held: sequence.nextTokenIndex,
          shared: sharedPrefix(sequence),
          lastUsed: this.lastUsed.get(sequence) ?? 0,
        })),
      );
    // Charged its whole prompt while it waits (what it reuses of a sequence is known once it has one), corrected at its end.
    const sequence = await this.pool.acquire(signal, choose, ticketOf(job.priority, prompt.length));
    // Charged what its finish reports; a request that failed keeps its estimate.
    let charged: number | undefined;
    try {
      const { shared, restored } = await this.fromPromptCache(sequence, context, sharedPrefix(sequence));
      lookUpIn(sequence, context);
      const echo = request.raw?.echo ? rawPromptText(this.model, request.raw) : undefined;
      const replay = {
        resume,
        replayed: check.active ? check.observe : undefined,
        toolCallIds: job.resume?.toolCallIds,
      };
      const plan = {
        job,
        sequence,
        prompt,
        sharedPrefix: shared,
        restored,
        hiddenStops: stops,
        startInReasoning,
        grammar,
        callGrammar,
        argumentGrammars,
        forcedOpening,
        forcedAfterReasoning,
        emit,
        echo,
        ...replay,
      };
      charged = chargedTokens(await new Decode(request.raw ? this.rawDecodeModel : this.decodeModel, plan).run());
    } finally {
      this.lastUsed.set(sequence, performance.now());
      this.keptLonger.set(sequence, request.keepPromptLonger === true);
      this.pool.release(sequence, charged);
      this.garbage.left(this.samplerBytes);
    }
  }

  /**
   * Before a sequence is overwritten by another conversation its state is kept (PromptCache), and a
   * prompt whose start was kept is restored into the sequence rather than evaluated again. Returns
   * what the sequence shares with the prompt then, and whether that was restored.
   */
  private async fromPromptCache(
    sequence: LlamaContextSequence,
    context: readonly Token[],
    shared: number,
  ): Promise<{ shared: number; restored: boolean }> {
    const cache = this.promptCache;
    if (!cache) return { shared, restored: false };
    // Another conversation's history, about to be erased (the decode keeps only the shared prefix).
    if (shared * 2 <= sequence.nextTokenIndex)
      await cache.keep(this.id, sequence, this.keptLonger.get(sequence) ?? false);
    const found = cache.best(this.id, context, shared);
    if (!found) return { shared, restored: false };
    // A restore that failed cleared the sequence: the whole prompt is evaluated.
    return (await cache.restore(found.kept, sequence))
      ? { shared: found.shared, restored: true }
      : { shared: 0, restored: false };
  }

  /** A migrated stream's resume point, checked against this model (see ResumeReplay). */
  private resumeOf(job: GenerateJob, promptTokens: number): ResumeReplay {
    return new ResumeReplay(job.resume as NonNullable<GenerateJob['resume']>, {
      vocabularySize: this.vocabularySize,
      contextSize: this.context.contextSize,
      promptTokens,
    });
  }

  /** Each part is disposed even when another fails: a context that throws must not leak the model's memory. */
  async dispose(): Promise<void> {
    this.promptCache?.forget(this.id);
    const results = await Promise.allSettled([this.context.dispose()]);
    results.push(...(await Promise.allSettled([this.model.dispose(), this.speculation?.dispose()])));
    const failed = results.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
  }
}
