/** Reasoning delimiters in the wild; a model uses a pair when both are single tokens in its vocabulary. */
export const REASONING_MARKERS: ReadonlyArray<readonly [string, string]> = [
  ['<think>', '</think>'],
  ['[THINK]', '[/THINK]'],
  ['<thought>', '</thought>'],
  ['<reasoning>', '</reasoning>'],
];

/** Tool-call delimiters (Hermes / Qwen style); the content between them is `{"name", "arguments"}` JSON. */
export const TOOL_CALL_MARKERS: ReadonlyArray<readonly [string, string]> = [['<tool_call>', '</tool_call>']];

/** Finds the first pair whose both halves tokenize to exactly one token; returns their ids. */
export function probeMarkers(
  pairs: ReadonlyArray<readonly [string, string]>,
  tokenize: (text: string) => readonly number[],
): { open: number; close: number; pair: readonly [string, string] } | null {
  for (const pair of pairs) {
    const open = tokenize(pair[0]);
    const close = tokenize(pair[1]);
    if (open.length === 1 && close.length === 1 && open[0] !== undefined && close[0] !== undefined) {
      return { open: open[0], close: close[0], pair };
    }
  }
  return null;
}
