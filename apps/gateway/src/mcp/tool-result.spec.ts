import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CUT_META, cutUtf8, renderPart, renderToolResult } from './tool-result.js';

describe('tool result', () => {
  it('tool result - text parts are joined; images, audio, resources and links are described, not passed', () => {
    const table: Array<[unknown, string]> = [
      [{ type: 'text', text: 'hello' }, 'hello'],
      [{ type: 'image', mimeType: 'image/png', data: 'AAAA' }, '[image: image/png, 3 bytes]'],
      [{ type: 'audio', mimeType: 'audio/wav', data: 'AAA=' }, '[audio: audio/wav, 2 bytes]'],
      [
        { type: 'resource', resource: { uri: 'file:///a.txt', mimeType: 'text/plain', text: 'inside' } },
        '[resource <file:///a.txt>]\ninside',
      ],
      [
        { type: 'resource', resource: { uri: 'file:///a.bin', mimeType: 'application/zip', blob: 'AAAAAAAA' } },
        '[resource <file:///a.bin>: application/zip, 6 bytes]',
      ],
      [
        { type: 'resource_link', name: 'Doc', uri: 'demo://doc/1', description: 'the doc' },
        '[resource link: Doc <demo://doc/1> the doc]',
      ],
      [{ type: 'hologram' }, '[a "hologram" content part]'],
      ['plain', '[a content part that is not an object]'],
    ];
    for (const [part, text] of table) assert.equal(renderPart(part), text);
    assert.deepEqual(
      renderToolResult(
        {
          content: [
            { type: 'text', text: 'a' },
            { type: 'text', text: 'b' },
          ],
          isError: true,
        },
        100,
      ),
      { text: 'a\nb', isError: true, truncated: false },
    );
    assert.equal(renderToolResult({ content: [], structuredContent: { n: 1 } }, 100).text, '{"n":1}');
  });

  it('tool result - past max_output_bytes the text is cut on a character boundary, with a note; so is one the transport cut', () => {
    const long = renderToolResult({ content: [{ type: 'text', text: 'é'.repeat(100) }] }, 51);
    assert.equal(long.truncated, true);
    assert.ok(long.text.startsWith(`${'é'.repeat(25)}\n[cortex: the tool's answer was cut at 51 bytes`), long.text);
    const already = renderToolResult(
      { content: [{ type: 'text', text: 'short' }], _meta: { [CUT_META]: { limit: 9 } } },
      100,
    );
    assert.equal(already.truncated, true);
    assert.match(already.text, /^short\n\[cortex: the tool's answer was cut/);
    assert.deepEqual(cutUtf8('a😀b', 3), { text: 'a', cut: true });
    assert.deepEqual(cutUtf8('a😀b', 5), { text: 'a😀', cut: true });
    assert.deepEqual(cutUtf8('a😀b', 6), { text: 'a😀b', cut: false });
  });
});
