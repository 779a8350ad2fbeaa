import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { FinishReason, Usage } from '@cortex/contracts';
import type { EngineEvent, GenerateJob } from './engine.types.js';
import { AnswerRelease } from './answer-release.js';
import { runTimings } from './run-timings.js';
import type { TokenRelease } from './token-release.js';
import { inlineReasoningMarkers, type ChatFormat } from './formats/chat-format.js';
import { createOutputParser, type OutputParser, type ParsedEvent } from './formats/output-parser.js';

/** What one run's output is read by: its request, the model's format, the stops beside the user's, where events go. */
export interface OutputOptions {
  job: Pick<GenerateJob, 'request' | 'receivedAt'>;
  /** The model's id, for the start event. */
  model: string;
  format: ChatFormat;
  /** The prompt left the model inside its reasoning block (see promptReasoning). */
  startInReasoning: boolean;
  /** Stop strings that end the output but are not the user's stop sequence (the chat template's, a finished grammar's). */
  hiddenStops: readonly string[];
  /** Held white space at the end of the answer is dropped (a finished JSON grammar only admits white space). */
  trimEnd?: boolean;
  /** Tokens the context has left after the prompt: the output ends there whatever max_tokens says. */
  room: number;
  /** Ids of the calls a resumed stream announced, by index: a resumed call keeps its id. */
  callIds?: readonly string[];
  emit: (event: EngineEvent) => void;
  /**
   * Told each text the parser reads and how much of what it read may still become answer text (the
   * text engine's TokenRelease, which puts ids and log-probabilities on the events).
   */
  release?: Pick<TokenRelease, 'read' | 'hold'>;
  /**
   * The engine's own rule after each piece is read, before the token limit (the text engine's call
   * grammar follows the parser there); a finish reason it returns ends the output.
   */
  follow?: (wasInCall: boolean, text: string) => FinishReason | null;
}

/** How a run ended as its engine saw it, and what the engine counted of the prompt. */
export interface RunEnd {
  /** The engine's reason (a cancel, the end of generation, the length); the one the output itself ended with wins. */
  reason: FinishReason;
  promptTokens: number;
  cachedPromptTokens: number;
  restoredPromptTokens?: number;
  /** What the engine counts it generated, where it counts that itself (llama.node); absent: the tokens fed. */
  completionTokens?: number;
  /** Speculative decoding's proposed and accepted tokens (see draftUsageSince). */
  drafts?: Pick<Usage, 'draftTokens' | 'acceptedDraftTokens'>;
  /** When the prompt began evaluating; the run's start where the engine has no step between the two. */
  promptFrom?: number;
}

/**
 * Where every engine's generated output becomes events (vLLM's OutputProcessor does the same for its
 * runners). The engine feeds it pieces of output: the text engine each sampled token's text (a
 * character split across tokens read once whole, with the tokens that wrote it), the vision engine
 * the text llama.node hands it, a token at a time. It reads them through the model's output parser
 * (reasoning, tool calls, answer), the stop strings (see AnswerRelease) and the call limit
 * (max_tool_calls), counts the output and reasoning tokens against max_tokens, and sends the start
 * and the finish event with the finish reason and the usage. The engine keeps what is its own:
 * sampling, grammars, its sequence, log-probabilities.
 */
export class OutputProcessor {
  /** The model's output parser, for an engine whose grammars follow it. */
  readonly parser: OutputParser;
  /** Tokens the output may have: max_tokens, or the room the context has left where that is less. */
  readonly maxTokens: number;
  /** max_tool_calls: the output ends once that many calls are complete. */
  readonly maxToolCalls: number;
  /** What the output ended with by what was read (a stop string, the last call allowed); null while it goes on. */
  ended: 'stop' | 'tool_calls' | null = null;
  /** The answer through the stop strings, and every other parsed event, in order. */
  private readonly answer: AnswerRelease;
  /** What the parser sent while it read the current piece, in order. */
  private readonly parsed: ParsedEvent[] = [];
  private readonly startedAt = performance.now();
  private firstTokenAt = 0;
  private completion = 0;
  private reasoningTokens = 0;
  /** Tokens counted whose text is not read yet (a character still incomplete). */
  private unread = 0;

  constructor(private readonly options: OutputOptions) {
    const { request } = options.job;
    this.answer = new AnswerRelease(request.sampling.stop ?? [], options.hiddenStops, options.emit, options.trimEnd);
    this.maxTokens = Math.min(request.sampling.maxTokens ?? Infinity, options.room);
    this.maxToolCalls = request.maxToolCalls ?? Infinity;
    // A resumed stream's calls keep the ids the client already has.
    const callId = (index: number): string => options.callIds?.[index] ?? `call_${randomBytes(12).toString('hex')}`;
    this.parser = createOutputParser(options.format, {
      tools: new Map(request.tools?.map((tool) => [tool.name, tool.parameters])),
      startInReasoning: options.startInReasoning,
      callId,
      emit: (event) => this.parsed.push(event),
    });
  }

  /** Output tokens counted so far. */
  get completionTokens(): number {
    return this.completion;
  }

  /**
   * Characters at the end of what was read that may still become answer text: held by the parser (a
   * possible marker, a call) or by the stop strings.
   */
  get held(): number {
    return this.parser.held + this.answer.held;
  }

  /** The start event: the prompt's tokens, those of them reused, and the format's reasoning markers. */
  start(promptTokens: number, cachedPromptTokens = 0): void {
    const markers = inlineReasoningMarkers(this.options.format);
    this.options.emit({
      type: 'start',
      model: this.options.model,
      promptTokens,
      ...(cachedPromptTokens > 0 && { cachedPromptTokens }),
      ...(markers && { reasoningMarkers: markers }),
    });
  }

  /**
   * A forced call's opening, written for the model, read as the output's start (a format that writes
   * the name in its opening announces the call here). `tokens`: counted as output where the engine
   * writes them after the prompt; 0 where the prompt ends with them.
   */
  open(text: string, tokens: number): void {
    this.completion += tokens;
    this.read(text);
  }

  /** A token came from the sampler (the end-of-generation one too): the first one's arrival is the time to first token. */
  arrived(): void {
    if (this.firstTokenAt === 0) this.firstTokenAt = performance.now();
  }

  /**
   * One piece of output: `text` and the `tokens` that wrote it, or null text for a token whose
   * character is still incomplete (counted now, read with the token that completes it). Returns the
   * finish reason when the piece ends the output: a stop string, the last call allowed, the engine's
   * own rule (see `follow`), the token limit.
   */
  push(text: string | null, tokens = 1): FinishReason | null {
    this.completion += tokens;
    if (text === null) {
      this.unread += tokens;
      return null;
    }
    const wrote = this.unread + tokens;
    this.unread = 0;
    const { parser } = this;
    // Reasoning is what the model wrote from its opening marker through its closing one, both counted.
    const wasReasoning = parser.reasoning;
    const wasInCall = parser.inCall;
    const stopped = this.read(text);
    if (wasReasoning || parser.reasoning) this.reasoningTokens += wrote;
    if (stopped) return (this.ended = 'stop');
    if (parser.completedCalls >= this.maxToolCalls) return (this.ended = 'tool_calls');
    const followed = this.options.follow?.(wasInCall, text);
    if (followed) return followed;
    return this.completion >= this.maxTokens ? 'length' : null;
  }

  /** The output is over: what is held goes out (an open call ends), unless a stop string ended it. */
  end(): void {
    this.parser.end();
    this.answer.end(this.parsed);
  }

  /** Sends the finish event: the reason, the user's stop sequence that ended the output, the usage and timings. */
  finish(end: RunEnd): Usage {
    const ended = this.ended ?? end.reason;
    // A call the parser could only complete at the end (a list whose closing marker never came) is still a call.
    const reason: FinishReason = ended === 'stop' && this.parser.calls > 0 ? 'tool_calls' : ended;
    const completionTokens = end.completionTokens ?? this.completion;
    const usage: Usage = {
      promptTokens: end.promptTokens,
      cachedPromptTokens: end.cachedPromptTokens,
      ...(end.restoredPromptTokens !== undefined && { restoredPromptTokens: end.restoredPromptTokens }),
      completionTokens,
      reasoningTokens: this.reasoningTokens,
      ...end.drafts,
    };
    const { stopSequence } = this.answer;
    this.options.emit({
      type: 'finish',
      reason,
      ...(stopSequence !== undefined && { stopSequence }),
      usage,
      timings: runTimings({
        receivedAt: this.options.job.receivedAt,
        startedAt: this.startedAt,
        promptFrom: end.promptFrom,
        firstTokenAt: this.firstTokenAt,
        endedAt: performance.now(),
        completionTokens,
      }),
    });
    return usage;
  }

  /** Reads `text` through the parser and the stop strings; true when a stop string ended the output. */
  private read(text: string): boolean {
    const { release } = this.options;
    release?.read(text);
    this.parser.push(text);
    const stopped = this.answer.publish(this.parsed);
    release?.hold(this.held);
    return stopped;
  }
}
