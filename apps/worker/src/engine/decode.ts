import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import {
  LlamaGrammarEvaluationState,
  type LlamaContextSequence,
  type LlamaGrammar,
  type LlamaModel,
  type Token,
  type TokenBias,
} from 'node-llama-cpp';
import type { FinishReason, StreamEventBody, Usage } from '@cortex/contracts';
import type { GenerateJob } from './engine.types.js';
import { evaluatePromptInBatches } from './evaluate-prompt.js';
import { draftUsageSince, predictionCounts, type PredictionCounts } from './speculative.js';
import { stopTexts } from './stop-texts.js';
import { TextStreamer } from './text-streamer.js';
import { CallGrammar } from './call-grammar.js';
import { ToolCallParser } from './tool-call-parser.js';
import { TokenRelease } from './token-release.js';
import { acceptIntoGrammar } from './grammar-advance.js';
import type { ResumeReplay } from './resume-replay.js';

type Mode = 'text' | 'reasoning' | 'tool';

/** An opening and a closing marker, each one token of the model's vocabulary. */
export interface MarkerPair {
  open: Token;
  close: Token;
}

/** What a decode reads from its loaded model: the same for every request. */
export interface DecodeModel {
  id: string;
  model: LlamaModel;
  batchSize: number;
  reasoning: MarkerPair | null;
  toolCall: MarkerPair | null;
  /** Bans the marker tokens while a grammar holds the output. */
  markerBias: TokenBias | undefined;
}

/** One request as the model settled it before taking a sequence. */
export interface DecodePlan {
  job: GenerateJob;
  sequence: LlamaContextSequence;
  prompt: Token[];
  /** Prompt tokens the sequence already holds from an earlier request. */
  sharedPrefix: number;
  /** The chat template's own stop strings: they end the output but are not a user's stop sequence. */
  hiddenStops: string[];
  /** Holds the whole output (a JSON response format). */
  grammar: LlamaGrammar | null;
  /** Holds each tool call from its opening marker until its JSON closes (see CallGrammar). */
  callGrammar: LlamaGrammar | null;
  /** tool_choice required or named: the model starts inside a call held by `callGrammar`. */
  forceToolCall: boolean;
  emit: (event: StreamEventBody) => void;
  /** A migrated stream: the delivered tokens to evaluate and replay before sampling (see ResumeReplay). */
  resume?: ResumeReplay;
  /** Where a resume's replayed events go instead of the stream (the output check must still see them). */
  replayed?: (event: StreamEventBody) => void;
  /** Ids of the tool calls the stream announced, by index: a resumed call keeps its id. */
  toolCallIds?: readonly string[];
  /** A raw completion's `echo`: the prompt text, sent before the completion. */
  echo?: string;
}

/**
 * One request's decode on one sequence, step by step: reuse the cached prefix, evaluate the prompt,
 * sample token by token, route each token by mode (text, reasoning, tool call), check stops, finish.
 * Each generated token is routed by id (reasoning and tool-call markers), detokenized incrementally,
 * checked against stop strings and published at once.
 */
export class Decode {
  private readonly emit: (event: StreamEventBody) => void;
  /** Puts token ids on the events that send their output (see TokenRelease). */
  private readonly release: TokenRelease;
  private readonly userStops: string[];
  private readonly streamer: TextStreamer;
  private readonly maxTokens: number;
  private readonly maxToolCalls: number;
  private readonly declared: ReadonlySet<string>;
  private readonly startedAt = performance.now();
  /** The sequence's speculative decoding totals before this request (null without a predictor). */
  private readonly predictionsBefore: PredictionCounts | null;
  private mode: Mode;
  private completion = 0;
  private reasoningTokens = 0;
  private firstTokenAt = 0;
  private stopSequence: string | undefined;
  /** Tool calls completed so far; the next call's index. */
  private toolIndex = 0;
  private toolCall: ToolCallParser | null = null;
  /** The call grammar, switched on at each call's opening marker; null when no tool can be called. */
  private readonly calls: CallGrammar | null;
  /** The response format's grammar state (null without one): made here, so a resume can advance it. */
  private readonly formatState: LlamaGrammarEvaluationState | null;
  /** A forced call: the output ends when its JSON object closes. */
  private forced = false;
  /** Tokens of a multi-byte character not yet complete. */
  private readonly pending: Token[] = [];
  /** The last few tokens detokenized, for the tokenizer's leading-space context. */
  private readonly recent: Token[];

  constructor(
    private readonly model: DecodeModel,
    private readonly plan: DecodePlan,
  ) {
    const { job, prompt, grammar, callGrammar } = plan;
    this.release = new TokenRelease(plan.emit, plan.replayed);
    this.emit = this.release.emit;
    this.userStops = job.request.sampling.stop ?? [];
    // A finished JSON grammar only admits whitespace; node-llama-cpp's grammars stop on a run of it.
    const grammarStops = grammar ? stopTexts(grammar.stopGenerationTriggers) : [];
    this.calls = callGrammar && model.toolCall ? new CallGrammar(model.model, callGrammar, model.markerBias) : null;
    this.formatState = grammar ? new LlamaGrammarEvaluationState({ model: model.model, grammar }) : null;
    this.streamer = new TextStreamer([...this.userStops, ...plan.hiddenStops, ...grammarStops]);
    this.maxTokens = Math.min(job.request.sampling.maxTokens ?? Infinity, plan.sequence.contextSize - prompt.length);
    this.maxToolCalls = job.request.maxToolCalls ?? Infinity;
    this.declared = new Set(job.request.tools?.map((tool) => tool.name));
    this.mode = this.startsInReasoning() ? 'reasoning' : 'text';
    this.recent = prompt.slice(-4);
    this.predictionsBefore = predictionCounts(plan.sequence);
  }

  /** Decodes to the finish and returns the usage the finish reported (what the request is charged on). */
  async run(): Promise<Usage> {
    const { prompt, sequence, job, resume } = this.plan;
    // A resumed stream evaluates the tokens already delivered as part of its prompt.
    const context = resume ? resume.context(prompt) : prompt;
    const cached = await this.reusePrefix(context);
    // A resumed stream's context runs past its prompt: what is reported cached is the prompt's share.
    const cachedPrompt = Math.min(cached, prompt.length);
    this.emit({ type: 'start', runId: '', workerId: '', model: this.model.id, promptTokens: prompt.length });
    if (this.plan.echo && !resume) this.emit({ type: 'text', text: this.plan.echo });
    // All but the last prompt token are evaluated batch by batch so that a cancel ends a long prompt
    // at the next batch boundary; the last one goes to evaluate() to produce the first token.
    const evaluationStartedAt = performance.now();
    const evaluated = await evaluatePromptInBatches(sequence, context.slice(cached, -1), this.model.batchSize, job.signal);
    const promptDone = cached + evaluated === context.length - 1;
    if (!promptDone) return this.finish('cancelled', cachedPrompt, evaluationStartedAt);
    const replayed = resume ? this.replay(resume) : null;
    const finish = replayed ?? (await this.sample(resume ? context.slice(-1) : this.firstInput(), resume ? context.slice(prompt.length) : []));
    return this.finish(finish, cachedPrompt, evaluationStartedAt);
  }

  /**
   * Rebuilds the decode state a lost worker had from the tokens it delivered (see ResumeReplay); a
   * finish reason when they had already ended the output.
   */
  private replay(resume: ResumeReplay): FinishReason | null {
    // A forced call's opening marker was written, not sampled: the call opens as it did there.
    const forced = this.plan.forceToolCall && this.model.toolCall !== null && this.calls !== null;
    if (forced) {
      if (resume.tokens[0] !== this.model.toolCall?.open) throw resume.notForcedCall();
      this.forceCall();
    }
    return resume.replay<Token>(this.release, (token) => this.replayStep(token), forced ? 1 : 0);
  }

  /** One delivered token: the grammars that held it when it was sampled go past it, then it is handled as then. */
  private replayStep(token: Token): FinishReason | null {
    if (this.formatState) acceptIntoGrammar(this.model.model, this.formatState, token);
    this.calls?.accept(token);
    return this.step(token);
  }

  /** Keeps the prefix the sequence shares with the prompt (prompt caching); returns its length. */
  private async reusePrefix(prompt: readonly Token[]): Promise<number> {
    const { sequence, sharedPrefix } = this.plan;
    // At least one token must be evaluated to produce the next one.
    const keep = Math.min(sharedPrefix, prompt.length - 1);
    if (keep < sequence.nextTokenIndex) {
      await sequence.eraseContextTokenRanges([{ start: keep, end: sequence.nextTokenIndex }]);
    }
    return keep;
  }

  /** A template that opens the reasoning block itself leaves the model inside it. */
  private startsInReasoning(): boolean {
    const { reasoning } = this.model;
    if (!reasoning) return false;
    const open = this.plan.prompt.lastIndexOf(reasoning.open);
    return open !== -1 && this.plan.prompt.lastIndexOf(reasoning.close) < open;
  }

  /**
   * The last prompt token, and for a forced tool call the call's opening marker, written for the
   * model: it starts inside the call and the call grammar holds it to the allowed names and schemas.
   */
  private firstInput(): Token[] {
    const input = this.plan.prompt.slice(-1);
    if (this.plan.forceToolCall && this.model.toolCall && this.calls) {
      input.push(this.model.toolCall.open);
      this.release.written(this.model.toolCall.open);
      this.forceCall();
    }
    return input;
  }

  /** The model starts inside a forced call, whose opening marker the decode wrote. */
  private forceCall(): void {
    this.completion++;
    this.mode = 'tool';
    this.toolCall = this.newToolCall();
    this.forced = true;
    this.calls?.open();
  }

  /** Samples until a token ends the output; returns why it ended. `resumed`: the tokens a migrated stream had delivered. */
  private async sample(input: Token[], resumed: readonly Token[]): Promise<FinishReason> {
    const { job, grammar, sequence } = this.plan;
    const { sampling } = job.request;
    // Tokens written so far, for presence/frequency penalties (which node-llama-cpp asks for at every
    // step: kept here rather than copied out of the sequence's whole context each time). A resumed
    // stream's delivered tokens were written by the lost worker: they count as they did there.
    const penalized = sampling.presencePenalty || sampling.frequencyPenalty ? [...resumed, ...input.slice(1)] : null;
    const tokens = sequence.evaluate(input, {
      temperature: sampling.temperature ?? 0.8,
      topP: sampling.topP,
      topK: sampling.topK,
      seed: sampling.seed,
      yieldEogToken: true,
      grammarEvaluationState: this.formatState ?? this.calls?.evaluationState,
      tokenBias: grammar ? this.model.markerBias : this.calls?.tokenBias,
      repeatPenalty: penalized
        ? { punishTokens: () => penalized, presencePenalty: sampling.presencePenalty, frequencyPenalty: sampling.frequencyPenalty }
        : undefined,
    });
    for await (const token of tokens) {
      penalized?.push(token);
      if (job.signal.aborted) return 'cancelled';
      if (this.firstTokenAt === 0) this.firstTokenAt = performance.now();
      const finish = this.release.step(token, () => this.step(token));
      if (finish) return finish;
    }
    return 'length';
  }

  /** Routes one sampled token; returns a finish reason when it ends the output. */
  private step(token: Token): FinishReason | null {
    if (this.model.model.isEogToken(token)) return this.toolIndex > 0 ? 'tool_calls' : 'stop';
    this.completion++;
    if (this.mode === 'reasoning') this.reasoningTokens++;
    const outcome = this.isMarker(token) ? this.onMarker(token) : this.onContent(token);
    // A character still incomplete is not checked against the token limit until it is.
    if (outcome === 'incomplete') return null;
    if (outcome) return outcome;
    return this.completion >= this.maxTokens ? 'length' : null;
  }

  private isMarker(token: Token): boolean {
    const { reasoning, toolCall } = this.model;
    if (reasoning && (token === reasoning.open || token === reasoning.close)) return true;
    // A closing tool-call marker outside a call is plain text (except right after a call the grammar ended).
    return toolCall !== null && (token === toolCall.open || (token === toolCall.close && (this.toolCall !== null || this.calls?.closing === true)));
  }

  /** A reasoning or tool-call marker switches mode; closing a call may end the output. */
  private onMarker(token: Token): FinishReason | null {
    const { reasoning } = this.model;
    if (reasoning && (token === reasoning.open || token === reasoning.close)) {
      this.flushText();
      // Reasoning is what the model wrote from its opening marker through its closing one, both counted
      // (the closing one in `step`, while the mode is still reasoning).
      if (token === reasoning.open && this.mode !== 'reasoning') this.reasoningTokens++;
      this.mode = token === reasoning.open ? 'reasoning' : 'text';
      return null;
    }
    if (token === this.model.toolCall?.open) {
      this.flushText();
      this.mode = 'tool';
      this.toolCall = this.newToolCall();
      this.calls?.open();
      return null;
    }
    if (this.toolCall === null) {
      // The closing marker of a call whose JSON already closed: it was counted then.
      this.calls?.close();
      return null;
    }
    this.calls?.close();
    this.endToolCall();
    this.mode = 'text';
    // max_tool_calls / parallel_tool_calls: false — the response ends with the last call allowed.
    return this.toolIndex >= this.maxToolCalls ? 'tool_calls' : null;
  }

  /** Text for the current tool call or for the client; 'incomplete' while a character is split. */
  private onContent(token: Token): FinishReason | 'incomplete' | null {
    const { pending, recent } = this;
    pending.push(token);
    const text = this.model.model.detokenize(pending, false, recent);
    // A multi-byte character split across tokens decodes to U+FFFD until its last byte arrives.
    if (text.endsWith('\uFFFD') && pending.length < 4) return 'incomplete';
    recent.push(...pending);
    if (recent.length > 4) recent.splice(0, recent.length - 4);
    pending.length = 0;
    if (this.toolCall) {
      this.toolCall.push(text);
      if (!this.calls?.push(text)) return null;
      // The call's JSON closed: it is complete. A forced call ends the output; otherwise the model
      // goes on (closing the marker, another call, text) unless that was the last call allowed.
      this.endToolCall();
      this.mode = 'text';
      return this.forced || this.toolIndex >= this.maxToolCalls ? 'tool_calls' : null;
    }
    if (this.calls?.closing) {
      if (text.trim() === '') return null;
      this.calls.close();
    }
    return this.emitText(text) ? 'stop' : null;
  }

  private newToolCall(): ToolCallParser {
    // A resumed stream's calls keep the ids the client already has.
    const id = this.plan.toolCallIds?.[this.toolIndex] ?? `call_${randomBytes(12).toString('hex')}`;
    return new ToolCallParser(this.toolIndex, id, this.emit, this.declared);
  }

  /** Closes the open call; one that parsed as a call to a declared tool counts. */
  private endToolCall(): void {
    if (this.toolCall?.end()) this.toolIndex++;
    this.toolCall = null;
  }

  /** Sends text held back only as long as it may be a stop string; true when a stop string ended it. */
  private emitText(text: string): boolean {
    if (!this.streamer.holding) {
      this.emitDelta(text);
      return false;
    }
    const { text: safe, stopped, stop } = this.streamer.push(text);
    if (safe) this.emitDelta(safe);
    if (stop !== undefined && this.userStops.includes(stop)) this.stopSequence = stop;
    return stopped;
  }

  private flushText(): void {
    const held = this.streamer.flush();
    const rest = this.plan.grammar?.trimWhitespaceSuffix ? held.trimEnd() : held;
    if (rest) this.emitDelta(rest);
  }

  private emitDelta(text: string): void {
    this.emit({ type: this.mode === 'reasoning' ? 'reasoning' : 'text', text });
  }

  private finish(reason: FinishReason, cached: number, evaluationStartedAt: number): Usage {
    // What was held back goes out now, with the ids that produced it.
    this.release.step(null, () => {
      this.toolCall?.abandon();
      this.flushText();
    });
    const { prompt, job } = this.plan;
    const { firstTokenAt, completion } = this;
    const endedAt = performance.now();
    const decodeSeconds = firstTokenAt ? (endedAt - firstTokenAt) / 1000 : 0;
    const usage: Usage = { promptTokens: prompt.length, cachedPromptTokens: cached, completionTokens: completion, reasoningTokens: this.reasoningTokens, ...draftUsageSince(this.predictionsBefore, this.plan.sequence) };
    this.emit({
      type: 'finish',
      reason,
      ...(this.stopSequence !== undefined && { stopSequence: this.stopSequence }),
      usage,
      timings: {
        ttftMs: firstTokenAt ? firstTokenAt - job.receivedAt : 0,
        // Without a first token (cancelled during the prompt) this is the prompt time spent until the cancel.
        promptMs: (firstTokenAt || endedAt) - evaluationStartedAt,
        decodeTokensPerSecond: decodeSeconds > 0 && completion > 1 ? (completion - 1) / decodeSeconds : 0,
        durationMs: endedAt - job.receivedAt,
        queueMs: this.startedAt - job.receivedAt,
      },
    });
    return usage;
  }
}
