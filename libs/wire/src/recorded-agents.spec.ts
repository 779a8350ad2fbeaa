import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { CortexError, type CanonicalMessage, type StreamEvent } from '@cortex/contracts';
import { decodeMessagesRequest } from './anthropic/messages.decoder.js';
import { decodeResponsesRequest } from './responses/responses.decoder.js';
import { ResponsesStreamEncoder } from './responses/responses.encoder.js';

// Request bodies recorded from the real agents against a loopback server (prompt text cut to its length,
// ids zeroed; see each file's `client` and `note`). The fixtures stay in src: the build copies no JSON.
interface Recorded {
  client: string;
  url: string;
  headers: Record<string, string>;
  body: Record<string, unknown>;
}
const recorded = (name: string): Recorded =>
  JSON.parse(readFileSync(new URL(`../src/testing/recorded/${name}.json`, import.meta.url), 'utf8')) as Recorded;

const roles = (messages: CanonicalMessage[]) => messages.map((message) => message.role);
const names = (tools: Array<{ name: string }> | undefined) => (tools ?? []).map((tool) => tool.name);

const CLAUDE_TOOLS = [
  'Agent',
  'Bash',
  'Edit',
  'ListAgents',
  'Read',
  'ReportFindings',
  'ScheduleWakeup',
  'Skill',
  'ToolSearch',
  'Workflow',
  'DeferredToolPlaceholder',
  'Write',
];
const CODEX_FUNCTIONS = ['exec_command', 'write_stdin', 'request_user_input', 'view_image'];
const CODEX_NAMESPACE = ['close_agent', 'resume_agent', 'send_input', 'spawn_agent', 'wait_agent'];
const CODEX_GOALS = ['get_goal', 'create_goal', 'update_goal'];

describe('recorded agents - Claude Code 2.1.330 through the Anthropic decoder', () => {
  it('recorded agents - claude -p "say hi": the mid-conversation system turn stays where it stood', () => {
    const { url, headers, body, client } = recorded('claude-code.say-hi');
    assert.equal(client, '@anthropic-ai/claude-code 2.1.330');
    assert.equal(url, '/v1/messages?beta=true');
    assert.match(headers['anthropic-beta'] ?? '', /effort-2025-11-24/);
    const { request, thinking, droppedTools } = decodeMessagesRequest(body);
    assert.deepEqual(roles(request.messages), ['system', 'user', 'system']);
    // The three system blocks (two with cache_control) are one system message, block by block.
    assert.equal(request.messages[0]?.content, ['<74 chars cut>', '<62 chars cut>', '<6763 chars cut>'].join('\n'));
    assert.equal(request.messages[1]?.content, '<576 chars cut>\nsay hi');
    assert.equal(request.messages[2]?.content, '<9117 chars cut>');
    // defer_loading tools are ordinary tools here; nothing is dropped.
    assert.deepEqual(names(request.tools), CLAUDE_TOOLS);
    assert.deepEqual(droppedTools, []);
    // Adaptive thinking asks for reasoning; metadata.user_id (a JSON string) names the session.
    assert.equal(thinking, true);
    assert.equal(request.affinityKey, 'session:x');
    assert.equal(request.stream, true);
    assert.equal(request.sampling.maxTokens, 32000);
  });

  it('recorded agents - claude with experimental betas off sends the same mid-conversation system turn', () => {
    const { headers, body } = recorded('claude-code.no-experimental-betas');
    assert.doesNotMatch(headers['anthropic-beta'] ?? '', /mid-conversation/);
    const { request } = decodeMessagesRequest(body);
    assert.deepEqual(roles(request.messages), ['system', 'user', 'system']);
    // Here the system turn is a plain string (blocks with cache_control in the run above).
    assert.equal(request.messages[2]?.content, '<8748 chars cut>');
    assert.equal(request.tools?.length, 21);
  });

  it('recorded agents - claude turn after a Bash call: tool_use and tool_result pair up after the system turn', () => {
    const { request } = decodeMessagesRequest(recorded('claude-code.tool-result').body);
    assert.deepEqual(roles(request.messages), ['system', 'user', 'system', 'assistant', 'tool']);
    assert.deepEqual(request.messages[3]?.toolCalls, [
      { id: 'toolu_1', name: 'Bash', arguments: JSON.stringify({ command: 'echo hi', description: 'Print hi' }) },
    ]);
    assert.deepEqual(request.messages[4], { role: 'tool', content: 'hi', toolCallId: 'toolu_1' });
  });
});

describe('recorded agents - Codex CLI 0.169.0 through the Responses decoder', () => {
  it('recorded agents - codex exec "say hi": namespace tools flattened, web_search dropped, developer messages are system', () => {
    const { url, headers, body, client } = recorded('codex.say-hi');
    assert.equal(client, '@openai/codex 0.169.0');
    assert.equal(url, '/v1/responses');
    assert.equal(headers.accept, 'text/event-stream');
    const decoded = decodeResponsesRequest(body);
    assert.deepEqual(roles(decoded.request.messages), ['system', 'system', 'user', 'user']);
    assert.equal(decoded.request.messages[3]?.content, 'say hi');
    assert.deepEqual(names(decoded.request.tools), [...CODEX_FUNCTIONS, ...CODEX_NAMESPACE, ...CODEX_GOALS]);
    assert.deepEqual(decoded.droppedTools, ['tools[8] (tool type "web_search")']);
    // The echo lists the tools the model was offered, namespace members as plain functions.
    assert.deepEqual(names(decoded.echo.tools), names(decoded.request.tools));
    assert.equal(decoded.store, false);
    assert.equal(decoded.request.stream, true);
    assert.equal(decoded.request.affinityKey, 'pck:00000000-0000-0000-0000-000000000000');
  });

  it('recorded agents - codex: a call of a namespaced function carries its namespace back, a plain one none', () => {
    // Codex dispatches namespaced calls by (namespace, name); without the namespace it answers "unsupported call".
    const decoded = decodeResponsesRequest(recorded('codex.say-hi').body);
    assert.deepEqual(
      decoded.toolNamespaces,
      Object.fromEntries(CODEX_NAMESPACE.map((name) => [name, 'multi_agent_v1'])),
    );
    const encoder = new ResponsesStreamEncoder({
      id: 'resp_1',
      createdAt: 1,
      echo: decoded.echo,
      toolNamespaces: decoded.toolNamespaces,
    });
    const events = [
      { type: 'start', runId: 'r', workerId: 'w', model: 'm', promptTokens: 1 },
      { type: 'tool_call', index: 0, id: 'call_a', name: 'wait_agent' },
      { type: 'tool_args', index: 0, delta: '{"targets":["a"]}' },
      { type: 'tool_call', index: 1, id: 'call_b', name: 'exec_command' },
      { type: 'tool_args', index: 1, delta: '{"cmd":"ls"}' },
    ].map((event, seq) => ({ seq, ...event }) as StreamEvent);
    const frames = events.flatMap((event) => encoder.encode(event));
    const added = frames.flatMap((frame) =>
      frame.data.type === 'response.output_item.added' ? [frame.data.item] : [],
    );
    assert.deepEqual(
      added.map((item) => [
        item.type === 'function_call' && item.name,
        item.type === 'function_call' && item.namespace,
      ]),
      [
        ['wait_agent', 'multi_agent_v1'],
        ['exec_command', undefined],
      ],
    );
    const output = encoder.resource().output;
    assert.equal(output[0]?.type === 'function_call' && output[0].namespace, 'multi_agent_v1');
  });

  it('recorded agents - codex with hosted_tools reject names the web_search tool', () => {
    assert.throws(
      () => decodeResponsesRequest(recorded('codex.say-hi').body, { hostedTools: 'reject' }),
      (error: Error) =>
        error instanceof CortexError &&
        error.extra.param === 'tools[8].type' &&
        /"web_search" is not supported/.test(error.message),
    );
  });

  it('recorded agents - codex turn after exec_command: the call and its output become an assistant call and a tool message', () => {
    const decoded = decodeResponsesRequest(recorded('codex.tool-result').body);
    assert.deepEqual(roles(decoded.request.messages), ['system', 'system', 'user', 'user', 'assistant', 'tool']);
    assert.deepEqual(decoded.request.messages[4]?.toolCalls, [
      { id: 'call_1', name: 'exec_command', arguments: '{"cmd":"echo hi"}' },
    ]);
    assert.deepEqual(decoded.request.messages[5], { role: 'tool', content: '<105 chars cut>', toolCallId: 'call_1' });
  });
});
