import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseConfig } from '@cortex/config';
import { pull, pullSources } from './pull.js';

const sources = (...args: Parameters<typeof pullSources>): string[] =>
  pullSources(...args).map((pulled) => pulled.source);

describe('pull', () => {
  it('pull - sources are each model file once plus drafts that are sources, not catalogue ids or lookup', () => {
    const config = parseConfig({
      models: [
        { id: 'a', file: 'fixture:cortex-chat', draft: 'b' },
        { id: 'b', file: 'fixture:cortex-chat' },
        { id: 'c', file: 'fixture:cortex-tools', draft: 'lookup' },
        { id: 'd', file: 'fixture:cortex-reasoning', draft: 'fixture:cortex-chat:bytes' },
      ],
    });
    assert.deepEqual(sources(config), [
      'fixture:cortex-chat',
      'fixture:cortex-tools',
      'fixture:cortex-reasoning',
      'fixture:cortex-chat:bytes',
    ]);
    // A file two models share is pulled once, for the first; a draft that is a source belongs to no model.
    assert.deepEqual(
      pullSources(config).map((pulled) => pulled.model?.id),
      ['a', 'c', 'd', undefined],
    );
  });

  it('pull - one model (by id) is its file and its draft; anything else is a source of its own', () => {
    const config = parseConfig({
      models: [
        { id: 'a', file: 'fixture:cortex-tools', draft: 'b' },
        { id: 'b', file: 'fixture:cortex-chat' },
        { id: 'd', file: 'fixture:cortex-reasoning', aliases: ['dee'], draft: 'fixture:cortex-chat:bytes' },
      ],
    });
    assert.deepEqual(sources(config, 'a'), ['fixture:cortex-tools', 'fixture:cortex-chat']);
    assert.deepEqual(
      pullSources(config, 'a').map((pulled) => pulled.model?.id),
      ['a', 'b'],
    );
    assert.deepEqual(sources(config, 'dee'), ['fixture:cortex-reasoning', 'fixture:cortex-chat:bytes']);
    assert.deepEqual(sources(config, 'https://example.com/m.gguf'), ['https://example.com/m.gguf']);
  });

  it('pull - writes the fixtures into models_dir and fails naming a source it cannot have', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'cortex-pull-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const config = parseConfig({ worker: { models_dir: dir }, models: [{ id: 'chat', file: 'fixture:cortex-chat' }] });
    const paths = await pull(config, () => {});
    assert.ok(existsSync(paths['fixture:cortex-chat']!));
    assert.ok(paths['fixture:cortex-chat']!.startsWith(dir));
    const missing = parseConfig({ worker: { models_dir: dir }, models: [{ id: 'x', file: join(dir, 'nope.gguf') }] });
    await assert.rejects(
      pull(missing, () => {}),
      /nope\.gguf/,
    );
  });
});
