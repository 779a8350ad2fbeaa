import type { SamplingDefaults } from '@cortex/contracts';

/**
 * A GGUF's sampling defaults: the `general.sampling.*` keys llama.cpp's convert script writes from a
 * model's `generation_config.json` and llama.cpp applies when a request leaves a setting out
 * (node-llama-cpp reads them into `metadata.general.sampling`). A value out of the range a request
 * may set is left out, as is `penalty_last_n` -1 (llama.cpp's "the whole context"); mirostat and XTC
 * have no setting here yet.
 */
export function ggufSamplingDefaults(general: unknown): SamplingDefaults {
  const sampling = (general as { sampling?: Record<string, unknown> } | undefined)?.sampling;
  if (!sampling || typeof sampling !== 'object') return {};
  const number = (key: string, min: number, max: number): number | undefined => {
    const value = sampling[key];
    return typeof value === 'number' && Number.isFinite(value) && value >= min && value <= max
      ? round(value)
      : undefined;
  };
  const integer = (key: string, min: number): number | undefined => {
    const value = number(key, min, Number.MAX_SAFE_INTEGER);
    return value !== undefined && Number.isInteger(value) ? value : undefined;
  };
  const penalty = number('penalty_repeat', 0, 10);
  const out: SamplingDefaults = {
    temperature: number('temp', 0, 2),
    topP: number('top_p', 0, 1),
    topK: integer('top_k', 0),
    minP: number('min_p', 0, 1),
    repetitionPenalty: penalty === 0 ? undefined : penalty,
    repeatLastN: integer('penalty_last_n', 0),
  };
  return Object.fromEntries(Object.entries(out).filter(([, value]) => value !== undefined)) as SamplingDefaults;
}

/** A float32 as the decimal it was written from (0.6 is stored as 0.60000002384…). */
const round = (value: number): number => Number(value.toPrecision(7));
