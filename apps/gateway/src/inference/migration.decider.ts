import type { MigrationConfig } from '@cortex/config';
import type { CanonicalRequest, CortexError, ErrorCode } from '@cortex/contracts';
import type { CheckpointState } from './stream-checkpoint.js';

/** Everything a migration decision depends on; no bus, no clock. */
export interface MigrationAsk {
  error: CortexError;
  /** The client went away (or the run was stopped on purpose). */
  cancelled: boolean;
  checkpoint: CheckpointState;
  config: MigrationConfig;
  /** The request as the client sent it (what an answer begun may be given with). */
  request: Pick<CanonicalRequest, 'raw' | 'responseFormat' | 'toolChoice'>;
}

/**
 * How the stream goes on: `tokens`, exactly, from the token ids behind what the client has (on another
 * copy of the model); `text`, from the answer's text given as an answer begun (a prefill), where the
 * events carried no ids (an upstream's) — on another place of the model, or else its fallback.
 */
export type MigrationDecision = { migrate: true; from: 'tokens' | 'text' } | { migrate: false; reason: string };

/** Failures of the place, not of the request, that move a stream: its worker lost, or its upstream failing mid-answer. */
const MOVES: ReadonlySet<ErrorCode> = new Set<ErrorCode>(['worker_lost', 'upstream_unavailable']);

/**
 * Whether a stream whose place failed after the first token goes on elsewhere. Only a lost worker
 * (gone, or silent past the idle timeout) or an upstream that failed mid-answer moves a stream, and
 * only where the next place can go on without losing or repeating anything: every rule below names a
 * case that could not, and the stream then ends with the error as before.
 */
export function decideMigration(ask: MigrationAsk): MigrationDecision {
  const { error, checkpoint, config } = ask;
  const no = (reason: string): MigrationDecision => ({ migrate: false, reason });
  if (ask.cancelled) return no('the request was cancelled');
  if (!MOVES.has(error.code))
    return no(`the stream failed with ${error.code}, not a lost worker or a failing upstream`);
  if (config.maxAttempts === 0) return no('migration is off (gateway.migration.max_attempts: 0)');
  if (checkpoint.refused) return no(checkpoint.refused);
  if (checkpoint.migrations >= config.maxAttempts)
    return no(`the stream moved ${checkpoint.migrations} time(s) already (gateway.migration.max_attempts)`);
  const tokens = checkpoint.unaccounted === 0;
  const size = checkpoint.promptTokens + (tokens ? checkpoint.deliveredTokens : checkpoint.textPieces);
  if (size > config.maxTokens)
    return no(`the prompt and output are ${size} tokens, over gateway.migration.max_tokens (${config.maxTokens})`);
  if (tokens) return { migrate: true, from: 'tokens' };
  const without = `${checkpoint.unaccounted} output event(s) came without the token ids behind them`;
  if (checkpoint.beyondText)
    return no(`${without}, and the output holds ${checkpoint.beyondText}, which an answer begun cannot carry`);
  const held = heldFromTheStart(ask.request);
  if (held) return no(`${without}, and ${held}`);
  return { migrate: true, from: 'text' };
}

/** Why a request's output cannot go on from its text as an answer begun; null when it can. */
function heldFromTheStart(request: MigrationAsk['request']): string | null {
  if (request.raw) return 'a raw completion does not go on from an answer begun';
  if (request.responseFormat && request.responseFormat.type !== 'text')
    return 'its response format holds the output to a grammar from its start';
  if (request.toolChoice && request.toolChoice !== 'auto' && request.toolChoice !== 'none')
    return 'its tool_choice holds the output to a call from its start';
  return null;
}
