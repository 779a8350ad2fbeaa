import { LlamaGrammarEvaluationState, TokenBias, type LlamaGrammar, type LlamaModel, type Token } from 'node-llama-cpp';
import { acceptIntoGrammar } from './grammar-advance.js';
import { JsonDepth } from './formats/scan.js';

/**
 * A call's grammar, switched on lazily, as llama.cpp's server does: text is sampled freely, and from
 * the token after a call's opening marker a grammar holds the output (marker tokens banned) to
 * `{"name": <a declared tool>, "arguments": <its parameters>}` (Hermes), or from the token after a
 * call's name and separator to that tool's parameters (formats that write the name as text), so the
 * arguments match the tool's schema by construction. When the JSON object closes it lets go and the
 * model closes the call itself; a whole call's grammar (wholeCallGrammar: tags, fenced JSON, a dict,
 * a pythonic list) holds it through its closing marker, and lets go when the call is over. node-llama-cpp asks for the grammar state and
 * the token bias at every sampling step (the callbacks below), which is how its own LlamaChat switches
 * grammars for function parameters: the evaluation is never restarted.
 */
export class CallGrammar {
  private state: LlamaGrammarEvaluationState | undefined;
  private json: JsonDepth | null = null;
  private readonly none: TokenBias;

  constructor(
    private readonly model: LlamaModel,
    private readonly markerBias: TokenBias | undefined,
    /** What biases the output outside a call (a request's logit_bias); none by default. */
    free?: TokenBias,
  ) {
    this.none = free ?? new TokenBias(model.tokenizer);
  }

  /** For `sequence.evaluate`: the grammar's state inside a call, nothing outside. */
  readonly evaluationState = (): LlamaGrammarEvaluationState | undefined => this.state;

  /** For `sequence.evaluate`: marker tokens are banned while the grammar holds a call. */
  readonly tokenBias = (): TokenBias => (this.state && this.markerBias) || this.none;

  /** Whether the grammar holds the output now. */
  get holding(): boolean {
    return this.state !== undefined;
  }

  /**
   * A call (or its arguments) opened, sampled or written for a forced call: `grammar` holds the next
   * token, until its JSON closes, or with `toItsEnd` (a whole call's grammar, closing marker included)
   * until the call is over (close).
   */
  open(grammar: LlamaGrammar, toItsEnd = false): void {
    this.json = toItsEnd ? null : new JsonDepth();
    this.state = new LlamaGrammarEvaluationState({ model: this.model, grammar });
  }

  /** A resumed stream's delivered token, which the grammar held when it was sampled: the state goes past it. */
  accept(token: Token): void {
    if (this.state) acceptIntoGrammar(this.model, this.state, token);
  }

  /** Text written inside the call; true once its JSON object has closed, and the grammar has let go. */
  push(text: string): boolean {
    if (!this.json || this.json.push(text) === -1) return false;
    this.json = null;
    this.state = undefined;
    return true;
  }

  /** The call is over some other way (its closing marker, other text, the end of the output). */
  close(): void {
    this.json = null;
    this.state = undefined;
  }
}
