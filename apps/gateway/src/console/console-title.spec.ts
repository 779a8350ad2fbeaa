import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { consoleHeading } from './console-title.js';

describe('console title', () => {
  const cases: Array<[title: string, heading: string, why: string]> = [
    ['cortex', '', 'the default: the product name alone, not "cortex cortex"'],
    ['Cortex', '', 'in any case'],
    ['  cortex  ', '', 'around spaces'],
    ['', '', 'no title'],
    ['lab fleet', 'lab fleet', 'a title of its own follows the product name'],
    ['cortex lab', 'lab', 'a leading product name is not repeated'],
    ['Cortex: prod', 'prod', 'nor with a colon'],
    ['cortex-staging', 'staging', 'nor with a dash'],
    ['cortex · eu-west', 'eu-west', 'nor with a dot'],
    ['cortexia', 'cortexia', 'a word that only starts with the name is a name of its own'],
    ['my cortex', 'my cortex', 'the name elsewhere in the title stays'],
  ];
  for (const [title, heading, why] of cases)
    it(`console title - ${JSON.stringify(title)} → ${JSON.stringify(heading)}: ${why}`, () => {
      assert.equal(consoleHeading(title), heading);
    });
});
