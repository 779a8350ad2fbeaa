import { performance } from 'node:perf_hooks';
import {
  LlamaGrammarEvaluationState,
  type TokenBias,
  type LlamaContextSequence,
  type LlamaGrammar,
  type LlamaModel,
  type SequenceEvaluateOptions,
  type Token,
} from 'node-llama-cpp';
import {
  BUILTIN_SAMPLING,
  seedFor,
  withSamplingDefaults,
  type FinishReason,
  type SamplingDefaults,
  type TokenLogprob,
  type Usage,
} from '@cortex/contracts';
import type { EngineEvent, GenerateJob } from './engine.types.js';
import { evaluatePromptInBatches } from './evaluate-prompt.js';
import { draftUsageSince, predictionCounts, type PredictionCounts } from './speculative.js';
import { stopTexts } from './stop-texts.js';
import { CallGrammar } from './call-grammar.js';
import type { CallHold } from './call-hold.js';
import { TokenRelease } from './token-release.js';
import { acceptIntoGrammar } from './grammar-advance.js';
import { OutputProcessor } from './output-processor.js';
import { requestBias } from './token-bias.js';
import { tokenLogprob, tokenPiece } from './token-logprob.js';
import { TokenText } from './token-text.js';
import type { ResumeReplay } from './resume-replay.js';
import type { ChatFormat } from './formats/chat-format.js';
import type { OutputParser } from './formats/output-parser.js';

/** What every decode reads from its loaded model: the same for every request. */
export interface DecodeModel {
  id: string;
  model: LlamaModel;
  batchSize: number;
  /** How the model writes reasoning and calls (see ChatFormat); a raw completion's has neither. */
  format: ChatFormat;
  /** What a grammar holds of a call (see CallHold), or nothing. */
  callHold: CallHold | null;
  /** Bans the marker tokens while a grammar holds the output. */
  markerBias: TokenBias | undefined;
  /** The tokens markerBias bans (a request's logit_bias is joined to them). */
  markerTokens: readonly Token[];
  /** Bans the marker tokens while a call's grammar holds the output: all of them, or for a whole call those not its own. */
  callMarkerBias: TokenBias | undefined;
  /** The tokens callMarkerBias bans. */
  callMarkerTokens: readonly Token[];
  /** What a request that leaves a setting out samples with (the GGUF's `general.sampling.*`, see ggufSamplingDefaults). */
  samplingDefaults: SamplingDefaults;
  /**
   * The special tokens the format's markers are made of: shown to the parser as their text. Any other
   * special token a model writes (a stray `<|im_start|>`, Llama's `<|python_tag|>`) stays hidden, as
   * it always was. Empty for a raw completion.
   */
  shownSpecials: ReadonlySet<Token>;
}

/** One request as the model settled it before taking a sequence. */
export interface DecodePlan {
  job: GenerateJob;
  sequence: LlamaContextSequence;
  prompt: Token[];
  /** Prompt tokens the sequence already holds from an earlier request. */
  sharedPrefix: number;
  /** The sequence's state was just restored from the prompt cache (see PromptCache): what it shares came from there. */
  restored: boolean;
  /** The chat template's own stop strings: they end the output but are not a user's stop sequence. */
  hiddenStops: string[];
  /** The prompt ends inside the reasoning block (the template's generation prompt opened it). */
  startInReasoning: boolean;
  /** Holds the whole output (a JSON response format). */
  grammar: LlamaGrammar | null;
  /** Holds each tool call from its opening marker until its JSON closes (`callHold: call`, see CallGrammar). */
  callGrammar: LlamaGrammar | null;
  /** Holds each call's JSON arguments, by tool (`callHold: arguments`). */
  argumentGrammars: ReadonlyMap<string, LlamaGrammar> | null;
  /** tool_choice required or named: the tokens a forced call starts with, written for the model; its grammar holds the rest. */
  forcedOpening: Token[] | null;
  /** tool_choice required or named on a model that starts inside its reasoning: the call grammar holds from where the reasoning ends. */
  forcedAfterReasoning: boolean;
  emit: (event: EngineEvent) => void;
  /** A migrated stream: the delivered tokens to evaluate and replay before sampling (see ResumeReplay). */
  resume?: ResumeReplay;
  /** Where a resume's replayed events go instead of the stream (the output check must still see them). */
  replayed?: (event: EngineEvent) => void;
  /** Ids of the tool calls the stream announced, by index: a resumed call keeps its id. */
  toolCallIds?: readonly string[];
  /** A raw completion's `echo`: the prompt text, sent before the completion. */
  echo?: string;
}

/**
 * One request's decode on one sequence, step by step: reuse the cached prefix, evaluate the prompt,
 * sample token by token, and hand each token's text (special tokens shown, detokenized incrementally)
 * to the output processor, which reads it through the model's output parser, the stop strings and the
 * limits (see OutputProcessor). What the decode keeps is its own: sampling, the grammars that follow
 * the parser, the sequence, the token ids and log-probabilities on the events.
 */
export class Decode {
  private readonly emit: (event: EngineEvent) => void;
  /** Puts token ids on the events that send their output (see TokenRelease). */
  private readonly release: TokenRelease;
  /** The output's parser, stop strings, limits, counts and finish (see OutputProcessor). */
  private readonly output: OutputProcessor;
  /** max_tool_calls, as the processor reads it: the call grammar ends the output at the last call allowed. */
  private readonly maxToolCalls: number;
  /** The sequence's speculative decoding totals before this request (null without a predictor). */
  private readonly predictionsBefore: PredictionCounts | null;
  /** The output processor's parser, which the call grammar follows. */
  private readonly parser: OutputParser;
  /** The call grammar, switched on as each call (or its arguments) opens; null when no tool can be called. */
  private readonly calls: CallGrammar | null;
  /** The request's logit_bias while nothing holds the output; with the marker tokens banned while a grammar does. */
  private readonly freeBias: TokenBias | undefined;
  private readonly heldBias: TokenBias | undefined;
  /** The tool whose arguments' grammar was opened for the call being written (`callHold: arguments`). */
  private heldFor: string | null = null;
  /** The response format's grammar state (null without one): made here, so a resume can advance it. */
  private readonly formatState: LlamaGrammarEvaluationState | null;
  /** A forced call: the output ends when its JSON object closes. */
  private forced = false;
  /** The sampled tokens' text. */
  private readonly text: TokenText;

  constructor(
    private readonly model: DecodeModel,
    private readonly plan: DecodePlan,
  ) {
    const { job, prompt, grammar, callGrammar, argumentGrammars } = plan;
    this.release = new TokenRelease(plan.emit, plan.replayed, job.request.logprobs !== undefined);
    this.emit = this.release.emit;
    // A finished JSON grammar only admits whitespace; node-llama-cpp's grammars stop on a run of it.
    const grammarStops = grammar ? stopTexts(grammar.stopGenerationTriggers) : [];
    const bias = requestBias(model, job.request.sampling.logitBias);
    this.freeBias = bias?.free;
    this.heldBias = bias?.held ?? model.markerBias;
    const inCall = bias?.call ?? model.callMarkerBias;
    this.calls = callGrammar || argumentGrammars ? new CallGrammar(model.model, inCall, this.freeBias) : null;
    this.formatState = grammar ? new LlamaGrammarEvaluationState({ model: model.model, grammar }) : null;
    this.output = new OutputProcessor({
      job,
      model: model.id,
      format: model.format,
      startInReasoning: plan.startInReasoning,
      hiddenStops: [...plan.hiddenStops, ...grammarStops],
      trimEnd: grammar?.trimWhitespaceSuffix,
      room: plan.sequence.contextSize - prompt.length,
      callIds: plan.toolCallIds,
      emit: this.emit,
      release: this.release,
      follow: (wasInCall, text) =>
        plan.forcedAfterReasoning && !this.forced && !this.parser.reasoning
          ? this.forceAfterReasoning()
          : this.followCall(wasInCall, text),
    });
    this.parser = this.output.parser;
    this.maxToolCalls = this.output.maxToolCalls;
    this.text = new TokenText(model.model, model.shownSpecials, prompt);
    this.predictionsBefore = predictionCounts(plan.sequence);
  }

  /** Decodes to the finish and returns the usage the finish reported (what the request is charged on). */
  async run(): Promise<Usage> {
    const { prompt, sequence, job, resume } = this.plan;
    // A resumed stream evaluates the tokens already delivered as part of its prompt.
    const context = resume ? resume.context(prompt) : prompt;
    // An echoed prompt with log-probabilities needs the model's distribution after each of its tokens: none is reused.
    const promptLogprobs =
      this.plan.echo !== undefined && job.request.logprobs !== undefined && !resume ? job.request.logprobs : null;
    const cached = await this.reusePrefix(context, promptLogprobs === null ? Infinity : 0);
    // A resumed stream's context runs past its prompt: what is reported cached is the prompt's share.
    const cachedPrompt = Math.min(cached, prompt.length);
    this.output.start(prompt.length, cachedPrompt);
    if (this.plan.echo && !resume && promptLogprobs === null) this.emit({ type: 'text', text: this.plan.echo });
    // All but the last prompt token are evaluated batch by batch so that a cancel ends a long prompt
    // at the next batch boundary; the last one goes to evaluate() to produce the first token.
    const evaluationStartedAt = performance.now();
    const evaluated =
      promptLogprobs === null
        ? await evaluatePromptInBatches(sequence, context.slice(cached, -1), this.model.batchSize, job.signal)
        : await this.evaluateEchoed(context, promptLogprobs);
    const promptDone = cached + evaluated === context.length - 1;
    if (!promptDone) return this.finish('cancelled', cachedPrompt, evaluationStartedAt);
    // max_tokens 0 (an echoed prompt alone): nothing is sampled.
    if (this.output.maxTokens <= 0) return this.finish('length', cachedPrompt, evaluationStartedAt);
    const replayed = resume ? this.replay(resume) : null;
    const finish =
      replayed ??
      (await this.sample(resume ? context.slice(-1) : this.firstInput(), resume ? context.slice(prompt.length) : []));
    return this.finish(finish, cachedPrompt, evaluationStartedAt);
  }

  /**
   * Rebuilds the decode state a lost worker had from the tokens it delivered (see ResumeReplay); a
   * finish reason when they had already ended the output.
   */
  private replay(resume: ResumeReplay): FinishReason | null {
    // A forced call's opening tokens were written, not sampled: the call opens as it did there.
    const open = this.forcedOpen();
    if (open) {
      if (open.some((token, i) => resume.tokens[i] !== token)) throw resume.notForcedCall();
      // The call it opened was announced before: what it sends again goes where replayed events go.
      this.release.replaying = true;
      try {
        this.forceCall(open);
      } finally {
        this.release.replaying = false;
      }
    }
    return resume.replay<Token>(this.release, (token) => this.replayStep(token), open?.length ?? 0);
  }

  /** One delivered token: the grammars that held it when it was sampled go past it, then it is handled as then. */
  private replayStep(token: Token): FinishReason | null {
    if (this.formatState) acceptIntoGrammar(this.model.model, this.formatState, token);
    this.calls?.accept(token);
    return this.step(token);
  }

  /**
   * An echoed prompt with log-probabilities (lm-evaluation-harness's loglikelihood): all but its last
   * token evaluated from the start, batch by batch, with the model's distribution after each; the echo
   * goes out with each token's log-probability given those before it (none for the first). Returns
   * the tokens evaluated (fewer when cancelled).
   */
  private async evaluateEchoed(prompt: readonly Token[], top: number): Promise<number> {
    const { sequence, job } = this.plan;
    const model = this.model.model;
    const before = (i: number): Token[] => prompt.slice(Math.max(0, i - 4), i);
    const first = prompt[0] as Token;
    const entries: TokenLogprob[] = [{ ...tokenPiece(model, first, []), logprob: null, top: [] }];
    const tokens = prompt.slice(0, -1);
    for (let at = 0; at < tokens.length; at += this.model.batchSize) {
      if (job.signal.aborted) return at;
      const batch = tokens.slice(at, at + this.model.batchSize);
      const results = await sequence.controlledEvaluate(
        batch.map((token) => [token, { generateNext: { probabilities: true } }] as const),
      );
      batch.forEach((_, i) => {
        const next = prompt[at + i + 1] as Token;
        entries.push(tokenLogprob(model, next, results[i]?.next?.probabilities ?? new Map(), top, before(at + i + 1)));
      });
    }
    this.emit({ type: 'text', text: this.plan.echo ?? '', logprobs: entries });
    return tokens.length;
  }

  /** Keeps the prefix the sequence shares with the prompt (prompt caching), at most `most` tokens; returns its length. */
  private async reusePrefix(prompt: readonly Token[], most = Infinity): Promise<number> {
    const { sequence, sharedPrefix } = this.plan;
    // At least one token must be evaluated to produce the next one.
    const keep = Math.min(sharedPrefix, prompt.length - 1, most);
    if (keep < sequence.nextTokenIndex) {
      await sequence.eraseContextTokenRanges([{ start: keep, end: sequence.nextTokenIndex }]);
    }
    return keep;
  }

  /** The tokens a forced call starts with, or null when the request does not force one. */
  private forcedOpen(): Token[] | null {
    return this.calls ? this.plan.forcedOpening : null;
  }

  /**
   * The last prompt token, and for a forced tool call the call's opening tokens, written for the
   * model: it starts inside the call and the call grammar holds it to the allowed names and schemas.
   */
  private firstInput(): Token[] {
    const input = this.plan.prompt.slice(-1);
    const open = this.forcedOpen();
    if (open) {
      input.push(...open);
      for (const token of open) this.release.written(token);
      this.forceCall(open);
    }
    return input;
  }

  /** The model starts inside a forced call, whose opening the decode wrote (its tokens are output). */
  private forceCall(open: Token[]): void {
    const text = this.model.model.detokenize(open, true);
    this.output.open(text, open.length);
    this.forced = true;
    // A forced call in a section starts with the section's opening: its grammar writes the call's own.
    const { callGrammar } = this.plan;
    if (this.model.callHold === 'whole' && callGrammar && !this.parser.inCall) this.calls?.open(callGrammar, true);
    else this.followCall(false, text);
  }

  /** Samples until a token ends the output; returns why it ended. `resumed`: the tokens a migrated stream had delivered. */
  private async sample(input: Token[], resumed: readonly Token[]): Promise<FinishReason> {
    const { job, grammar, sequence } = this.plan;
    // A setting the request leaves out: the catalogue's came with it (the gateway), then the GGUF's, then cortex's.
    const sampling = withSamplingDefaults(job.request.sampling, this.model.samplingDefaults, BUILTIN_SAMPLING);
    // Tokens written so far, for the penalties (which node-llama-cpp asks for at every step: kept here
    // rather than copied out of the sequence's whole context each time). A resumed stream's delivered
    // tokens were written by the lost worker: they count as they did there. Presence and frequency
    // (OpenAI's) look at the whole output; a repetition penalty (llama.cpp's) at the latest
    // `repeatLastN` tokens of the prompt and the output, and the other two then look there too.
    const lastN = sampling.repeatLastN ?? BUILTIN_SAMPLING.repeatLastN;
    const repetition = sampling.repetitionPenalty !== undefined && sampling.repetitionPenalty !== 1 && lastN > 0;
    const outputPenalties = Boolean(sampling.presencePenalty || sampling.frequencyPenalty);
    const penalized =
      repetition || outputPenalties
        ? [...(repetition ? this.plan.prompt.slice(-lastN) : []), ...resumed, ...input.slice(1)]
        : null;
    const options: SequenceEvaluateOptions = {
      temperature: sampling.temperature,
      topP: sampling.topP,
      topK: sampling.topK,
      minP: sampling.minP,
      // Gateways seed every request; one that came without (another client of the bus) gets a fresh
      // seed rather than node-llama-cpp's current second, which every request in that second shares.
      seed: seedFor(sampling),
      yieldEogToken: true,
      grammarEvaluationState: this.formatState ?? this.calls?.evaluationState,
      tokenBias: grammar ? this.heldBias : (this.calls?.tokenBias ?? this.freeBias),
      xtc: sampling.xtc,
      dryRepeatPenalty: sampling.dry && {
        strength: sampling.dry.multiplier,
        base: sampling.dry.base,
        allowedLength: sampling.dry.allowedLength,
        // node-llama-cpp 3.21.1 applies no penalty with its `null` (the whole history): the context's size is that.
        lastTokens: sampling.dry.lastN ?? sequence.contextSize,
        sequenceBreakers: sampling.dry.sequenceBreakers,
      },
      repeatPenalty: penalized
        ? {
            punishTokens: () => (repetition ? penalized.slice(-lastN) : penalized),
            ...(repetition && { maxPunishTokens: lastN }),
            // node-llama-cpp applies 1.1 when this is left out: only a request that asks for it gets one.
            penalty: sampling.repetitionPenalty ?? 1,
            presencePenalty: sampling.presencePenalty,
            frequencyPenalty: sampling.frequencyPenalty,
          }
        : undefined,
    };
    const top = job.request.logprobs;
    // The sampled token's probability alone (`confidence`) costs a sort of the vocabulary per token; the
    // likeliest alternatives need node-llama-cpp's map of the whole vocabulary, several times that (docs/benchmarks.md).
    const tokens =
      top === undefined
        ? sequence.evaluate(input, options)
        : this.withLogprobs(
            top === 0
              ? sequence.evaluateWithMetadata(input, { confidence: true }, options)
              : sequence.evaluateWithMetadata(input, { probabilities: true }, options),
            top,
          );
    for await (const token of tokens) {
      penalized?.push(token);
      if (job.signal.aborted) return 'cancelled';
      this.output.arrived();
      const finish = this.release.step(token, () => this.step(token));
      if (finish) return finish;
    }
    return 'length';
  }

  /**
   * The sampled tokens, each one's log-probability handed to the release first (to go out with its
   * id). node-llama-cpp's probabilities are those of the distribution the token was drawn from: the
   * model's own at temperature 0 (after logit_bias, penalties and a grammar), at a higher temperature
   * what top_k, top_p, min_p and the temperature left of it.
   */
  private async *withLogprobs(
    steps: AsyncGenerator<{ token: Token; probabilities?: Map<Token, number>; confidence?: number }>,
    top: number,
  ): AsyncGenerator<Token> {
    const model = this.model.model;
    for await (const { token, probabilities, confidence } of steps) {
      if (!model.isEogToken(token))
        this.release.sampled(
          tokenLogprob(model, token, probabilities ?? new Map([[token, confidence ?? 0]]), top, this.text.recent),
        );
      yield token;
    }
  }

  /**
   * Reads one sampled token (its text, once its character is whole, through the output processor);
   * returns a finish reason when it ends the output.
   */
  private step(token: Token): FinishReason | null {
    // The end of generation: the finish makes it tool_calls where calls were read.
    if (this.model.model.isEogToken(token)) return 'stop';
    return this.output.push(this.text.next(token));
  }

  /** A forced call's grammar, written from its openings on, holds the output from where the reasoning ended. */
  private forceAfterReasoning(): null {
    this.forced = true;
    if (this.plan.callGrammar) this.calls?.open(this.plan.callGrammar, true);
    return null;
  }

  /**
   * The call grammar follows the parser: on as a call opens (`callHold: call`) or as its arguments
   * begin (`callHold: arguments`), off as the call ends. When a held call's JSON closes, a forced call
   * ends the output, and so does the last call allowed (max_tool_calls).
   */
  private followCall(wasInCall: boolean, text: string): FinishReason | null {
    const { calls, parser, plan } = this;
    if (!calls) return null;
    if (wasInCall && calls.holding && calls.push(text)) {
      return this.forced || parser.calls >= this.maxToolCalls ? 'tool_calls' : null;
    }
    if (!parser.inCall) {
      // A call in a section is held from the section's opening, before the call opens: a grammar holding
      // outside a call is let go only once a call is over (it may open and close within one token).
      if (wasInCall || parser.completedCalls > 0) calls.close();
      this.heldFor = null;
      // A forced call held through its closing marker ends the output there.
      return this.forced && this.model.callHold === 'whole' && parser.completedCalls > 0 ? 'tool_calls' : null;
    }
    if (calls.holding) return null;
    if (plan.callGrammar && !wasInCall) {
      // A whole call's grammar starts after its opening marker (a forced call's written one, its section's
      // included), not after text that opened the call without one.
      const whole = this.model.callHold === 'whole';
      if (!whole || this.forced || text.trim() === this.model.format.tools?.callOpen)
        calls.open(plan.callGrammar, whole);
    }
    const tool = parser.argumentsFor;
    if (tool === null) this.heldFor = null;
    else if (this.heldFor === null) {
      const held = plan.argumentGrammars?.get(tool);
      this.heldFor = tool;
      if (held) calls.open(held);
    }
    return null;
  }

  private finish(ended: FinishReason, cached: number, evaluationStartedAt: number): Usage {
    // What was held back goes out now, with the ids that produced it; after a stop string, nothing does.
    this.release.step(null, () => this.output.end());
    return this.output.finish({
      reason: ended,
      promptTokens: this.plan.prompt.length,
      cachedPromptTokens: cached,
      ...(this.plan.restored && cached > 0 && { restoredPromptTokens: cached }),
      drafts: draftUsageSince(this.predictionsBefore, this.plan.sequence),
      promptFrom: evaluationStartedAt,
    });
  }
}
