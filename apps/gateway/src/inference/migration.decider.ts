import type { MigrationConfig } from '@cortex/config';
import type { CortexError } from '@cortex/contracts';
import type { CheckpointState } from './stream-checkpoint.js';

/** Everything a migration decision depends on; no bus, no clock. */
export interface MigrationAsk {
  error: CortexError;
  /** The client went away (or the run was stopped on purpose). */
  cancelled: boolean;
  checkpoint: CheckpointState;
  config: MigrationConfig;
}

export type MigrationDecision = { migrate: true } | { migrate: false; reason: string };

/**
 * Whether a stream whose worker failed after the first token goes on on another worker. Only a lost
 * worker (gone, or silent past the idle timeout) moves a stream, and only where the next worker can
 * go on exactly: every rule below names a case that could not, and the stream then ends with the
 * error as before.
 */
export function decideMigration(ask: MigrationAsk): MigrationDecision {
  const { error, checkpoint, config } = ask;
  const no = (reason: string): MigrationDecision => ({ migrate: false, reason });
  if (ask.cancelled) return no('the request was cancelled');
  if (error.code !== 'worker_lost') return no(`the stream failed with ${error.code}, not a lost worker`);
  if (config.maxAttempts === 0) return no('migration is off (gateway.migration.max_attempts: 0)');
  if (checkpoint.refused) return no(checkpoint.refused);
  if (checkpoint.migrations >= config.maxAttempts)
    return no(`the stream moved ${checkpoint.migrations} time(s) already (gateway.migration.max_attempts)`);
  if (checkpoint.unaccounted > 0)
    return no(
      `${checkpoint.unaccounted} output event(s) came without the token ids behind them (a worker that sends none)`,
    );
  const size = checkpoint.promptTokens + checkpoint.deliveredTokens;
  if (size > config.maxTokens)
    return no(`the prompt and output are ${size} tokens, over gateway.migration.max_tokens (${config.maxTokens})`);
  return { migrate: true };
}
