import { JsonDepth } from './scan.js';

/** `[name(key="value", n=1), other()]` (LFM2): the calls, or null when the text is not such a list. */
export function parsePythonic(text: string): Array<{ name: string; arguments: string }> | null {
  const source = text.trim();
  if (!source.startsWith('[') || !source.endsWith(']')) return null;
  const calls: Array<{ name: string; arguments: string }> = [];
  let at = 1;
  const skip = (): void => {
    while (at < source.length && /[\s,]/.test(source[at] ?? '')) at++;
  };
  for (skip(); at < source.length - 1; skip()) {
    const name = /^[A-Za-z_][\w.-]*/.exec(source.slice(at))?.[0];
    if (!name || source[at + name.length] !== '(') return null;
    at += name.length + 1;
    const args: Record<string, unknown> = {};
    for (;;) {
      while (/\s|,/.test(source[at] ?? '')) at++;
      if (source[at] === ')') {
        at++;
        break;
      }
      const key = /^[A-Za-z_]\w*/.exec(source.slice(at))?.[0];
      if (!key || source[at + key.length] !== '=') return null;
      at += key.length + 1;
      const value = pythonValue(source, at);
      if (!value) return null;
      args[key] = value.value;
      at = value.end;
    }
    calls.push({ name, arguments: JSON.stringify(args) });
  }
  return calls;
}

/** One Python literal at `at`: a string, number, True/False/None, or a list or dict of them written as JSON would be. */
function pythonValue(source: string, at: number): { value: unknown; end: number } | null {
  const quote = source[at];
  if (quote === '"' || quote === "'") {
    let value = '';
    for (let i = at + 1; i < source.length; i++) {
      const char = source[i] as string;
      if (char === '\\') {
        const next = source[++i] ?? '';
        value += next === 'n' ? '\n' : next === 't' ? '\t' : next;
      } else if (char === quote) return { value, end: i + 1 };
      else value += char;
    }
    return null;
  }
  const word = /^(True|False|None|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)/.exec(source.slice(at))?.[0];
  if (word)
    return {
      value: word === 'True' ? true : word === 'False' ? false : word === 'None' ? null : Number(word),
      end: at + word.length,
    };
  if (quote === '[' || quote === '{') {
    const depth = new JsonDepth();
    const closed = depth.push(source.slice(at));
    if (closed === -1) return null;
    const literal = source
      .slice(at, at + closed)
      .replace(/\bTrue\b/g, 'true')
      .replace(/\bFalse\b/g, 'false')
      .replace(/\bNone\b/g, 'null')
      .replace(/'/g, '"');
    try {
      return { value: JSON.parse(literal) as unknown, end: at + closed };
    } catch {
      return null;
    }
  }
  return null;
}
