import type { RawServerDefault } from 'fastify';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { CortexError } from '@cortex/contracts';
import type { RefusalCounter } from './refusals.js';

/**
 * How deep a request body may nest. Real requests stay far below (a tool's JSON Schema is the
 * deepest part, a few dozen levels); deeper bodies would overflow the stack of every recursive
 * walk after the parser (JSON.stringify on the bus, the decoders, grammar building in the worker).
 */
export const MAX_BODY_DEPTH = 128;

/** The top-level field under which `value` nests deeper than `limit`, '' for the body itself, or null when it does not. */
export function tooDeep(value: unknown, limit = MAX_BODY_DEPTH): string | null {
  // Iterative on purpose: a recursive walk would overflow on exactly the bodies it is meant to catch.
  const stack: Array<{ value: unknown; depth: number; field: string }> = [{ value, depth: 0, field: '' }];
  for (let next = stack.pop(); next; next = stack.pop()) {
    if (next.value === null || typeof next.value !== 'object') continue;
    if (next.depth >= limit) return next.field;
    const entries = Array.isArray(next.value)
      ? next.value.map((item, index) => [String(index), item] as const)
      : Object.entries(next.value);
    for (const [key, item] of entries)
      stack.push({ value: item, depth: next.depth + 1, field: next.depth === 0 ? key : next.field });
  }
  return null;
}

/**
 * Nesting a Responses WebSocket message's text is refused at before it is parsed: past MAX_BODY_DEPTH
 * (which its parsed body is checked against, naming the field), but it keeps a message nested
 * millions deep from being parsed into millions of objects at all.
 */
export const MAX_TEXT_DEPTH = 4 * MAX_BODY_DEPTH;

/**
 * Counts how deep JSON text nests as it arrives, chunk by chunk (bytes or a string: the characters it
 * looks at are ASCII, which no byte of a multi-byte UTF-8 character is), skipping strings. It keeps
 * the top-level field the deepest part is under, to name it.
 */
export class DepthScan {
  private depth = 0;
  private inString = false;
  private escaped = false;
  /** The characters of the string being read at the top level (a field name, or a value), up to MAX_KEY. */
  private chars: number[] = [];
  private lastString = '';
  private arrayAtTop = false;
  private index = -1;
  /** The top-level field (or index) whose value is being read; '' at the top level itself. */
  field = '';

  constructor(private readonly limit = MAX_TEXT_DEPTH) {}

  /** Reads the next piece; true once the text has opened more than `limit` objects or arrays inside one another. */
  push(piece: Uint8Array | string): boolean {
    const text = typeof piece === 'string';
    for (let i = 0; i < piece.length; i++) {
      const c = text ? piece.charCodeAt(i) : (piece[i] as number);
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === 0x5c) this.escaped = true;
        else if (c === 0x22) {
          this.inString = false;
          if (this.depth === 1) this.lastString = String.fromCharCode(...this.chars);
          continue;
        }
        if (this.depth === 1 && this.chars.length < MAX_KEY) this.chars.push(c);
      } else if (c === 0x22) {
        this.inString = true;
        this.chars = [];
      } else if (c === 0x7b || c === 0x5b) {
        if (this.depth === 0) this.arrayAtTop = c === 0x5b;
        if (this.depth === 1) this.field = this.arrayAtTop ? String(this.index + 1) : this.lastString;
        if (++this.depth > this.limit) return true;
      } else if (c === 0x7d || c === 0x5d) this.depth--;
      else if (c === 0x2c && this.depth === 1) this.index++;
    }
    return false;
  }
}

/** Field names are cut here: what names a field in an error is short. */
const MAX_KEY = 128;

/**
 * When JSON `text` opens more than `limit` objects or arrays inside one another, the top-level field
 * it does so under ('' for the text itself); else null. One pass over the characters, strings skipped.
 */
export function textTooDeep(text: string, limit = MAX_TEXT_DEPTH): string | null {
  const scan = new DepthScan(limit);
  return scan.push(text) ? scan.field : null;
}

/** The error for a JSON text that nests too deep: naming its top-level field, as the check of a parsed body does. */
export function tooDeepText(what: string, field = ''): CortexError {
  const where = field ? `field \`${field}\`` : what;
  return new CortexError('invalid_request', `${where} nests deeper than ${MAX_BODY_DEPTH} levels`, {
    param: field || undefined,
  });
}

/**
 * Refuses bodies that nest deeper than MAX_BODY_DEPTH with a 400 in the route's dialect, naming the
 * top-level field, before any handler runs: the JSON parser scans the body's text first (one pass,
 * strings skipped) and parses it only when it is not too deep, so a body nested millions of levels is
 * never parsed into millions of objects. A text nests exactly as deep as the value it parses into, so
 * the parsed body needs no second walk. Fastify's own parser does the parsing (prototype poisoning
 * refused as before); the scan adds no stream stage to the body's way in.
 */
export function installBodyDepth(app: NestFastifyApplication, refusals: RefusalCounter): void {
  const fastify = app.getHttpAdapter().getInstance();
  const parse = fastify.getDefaultJsonParser('error', 'error');
  // Through Nest, so that it keeps this parser in the place of its own default one.
  app.useBodyParser<RawServerDefault>(
    'application/json',
    { bodyLimit: fastify.initialConfig.bodyLimit },
    (request, body, done) => {
      const scan = new DepthScan(MAX_BODY_DEPTH);
      if (!scan.push(body)) return parse(request, body.toString('utf8'), done);
      refusals.count('body_too_deep');
      done(tooDeepText('the request body', scan.field), undefined);
    },
  );
}
