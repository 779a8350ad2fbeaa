import type { Resume, StreamEvent } from '@cortex/contracts';

/** What a migration decision reads from a stream's checkpoint. */
export interface CheckpointState {
  /** The prompt's tokens as the first worker counted them. */
  promptTokens: number;
  /** Token ids behind the output the client has. */
  deliveredTokens: number;
  /** Output events sent after the last one that carried token ids: output a resume could not account for. */
  unaccounted: number;
  /** Times this stream has moved to another worker already. */
  migrations: number;
  /** Why this stream must not move, whatever happens (set by whoever drives the run); null when it may. */
  refused: string | null;
  /** Text events handed on (each about a token: what a stream without ids has given of its budget). */
  textPieces: number;
  /** Output other than text the client has (`reasoning`, `a tool call`), which an answer begun cannot carry; null when none. */
  beyondText: string | null;
}

/**
 * Where a stream stands for the client: the token ids behind every output event it was given, the
 * ids of the tool calls it announced, and the prompt's size. The run shows it each event it hands on
 * (`delivered`); when the stream's worker is lost, `resume` is what another worker needs to go on
 * exactly where the client is. Ids arrive on the events that complete their output (see the
 * StreamEvent contract), so the checkpoint only ever advances over output the client has.
 */
export class StreamCheckpoint {
  private readonly tokens: number[] = [];
  private readonly toolCallIds: string[] = [];
  private promptTokens = 0;
  private unaccounted = 0;
  private migrations = 0;
  private refused: string | null = null;
  /** The answer's text the client has, in pieces: where a stream without ids goes on from (see prefill). */
  private readonly answer: string[] = [];
  private beyondText: string | null = null;

  /** An event handed on to the client. */
  delivered(event: StreamEvent): void {
    switch (event.type) {
      case 'start':
        // A resumed worker counts the original prompt too; the first count stands.
        if (this.migrations === 0) this.promptTokens = event.promptTokens;
        return;
      case 'tool_call':
        this.toolCallIds[event.index] = event.id;
        this.beyondText ??= 'a tool call';
        break;
      case 'reasoning':
        this.beyondText ??= 'reasoning';
        break;
      case 'text':
      case 'tool_args':
        break;
      default:
        return;
    }
    // A stream that will never move needs no ids nor text: they would only grow with the output.
    if (this.refused !== null) return;
    if (event.type === 'text') this.answer.push(event.text);
    if (event.tokens && event.tokens.length > 0) {
      for (const token of event.tokens) this.tokens.push(token);
      this.unaccounted = 0;
    } else {
      this.unaccounted++;
    }
  }

  /** This stream must not move (e.g. one choice of several); the reason is logged when its worker is lost. */
  refuse(reason: string): void {
    this.refused ??= reason;
    this.tokens.length = 0;
    this.toolCallIds.length = 0;
    this.answer.length = 0;
  }

  /** The stream moves to another worker now. */
  moved(): void {
    this.migrations++;
  }

  /** How many times the stream moved. */
  get moves(): number {
    return this.migrations;
  }

  get state(): CheckpointState {
    return {
      promptTokens: this.promptTokens,
      deliveredTokens: this.tokens.length,
      unaccounted: this.unaccounted,
      migrations: this.migrations,
      refused: this.refused,
      textPieces: this.answer.length,
      beyondText: this.beyondText,
    };
  }

  /** The answer's text the client has: what a stream whose events carry no token ids goes on from, as an answer begun. */
  prefill(): string {
    return this.answer.join('');
  }

  /** What the next worker is sent: a copy, so the checkpoint may go on advancing. */
  resume(): Resume {
    return { tokens: [...this.tokens], toolCallIds: [...this.toolCallIds] };
  }
}
