// A node:test reporter that prints, after the run, how long each test file took (the sum of its
// top-level tests' durations, slowest first) and the run's wall time: where the suite's time goes.
import { relative } from 'node:path';

export default async function* fileTimes(source) {
  const started = Date.now();
  const files = new Map();
  for await (const event of source) {
    if ((event.type === 'test:pass' || event.type === 'test:fail') && event.data.nesting === 0 && event.data.file) {
      const file = relative(process.cwd(), event.data.file);
      files.set(file, (files.get(file) ?? 0) + (event.data.details?.duration_ms ?? 0));
    }
  }
  const rows = [...files].sort((a, b) => b[1] - a[1]);
  const seconds = (ms) => (ms / 1000).toFixed(1).padStart(7);
  yield `\ntime per file (${rows.length} files, slowest first):\n`;
  for (const [file, ms] of rows) yield `${seconds(ms)} s  ${file}\n`;
  yield `${seconds(Date.now() - started)} s  in all (wall time)\n`;
}
