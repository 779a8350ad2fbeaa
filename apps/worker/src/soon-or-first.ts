/**
 * Runs `write` once: on the next turn of the event loop, or at once when the returned function is
 * called before that. For a line that need not hold up what follows it (a run's "generating" line is
 * written while its prompt is evaluated, not before), yet must come before any later line about the
 * same thing: each of those calls the returned function first.
 */
export function soonOrFirst(write: () => void): () => void {
  let pending = true;
  const now = (): void => {
    if (!pending) return;
    pending = false;
    clearImmediate(timer);
    write();
  };
  const timer = setImmediate(now);
  return now;
}
