import type { ParsedEvent } from './formats/output-parser.js';
import { TextStreamer } from './text-streamer.js';

/**
 * Sends what a model's output parser read, in order, for both engines' decode loops: the answer
 * through the stop strings (text that may be the start of one is held until the next piece says, and
 * a stop string is never sent), every other event (reasoning, a call) at once, after the answer text
 * held before it.
 */
export class AnswerRelease {
  /** The user's stop string that ended the output, if one did. */
  stopSequence: string | undefined;
  /** A stop string (the user's or the template's) ended the output: what the parser reads after it is not sent. */
  stopped = false;
  private readonly streamer: TextStreamer;

  constructor(
    private readonly userStops: readonly string[],
    hiddenStops: readonly string[],
    private readonly emit: (event: ParsedEvent) => void,
    /** Held white space at the end is dropped (a finished JSON grammar only admits white space). */
    private readonly trimEnd = false,
  ) {
    this.streamer = new TextStreamer([...userStops, ...hiddenStops]);
  }

  /** The answer's characters held back now (the possible start of a stop string). */
  get held(): number {
    return this.streamer.heldLength;
  }

  /** Sends `events` and empties the list; true when a stop string ended the output. */
  publish(events: ParsedEvent[]): boolean {
    for (const event of events) {
      if (event.type !== 'text') {
        // Answer text held back (a possible stop string) goes out before what follows it.
        this.flush();
        this.emit(event);
      } else if (this.text(event.text)) {
        this.stopped = true;
        break;
      }
    }
    events.length = 0;
    return this.stopped;
  }

  /** The output is over (its parser ended): the rest goes out, unless a stop string ended it. */
  end(events: ParsedEvent[]): void {
    if (this.stopped) events.length = 0;
    this.publish(events);
    if (!this.stopped) this.flush();
  }

  private text(text: string): boolean {
    if (!this.streamer.holding) {
      this.emit({ type: 'text', text });
      return false;
    }
    const { text: safe, stopped, stop } = this.streamer.push(text);
    if (safe) this.emit({ type: 'text', text: safe });
    if (stop !== undefined && this.userStops.includes(stop)) this.stopSequence = stop;
    return stopped;
  }

  private flush(): void {
    const held = this.streamer.flush();
    const rest = this.trimEnd ? held.trimEnd() : held;
    if (rest) this.emit({ type: 'text', text: rest });
  }
}
