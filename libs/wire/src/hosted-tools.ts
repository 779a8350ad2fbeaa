import { fail } from '@cortex/contracts';

/**
 * What a decoder does with a tool that only the provider's own servers can run (Anthropic server tools,
 * OpenAI hosted tools): `drop` leaves it out of the request and names it in `droppedTools`, so agents that
 * always offer web search still work; `reject` answers 400 naming the tool, as a strict client may prefer.
 */
export type HostedToolsPolicy = 'drop' | 'reject';

export interface DecodeOptions {
  /** Default `drop` (`gateway.hosted_tools`). */
  hostedTools?: HostedToolsPolicy;
}

/** Applies the policy to one unrunnable tool: returns a note for the log, or throws `invalid_request`. */
export function unrunnableTool(options: DecodeOptions, param: string, what: string): string {
  if (options.hostedTools === 'reject')
    fail(
      `${param}.type`,
      `${what} is not supported here: only function tools run on a local model (gateway.hosted_tools: reject)`,
    );
  return `${param} (${what})`;
}
