import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '@cortex/contracts';
import {
  ANTHROPIC_MCP_FIELDS,
  anthropicMcpServersOf,
  mcpToolsOf,
  needsApproval,
  type ApprovalRule,
} from './mcp-request.js';

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

  it('mcp request - Anthropic mcp_servers: registered by name or its own URL, a token as bearer header, toolsets as filters', () => {
    const registered = (label: string): string | null => (label === 'docs' ? 'https://docs.example.com/mcp' : null);
    const custom = { name: 'lookup', input_schema: { type: 'object' } };
    const { servers, others } = anthropicMcpServersOf(
      {
        mcp_servers: [
          { type: 'url', name: 'docs', url: 'https://docs.example.com/mcp' },
          { type: 'url', name: 'remote', url: 'https://mcp.example.com/mcp', authorization_token: 't0ken' },
          { type: 'url', name: 'old', tool_configuration: { allowed_tools: ['a', 'b'] } },
          { type: 'url', name: 'off', tool_configuration: { enabled: false } },
        ],
        tools: [
          custom,
          { type: 'mcp_toolset', mcp_server_name: 'docs', configs: { drop: { enabled: false } } },
          {
            type: 'mcp_toolset',
            mcp_server_name: 'remote',
            default_config: { enabled: false },
            configs: { x: { enabled: true } },
          },
        ],
      },
      registered,
    );
    assert.deepEqual(others, [custom]);
    assert.deepEqual(
      servers.map(({ param, serverLabel, spec, approval, denied, fields }) => ({
        param,
        serverLabel,
        spec,
        approval,
        denied,
        fields,
      })),
      [
        {
          param: 'mcp_servers[0]',
          serverLabel: 'docs',
          spec: { server_label: 'docs' },
          approval: 'never',
          denied: new Set(['drop']),
          fields: ANTHROPIC_MCP_FIELDS,
        },
        {
          param: 'mcp_servers[1]',
          serverLabel: 'remote',
          spec: {
            server_label: 'remote',
            server_url: 'https://mcp.example.com/mcp',
            headers: { authorization: 'Bearer t0ken' },
            allowed_tools: ['x'],
          },
          approval: 'never',
          denied: undefined,
          fields: ANTHROPIC_MCP_FIELDS,
        },
        {
          param: 'mcp_servers[2]',
          serverLabel: 'old',
          spec: { server_label: 'old', allowed_tools: ['a', 'b'] },
          approval: 'never',
          denied: undefined,
          fields: ANTHROPIC_MCP_FIELDS,
        },
        {
          param: 'mcp_servers[3]',
          serverLabel: 'off',
          spec: { server_label: 'off', allowed_tools: [] },
          approval: 'never',
          denied: undefined,
          fields: ANTHROPIC_MCP_FIELDS,
        },
      ],
    );
  });

  it('mcp request - Anthropic mcp_servers: what is refused names the field', () => {
    const refused = (body: Record<string, unknown>, param: string): void =>
      assert.throws(
        () => anthropicMcpServersOf(body, () => null),
        (error: unknown) =>
          error instanceof CortexError && error.extra.param === param && error.message.startsWith(`${param}: `),
        param,
      );
    refused({ mcp_servers: [{ type: 'stdio', name: 'a' }] }, 'mcp_servers[0].type');
    refused({ mcp_servers: [{ type: 'url', name: 'a b' }] }, 'mcp_servers[0].name');
    refused({ mcp_servers: [{ name: 'a' }, { name: 'a' }] }, 'mcp_servers[1].name');
    refused({ mcp_servers: [{ name: 'a', authorization_token: 5 }] }, 'mcp_servers[0].authorization_token');
    refused(
      { mcp_servers: [{ name: 'a', tool_configuration: { allowed_tools: 'x' } }] },
      'mcp_servers[0].tool_configuration.allowed_tools',
    );
    refused(
      { mcp_servers: [{ name: 'a' }], tools: [{ type: 'mcp_toolset', mcp_server_name: 'b' }] },
      'tools[0].mcp_server_name',
    );
    refused(
      {
        mcp_servers: [{ name: 'a' }],
        tools: [{ type: 'mcp_toolset', mcp_server_name: 'a', configs: { t: { enabled: 'no' } } }],
      },
      'tools[0].configs.t.enabled',
    );
  });
});
