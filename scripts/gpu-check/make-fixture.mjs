// Writes a realistic-size fixture pair for scripts/gpu-check.sh: a family fixture (real chat template and
// special tokens) whose answer loops forever, with its vocabulary padded to --vocab tokens and its width
// raised to --width, and a draft of the same vocabulary and chain at --draft-width (about a tenth of the
// target's size when the widths are 10:1). Built from libs/fixtures/dist (run `npm run build` first).
// Usage: node scripts/gpu-check/make-fixture.mjs --out DIR [--family cortex-qwen3] [--vocab 150000] [--width 640] [--draft-width 64]
import { mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { buildBigramModel } from '../../libs/fixtures/dist/bigram-model.js';
import { familyFixture, familyTemplate } from '../../libs/fixtures/dist/family-fixtures.js';
import { fixturePieces } from '../../libs/fixtures/dist/fixture-models.js';
import { buildVocab, SPM_SPACE } from '../../libs/fixtures/dist/fixture-vocab.js';
import { encodeGguf, writeFileAtomic } from '../../libs/fixtures/dist/gguf-writer.js';

const { values } = parseArgs({
  options: {
    out: { type: 'string' },
    family: { type: 'string', default: 'cortex-qwen3' },
    vocab: { type: 'string', default: '150000' },
    width: { type: 'string', default: '640' },
    'draft-width': { type: 'string', default: '64' },
  },
});
if (!values.out) throw new Error('--out DIR is required');
const fixture = familyFixture(values.family);
if (!fixture) throw new Error(`no family fixture ${values.family}`);
const targetVocab = Number(values.vocab);

// The answer chain only, looping back to its start instead of EOS: decode never ends by itself, so a
// bench can ask any number of tokens, and the chat template and special tokens stay the family's.
const special = new Set([...fixture.tokens.control, ...(fixture.tokens.userDefined ?? [])]);
const chain = fixture.chains.answer;
const words = [...new Set(chain.filter((token) => !special.has(token)))];
const reachable = new Set(fixture.reachable ?? []);
const promptWords = [
  fixture.triggers.call,
  fixture.triggers.parallel,
  fixture.triggers.result,
  ...(fixture.pieces ?? []),
].filter((t) => t !== undefined && !special.has(t));
const pieces = fixturePieces(
  words,
  reachable,
  promptWords.map((word) => word.trimStart()),
);
// Padding: two-character CJK pieces (U+4E00…), which no chain word (Latin text and the family's
// markers) can be split into, so the tokenizer still never reaches a chain token.
const base = buildVocab(words, pieces, fixture.tokens).tokens.length;
const padding = [];
const CJK = 0x4e00;
const SPAN = 2000;
for (let i = 0; padding.length < targetVocab - base; i++)
  padding.push(String.fromCodePoint(CJK + (i % SPAN)) + String.fromCodePoint(CJK + Math.floor(i / SPAN)));
const vocab = buildVocab(words, [...pieces, ...padding], fixture.tokens);
const token = (text) => (special.has(text) ? text : text.replaceAll(' ', SPM_SPACE));

const build = (width, name) =>
  buildBigramModel({
    name,
    description: `cortex gpu-check fixture: ${fixture.family}'s template, ${vocab.tokens.length} tokens, n_embd ${width}, looping answer`,
    vocab,
    chain: chain.map(token),
    reachable: [...reachable],
    loop: true,
    embeddingLength: width,
    headDim: 16,
    heads: 4,
    chatTemplate: familyTemplate(fixture.template),
  });

mkdirSync(values.out, { recursive: true });
const written = {};
for (const [role, width] of [
  ['target', Number(values.width)],
  ['draft', Number(values['draft-width'])],
]) {
  const started = performance.now();
  const file = build(width, `${fixture.id}-gpu-check-${role}`);
  const params = file.tensors.reduce((sum, t) => sum + t.dims.reduce((a, b) => a * b, 1), 0);
  const path = join(values.out, `${fixture.id}-${role}.gguf`);
  await writeFileAtomic(path, encodeGguf(file));
  const bytes = statSync(path).size;
  written[role] = { path, params, bytes, width };
  console.log(
    `fixture ${role}: ${path}: ${vocab.tokens.length} tokens, n_embd ${width}, ${(params / 1e6).toFixed(1)}M parameters, ${(bytes / 2 ** 20).toFixed(1)} MiB (F32), ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
}
console.log(`fixture draft/target size: ${(written.draft.bytes / written.target.bytes).toFixed(3)}`);
console.log(`FIXTURE_TARGET=${written.target.path}`);
console.log(`FIXTURE_DRAFT=${written.draft.path}`);
