import type { TokenLogprob } from '@cortex/contracts';
import { AnswerLogprobs } from './answer-logprobs.js';
import type { EngineEvent } from './engine.types.js';

type Output = Extract<EngineEvent, { type: 'text' | 'reasoning' | 'tool_call' | 'tool_args' }>;

const isOutput = (event: EngineEvent): event is Output =>
  event.type === 'text' || event.type === 'reasoning' || event.type === 'tool_call' || event.type === 'tool_args';

/**
 * Puts the ids of generated tokens on the events that send their output, so a gateway holds a
 * stream's resume point (see Resume). A token's output is whatever the decode emits while it handles
 * that token (`step`): the events are held until the step ends and the last output event among them
 * carries every id not sent yet. A token whose text is held back (a possible stop string, an
 * incomplete character) emits nothing: its id waits for the next output, so a gateway never holds an
 * id whose output the client lacks, and a stream resumed from those ids replays the same held text.
 *
 * For a request that asks for log-probabilities, each answer text event carries those of the tokens
 * that wrote its text, and only those (see AnswerLogprobs): a marker's, the reasoning's and a call's
 * tokens have none.
 *
 * While `replaying` (a resumed stream rebuilding its state from delivered ids) nothing reaches the
 * stream: events go to `replayed` instead (the output check still has to see them) and ids are not
 * collected, the gateway has them already.
 */
export class TokenRelease {
  private pending: number[] = [];
  /** The answer's log-probabilities, for a request that asked (null: it did not). */
  private readonly answer: AnswerLogprobs | null;
  private held: EngineEvent[] | null = null;
  replaying = false;

  constructor(
    private readonly out: (event: EngineEvent) => void,
    private readonly replayed: (event: EngineEvent) => void = () => undefined,
    logprobs = false,
  ) {
    this.answer = logprobs ? new AnswerLogprobs() : null;
  }

  readonly emit = (event: EngineEvent): void => {
    if (this.replaying) this.replayed(event);
    else if (this.held) this.held.push(event);
    else this.out(event);
  };

  /** A token was written to the sequence without being sampled (a forced call's opening marker): it goes with the next output. */
  written(token: number): void {
    if (!this.replaying) this.pending.push(token);
  }

  /**
   * A sampled token's log-probability, for a request that asked: it goes out on the text event that
   * sends the token's answer text; the tokens of markers, reasoning and tool calls have none, as in
   * OpenAI's API.
   */
  sampled(logprob: TokenLogprob): void {
    if (!this.replaying) this.answer?.sampled(logprob);
  }

  /** The output parser reads `text`, written by the tokens since the last read (for the log-probabilities). */
  read(text: string): void {
    // A resumed stream's replayed text is read too (with no log-probabilities): the parser may hold some of it.
    this.answer?.read(text);
  }

  /** Of the text read, the last `chars` characters may still become answer text (held by the parser or the stop strings). */
  hold(chars: number): void {
    this.answer?.hold(chars);
  }

  /**
   * Runs one token's handling (or, without a token, a flush of held output at the end) and sends what it emitted, ids
   * on the last output.
   */
  step<T>(token: number | null, handle: () => T): T {
    if (token !== null) this.written(token);
    const held: EngineEvent[] = [];
    this.held = held;
    try {
      return handle();
    } finally {
      this.held = null;
      this.send(held, token === null);
    }
  }

  private send(events: EngineEvent[], end: boolean): void {
    const { answer } = this;
    if (answer) {
      for (const [i, event] of events.entries()) {
        if (event.type !== 'text' || event.logprobs) continue;
        const logprobs = answer.entries(event.text);
        if (logprobs.length > 0) events[i] = { ...event, logprobs };
      }
      answer.settle(end);
    }
    let last = -1;
    for (let i = events.length - 1; i >= 0 && last === -1; i--) if (isOutput(events[i] as EngineEvent)) last = i;
    if (last !== -1 && this.pending.length > 0) {
      const output = events[last] as Output;
      events[last] = { ...output, tokens: this.pending };
      this.pending = [];
    }
    for (const event of events) this.out(event);
  }
}
