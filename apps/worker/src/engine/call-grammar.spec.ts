import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  getLlama,
  LlamaLogLevel,
  TokenBias,
  type Llama,
  type LlamaContext,
  type LlamaModel,
  type Token,
} from 'node-llama-cpp';
import { jsonSchemaMismatch, type ToolDefinition } from '@cortex/contracts';
import { ensureFixtureModels } from '@cortex/fixtures';
import { CallGrammar } from './call-grammar.js';
import { GrammarCache } from './grammars.js';

const LOCATION = { type: 'object', properties: { location: { type: 'string' } }, required: ['location'] };
const TOOLS: ToolDefinition[] = [{ name: 'get_weather', parameters: LOCATION }];

describe('call grammar', () => {
  let dir: string;
  let llama: Llama;
  let model: LlamaModel;
  let context: LlamaContext;
  let open: Token;
  let close: Token;
  let markerBias: TokenBias;
  let calls: () => Promise<{ grammar: CallGrammar; open: () => void }>;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cortex-call-grammar-'));
    const paths = await ensureFixtureModels(dir);
    llama = await getLlama({ gpu: false, logLevel: LlamaLogLevel.error });
    model = await llama.loadModel({ modelPath: paths['cortex-tools'] as string });
    context = await model.createContext({ contextSize: 512, threads: 1 });
    [open, close] = [model.tokenize('<tool_call>', true)[0] as Token, model.tokenize('</tool_call>', true)[0] as Token];
    markerBias = new TokenBias(model.tokenizer).set([open, close], 'never');
    const grammars = new GrammarCache(llama);
    calls = async () => {
      const call = await grammars.forToolCall(TOOLS);
      const grammar = new CallGrammar(model, markerBias);
      return { grammar, open: () => grammar.open(call) };
    };
  });

  after(async () => {
    await context?.dispose();
    await model?.dispose();
    await llama?.dispose();
    await rm(dir, { recursive: true, force: true });
  });

  it('call grammar - holds from a call opening until its JSON closes, then lets go', async () => {
    const { grammar, open } = await calls();
    const outside = () => [
      grammar.holding,
      grammar.evaluationState() === undefined,
      grammar.tokenBias() === markerBias,
    ];
    assert.deepEqual(outside(), [false, true, false], 'nothing holds free text');
    open();
    assert.deepEqual(outside(), [true, false, true], 'a call: the grammar and the marker ban');
    assert.equal(
      grammar.push('{"name": "get_weather", "arguments": {"location": "a}'),
      false,
      'a brace inside a string closes nothing',
    );
    assert.equal(grammar.push('"}'), false);
    assert.equal(grammar.push('}'), true, 'the wrapper object closed');
    assert.deepEqual(outside(), [false, true, false], 'let go: the model closes the call itself');
    open();
    grammar.close();
    assert.deepEqual(outside(), [false, true, false], 'closed some other way');
  });

  it("call grammar - switched on mid-sequence by evaluate's callbacks, it makes the fixture's call match another schema", async () => {
    /** Generates from a chat prompt; returns the JSON written between the call markers. */
    const callText = async (held: { grammar: CallGrammar; open: () => void } | null): Promise<string> => {
      const grammar = held?.grammar;
      const sequence = context.getSequence();
      try {
        const prompt = model.tokenize(
          '<|im_start|>user\nWeather in San Francisco?<|im_end|>\n<|im_start|>assistant\n',
          true,
        );
        let text = '';
        let inCall = false;
        const tokens: Token[] = [];
        for await (const token of sequence.evaluate(prompt, {
          temperature: 0.8,
          yieldEogToken: true,
          grammarEvaluationState: grammar?.evaluationState,
          tokenBias: grammar?.tokenBias,
        })) {
          tokens.push(token);
          if (token === open) {
            inCall = true;
            held?.open();
          } else if (token === close || model.isEogToken(token) || tokens.length > 64) break;
          else if (inCall) {
            const piece = model.detokenize([token]);
            text += piece;
            if (grammar?.push(piece)) break;
          }
        }
        return text;
      } finally {
        sequence.dispose();
      }
    };
    const free = JSON.parse(await callText(null)) as { name: string; arguments: unknown };
    assert.deepEqual(
      free,
      { name: 'get_weather', arguments: { city: 'Paris' } },
      'left alone, the fixture writes its own call',
    );
    assert.notEqual(jsonSchemaMismatch(LOCATION, JSON.stringify(free.arguments)), null);
    const held = JSON.parse(await callText(await calls())) as { name: string; arguments: unknown };
    assert.equal(held.name, 'get_weather');
    assert.equal(jsonSchemaMismatch(LOCATION, JSON.stringify(held.arguments)), null, JSON.stringify(held.arguments));
  });
});
