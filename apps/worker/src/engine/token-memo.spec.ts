import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  getLlama,
  LlamaLogLevel,
  resolveChatWrapper,
  type ChatWrapper,
  type Llama,
  type LlamaModel,
  type Token,
  type Tokenizer,
} from 'node-llama-cpp';
import type { CanonicalMessage, ToolDefinition } from '@cortex/contracts';
import { AGENT_SYSTEM_PROMPT, ensureFixtureModels } from '@cortex/fixtures';
import { toChatHistory, toFunctions } from './prompt.js';
import { memoTokenizer } from './token-memo.js';

const TOOLS: ToolDefinition[] = [
  {
    name: 'read_file',
    description: 'Reads a file of the workspace.',
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  },
];

/** An agent's conversation after `turns` tool round trips, in the shape coding agents send. */
function conversation(turns: number): CanonicalMessage[] {
  const messages: CanonicalMessage[] = [{ role: 'system', content: AGENT_SYSTEM_PROMPT }];
  for (let turn = 0; turn < turns; turn++) {
    messages.push({ role: 'user', content: `Look at src/file-${turn}.ts and fix what fails there. `.repeat(6) });
    messages.push({
      role: 'assistant',
      content: 'Reading it.',
      toolCalls: [
        { id: `call_${turn}`, name: 'read_file', arguments: JSON.stringify({ path: `src/file-${turn}.ts` }) },
      ],
    });
    messages.push({
      role: 'tool',
      toolCallId: `call_${turn}`,
      content: JSON.stringify({ text: `export const value${turn} = ${turn};\n`.repeat(20) }),
    });
  }
  return messages;
}

/** The tokenizer, counting the characters it was asked to tokenize. */
function counting(tokenizer: Tokenizer): { tokenizer: Tokenizer; chars: () => number } {
  let chars = 0;
  const tokenize = (text: string, specialTokens?: boolean, options?: 'trimLeadingSpace'): Token[] => {
    chars += text.length;
    return tokenizer(text, specialTokens, options);
  };
  return {
    tokenizer: Object.assign(tokenize, {
      detokenize: tokenizer.detokenize,
      isSpecialToken: tokenizer.isSpecialToken,
      isEogToken: tokenizer.isEogToken,
    }) as Tokenizer,
    chars: () => chars,
  };
}

describe('token memo', () => {
  let dir: string;
  let llama: Llama;
  let model: LlamaModel;
  let wrapper: ChatWrapper;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cortex-token-memo-'));
    const path = (await ensureFixtureModels(dir))['cortex-tools'];
    assert.ok(path, 'the cortex-tools fixture');
    llama = await getLlama({ gpu: false, logLevel: LlamaLogLevel.error });
    model = await llama.loadModel({ modelPath: path });
    wrapper = resolveChatWrapper(model);
  });

  after(async () => {
    await model?.dispose();
    await llama?.dispose();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const render = (messages: CanonicalMessage[]) =>
    wrapper.generateContextState({ chatHistory: toChatHistory(messages), availableFunctions: toFunctions(TOOLS) })
      .contextText;

  it('token memo - each turn of a conversation tokenizes exactly as the tokenizer does, and asks it only for the new messages', () => {
    const base = counting(model.tokenizer);
    const memo = memoTokenizer(base.tokenizer, 1_000_000);
    let before = 0;
    for (let turns = 1; turns <= 4; turns++) {
      const text = render(conversation(turns));
      assert.deepEqual(text.tokenize(memo), text.tokenize(model.tokenizer), `turn ${turns}`);
      const asked = base.chars() - before;
      before = base.chars();
      if (turns === 1) assert.ok(asked >= AGENT_SYSTEM_PROMPT.length, 'the first turn is tokenized whole');
      else
        assert.ok(
          asked < AGENT_SYSTEM_PROMPT.length / 2,
          `turn ${turns} asked the tokenizer for ${asked} characters: more than its new messages`,
        );
    }
  });

  it("token memo - the template's own short runs are asked of the tokenizer once; a short message is asked every time", () => {
    const calls: string[] = [];
    const tokenize = (text: string, specialTokens?: boolean | 'builtin', options?: 'trimLeadingSpace'): Token[] => {
      if (text !== '' && specialTokens !== 'builtin')
        calls.push(`${specialTokens === true ? 'template' : 'message'}: ${text}`);
      return model.tokenizer(text, specialTokens as never, options);
    };
    const memo = memoTokenizer(
      Object.assign(tokenize, {
        detokenize: model.tokenizer.detokenize,
        isSpecialToken: model.tokenizer.isSpecialToken,
        isEogToken: model.tokenizer.isEogToken,
      }) as Tokenizer,
      1_000_000,
    );
    for (const content of ['Once upon a time', 'Tell me a story', 'Once upon a time']) {
      const text = wrapper.generateContextState({
        chatHistory: toChatHistory([{ role: 'user', content }]),
      }).contextText;
      assert.deepEqual(text.tokenize(memo), text.tokenize(model.tokenizer), content);
    }
    const template = calls.filter((call) => call.startsWith('template: '));
    assert.ok(template.length > 0, `the template has runs of its own: ${calls.join(' | ')}`);
    assert.equal(new Set(template).size, template.length, `each template run was asked once: ${template.join(' | ')}`);
    assert.equal(
      calls.filter((call) => call.startsWith('message: ') && call.includes('upon')).length,
      2,
      'a short message is tokenized each time it comes',
    );
  });

  it('token memo - keeps at most maxChars of text, dropping the runs used longest ago, and answers the same', () => {
    const base = counting(model.tokenizer);
    const run = (words: string): string => words.repeat(Math.ceil(1_000 / words.length)).slice(0, 1_000);
    const [a, b, c] = [run('alpha beta '), run('gamma delta '), run('epsilon zeta ')];
    // Room for two of the three runs (each kept with a two-character key prefix).
    const memo = memoTokenizer(base.tokenizer, 2_500);
    const asked = (text: string): number => {
      const before = base.chars();
      assert.deepEqual(memo(text, false), model.tokenize(text, false));
      return base.chars() - before;
    };
    assert.equal(asked(a), 1_000);
    assert.equal(asked(b), 1_000);
    assert.equal(asked(a), 0, 'a is kept');
    assert.equal(asked(c), 1_000, 'c makes room by dropping b, used longest ago');
    assert.equal(asked(a), 0, 'a, used since, is still kept');
    assert.equal(asked(b), 1_000, 'b was dropped');
    const tooLong = a.repeat(3);
    assert.equal(asked(tooLong), 3_000);
    assert.equal(asked(tooLong), 3_000, 'a run over the whole budget is never kept');
  });

  it('token memo - a caller that changes the tokens it got changes nothing kept', () => {
    const memo = memoTokenizer(model.tokenizer, 1_000_000);
    const tokens = memo(AGENT_SYSTEM_PROMPT, false);
    const expected = [...tokens];
    tokens.length = 0;
    assert.deepEqual(memo(AGENT_SYSTEM_PROMPT, false), expected);
    const again = memo(AGENT_SYSTEM_PROMPT, false);
    again[0] = -1 as Token;
    assert.deepEqual(memo(AGENT_SYSTEM_PROMPT, false), expected);
  });
});
