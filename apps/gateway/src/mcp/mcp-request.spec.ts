import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mcpToolsOf, needsApproval, type ApprovalRule } from './mcp-request.js';

const fn = { type: 'function', name: 'lookup', parameters: { type: 'object' } };

describe('mcp request', () => {
  it('mcp request - the mcp tools of a body, read; every other tool left as it was', () => {
    assert.equal(mcpToolsOf({ tools: [fn] }), null);
    assert.equal(mcpToolsOf({ input: 'hi' }), null);
    const everything = { type: 'mcp', server_label: 'everything', require_approval: 'never', allowed_tools: ['echo'] };
    const remote = {
      type: 'mcp',
      server_label: 'remote',
      server_url: 'https://mcp.example.com/mcp',
      require_approval: { never: { tool_names: ['a'] } },
    };
    const tools = mcpToolsOf({ tools: [fn, everything, remote] });
    assert.deepEqual(tools?.others, [fn]);
    assert.deepEqual(tools?.servers, [
      { param: 'tools[1]', serverLabel: 'everything', spec: everything, approval: 'never' },
      { param: 'tools[2]', serverLabel: 'remote', spec: remote, approval: { always: null, never: ['a'] } },
    ]);
    // OpenAI's default: every call waits for approval.
    assert.equal(mcpToolsOf({ tools: [{ type: 'mcp', server_label: 's' }] })?.servers[0]?.approval, 'always');
  });

  it('mcp request - what is refused names the field', () => {
    const refused = (tool: Record<string, unknown>, param: string, message: RegExp): void =>
      assert.throws(
        () => mcpToolsOf({ tools: [fn, { type: 'mcp', ...tool }] }),
        (error: Error & { extra?: { param?: string } }) => {
          assert.equal(error.extra?.param, param);
          assert.match(error.message, message);
          return true;
        },
      );
    refused({}, 'tools[1].server_label', /1-64 letters/);
    refused({ server_label: 'a b' }, 'tools[1].server_label', /1-64 letters/);
    refused({ server_label: 's', connector_id: 'connector_gmail' }, 'tools[1].connector_id', /connectors/);
    refused({ server_label: 's', require_approval: 'sometimes' }, 'tools[1].require_approval', /'always', 'never'/);
    assert.throws(
      () =>
        mcpToolsOf({
          tools: [
            { type: 'mcp', server_label: 's' },
            { type: 'mcp', server_label: 's' },
          ],
        }),
      /tools\[1\]\.server_label: 's' is named by another mcp tool/,
    );
  });

  it('mcp request - which calls wait for approval', () => {
    const table: ReadonlyArray<[ApprovalRule, string, boolean]> = [
      ['always', 'echo', true],
      ['never', 'echo', false],
      [{ always: null, never: ['echo'] }, 'echo', false],
      [{ always: null, never: ['echo'] }, 'add', true],
      [{ always: ['add'], never: null }, 'add', true],
      // A tool under neither list waits: approval is the safe default.
      [{ always: ['add'], never: null }, 'echo', true],
    ];
    for (const [rule, tool, waits] of table)
      assert.equal(needsApproval(rule, tool), waits, JSON.stringify([rule, tool]));
  });
});
