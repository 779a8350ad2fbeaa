/**
 * Where one run of a request is in its life. A run moves only as `nextPhase` allows; `finished` is
 * the end, reached from any phase once (the request-finished event is published and its usage
 * reported). A cancel is not a phase: it ends the waits of whatever phase the run is in (an
 * AbortSignal), and the run then fails or finishes from there.
 */
export type RunPhase =
  /** Made; its body not decoded yet. */
  | 'new'
  /** Its canonical request is known (decoded, or made by the gateway). */
  | 'decoded'
  /** A router is asked for a worker (a cold load may be waited for). */
  | 'placing'
  /** A worker has the work: a generation not yet past its first token, or a retrieval or count asked. */
  | 'running'
  /** The first token came: the client may have been given output, so a failure no longer retries. */
  | 'streaming'
  /** The stream's worker was lost and the stream is placed again, to go on from its checkpoint. */
  | 'moving'
  /** The worker ended the stream itself (its finish or error event): nothing is left to cancel. */
  | 'ended'
  /** A background run left to its worker after its first token: it is not cancelled when read no more. */
  | 'detached'
  | 'finished';

export type RunStep =
  'decoded' | 'place' | 'run' | 'first-token' | 'lost' | 'resumed' | 'worker-ended' | 'detach' | 'finish';

const NEXT: Record<RunPhase, Partial<Record<RunStep, RunPhase>>> = {
  new: { decoded: 'decoded', place: 'placing', finish: 'finished' },
  decoded: { place: 'placing', finish: 'finished' },
  placing: { place: 'placing', run: 'running', finish: 'finished' },
  running: { place: 'placing', 'first-token': 'streaming', 'worker-ended': 'ended', finish: 'finished' },
  streaming: { lost: 'moving', 'worker-ended': 'ended', detach: 'detached', finish: 'finished' },
  moving: { resumed: 'streaming', detach: 'detached', finish: 'finished' },
  ended: { detach: 'detached', finish: 'finished' },
  detached: { 'worker-ended': 'detached', finish: 'finished' },
  finished: {},
};

/** The phase `step` takes a run in `phase` to, or null when it may not happen there (a bug in the run). */
export function nextPhase(phase: RunPhase, step: RunStep): RunPhase | null {
  return NEXT[phase][step] ?? null;
}

/**
 * Whether the worker's stream of a run in `phase` has ended on its own (its finish or error event, or
 * a background run left to its worker): a stream read no more is then only closed. In any other phase
 * a worker may be writing it, a generate command still on its way included, and is told to stop.
 */
export function streamEnded(phase: RunPhase): boolean {
  return phase === 'ended' || phase === 'detached' || phase === 'finished';
}
