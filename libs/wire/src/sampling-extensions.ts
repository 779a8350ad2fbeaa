import {
  checkBreakers,
  checkLogitBias,
  fail,
  optionalArray,
  optionalInteger,
  optionalNumber,
  optionalObject,
  SAMPLING_DEFAULT_RANGES,
  type Sampling,
} from '@cortex/contracts';

type Json = Record<string, unknown>;
/** llama.cpp's samplers that node-llama-cpp lacks: refused rather than dropped, since each changes the output. */
const UNSUPPORTED = ['typical_p', 'mirostat', 'mirostat_tau', 'mirostat_eta'];

type Extensions = Pick<Sampling, 'topK' | 'minP' | 'repetitionPenalty' | 'repeatLastN' | 'logitBias' | 'xtc' | 'dry'>;

/**
 * The sampling knobs OpenAI's APIs lack and local servers take, by the names llama.cpp's and vLLM's
 * servers accept: `top_k` (0 or -1: off, every token), `min_p`, `repetition_penalty` (vLLM) or
 * `repeat_penalty` (llama.cpp; 1: off), `repeat_last_n` (llama.cpp: how many of the latest tokens the repetition
 * penalty looks at, 64 by default), XTC (`xtc_probability`, `xtc_threshold`) and DRY (`dry_multiplier`,
 * `dry_base`, `dry_allowed_length`, `dry_penalty_last_n`, `dry_sequence_breakers`) with llama.cpp's
 * defaults; and OpenAI's `logit_bias` (token id → -100 to 100). Chat
 * Completions, legacy completions and Responses read them from the body; each bad value is a 400
 * naming its field. A value that turns a setting off is kept as such: it wins over the model's
 * defaults (its GGUF's, the catalogue's) like any other.
 */
export function samplingExtensions(body: Json): Extensions {
  for (const field of UNSUPPORTED) {
    if (body[field] !== undefined && body[field] !== null)
      fail(
        field,
        `${field} is not a sampler this gateway's engine has (node-llama-cpp); leave it out, or use min_p, top_k, top_p, XTC or DRY`,
      );
  }
  const topK = optionalInteger(body.top_k, 'top_k', -1);
  const named =
    body.repetition_penalty !== undefined && body.repetition_penalty !== null ? 'repetition_penalty' : 'repeat_penalty';
  const { min, max } = SAMPLING_DEFAULT_RANGES.repetitionPenalty;
  const penalty = optionalNumber(body[named], named, min, max);
  const out: Extensions = {};
  if (topK !== undefined) out.topK = Math.max(0, topK);
  const minP = optionalNumber(body.min_p, 'min_p', 0, 1);
  if (minP !== undefined) out.minP = minP;
  if (penalty !== undefined) out.repetitionPenalty = penalty;
  const lastN = optionalInteger(body.repeat_last_n, 'repeat_last_n', 0);
  if (lastN !== undefined) out.repeatLastN = lastN;
  const bias = optionalObject(body.logit_bias, 'logit_bias');
  if (bias && Object.keys(bias).length > 0) out.logitBias = checkLogitBias(bias, 'logit_bias');
  const xtcProbability = optionalNumber(body.xtc_probability, 'xtc_probability', 0, 1);
  const xtcThreshold = optionalNumber(body.xtc_threshold, 'xtc_threshold', 0, 1);
  if (xtcProbability) out.xtc = { probability: xtcProbability, threshold: xtcThreshold ?? 0.1 };
  const dry = optionalNumber(body.dry_multiplier, 'dry_multiplier', 0, 100);
  const dryBase = optionalNumber(body.dry_base, 'dry_base', 1, 100);
  const dryAllowed = optionalInteger(body.dry_allowed_length, 'dry_allowed_length', 0);
  // llama.cpp's -1 is the whole context, its default.
  const dryLastN = optionalInteger(body.dry_penalty_last_n, 'dry_penalty_last_n', -1);
  const breakers = checkBreakers(
    optionalArray(body.dry_sequence_breakers, 'dry_sequence_breakers'),
    'dry_sequence_breakers',
  );
  if (dry) {
    out.dry = {
      multiplier: dry,
      ...(dryBase !== undefined && { base: dryBase }),
      ...(dryAllowed !== undefined && { allowedLength: dryAllowed }),
      ...(dryLastN !== undefined && dryLastN >= 0 && { lastN: dryLastN }),
      ...(breakers && { sequenceBreakers: breakers }),
    };
  }
  return out;
}
