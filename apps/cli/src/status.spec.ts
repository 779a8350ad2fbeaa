import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { CatalogueEntry } from '@cortex/contracts';
import { formatModels } from './status.js';

const entry = (
  id: string,
  locations: CatalogueEntry['locations'],
  replicas?: CatalogueEntry['replicas'],
): CatalogueEntry => ({
  id,
  ownedBy: 'cortex',
  created: 0,
  contextSize: 512,
  pinned: false,
  priority: 0,
  loaded: locations.some((l) => l.state === 'ready'),
  locations,
  ...(replicas && { replicas }),
  capabilities: null,
});

describe('cli status', () => {
  it('status - the models table shows each model’s ready copies, their bounds, and load per copy', () => {
    const text = formatModels([
      entry(
        'hot',
        [
          { workerId: 'w1', state: 'ready', inFlight: 4, queued: 2 },
          { workerId: 'w2', state: 'ready', inFlight: 3, queued: 0 },
          { workerId: 'w3', state: 'loading', inFlight: 0, queued: 0 },
        ],
        { ready: 2, min: 1, max: 0 },
      ),
      entry('solo', [{ workerId: 'w1', state: 'ready', inFlight: 1, queued: 0 }], { ready: 1, min: 1, max: 1 }),
      entry('old', [{ workerId: 'w2', state: 'ready', inFlight: 0, queued: 0 }]),
    ]);
    const rows = text.split('\n').map((line) => line.trim().split(/\s{2,}/));
    assert.deepEqual(rows[0]?.slice(0, 4), ['model', 'loaded', 'copies', 'where']);
    assert.deepEqual(rows[1]?.slice(0, 4), ['hot', 'yes', '2 (1-any)', 'w1:ready 4+2q, w2:ready 3+0q, w3:loading']);
    assert.deepEqual(rows[2]?.slice(0, 3), ['solo', 'yes', '1 (1-1)']);
    assert.deepEqual(rows[3]?.slice(0, 3), ['old', 'yes', '1'], 'a router without replication: the ready locations');
  });
});
