import { fail } from '@cortex/contracts';

/**
 * The tool calls a conversation has made so far, read in order, to check each tool result against. A
 * result whose call id matches no earlier call is refused (400 naming the id), as OpenAI and Anthropic
 * refuse it: a chat template would otherwise render the answer to a question the model never asked.
 */
export class ToolCallLedger {
  private readonly calls = new Set<string>();

  /** The assistant made a call with this id. */
  called(id: string): void {
    this.calls.add(id);
  }

  /** A tool result answers `id`; throws `invalid_request` at `param` when no earlier call has that id. */
  answered(id: string, param: string): void {
    if (!this.calls.has(id))
      fail(
        param,
        `no earlier tool call in the conversation has the id '${id}': a tool result must answer a call made before it`,
      );
  }
}
