import type { ChatHistoryItem, ChatModelFunctionCall, ChatModelFunctions } from 'node-llama-cpp';
import type { CanonicalMessage, ToolDefinition } from '@cortex/contracts';

/**
 * Canonical messages → node-llama-cpp chat history, so the model's own template (or the chat wrapper
 * node-llama-cpp resolves for it) renders the prompt. Tool results attach to the assistant turn that
 * called them, which is how node-llama-cpp's wrappers render function calls. `prefill`: the start of
 * the answer, already written (see CanonicalRequest).
 */
export function toChatHistory(messages: readonly CanonicalMessage[], prefill?: string): ChatHistoryItem[] {
  const history: ChatHistoryItem[] = [];
  const pendingCalls = new Map<string, ChatModelFunctionCall>();
  for (const message of messages) {
    switch (message.role) {
      case 'system':
        history.push({ type: 'system', text: message.content });
        break;
      case 'user':
        history.push({ type: 'user', text: message.content });
        break;
      case 'assistant': {
        const response: Array<string | ChatModelFunctionCall> = [];
        if (message.content) response.push(message.content);
        for (const call of message.toolCalls ?? []) {
          const entry: ChatModelFunctionCall = {
            type: 'functionCall',
            name: call.name,
            params: parseJson(call.arguments),
            result: '',
          };
          pendingCalls.set(call.id, entry);
          response.push(entry);
        }
        history.push({ type: 'model', response });
        break;
      }
      case 'tool': {
        const call = message.toolCallId ? pendingCalls.get(message.toolCallId) : undefined;
        if (call) call.result = parseJson(message.content);
        else history.push({ type: 'user', text: message.content });
        break;
      }
    }
  }
  // The last model response is the one generated: an answer already begun goes on from its text.
  history.push({ type: 'model', response: prefill ? [prefill] : [] });
  return history;
}

export function toFunctions(tools: readonly ToolDefinition[] | undefined): ChatModelFunctions | undefined {
  if (!tools || tools.length === 0) return undefined;
  return Object.fromEntries(
    tools.map((tool) => [tool.name, { description: tool.description, params: tool.parameters as never }]),
  );
}

/** A call's arguments as the value they write, or their text when they are not JSON. */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
