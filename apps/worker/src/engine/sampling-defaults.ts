import { inSamplingRange, type SamplingDefaults } from '@cortex/contracts';

/**
 * A GGUF's sampling defaults: the `general.sampling.*` keys llama.cpp's convert script writes from a
 * model's `generation_config.json` and llama.cpp applies when a request leaves a setting out
 * (node-llama-cpp reads them into `metadata.general.sampling`). A value out of the range a default
 * may take (SAMPLING_DEFAULT_RANGES) is left out, as is `penalty_last_n` -1 (llama.cpp's "the whole context"); mirostat and XTC
 * have no setting here yet.
 */
export function ggufSamplingDefaults(general: unknown): SamplingDefaults {
  const sampling = (general as { sampling?: Record<string, unknown> } | undefined)?.sampling;
  if (!sampling || typeof sampling !== 'object') return {};
  const out: SamplingDefaults = {};
  for (const [ggufKey, key] of GGUF_KEYS) {
    const value = sampling[ggufKey];
    if (typeof value !== 'number') continue;
    const rounded = round(value);
    if (inSamplingRange(key, rounded)) out[key] = rounded;
  }
  return out;
}

/** llama.cpp's `general.sampling.*` key of each default. */
const GGUF_KEYS: ReadonlyArray<readonly [string, keyof SamplingDefaults]> = [
  ['temp', 'temperature'],
  ['top_p', 'topP'],
  ['top_k', 'topK'],
  ['min_p', 'minP'],
  ['penalty_repeat', 'repetitionPenalty'],
  ['penalty_last_n', 'repeatLastN'],
];

/** A float32 as the decimal it was written from (0.6 is stored as 0.60000002384…). */
const round = (value: number): number => Number(value.toPrecision(7));
