import { fail, optionalInteger, optionalNumber, type Sampling } from '@cortex/contracts';

type Json = Record<string, unknown>;

/**
 * The sampling knobs OpenAI's APIs lack and local servers take, by the names llama.cpp's and vLLM's
 * servers accept: `top_k` (0 or -1: off), `min_p`, `repetition_penalty` (vLLM) or `repeat_penalty`
 * (llama.cpp; 1: off), `repeat_last_n` (llama.cpp: how many of the latest tokens the repetition
 * penalty looks at, 64 by default). Chat Completions, legacy completions and Responses read them from
 * the body; each bad value is a 400 naming its field.
 */
export function samplingExtensions(body: Json): Pick<Sampling, 'topK' | 'minP' | 'repetitionPenalty' | 'repeatLastN'> {
  const topK = optionalInteger(body.top_k, 'top_k', -1);
  const named = body.repetition_penalty !== undefined && body.repetition_penalty !== null ? 'repetition_penalty' : 'repeat_penalty';
  const penalty = optionalNumber(body[named], named, 0, 10);
  if (penalty === 0) fail(named, 'must be above 0 (1 is no penalty)');
  const out: Pick<Sampling, 'topK' | 'minP' | 'repetitionPenalty' | 'repeatLastN'> = {};
  if (topK !== undefined && topK > 0) out.topK = topK;
  const minP = optionalNumber(body.min_p, 'min_p', 0, 1);
  if (minP !== undefined) out.minP = minP;
  if (penalty !== undefined && penalty !== 1) out.repetitionPenalty = penalty;
  const lastN = optionalInteger(body.repeat_last_n, 'repeat_last_n', 0);
  if (lastN !== undefined) out.repeatLastN = lastN;
  return out;
}
