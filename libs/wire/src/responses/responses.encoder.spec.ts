import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { StreamEvent } from '@cortex/contracts';
import { ResponsesStreamEncoder } from './responses.encoder.js';
import { outputItemId } from './responses.resource.js';
import { inputItemId, responseIdOfAnyItem } from './responses.state.js';
import { aggregate, encodeAll, encoderOptions, events, finish, scripts, start } from './responses.fixtures.js';
import type { ResponseResource, ResponsesFrame } from './responses.types.js';

const names = (frames: ResponsesFrame[]) => frames.map((frame) => frame.event);
const last = (frames: ResponsesFrame[]) => frames[frames.length - 1]?.data;
const finalResource = (frames: ResponsesFrame[]): ResponseResource => {
  const data = last(frames);
  assert.ok(data && 'response' in data, 'the last frame carries the resource');
  return data.response;
};

const finalUsage = {
  input_tokens: 12,
  input_tokens_details: { cached_tokens: 2 },
  output_tokens: 9,
  output_tokens_details: { reasoning_tokens: 3 },
  total_tokens: 21,
};

describe('responses codec - stream encoding', () => {
  it("responses codec - MCP tools run server-side: the listing, a call's arguments and output, an approval request", () => {
    const call = { id: 'mcp_1', serverLabel: 'everything', name: 'echo', arguments: '{"message":"Paris"}' };
    const frames = encodeAll(
      events(
        start,
        {
          type: 'mcp_list_tools',
          id: 'mcpl_1',
          serverLabel: 'everything',
          tools: [{ name: 'echo', description: 'Echoes', inputSchema: { type: 'object' } }],
        },
        { type: 'mcp_call', phase: 'begun', ...call },
        { type: 'mcp_call', phase: 'ended', ...call, output: 'Echo: Paris' },
        { type: 'mcp_call', phase: 'begun', ...call, id: 'mcp_2' },
        { type: 'mcp_call', phase: 'ended', ...call, id: 'mcp_2', error: 'the tool timed out' },
        { type: 'text', text: 'Done.' },
        { type: 'mcp_approval_request', id: 'mcpr_1', serverLabel: 'everything', name: 'add', arguments: '{}' },
        finish('stop'),
      ),
    );
    assert.deepEqual(names(frames), [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.mcp_list_tools.in_progress',
      'response.mcp_list_tools.completed',
      'response.output_item.done',
      'response.output_item.added',
      'response.mcp_call_arguments.delta',
      'response.mcp_call_arguments.done',
      'response.mcp_call.in_progress',
      'response.mcp_call.completed',
      'response.output_item.done',
      'response.output_item.added',
      'response.mcp_call_arguments.delta',
      'response.mcp_call_arguments.done',
      'response.mcp_call.in_progress',
      'response.mcp_call.failed',
      'response.output_item.done',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.output_item.done',
      'response.completed',
    ]);
    const output = finalResource(frames).output;
    assert.deepEqual(output[0], {
      type: 'mcp_list_tools',
      id: 'mcpl_1',
      server_label: 'everything',
      tools: [{ name: 'echo', description: 'Echoes', input_schema: { type: 'object' } }],
      error: null,
    });
    assert.deepEqual(output[1], {
      type: 'mcp_call',
      id: 'mcp_1',
      server_label: 'everything',
      name: 'echo',
      arguments: '{"message":"Paris"}',
      output: 'Echo: Paris',
      error: null,
      status: 'completed',
    });
    assert.equal(output[2]?.type === 'mcp_call' && output[2].error, 'the tool timed out');
    assert.equal(output[2]?.type === 'mcp_call' && output[2].status, 'failed');
    assert.deepEqual(output[4], {
      type: 'mcp_approval_request',
      id: 'mcpr_1',
      server_label: 'everything',
      name: 'add',
      arguments: '{}',
    });
    // The item is announced without its output, and its arguments come as their own events.
    const added = frames.find(
      (frame) => frame.data.type === 'response.output_item.added' && frame.data.output_index === 1,
    );
    assert.deepEqual(added?.data.type === 'response.output_item.added' && added.data.item, {
      ...output[1],
      arguments: '',
      output: null,
      status: 'in_progress',
    });
  });

  it('responses codec - logprobs ride on each text delta, and the part and its done event hold them all', () => {
    const entry = (token: string, logprob: number) => ({
      token,
      logprob,
      bytes: [...Buffer.from(token)],
      top: [{ token, logprob, bytes: [...Buffer.from(token)] }],
    });
    const frames = encodeAll(
      events(
        start,
        { type: 'text', text: 'Hel', logprobs: [entry('Hel', -0.1)] },
        { type: 'text', text: 'lo', logprobs: [entry('lo', -0.2)] },
        finish('stop'),
      ),
    );
    const deltas = frames.flatMap((frame) =>
      frame.data.type === 'response.output_text.delta' ? [frame.data.logprobs] : [],
    );
    assert.deepEqual(deltas, [
      [
        {
          token: 'Hel',
          logprob: -0.1,
          bytes: [72, 101, 108],
          top_logprobs: [{ token: 'Hel', logprob: -0.1, bytes: [72, 101, 108] }],
        },
      ],
      [
        {
          token: 'lo',
          logprob: -0.2,
          bytes: [108, 111],
          top_logprobs: [{ token: 'lo', logprob: -0.2, bytes: [108, 111] }],
        },
      ],
    ]);
    const done = frames.find((frame) => frame.data.type === 'response.output_text.done')?.data as {
      logprobs: Array<{ token: string }>;
    };
    assert.deepEqual(
      done.logprobs.map((l) => l.token),
      ['Hel', 'lo'],
    );
    const message = finalResource(frames).output[0];
    assert.ok(message?.type === 'message');
    assert.deepEqual(
      message.content[0]?.logprobs?.map((l) => (l as { token: string }).token),
      ['Hel', 'lo'],
    );
  });

  it('responses codec - a text stream: lifecycle, one message item, numbered frames named by their type', () => {
    const frames = encodeAll(scripts.text);
    assert.deepEqual(names(frames), [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    frames.forEach((frame, i) => {
      assert.equal(frame.data.type, frame.event);
      assert.equal(frame.data.sequence_number, i);
    });
    const created = frames[0]?.data;
    assert.ok(created?.type === 'response.created');
    assert.equal(created.response.status, 'in_progress');
    assert.deepEqual(created.response.output, []);
    assert.equal(created.response.usage, null);
    assert.deepEqual(frames[2]?.data, {
      type: 'response.output_item.added',
      output_index: 0,
      item: { type: 'message', id: 'msg_test1_0', status: 'in_progress', role: 'assistant', content: [] },
      sequence_number: 2,
    });
    assert.deepEqual(frames[3]?.data, {
      type: 'response.content_part.added',
      item_id: 'msg_test1_0',
      output_index: 0,
      content_index: 0,
      part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
      sequence_number: 3,
    });
    assert.deepEqual(frames[4]?.data, {
      type: 'response.output_text.delta',
      item_id: 'msg_test1_0',
      output_index: 0,
      content_index: 0,
      delta: 'Hello',
      logprobs: [],
      sequence_number: 4,
    });
    assert.deepEqual(frames[6]?.data, {
      type: 'response.output_text.done',
      item_id: 'msg_test1_0',
      output_index: 0,
      content_index: 0,
      text: 'Hello, world.',
      logprobs: [],
      sequence_number: 6,
    });
    const resource = finalResource(frames);
    assert.equal(resource.status, 'completed');
    assert.equal(resource.completed_at, 1_700_000_005);
    assert.equal(resource.created_at, 1_700_000_000);
    assert.deepEqual(resource.output, [
      {
        type: 'message',
        id: 'msg_test1_0',
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'output_text', text: 'Hello, world.', annotations: [], logprobs: [] }],
      },
    ]);
    assert.deepEqual(resource.usage, finalUsage);
    assert.equal(resource.error, null);
    assert.equal(resource.incomplete_details, null);
    // Snapshots are copies: the created frame still shows the empty resource.
    assert.deepEqual(created.response.output, []);
  });

  it('responses codec - reasoning is a reasoning item; the family option picks the event names only', () => {
    const openai = encodeAll(scripts.reasoning, encoderOptions('openai'));
    const spec = encodeAll(scripts.reasoning, encoderOptions('openresponses'));
    assert.deepEqual(names(openai).slice(2, 8), [
      'response.output_item.added',
      'response.content_part.added',
      'response.reasoning_text.delta',
      'response.reasoning_text.delta',
      'response.reasoning_text.done',
      'response.content_part.done',
    ]);
    assert.deepEqual(names(spec).slice(2, 8), [
      'response.output_item.added',
      'response.content_part.added',
      'response.reasoning.delta',
      'response.reasoning.delta',
      'response.reasoning.done',
      'response.content_part.done',
    ]);
    assert.deepEqual(openai[4]?.data, {
      type: 'response.reasoning_text.delta',
      item_id: 'rs_test1_0',
      output_index: 0,
      content_index: 0,
      delta: 'The user ',
      sequence_number: 4,
    });
    // Same frames otherwise, same resource.
    assert.deepEqual(
      openai.map((frame) => ({ ...frame.data, type: null })),
      spec.map((frame) => ({ ...frame.data, type: null })),
    );
    assert.deepEqual(finalResource(openai).output, [
      {
        type: 'reasoning',
        id: 'rs_test1_0',
        summary: [],
        content: [{ type: 'reasoning_text', text: 'The user greets me.' }],
      },
      {
        type: 'message',
        id: 'msg_test1_1',
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'output_text', text: 'Hi!', annotations: [], logprobs: [] }],
      },
    ]);
  });

  it('responses codec - tool calls: one function_call item per call, arguments streamed then done', () => {
    const frames = encodeAll(scripts.toolCall);
    const calls = frames.filter(
      (frame) =>
        frame.event.startsWith('response.function_call_arguments') ||
        (frame.data.type.startsWith('response.output_item') &&
          'item' in frame.data &&
          frame.data.item.type === 'function_call'),
    );
    assert.deepEqual(
      calls.map((frame) => frame.data),
      [
        {
          type: 'response.output_item.added',
          output_index: 2,
          item: {
            type: 'function_call',
            id: 'fc_test1_2',
            call_id: 'call_1',
            name: 'weather',
            arguments: '',
            status: 'in_progress',
          },
          sequence_number: 14,
        },
        {
          type: 'response.function_call_arguments.delta',
          item_id: 'fc_test1_2',
          output_index: 2,
          delta: '{"city":',
          sequence_number: 15,
        },
        {
          type: 'response.function_call_arguments.delta',
          item_id: 'fc_test1_2',
          output_index: 2,
          delta: ' "Paris"}',
          sequence_number: 16,
        },
        {
          type: 'response.function_call_arguments.done',
          item_id: 'fc_test1_2',
          output_index: 2,
          arguments: '{"city": "Paris"}',
          sequence_number: 17,
        },
        {
          type: 'response.output_item.done',
          output_index: 2,
          item: {
            type: 'function_call',
            id: 'fc_test1_2',
            call_id: 'call_1',
            name: 'weather',
            arguments: '{"city": "Paris"}',
            status: 'completed',
          },
          sequence_number: 18,
        },
        {
          type: 'response.output_item.added',
          output_index: 3,
          item: {
            type: 'function_call',
            id: 'fc_test1_3',
            call_id: 'call_2',
            name: 'weather',
            arguments: '',
            status: 'in_progress',
          },
          sequence_number: 19,
        },
        {
          type: 'response.function_call_arguments.delta',
          item_id: 'fc_test1_3',
          output_index: 3,
          delta: '{"city": "Lyon"}',
          sequence_number: 20,
        },
        {
          type: 'response.function_call_arguments.done',
          item_id: 'fc_test1_3',
          output_index: 3,
          arguments: '{"city": "Lyon"}',
          sequence_number: 21,
        },
        {
          type: 'response.output_item.done',
          output_index: 3,
          item: {
            type: 'function_call',
            id: 'fc_test1_3',
            call_id: 'call_2',
            name: 'weather',
            arguments: '{"city": "Lyon"}',
            status: 'completed',
          },
          sequence_number: 22,
        },
      ],
    );
    const resource = finalResource(frames);
    assert.equal(last(frames)?.type, 'response.completed');
    assert.deepEqual(
      resource.output.map((item) => [item.type, item.id]),
      [
        ['reasoning', 'rs_test1_0'],
        ['message', 'msg_test1_1'],
        ['function_call', 'fc_test1_2'],
        ['function_call', 'fc_test1_3'],
      ],
    );
    assert.deepEqual(resource.tools, [
      {
        type: 'function',
        name: 'weather',
        description: 'Forecast for a city',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        strict: true,
      },
    ]);
    assert.equal(resource.instructions, 'You are terse.');
  });

  it('responses codec - a length finish is response.incomplete with max_output_tokens and an incomplete item', () => {
    const frames = encodeAll(scripts.incomplete);
    assert.deepEqual(names(frames).slice(-2), ['response.output_item.done', 'response.incomplete']);
    const resource = finalResource(frames);
    assert.equal(resource.status, 'incomplete');
    assert.deepEqual(resource.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(resource.completed_at, null);
    assert.equal(resource.output[0]?.type === 'message' && resource.output[0].status, 'incomplete');
    assert.deepEqual(resource.usage, finalUsage);
  });

  it('responses codec - an error event: the open item closes, an error frame, then response.failed', () => {
    const encoder = new ResponsesStreamEncoder(encoderOptions());
    const frames = scripts.error.flatMap((event) => encoder.encode(event));
    assert.deepEqual(names(frames).slice(-4), [
      'response.content_part.done',
      'response.output_item.done',
      'error',
      'response.failed',
    ]);
    const error = frames[frames.length - 2]?.data;
    assert.deepEqual(error, {
      type: 'error',
      code: 'worker_lost',
      message: 'the worker went away',
      param: null,
      error: { type: 'api_error', code: 'worker_lost', message: 'the worker went away', param: null },
      sequence_number: frames.length - 2,
    });
    const resource = finalResource(frames);
    assert.equal(resource.status, 'failed');
    assert.deepEqual(resource.error, { code: 'worker_lost', message: 'the worker went away' });
    assert.equal(resource.output[0]?.type === 'message' && resource.output[0].status, 'incomplete');
    assert.ok(encoder.isEnded);
    assert.deepEqual(encoder.encode({ seq: 9, type: 'text', text: 'late' }), []);
    assert.deepEqual(encoder.resource(), resource);
  });

  it('responses codec - a fallback chosen before the first frame is the model every frame names, the one asked for otherwise', () => {
    let served: string | null = null;
    const encoder = new ResponsesStreamEncoder({ ...encoderOptions(), servedBy: () => served });
    const asked = encoderOptions().echo.model;
    served = 'local-chat';
    const frames = events(start, { type: 'text', text: 'Hi' }, finish('stop')).flatMap((event) =>
      encoder.encode(event),
    );
    const models = frames.flatMap((frame) =>
      frame.data && 'response' in frame.data ? [frame.data.response.model] : [],
    );
    assert.deepEqual(models, ['local-chat', 'local-chat', 'local-chat']);
    assert.equal(encoder.resource().model, 'local-chat');
    const plain = new ResponsesStreamEncoder({ ...encoderOptions(), servedBy: () => null });
    assert.equal(finalResource(events(start, finish('stop')).flatMap((event) => plain.encode(event))).model, asked);
  });

  it('responses codec - a cancelled finish fails the response with code cancelled', () => {
    const resource = finalResource(encodeAll(scripts.cancelled));
    assert.equal(resource.status, 'failed');
    assert.equal(resource.error?.code, 'cancelled');
  });

  it('responses codec - keep-alives send nothing; a stream without start still opens with response.created', () => {
    const encoder = new ResponsesStreamEncoder(encoderOptions());
    assert.deepEqual(encoder.encode({ seq: 0, type: 'keepalive' }), []);
    assert.deepEqual(names(encoder.encode({ seq: 1, type: 'text', text: 'x' })).slice(0, 2), [
      'response.created',
      'response.in_progress',
    ]);
    assert.deepEqual(encoder.encode({ seq: 2, type: 'text', text: '' }), []);

    // An error before any event (e.g. no worker) still makes a well-formed stream.
    const failed = new ResponsesStreamEncoder(encoderOptions()).fail({
      code: 'no_worker',
      message: 'no worker serves local-model',
    });
    assert.deepEqual(names(failed), ['response.created', 'response.in_progress', 'error', 'response.failed']);
  });

  it('responses codec - the aggregator body is the final resource plus output_text', () => {
    for (const name of ['text', 'reasoning', 'toolCall', 'incomplete', 'error'] as const) {
      const frames = encodeAll(scripts[name]);
      const { output_text: text, ...resource } = aggregate(scripts[name]);
      assert.deepEqual(resource, finalResource(frames), name);
      const expected = resource.output
        .flatMap((item) =>
          item.type === 'message' ? item.content.flatMap((part) => ('text' in part ? [part.text] : [])) : [],
        )
        .join('');
      assert.equal(text, expected, name);
    }
    assert.equal(aggregate(scripts.text).output_text, 'Hello, world.');
    assert.equal(aggregate(scripts.toolCall).output_text, 'Let me check.');
  });

  it('responses codec - a late tool_args delta still lands in its own item', () => {
    const list: StreamEvent[] = events(
      start,
      { type: 'tool_call', index: 0, id: 'call_1', name: 'a' },
      { type: 'tool_call', index: 1, id: 'call_2', name: 'b' },
      { type: 'tool_args', index: 0, delta: '{}' },
      finish('tool_calls'),
    );
    const resource = aggregate(list);
    assert.deepEqual(
      resource.output.map((item) => (item.type === 'function_call' ? item.arguments : null)),
      ['{}', ''],
    );
  });

  it('responses codec - input and output item ids name their response', () => {
    assert.equal(outputItemId('resp_abc', 'fc', 3), 'fc_abc_3');
    assert.equal(responseIdOfAnyItem(outputItemId('resp_abc', 'fc', 3)), 'resp_abc');
    assert.equal(responseIdOfAnyItem(outputItemId('resp_0f9e', 'rs', 0)), 'resp_0f9e');
    assert.equal(responseIdOfAnyItem(inputItemId('resp_0f9e', 2)), 'resp_0f9e');
    assert.equal(responseIdOfAnyItem('call_abc_1'), undefined, 'a client-made id names no response');
    assert.equal(responseIdOfAnyItem('something'), undefined);
  });
});
