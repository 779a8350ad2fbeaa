import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import {
  LlamaGrammarEvaluationState,
  TokenBias,
  type ChatWrapper,
  type LlamaGrammar,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaModel,
  type Token,
} from 'node-llama-cpp';
import { CortexError, type CanonicalRequest, type ModelCapabilities, type FinishReason, type ResponseFormat, type StreamEventBody, type ToolDefinition } from '@cortex/contracts';
import type { EngineModel, GenerateJob, ModelSpec } from './engine.types.js';
import { evaluatePromptInBatches } from './evaluate-prompt.js';
import { createJsonGrammar } from './json-grammar.js';
import { probeMarkers, REASONING_MARKERS, TOOL_CALL_MARKERS } from './markers.js';
import { memoAsync } from './memo.js';
import { OutputCheck } from './output-check.js';
import { toChatHistory, toFunctions } from './prompt.js';
import { SlotPool } from './slot-pool.js';
import { TextStreamer } from './text-streamer.js';
import { JsonEnd, ToolCallParser } from './tool-call-parser.js';

type Mode = 'text' | 'reasoning' | 'tool';

/**
 * One loaded model: a context with `slots` sequences and cortex's own decode loop. The prompt is
 * rendered by the model's chat wrapper; each generated token is routed by id (reasoning and tool-call
 * markers), detokenized incrementally, checked against stop strings and published at once.
 */
export class LlamaEngineModel implements EngineModel {
  readonly id: string;
  readonly slots: number;
  readonly reasoningMarkers: readonly [string, string] | null;
  readonly capabilities: ModelCapabilities;
  private readonly pool: SlotPool<LlamaContextSequence>;
  private readonly chatWrapper: ChatWrapper;
  private readonly reasoning: { open: Token; close: Token } | null;
  private readonly toolCall: { open: Token; close: Token } | null;
  /**
   * Marker tokens banned while a grammar holds the output: a marker's text can fit inside a JSON
   * string, and read as a marker it would open a new call (or reasoning) inside the one being written.
   */
  private readonly markerBias: TokenBias | undefined;
  /** Compiled grammars by schema text; clients tend to send the same schema again and again. */
  private readonly grammars = new Map<string, Promise<LlamaGrammar>>();

  constructor(
    spec: ModelSpec,
    private readonly model: LlamaModel,
    private readonly context: LlamaContext,
    chatWrapper: ChatWrapper,
  ) {
    this.id = spec.id;
    this.slots = spec.slots;
    const sequences = Array.from({ length: spec.slots }, () => context.getSequence());
    this.pool = new SlotPool(sequences, spec.maxQueue);
    this.chatWrapper = chatWrapper;
    const tokenize = (text: string): Token[] => model.tokenize(text, true);
    const reasoning = probeMarkers(REASONING_MARKERS, tokenize);
    this.reasoning = reasoning ? { open: reasoning.open as Token, close: reasoning.close as Token } : null;
    this.reasoningMarkers = reasoning?.pair ?? null;
    const tool = probeMarkers(TOOL_CALL_MARKERS, tokenize);
    this.toolCall = tool ? { open: tool.open as Token, close: tool.close as Token } : null;
    const markers = [this.reasoning?.open, this.reasoning?.close, this.toolCall?.open, this.toolCall?.close].filter((t) => t !== undefined);
    this.markerBias = markers.length > 0 ? new TokenBias(model.tokenizer).set(markers, 'never') : undefined;
    this.capabilities = { tools: this.toolCall !== null, reasoning: this.reasoning !== null, vision: false };
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

  countTokens(request: CanonicalRequest): number {
    return this.render(request).prompt.length;
  }

  private render(request: CanonicalRequest): { prompt: Token[]; stops: string[] } {
    const { contextText, stopGenerationTriggers } = this.chatWrapper.generateContextState({
      chatHistory: toChatHistory(request.messages),
      availableFunctions: toFunctions(request.tools),
    });
    return { prompt: contextText.tokenize(this.model.tokenizer), stops: stopTexts(stopGenerationTriggers) };
  }

  async generate(job: GenerateJob): Promise<void> {
    const { request, signal } = job;
    const check = new OutputCheck(request, job.emit);
    const emit = check.active ? check.emit : job.emit;
    const { prompt, stops } = this.render(request);
    const contextSize = this.context.contextSize;
    if (prompt.length >= contextSize) {
      throw new CortexError(
        'invalid_request',
        `the prompt is ${prompt.length} tokens but ${this.id} has a context of ${contextSize}; shorten the messages`,
        { param: 'messages' },
      );
    }
    const forced = this.forcedToolCall(request);
    const grammar = forced ? await this.toolCallGrammar(forced) : request.responseFormat ? await this.grammarFor(request.responseFormat) : null;
    // The free sequence that already holds the longest part of this prompt (a conversation's follow-up).
    const shared = new Map<LlamaContextSequence, number>();
    const sharedPrefix = (candidate: LlamaContextSequence): number => {
      let length = shared.get(candidate);
      if (length === undefined) shared.set(candidate, (length = candidate.compareContextTokens(prompt).firstDifferentIndex));
      return length;
    };
    const sequence = await this.pool.acquire(signal, sharedPrefix);
    try {
      await this.run(job, sequence, prompt, sharedPrefix(sequence), stops, grammar, forced !== null, emit);
    } finally {
      this.pool.release(sequence);
    }
  }

  private async run(
    job: GenerateJob,
    sequence: LlamaContextSequence,
    prompt: Token[],
    sharedPrefix: number,
    hiddenStops: string[],
    grammar: LlamaGrammar | null,
    forceToolCall: boolean,
    emit: (event: StreamEventBody) => void,
  ): Promise<void> {
    const { request, signal, receivedAt } = job;
    const startedAt = performance.now();
    const cached = await this.reusePrefix(sequence, prompt, sharedPrefix);
    emit({ type: 'start', requestId: '', workerId: '', model: this.id, promptTokens: prompt.length });

    const userStops = request.sampling.stop ?? [];
    // A finished JSON grammar only admits whitespace; node-llama-cpp's grammars stop on a run of it.
    const grammarStops = grammar && !forceToolCall ? stopTexts(grammar.stopGenerationTriggers) : [];
    const streamer = new TextStreamer([...userStops, ...hiddenStops, ...grammarStops]);
    const maxTokens = Math.min(request.sampling.maxTokens ?? Infinity, sequence.contextSize - prompt.length);
    let mode: Mode = this.startsInReasoning(prompt) ? 'reasoning' : 'text';
    let completion = 0;
    let reasoningTokens = 0;
    let firstTokenAt = 0;
    let finish: FinishReason = 'length';
    const pending: Token[] = [];
    const recent: Token[] = prompt.slice(-4);
    let toolCall: ToolCallParser | null = null;
    let stopSequence: string | undefined;
    let toolIndex = 0;
    const maxToolCalls = request.maxToolCalls ?? Infinity;
    const declared = new Set(request.tools?.map((tool) => tool.name));
    const newToolCall = (): ToolCallParser => new ToolCallParser(toolIndex, `call_${randomBytes(12).toString('hex')}`, emit, declared);
    // tool_choice required or named: the model starts inside a call (its opening marker is written for
    // it) and the call grammar holds it to the allowed names and their argument schemas.
    let forcedCall: JsonEnd | null = null;
    // All but the last prompt token are evaluated batch by batch so that a cancel ends a long prompt
    // at the next batch boundary; the last one goes to evaluate() to produce the first token.
    const evaluationStartedAt = performance.now();
    const evaluated = await evaluatePromptInBatches(sequence, prompt.slice(cached, -1), this.context.batchSize, signal);
    const promptDone = cached + evaluated === prompt.length - 1;
    const input = prompt.slice(-1);
    if (forceToolCall && this.toolCall) {
      input.push(this.toolCall.open);
      completion++;
      mode = 'tool';
      toolCall = newToolCall();
      forcedCall = new JsonEnd();
    }

    const sample = request.sampling;
    // Tokens written so far, for presence/frequency penalties (which node-llama-cpp asks for at every
    // step: kept here rather than copied out of the sequence's whole context each time).
    const penalized = sample.presencePenalty || sample.frequencyPenalty ? input.slice(1) : null;
    if (!promptDone) finish = 'cancelled';
    const iterator = promptDone ? sequence.evaluate(input, {
      temperature: sample.temperature ?? 0.8,
      topP: sample.topP,
      topK: sample.topK,
      seed: sample.seed,
      yieldEogToken: true,
      grammarEvaluationState: grammar ? new LlamaGrammarEvaluationState({ model: this.model, grammar }) : undefined,
      tokenBias: grammar ? this.markerBias : undefined,
      repeatPenalty: penalized
        ? { punishTokens: () => penalized, presencePenalty: sample.presencePenalty, frequencyPenalty: sample.frequencyPenalty }
        : undefined,
    }) : null;

    const emitText = (text: string): boolean => {
      if (!streamer.holding) {
        emit({ type: mode === 'reasoning' ? 'reasoning' : 'text', text });
        return false;
      }
      const { text: safe, stopped, stop } = streamer.push(text);
      if (safe) emit({ type: mode === 'reasoning' ? 'reasoning' : 'text', text: safe });
      if (stop !== undefined && userStops.includes(stop)) stopSequence = stop;
      return stopped;
    };
    const flushText = (): void => {
      const held = streamer.flush();
      const rest = grammar?.trimWhitespaceSuffix ? held.trimEnd() : held;
      if (rest) emit({ type: mode === 'reasoning' ? 'reasoning' : 'text', text: rest });
    };

    for await (const token of iterator ?? []) {
      penalized?.push(token);
      if (signal.aborted) {
        finish = 'cancelled';
        break;
      }
      if (firstTokenAt === 0) firstTokenAt = performance.now();
      if (this.model.isEogToken(token)) {
        finish = toolIndex > 0 ? 'tool_calls' : 'stop';
        break;
      }
      completion++;
      if (mode === 'reasoning') reasoningTokens++;
      if (this.reasoning && (token === this.reasoning.open || token === this.reasoning.close)) {
        flushText();
        mode = token === this.reasoning.open ? 'reasoning' : 'text';
      } else if (this.toolCall && token === this.toolCall.open) {
        flushText();
        mode = 'tool';
        toolCall = newToolCall();
      } else if (this.toolCall && token === this.toolCall.close && toolCall) {
        if (toolCall.end()) toolIndex++;
        toolCall = null;
        mode = 'text';
        // max_tool_calls / parallel_tool_calls: false — the response ends with the last call allowed.
        if (toolIndex >= maxToolCalls) {
          finish = 'tool_calls';
          break;
        }
      } else {
        pending.push(token);
        const text = this.model.detokenize(pending, false, recent);
        // A multi-byte character split across tokens decodes to U+FFFD until its last byte arrives.
        if (text.endsWith('\uFFFD') && pending.length < 4) continue;
        recent.push(...pending);
        if (recent.length > 4) recent.splice(0, recent.length - 4);
        pending.length = 0;
        if (toolCall) {
          toolCall.push(text);
          // A forced call is complete when its JSON object closes; the model need not close the marker.
          if (forcedCall?.push(text)) {
            if (toolCall.end()) toolIndex++;
            toolCall = null;
            finish = 'tool_calls';
            break;
          }
        } else if (emitText(text)) {
          finish = 'stop';
          break;
        }
      }
      if (completion >= maxTokens) {
        finish = 'length';
        break;
      }
    }
    toolCall?.abandon();
    flushText();
    const endedAt = performance.now();
    const decodeSeconds = firstTokenAt ? (endedAt - firstTokenAt) / 1000 : 0;
    emit({
      type: 'finish',
      reason: finish,
      ...(stopSequence !== undefined && { stopSequence }),
      usage: { promptTokens: prompt.length, cachedPromptTokens: cached, completionTokens: completion, reasoningTokens },
      timings: {
        ttftMs: firstTokenAt ? firstTokenAt - receivedAt : 0,
        // Without a first token (cancelled during the prompt) this is the prompt time spent until the cancel.
        promptMs: (firstTokenAt || endedAt) - evaluationStartedAt,
        decodeTokensPerSecond: decodeSeconds > 0 && completion > 1 ? (completion - 1) / decodeSeconds : 0,
        durationMs: endedAt - receivedAt,
        queueMs: startedAt - receivedAt,
      },
    });
  }

  /** A grammar that makes every output parse: JSON in general, or JSON of one schema. */
  private grammarFor(format: ResponseFormat): Promise<LlamaGrammar> {
    const key = format.type === 'json_schema' ? JSON.stringify(format.schema ?? {}) : format.type;
    const llama = this.model.llama;
    return this.cachedGrammar(key, () =>
      createJsonGrammar(llama, format.type === 'json_schema' ? (format.schema ?? {}) : null).catch((error: Error) => {
        throw new CortexError('invalid_request', `response_format: this JSON schema cannot be enforced: ${error.message}`, {
          param: 'response_format',
          cause: error,
        });
      }),
    );
  }

  /** Compiled grammars by key, at most 64; one that fails to compile is forgotten so a retry compiles again. */
  private cachedGrammar(key: string, create: () => Promise<LlamaGrammar>): Promise<LlamaGrammar> {
    return memoAsync(this.grammars, key, create, 64);
  }

  /**
   * The tools a request obliges the model to call (`tool_choice` required: any of them; a named
   * function: that one), or null when the model chooses. Enforcing needs the model's tool-call
   * markers; without them the request is refused rather than silently left to chance.
   */
  private forcedToolCall(request: CanonicalRequest): ToolDefinition[] | null {
    const choice = request.toolChoice;
    if (!choice || choice === 'auto' || !request.tools?.length) return null;
    if (!this.toolCall) {
      throw new CortexError(
        'invalid_request',
        `tool_choice '${choice}' cannot be enforced: ${this.id} writes no tool calls cortex can parse (it has no single-token <tool_call> marker); send tool_choice 'auto' or use a tool-calling model`,
        { param: 'tool_choice' },
      );
    }
    if (choice === 'required') return request.tools;
    const name = choice.slice('function:'.length);
    const tool = request.tools.find((t) => t.name === name);
    if (!tool) throw new CortexError('invalid_request', `tool_choice names '${name}', which is not in tools`, { param: 'tool_choice' });
    return [tool];
  }

  /** JSON of `{"name": <one of the tools>, "arguments": <that tool's parameters>}`, compiled once per tool set. */
  private toolCallGrammar(tools: readonly ToolDefinition[]): Promise<LlamaGrammar> {
    const call = (tool: ToolDefinition, strictArguments: boolean): Record<string, unknown> => ({
      type: 'object',
      properties: { name: { const: tool.name }, arguments: strictArguments && tool.parameters ? tool.parameters : { type: 'object', additionalProperties: true } },
    });
    const schema = (strict: boolean): Record<string, unknown> => (tools.length === 1 ? call(tools[0] as ToolDefinition, strict) : { oneOf: tools.map((t) => call(t, strict)) });
    const key = `tools:${JSON.stringify(tools.map((t) => [t.name, t.parameters ?? null]))}`;
    const llama = this.model.llama;
    // A parameter schema the grammar compiler cannot express still gets a JSON object for its arguments.
    return this.cachedGrammar(key, () => createJsonGrammar(llama, schema(true)).catch(() => createJsonGrammar(llama, schema(false))));
  }

  /** Keeps the prefix the sequence shares with the prompt (prompt caching); returns its length. */
  private async reusePrefix(sequence: LlamaContextSequence, prompt: Token[], shared: number): Promise<number> {
    // At least one token must be evaluated to produce the next one.
    const keep = Math.min(shared, prompt.length - 1);
    if (keep < sequence.nextTokenIndex) {
      await sequence.eraseContextTokenRanges([{ start: keep, end: sequence.nextTokenIndex }]);
    }
    return keep;
  }

  /** A template that opens the reasoning block itself leaves the model inside it. */
  private startsInReasoning(prompt: readonly Token[]): boolean {
    if (!this.reasoning) return false;
    const open = prompt.lastIndexOf(this.reasoning.open);
    return open !== -1 && prompt.lastIndexOf(this.reasoning.close) < open;
  }

  async dispose(): Promise<void> {
    await this.context.dispose();
    await this.model.dispose();
  }
}

/** Stop triggers that are plain text (strings, or LlamaText/arrays of strings only); token triggers are skipped. */
function stopTexts(triggers: readonly unknown[]): string[] {
  const texts: string[] = [];
  for (const trigger of triggers) {
    const values: readonly unknown[] =
      typeof trigger === 'string' ? [trigger] : Array.isArray(trigger) ? trigger : ((trigger as { values?: readonly unknown[] }).values ?? []);
    if (values.length > 0 && values.every((value) => typeof value === 'string')) {
      const text = values.join('');
      if (text) texts.push(text);
    }
  }
  return texts;
}
