import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '@cortex/contracts';
import { decodeResponsesRequest } from './responses.decoder.js';
import { conversationMessages, itemsToMessages, resolveItemReferences } from './responses.items.js';
import { aggregate, scripts, toolCallTurns, toolResults } from './responses.fixtures.js';
import type { ResponsesItem } from './responses.types.js';

function invalid(body: unknown, param: string, message?: RegExp): void {
  assert.throws(
    () => decodeResponsesRequest(body),
    (error: Error) =>
      error instanceof CortexError &&
      error.code === 'invalid_request' &&
      error.extra.param === param &&
      error.message.startsWith(`${param}: `) &&
      (message === undefined || message.test(error.message)),
    `expected invalid_request on ${param}`,
  );
}

const base = { model: 'm', input: 'hi' };
const tool = (name: string, extra: Record<string, unknown> = {}) => ({
  type: 'function',
  name,
  parameters: { type: 'object' },
  ...extra,
});

describe('responses codec - request decoding', () => {
  it("responses codec - an MCP call the gateway ran is the model's call and the tool's answer; a listing is not", () => {
    const decoded = decodeResponsesRequest({
      model: 'm',
      input: [
        { role: 'user', content: 'Echo Paris' },
        { type: 'mcp_list_tools', id: 'mcpl_1', server_label: 's', tools: [{ name: 'echo', input_schema: {} }] },
        { type: 'mcp_approval_request', id: 'mcpr_1', server_label: 's', name: 'echo', arguments: '{}' },
        {
          type: 'mcp_call',
          id: 'mcp_1',
          server_label: 's',
          name: 'echo',
          arguments: '{"message":"Paris"}',
          output: 'Echo: Paris',
        },
        { type: 'mcp_call', id: 'mcp_2', server_label: 's', name: 'echo', arguments: '', error: 'timed out' },
      ],
    });
    assert.deepEqual(decoded.request.messages, [
      { role: 'user', content: 'Echo Paris' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'mcp_1', name: 'echo', arguments: '{"message":"Paris"}' }] },
      { role: 'tool', content: 'Echo: Paris', toolCallId: 'mcp_1' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'mcp_2', name: 'echo', arguments: '{}' }] },
      { role: 'tool', content: 'error: timed out', toolCallId: 'mcp_2' },
    ]);
  });

  it('responses codec - a string input is one user message, instructions a leading system message', () => {
    const decoded = decodeResponsesRequest({ model: 'm', instructions: 'Be brief.', input: 'Hello' });
    assert.deepEqual(decoded.request, {
      model: 'm',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hello' },
      ],
      sampling: {},
      stream: false,
    });
    assert.deepEqual(decoded.input, [
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hello' }] },
    ]);
    assert.equal(decoded.instructions, 'Be brief.');
    assert.equal(decoded.store, true);
    assert.deepEqual(decoded.metadata, {});
    assert.deepEqual(decoded.itemReferences, []);
    assert.equal(decoded.previousResponseId, undefined);
    assert.equal(decoded.conversation, undefined);
  });

  it('responses codec - message items of every role, string or text-part content; developer becomes system', () => {
    const decoded = decodeResponsesRequest({
      model: 'm',
      input: [
        { type: 'message', role: 'developer', content: [{ type: 'input_text', text: 'Rules.' }] },
        { type: 'message', role: 'system', content: 'System.' },
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'Part one.' },
            { type: 'input_text', text: 'Part two.' },
          ],
        },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Answer.', annotations: [] }] },
        { role: 'user', content: 'Thanks.' },
      ],
    });
    assert.deepEqual(decoded.request.messages, [
      { role: 'system', content: 'Rules.' },
      { role: 'system', content: 'System.' },
      { role: 'user', content: 'Part one.\nPart two.' },
      { role: 'assistant', content: 'Answer.' },
      { role: 'user', content: 'Thanks.' },
    ]);
    // Normalized items keep their role and use the wire's part type for it.
    assert.deepEqual(decoded.input[0], {
      type: 'message',
      role: 'developer',
      content: [{ type: 'input_text', text: 'Rules.' }],
    });
    assert.deepEqual(decoded.input[3], {
      type: 'message',
      role: 'assistant',
      content: [{ type: 'output_text', text: 'Answer.', annotations: [] }],
    });
  });

  it('responses codec - a multi-turn tool round trip: consecutive function_calls merge, outputs become tool messages', () => {
    const decoded = decodeResponsesRequest({
      model: 'm',
      tools: [tool('weather')],
      input: [
        { role: 'user', content: 'Paris and Lyon?' },
        { type: 'message', role: 'assistant', content: 'Checking.' },
        { type: 'function_call', id: 'fc_1', call_id: 'call_1', name: 'weather', arguments: '{"city":"Paris"}' },
        {
          type: 'function_call',
          call_id: 'call_2',
          name: 'weather',
          arguments: '{"city":"Lyon"}',
          status: 'completed',
        },
        { type: 'function_call_output', call_id: 'call_1', output: '18C' },
        { type: 'function_call_output', call_id: 'call_2', output: [{ type: 'input_text', text: '21C' }] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Paris 18C, Lyon 21C.' }] },
        { role: 'user', content: 'And tomorrow?' },
      ],
    });
    assert.deepEqual(decoded.request.messages, [
      { role: 'user', content: 'Paris and Lyon?' },
      {
        role: 'assistant',
        content: 'Checking.',
        toolCalls: [
          { id: 'call_1', name: 'weather', arguments: '{"city":"Paris"}' },
          { id: 'call_2', name: 'weather', arguments: '{"city":"Lyon"}' },
        ],
      },
      { role: 'tool', content: '18C', toolCallId: 'call_1' },
      { role: 'tool', content: '21C', toolCallId: 'call_2' },
      { role: 'assistant', content: 'Paris 18C, Lyon 21C.' },
      { role: 'user', content: 'And tomorrow?' },
    ]);
    assert.deepEqual(decoded.input[2], {
      type: 'function_call',
      id: 'fc_1',
      call_id: 'call_1',
      name: 'weather',
      arguments: '{"city":"Paris"}',
    });
  });

  it('responses codec - reasoning items become the reasoning of the assistant turn they open', () => {
    const decoded = decodeResponsesRequest({
      model: 'm',
      input: [
        { role: 'user', content: 'Weather?' },
        { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'Summary only.' }] },
        { type: 'function_call', call_id: 'call_1', name: 'weather', arguments: '{}' },
        { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
        // Raw reasoning_text content wins over the summary.
        {
          type: 'reasoning',
          summary: [{ type: 'summary_text', text: 'short' }],
          content: [{ type: 'reasoning_text', text: 'It is sunny.' }],
        },
        { type: 'message', role: 'assistant', content: 'Sunny.' },
        // Encrypted reasoning from another provider cannot be read and is left out.
        { type: 'reasoning', summary: [], encrypted_content: 'gAAAA…' },
        { type: 'reasoning', summary: [{ type: 'summary_text', text: 'Next step.' }] },
        { type: 'message', role: 'assistant', content: 'More.' },
      ],
    });
    assert.deepEqual(decoded.request.messages, [
      { role: 'user', content: 'Weather?' },
      {
        role: 'assistant',
        content: '',
        reasoning: 'Summary only.',
        toolCalls: [{ id: 'call_1', name: 'weather', arguments: '{}' }],
      },
      { role: 'tool', content: 'sunny', toolCallId: 'call_1' },
      { role: 'assistant', content: 'Sunny.', reasoning: 'It is sunny.' },
      { role: 'assistant', content: 'More.', reasoning: 'Next step.' },
    ]);
    assert.deepEqual(decoded.input[6], { type: 'reasoning', summary: [], encrypted_content: 'gAAAA…' });
  });

  it('responses codec - function tools, tool_choice modes and allowed_tools', () => {
    const tools = [tool('weather', { description: 'Forecast', strict: false }), tool('time')];
    const auto = decodeResponsesRequest({ ...base, tools });
    assert.deepEqual(auto.request.tools, [
      { name: 'weather', description: 'Forecast', parameters: { type: 'object' } },
      // strict is true unless the tool says otherwise, as the Responses API documents it.
      { name: 'time', parameters: { type: 'object' }, strict: true },
    ]);
    assert.equal(auto.request.toolChoice, undefined);
    assert.deepEqual(auto.echo.tools, [
      { type: 'function', name: 'weather', description: 'Forecast', parameters: { type: 'object' }, strict: false },
      { type: 'function', name: 'time', description: null, parameters: { type: 'object' }, strict: true },
    ]);
    assert.equal(auto.echo.tool_choice, 'auto');

    assert.equal(decodeResponsesRequest({ ...base, tools, tool_choice: 'required' }).request.toolChoice, 'required');
    const none = decodeResponsesRequest({ ...base, tools, tool_choice: 'none' });
    assert.equal(none.request.tools, undefined);
    assert.equal(none.request.toolChoice, undefined);
    assert.equal(none.echo.tools.length, 2);
    assert.equal(none.echo.tool_choice, 'none');

    const named = decodeResponsesRequest({ ...base, tools, tool_choice: { type: 'function', name: 'time' } });
    assert.equal(named.request.toolChoice, 'function:time');
    assert.deepEqual(named.echo.tool_choice, { type: 'function', name: 'time' });

    const allowed = decodeResponsesRequest({
      ...base,
      tools,
      tool_choice: { type: 'allowed_tools', mode: 'required', tools: [{ type: 'function', name: 'time' }] },
    });
    assert.deepEqual(allowed.request.tools, [{ name: 'time', parameters: { type: 'object' }, strict: true }]);
    assert.equal(allowed.request.toolChoice, 'required');
    assert.deepEqual(allowed.echo.tool_choice, {
      type: 'allowed_tools',
      mode: 'required',
      tools: [{ type: 'function', name: 'time' }],
    });
  });

  it('responses codec - max_tool_calls and parallel_tool_calls cap the tool calls, and are echoed', () => {
    const base = { model: 'm', input: 'hi' };
    assert.equal(decodeResponsesRequest(base).request.maxToolCalls, undefined);
    const capped = decodeResponsesRequest({ ...base, max_tool_calls: 3 });
    assert.equal(capped.request.maxToolCalls, 3);
    assert.equal(capped.echo.max_tool_calls, 3);
    const serial = decodeResponsesRequest({ ...base, max_tool_calls: 3, parallel_tool_calls: false });
    assert.equal(serial.request.maxToolCalls, 1);
    assert.equal(serial.echo.parallel_tool_calls, false);
  });

  it('responses codec - text.format maps to the canonical response format', () => {
    const schema = { type: 'object', properties: { a: { type: 'string' } } };
    const jsonSchema = decodeResponsesRequest({
      ...base,
      text: { format: { type: 'json_schema', name: 'answer', schema, strict: true }, verbosity: 'low' },
    });
    assert.deepEqual(jsonSchema.request.responseFormat, { type: 'json_schema', schema });
    // The spec's JsonSchemaResponseFormat admits only a null schema in the resource.
    assert.deepEqual(jsonSchema.echo.text, {
      format: { type: 'json_schema', name: 'answer', description: null, schema: null, strict: true },
      verbosity: 'low',
    });
    assert.deepEqual(
      decodeResponsesRequest({ ...base, text: { format: { type: 'json_object' } } }).request.responseFormat,
      { type: 'json_object' },
    );
    const text = decodeResponsesRequest({ ...base, text: { format: { type: 'text' } } });
    assert.equal(text.request.responseFormat, undefined);
    assert.deepEqual(text.echo.text, { format: { type: 'text' }, verbosity: 'medium' });
  });

  it('responses codec - sampling, limits and the echoed settings', () => {
    const decoded = decodeResponsesRequest({
      ...base,
      stream: true,
      stream_options: { include_obfuscation: false },
      max_output_tokens: 256,
      max_tool_calls: 3,
      parallel_tool_calls: false,
      temperature: 0.2,
      top_p: 0.9,
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
      truncation: 'auto',
      reasoning: { effort: 'high', summary: 'auto' },
      include: ['reasoning.encrypted_content'],
      user: 'u-1',
      safety_identifier: 'hash-1',
      prompt_cache_key: 'cache-1',
      service_tier: 'flex',
      top_logprobs: 0,
      store: false,
      metadata: { team: 'core' },
      background: false,
      some_future_field: { anything: true },
    });
    assert.equal(decoded.request.stream, true);
    assert.deepEqual(
      decoded.request.templateOptions,
      { reasoning_effort: 'high' },
      "the effort reaches the model's chat template",
    );
    assert.deepEqual(decoded.request.sampling, {
      temperature: 0.2,
      topP: 0.9,
      maxTokens: 256,
      presencePenalty: 0.5,
      frequencyPenalty: -0.5,
    });
    assert.equal(decoded.store, false);
    assert.deepEqual(decoded.metadata, { team: 'core' });
    const { echo } = decoded;
    assert.equal(echo.max_output_tokens, 256);
    assert.equal(echo.max_tool_calls, 3);
    assert.equal(echo.parallel_tool_calls, false);
    assert.equal(echo.truncation, 'auto');
    assert.deepEqual(echo.reasoning, { effort: 'high', summary: 'auto' });
    assert.equal(echo.safety_identifier, 'hash-1');
    assert.equal(echo.prompt_cache_key, 'cache-1');
    assert.equal(echo.service_tier, 'default');
    assert.equal(echo.store, false);
    assert.equal(echo.background, false);
    assert.deepEqual(
      [echo.temperature, echo.top_p, echo.presence_penalty, echo.frequency_penalty, echo.top_logprobs],
      [0.2, 0.9, 0.5, -0.5, 0],
    );
  });

  it('responses codec - previous_response_id, conversation and item references are returned for the caller', () => {
    const chained = decodeResponsesRequest({
      model: 'm',
      previous_response_id: 'resp_prev',
      input: [{ type: 'function_call_output', call_id: 'call_1', output: 'ok' }],
    });
    assert.equal(chained.previousResponseId, 'resp_prev');
    assert.equal(chained.echo.previous_response_id, 'resp_prev');
    // Without input, a chained request is still valid: the previous response is the context.
    assert.deepEqual(decodeResponsesRequest({ model: 'm', previous_response_id: 'resp_prev' }).request.messages, []);
    assert.equal(decodeResponsesRequest({ ...base, conversation: 'conv_1' }).conversation, 'conv_1');
    const conversation = decodeResponsesRequest({ ...base, conversation: { id: 'conv_2' } });
    assert.equal(conversation.conversation, 'conv_2');
    assert.deepEqual(conversation.echo.conversation, { id: 'conv_2' });

    const referenced = decodeResponsesRequest({
      model: 'm',
      instructions: 'Be brief.',
      input: [{ type: 'item_reference', id: 'msg_a_0' }, { role: 'user', content: 'Go on.' }, { id: 'fc_a_1' }],
    });
    assert.deepEqual(referenced.itemReferences, ['msg_a_0', 'fc_a_1']);
    assert.deepEqual(referenced.input[0], { type: 'item_reference', id: 'msg_a_0' });
    assert.deepEqual(referenced.input[2], { type: 'item_reference', id: 'fc_a_1' });
    // The request built here leaves the references out…
    assert.deepEqual(referenced.request.messages, [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Go on.' },
    ]);
    // …and the caller splices the fetched items in at their places.
    const found = new Map<string, ResponsesItem>([
      [
        'msg_a_0',
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Earlier.', annotations: [] }] },
      ],
      ['fc_a_1', { type: 'function_call', call_id: 'call_9', name: 'weather', arguments: '{}' }],
    ]);
    assert.deepEqual(conversationMessages(referenced.instructions, resolveItemReferences(referenced.input, found)), [
      { role: 'system', content: 'Be brief.' },
      { role: 'assistant', content: 'Earlier.' },
      { role: 'user', content: 'Go on.' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'call_9', name: 'weather', arguments: '{}' }] },
    ]);
    assert.throws(
      () => resolveItemReferences(referenced.input, new Map()),
      (error: Error) =>
        error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === 'input[0].id',
    );
    assert.throws(
      () => itemsToMessages(referenced.input),
      (error: Error) => error instanceof CortexError && error.code === 'internal',
    );
  });

  it('responses codec - a stored response (input items + output items) rehydrates into the conversation', () => {
    const previous = decodeResponsesRequest({
      model: 'm',
      instructions: 'Old instructions.',
      input: 'Weather in Paris?',
    });
    const stored = aggregate(scripts.toolCall);
    const next = decodeResponsesRequest({
      model: 'm',
      instructions: 'New instructions.',
      previous_response_id: stored.id,
      input: [...toolResults],
    });
    // Instructions are not inherited: only this request's instructions lead.
    assert.deepEqual(conversationMessages(next.instructions, [...previous.input, ...stored.output, ...next.input]), [
      { role: 'system', content: 'New instructions.' },
      ...toolCallTurns,
    ]);
  });

  it('responses codec - a JSON schema that is not an object or does not compile is a 400 naming it', () => {
    invalid(
      { model: 'm', input: 'hi', text: { format: { type: 'json_schema', name: 'r', schema: true } } },
      'text.format.schema',
      /JSON schema object/,
    );
    invalid(
      { model: 'm', input: 'hi', text: { format: { type: 'json_schema', name: 'r', schema: { type: 'objekt' } } } },
      'text.format.schema',
      /not a valid JSON schema/,
    );
    invalid(
      {
        model: 'm',
        input: 'hi',
        tools: [{ type: 'function', name: 'f', parameters: { type: 'object', minProperties: -1 } }],
      },
      'tools[0].parameters',
    );
  });

  it('responses codec - namespace tools are flattened to their functions; hosted tools are dropped or rejected', () => {
    const body = {
      ...base,
      tools: [
        tool('f'),
        { type: 'web_search', external_web_access: false },
        { type: 'namespace', name: 'ns', description: 'group', tools: [tool('g'), { type: 'custom', name: 'patch' }] },
        { type: 'mcp', server_label: 's' },
      ],
    };
    const decoded = decodeResponsesRequest(body);
    assert.deepEqual(decoded.request.tools, [
      { name: 'f', parameters: { type: 'object' }, strict: true },
      { name: 'g', parameters: { type: 'object' }, strict: true },
    ]);
    assert.deepEqual(decoded.droppedTools, [
      'tools[1] (tool type "web_search")',
      'tools[2].tools[1] (tool type "custom")',
      'tools[3] (tool type "mcp")',
    ]);
    assert.throws(
      () => decodeResponsesRequest(body, { hostedTools: 'reject' }),
      (error: Error) =>
        error instanceof CortexError &&
        error.extra.param === 'tools[1].type' &&
        /"web_search" is not supported/.test(error.message),
    );
  });

  it('responses codec - errors name the field at fault', () => {
    invalid('nope', 'body');
    invalid({ input: 'hi' }, 'model');
    invalid({ model: '', input: 'hi' }, 'model');
    invalid({ model: 'm' }, 'input', /is required/);
    invalid({ model: 'm', input: [{ role: 'tool', content: 'x' }] }, 'input[0].role');
    invalid(
      {
        model: 'm',
        input: [
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'see' },
              { type: 'input_image', image_url: 'ftp://x/y.png' },
            ],
          },
        ],
      },
      'input[0].content[1]',
      /an image URL must be http, https or a base64 data URI/,
    );
    invalid(
      { model: 'm', input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'f' }] }] },
      'input[0].content[0]',
      /takes no audio, files or documents/,
    );
    invalid(
      {
        model: 'm',
        input: [{ type: 'function_call_output', call_id: 'c', output: [{ type: 'input_image', image_url: 'x' }] }],
      },
      'input[0].output[0]',
      /an image URL must be http, https or a base64 data URI/,
    );
    invalid({ model: 'm', input: [{ type: 'web_search_call', id: 'ws_1' }] }, 'input[0].type', /unsupported item type/);
    invalid({ model: 'm', input: [{ type: 'function_call', name: 'f', arguments: '{}' }] }, 'input[0].call_id');
    invalid({ model: 'm', input: [{ content: 'no role' }] }, 'input[0].type');
    invalid({ ...base, background: true, store: false }, 'background', /must be stored/);
    invalid(
      { ...base, previous_response_id: 'resp_1', conversation: 'conv_1' },
      'previous_response_id',
      /conversation/,
    );
    invalid(
      { ...base, tools: [tool('f'), { type: 'namespace', name: 'ns', tools: [tool('f')] }] },
      'tools',
      /two tools are named 'f'/,
    );
    invalid({ ...base, tools: [{ type: 'namespace', name: 'ns' }] }, 'tools[0].tools');
    invalid({ ...base, tools: [{ type: 'function' }] }, 'tools[0].name');
    invalid({ ...base, tools: [tool('f')], tool_choice: { type: 'function', name: 'g' } }, 'tool_choice.name');
    invalid({ ...base, tool_choice: { type: 'web_search_preview' } }, 'tool_choice.type');
    invalid({ ...base, tool_choice: 'sometimes' }, 'tool_choice');
    invalid({ ...base, text: { format: { type: 'json_schema', name: 'a' } } }, 'text.format.schema');
    invalid({ ...base, text: { format: { type: 'yaml' } } }, 'text.format.type');
    invalid({ ...base, temperature: 3 }, 'temperature');
    invalid({ ...base, max_output_tokens: 0 }, 'max_output_tokens');
    invalid({ ...base, top_logprobs: 21 }, 'top_logprobs');
    invalid({ ...base, truncation: 'sometimes' }, 'truncation');
    invalid({ ...base, reasoning: { effort: 'extreme' } }, 'reasoning.effort');
    invalid({ ...base, service_tier: 'gold' }, 'service_tier');
    invalid({ ...base, metadata: { n: 1 } }, 'metadata.n');
    invalid({ ...base, stream_options: { include_obfuscation: true } }, 'stream_options');
    invalid({ ...base, prompt: { id: 'pmpt_1' } }, 'prompt', /not supported/);
  });

  it(
    'responses decoder - logprobs: the include asks for the generated ' +
      "tokens' log-probabilities, top_logprobs for the likeliest too",
    () => {
      const base = { model: 'm', input: 'Hi.' };
      assert.equal(decodeResponsesRequest(base).request.logprobs, undefined);
      assert.equal(decodeResponsesRequest({ ...base, include: ['message.output_text.logprobs'] }).request.logprobs, 0);
      assert.equal(
        decodeResponsesRequest({ ...base, include: ['message.output_text.logprobs'], top_logprobs: 3 }).request
          .logprobs,
        3,
      );
      assert.equal(decodeResponsesRequest({ ...base, top_logprobs: 2 }).request.logprobs, 2);
      assert.equal(decodeResponsesRequest({ ...base, top_logprobs: 2 }).echo.top_logprobs, 2);
    },
  );
});
