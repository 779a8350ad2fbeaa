/**
 * A stdio MCP server with one tool, `get_weather({city})`, that the agents e2e gives Claude Code and
 * Codex: the tool the cortex-tools fixture calls becomes one the agent really declares and runs.
 * MCP's stdio transport is JSON-RPC 2.0, one message per line; this answers only what an agent asks
 * of a tools-only server. Run as `node weather-mcp.js [calls.log]`: each call's arguments are appended
 * to the log as a JSON line, the test's evidence that the agent really ran the tool.
 */
import { appendFileSync } from 'node:fs';
import { createInterface } from 'node:readline';

export const WEATHER_TOOL = 'get_weather';
/** What a call returns; the agent passes it back to the model as the tool result. */
export const WEATHER_REPORT = 'Sunny in Paris, 21 degrees.';

interface Message {
  jsonrpc: '2.0';
  id?: number | string;
  method?: string;
  params?: { name?: string; arguments?: { city?: unknown }; protocolVersion?: string };
}

const tool = {
  name: WEATHER_TOOL,
  description: 'Current weather for a city.',
  inputSchema: {
    type: 'object',
    properties: { city: { type: 'string', description: 'City name' } },
    required: ['city'],
    additionalProperties: false,
  },
};

function result(message: Message): unknown {
  switch (message.method) {
    case 'initialize':
      return {
        // Echo the client's version: this server uses nothing that differs between versions.
        protocolVersion: message.params?.protocolVersion ?? '2025-06-18',
        capabilities: { tools: { listChanged: false } },
        serverInfo: { name: 'weather', version: '1.0.0' },
      };
    case 'ping':
      return {};
    case 'tools/list':
      return { tools: [tool] };
    case 'tools/call': {
      const log = process.argv[2];
      if (log)
        appendFileSync(
          log,
          JSON.stringify({ name: message.params?.name, arguments: message.params?.arguments }) + '\n',
        );
      const city = message.params?.arguments?.city;
      if (message.params?.name !== WEATHER_TOOL || typeof city !== 'string') {
        return { content: [{ type: 'text', text: 'unknown tool or missing city' }], isError: true };
      }
      return { content: [{ type: 'text', text: city === 'Paris' ? WEATHER_REPORT : `No report for ${city}.` }] };
    }
    default:
      return undefined;
  }
}

function reply(line: string): void {
  let message: Message;
  try {
    message = JSON.parse(line) as Message;
  } catch {
    process.stdout.write(
      JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'parse error' } }) + '\n',
    );
    return;
  }
  if (message.id === undefined) return; // a notification (notifications/initialized): nothing to answer
  const body = result(message);
  const response =
    body === undefined
      ? { jsonrpc: '2.0', id: message.id, error: { code: -32601, message: `method not found: ${message.method}` } }
      : { jsonrpc: '2.0', id: message.id, result: body };
  process.stdout.write(JSON.stringify(response) + '\n');
}

if (process.argv[1]?.endsWith('weather-mcp.js')) {
  createInterface({ input: process.stdin }).on('line', (line) => {
    if (line.trim()) reply(line);
  });
}
