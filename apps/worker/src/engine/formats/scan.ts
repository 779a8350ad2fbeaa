/**
 * The earliest marker found in a text (`at` -1 and `marker` empty when none is), and how much of the
 * text is safe to pass on: nothing before `safe` is or starts a marker.
 */
export interface Scan {
  readonly at: number;
  readonly marker: string;
  readonly safe: number;
}

/**
 * Looks for the earliest of `markers` in `text` (the longest one where two start at the same place).
 * When none is there, the text's end may still be the start of one that the next piece completes:
 * `safe` is the length before that possible start. A marker found at the very end that a longer one
 * begins with (Gemma's `<|channel>` and `<|channel>thought`) is not taken until the text says which,
 * unless the text is `final`.
 */
export function scan(text: string, markers: readonly string[], final = false): Scan {
  let at = -1;
  let found = '';
  for (const marker of markers) {
    if (!marker) continue;
    const index = text.indexOf(marker);
    if (index !== -1 && (at === -1 || index < at || (index === at && marker.length > found.length))) {
      at = index;
      found = marker;
    }
  }
  if (at !== -1) {
    const rest = text.length - at;
    const longer =
      !final &&
      markers.some(
        (marker) => marker.length > rest && text.endsWith(marker.slice(0, rest)) && marker.startsWith(found),
      );
    return longer ? { at: -1, marker: '', safe: at } : { at, marker: found, safe: at };
  }
  return { at: -1, marker: '', safe: text.length - partialSuffix(text, markers) };
}

/** The length of the longest end of `text` that is a proper beginning of one of `markers`. */
export function partialSuffix(text: string, markers: readonly string[]): number {
  let best = 0;
  for (const marker of markers) {
    const longest = Math.min(marker.length - 1, text.length);
    for (let length = longest; length > best; length--) {
      if (text.charCodeAt(text.length - length) === marker.charCodeAt(0) && text.endsWith(marker.slice(0, length))) {
        best = length;
        break;
      }
    }
  }
  return best;
}

/**
 * Follows JSON text as it streams and says where its first top-level object or array closes (strings
 * and escapes understood), so a call without a closing marker ends where its JSON does.
 */
export class JsonDepth {
  private depth = 0;
  private opened = false;
  private inString = false;
  private escaped = false;

  /** Feeds text; the index just past the character that closed the value, or -1 while it is open. */
  push(text: string): number {
    for (let i = 0; i < text.length; i++) {
      const char = text[i];
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (char === '\\') this.escaped = true;
        else if (char === '"') this.inString = false;
      } else if (char === '"') {
        this.inString = true;
      } else if (char === '{' || char === '[') {
        this.depth++;
        this.opened = true;
      } else if (char === '}' || char === ']') {
        this.depth--;
        if (this.opened && this.depth === 0) return i + 1;
      }
    }
    return -1;
  }
}

/** The white space at the end of `text` (linear: a `\s*$` pattern backtracks over long runs). */
export function trailingSpace(text: string): string {
  return text.slice(text.trimEnd().length);
}

/** `text` as a regular expression that matches it literally. */
export const escapeRegExp = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
