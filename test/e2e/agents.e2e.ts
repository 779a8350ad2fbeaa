import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import {
  familyFixture,
  fixtureModel,
  MCP_FAMILY_FIXTURES,
  solidPng,
  VISION_READ_FIXTURE,
  VISION_READ_PATH,
  type FamilyFixture,
} from '@cortex/fixtures';
import { Subjects, type RequestFinishedEvent } from '@cortex/contracts';
import { startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';
import { WEATHER_TOOL } from './weather-mcp.js';

// The real agents, at the versions whose requests are recorded in libs/wire/src/testing/recorded.
const CLAUDE_CODE = '@anthropic-ai/claude-code@2.1.330';
const CODEX = '@openai/codex@0.169.0';
// Outside the checkout, so fresh clones (CI) reuse one install of ~1.2 GB instead of fetching it again.
const AGENTS_DIR = resolve(
  process.env.CORTEX_AGENTS_DIR ?? join(homedir(), '.cache/cortex/agents/claude-code-2.1.330+codex-0.169.0'),
);
const CLAUDE_BIN = join(AGENTS_DIR, 'node_modules/.bin/claude');
const CODEX_BIN = join(AGENTS_DIR, 'node_modules/@openai/codex/bin/codex.js');
// The default catalogue's context: an agent's first turn (70-80 kB) is ~14-22k fixture tokens.
const CONTEXT = 32_768;
const RUN_TIMEOUT_MS = 480_000;
/**
 * By default the agents run exactly as a user would, with their own system prompts and built-in
 * tools (Claude Code's first turn is ~14k fixture tokens; each run took 3-5 s here).
 * `CORTEX_AGENTS_COMPACT=1` gives them short instructions and fewer built-in tools instead, for a
 * quicker loop on a slow machine: the same clients and the same request shapes (mid-conversation
 * system turn, adaptive thinking, `?beta=true`; developer messages, a namespace tool, hosted
 * web_search, store false).
 */
const FULL = process.env.CORTEX_AGENTS_COMPACT !== '1';

const chat = fixtureModel('cortex-chat');
/*
 * The tool round trip: each agent is given a stdio MCP server (weather-mcp.ts) whose get_weather
 * tool it declares to the model under its own name. Claude Code names it `mcp__weather__get_weather`
 * (cortex-tools-mcp calls that); Codex offers it in a `mcp__weather` namespace tool, which cortex
 * flattens to `get_weather` (cortex-tools calls that).
 */
const claudeTools = fixtureModel('cortex-tools-mcp');
const codexTools = fixtureModel('cortex-tools');
const WEATHER_MCP = join(dirname(fileURLToPath(import.meta.url)), 'weather-mcp.js');
/**
 * The same round trip on models people run: family fixtures with their vendors' templates, each
 * writing its family's own call syntax (Harmony, Qwen3-Coder's XML parameters, Devstral's
 * [TOOL_CALLS]). Claude Code gets the `-mcp` variant, which calls Claude's name for the tool.
 */
const FAMILIES: ReadonlyArray<{ claude: FamilyFixture; codex: FamilyFixture }> = MCP_FAMILY_FIXTURES.map((claude) => ({
  claude,
  codex: familyFixture(claude.id.replace(/-mcp$/, '')) as FamilyFixture,
}));

/** Installs the pinned agents once (npm, with their native binaries); later runs reuse the directory. */
async function installAgents(): Promise<void> {
  if (existsSync(CLAUDE_BIN) && existsSync(CODEX_BIN)) return;
  await mkdir(AGENTS_DIR, { recursive: true });
  await promisify(execFile)(
    'npm',
    ['install', '--no-save', '--no-audit', '--no-fund', '--prefix', AGENTS_DIR, CLAUDE_CODE, CODEX],
    { timeout: 300_000 },
  );
  assert.ok(
    existsSync(CLAUDE_BIN) && existsSync(CODEX_BIN),
    `npm installed the agents but ${CLAUDE_BIN} or ${CODEX_BIN} is missing`,
  );
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs an agent to its end (bounded), with a throwaway HOME and nothing inherited but PATH. */
function runAgent(command: string, args: string[], env: Record<string, string>, cwd: string): Promise<Run> {
  return new Promise((resolveRun, reject) => {
    // Its own process group: the codex launcher is a node script whose native child would outlive a
    // kill of the launcher alone and keep the pipes (and this test) open.
    const child = spawn(command, args, {
      cwd,
      env: { PATH: process.env.PATH ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => {
      if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
    }, RUN_TIMEOUT_MS);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolveRun({ code, stdout, stderr });
    });
  });
}

const explain = (run: Run, stack: TestStack) =>
  `exit ${run.code}\nstdout: ${run.stdout.slice(-2000)}\nstderr: ${run.stderr.slice(-2000)}\nstack: ${stack.logs().slice(-3000)}`;

/**
 * `claude -p` and `codex exec` against a stack, each in its own throwaway HOME under `home`; `key` is
 * the API key each presents (the stacks here without keys take any).
 */
function agentRunners(context: () => { stack: TestStack; home: string; key?: string }) {
  const claude = async (
    name: string,
    model: string,
    extraEnv: Record<string, string> = {},
    extraArgs: string[] = [],
  ): Promise<Run> => {
    const dir = join(context().home, name);
    await mkdir(dir, { recursive: true });
    const env = {
      HOME: dir,
      ANTHROPIC_BASE_URL: context().stack.baseUrl,
      ANTHROPIC_API_KEY: context().key ?? 'unused',
      DISABLE_AUTOUPDATER: '1',
      DISABLE_TELEMETRY: '1',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      ...extraEnv,
    };
    const compact = FULL ? [] : ['--system-prompt', 'Answer briefly.', '--tools', ''];
    return runAgent(CLAUDE_BIN, ['-p', 'say hi', '--model', model, ...compact, ...extraArgs], env, dir);
  };

  /** `websocket`: Codex's Responses WebSocket transport (its warm-up, then each turn on the socket) instead of HTTP. */
  const codex = async (name: string, model: string, extraConfig: string[] = [], websocket = false): Promise<Run> => {
    const dir = join(context().home, name);
    const codexHome = join(dir, '.codex');
    await mkdir(codexHome, { recursive: true });
    const config = [
      `model = "${model}"`,
      'model_provider = "cortex"',
      '[model_providers.cortex]',
      'name = "cortex"',
      `base_url = "${context().stack.baseUrl}/v1"`,
      'wire_api = "responses"',
      'env_key = "CORTEX_API_KEY"',
      ...(websocket ? ['supports_websockets = true'] : []),
      '',
    ];
    if (!FULL) {
      await writeFile(join(dir, 'instructions.md'), 'Answer briefly.\n');
      // Top-level keys must come before the first table.
      config.unshift(
        `model_instructions_file = "${join(dir, 'instructions.md')}"`,
        'include_permissions_instructions = false',
        'include_environment_context = false',
        'include_apps_instructions = false',
      );
      // The multi_agent_v1 namespace and the hosted web_search stay: they are what is under test.
      config.push(
        '[features]',
        'goals = false',
        'view_image = false',
        ...(websocket ? ['responses_websockets = true'] : []),
        '',
      );
    } else if (websocket) {
      config.push('[features]', 'responses_websockets = true', '');
    }
    await writeFile(join(codexHome, 'config.toml'), [...config, ...extraConfig].join('\n'));
    const env = { HOME: dir, CODEX_HOME: codexHome, CORTEX_API_KEY: context().key ?? 'unused' };
    // Codex refuses to run outside a trusted directory unless told to skip the check.
    return runAgent(process.execPath, [CODEX_BIN, 'exec', '--skip-git-repo-check', 'say hi'], env, dir);
  };
  return { claude, codex };
}

describe('agents e2e - Claude Code and Codex CLI against the gateway', () => {
  let stack: TestStack;
  let home: string;

  before(async () => {
    await installAgents();
    home = await mkdtemp(join(tmpdir(), 'cortex-agents-'));
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: CONTEXT, pinned: true, slots: 1 },
        { id: 'cortex-tools', file: 'fixture:cortex-tools', context_size: CONTEXT, slots: 1 },
        { id: 'cortex-tools-mcp', file: 'fixture:cortex-tools-mcp', context_size: CONTEXT, slots: 1 },
        {
          id: VISION_READ_FIXTURE.id,
          file: `fixture:${VISION_READ_FIXTURE.id}`,
          mmproj: `fixture:mmproj-${VISION_READ_FIXTURE.id}`,
          context_size: CONTEXT,
          slots: 1,
        },
        ...FAMILIES.flatMap(({ claude, codex }) =>
          [claude, codex].map((fixture) => ({
            id: fixture.id,
            file: `fixture:${fixture.id}`,
            context_size: CONTEXT,
            slots: 1,
          })),
        ),
      ],
    });
  });

  after(async () => {
    await stack?.stop();
    if (home) await rm(home, { recursive: true, force: true });
  });

  const { claude, codex } = agentRunners(() => ({ stack, home }));

  it('agents e2e - claude -p "say hi" prints the model\'s answer', async () => {
    const run = await claude('claude-chat', 'cortex-chat');
    assert.equal(run.code, 0, explain(run, stack));
    assert.match(run.stdout, new RegExp(escape(chat.expected.text)), explain(run, stack));
  });

  it("agents e2e - claude with experimental betas off prints the model's answer", async () => {
    const run = await claude('claude-nobeta', 'cortex-chat', { CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS: '1' });
    assert.equal(run.code, 0, explain(run, stack));
    assert.match(run.stdout, new RegExp(escape(chat.expected.text)), explain(run, stack));
  });

  it("agents e2e - claude runs the MCP tool the model calls and prints the model's answer after the tool result", async () => {
    const calls = join(home, 'claude-weather.log');
    const mcpConfig = join(home, 'claude-mcp.json');
    await writeFile(
      mcpConfig,
      JSON.stringify({ mcpServers: { weather: { command: process.execPath, args: [WEATHER_MCP, calls] } } }),
    );
    // Print mode runs no tool without a permission rule for it.
    // With tool search on (its default), Claude Code sends MCP tools only after a ToolSearch call the
    // fixture never makes; off, it declares them in the request.
    const run = await claude('claude-tools', claudeTools.id, { ENABLE_TOOL_SEARCH: 'false' }, [
      '--mcp-config',
      mcpConfig,
      '--strict-mcp-config',
      '--allowedTools',
      claudeTools.expected.toolCall?.name ?? '',
    ]);
    assert.equal(run.code, 0, explain(run, stack));
    assert.deepEqual(
      await toolCalls(calls),
      [{ name: WEATHER_TOOL, arguments: claudeTools.expected.toolCall?.arguments }],
      explain(run, stack),
    );
    assert.match(run.stdout, new RegExp(escape(claudeTools.expected.afterToolResult?.text ?? '')), explain(run, stack));
  });

  it('agents e2e - claude reads an image file with its Read tool and the vision model answers what the image shows', async () => {
    const red = VISION_READ_FIXTURE.expected.red;
    await writeFile(VISION_READ_PATH, solidPng(32, 32, red.rgb as [number, number, number]));
    const finished = await watchBus<RequestFinishedEvent>(stack.nc, Subjects.requestFinished);
    try {
      const run = await claude('claude-image', VISION_READ_FIXTURE.id, {}, ['--allowedTools', 'Read']);
      assert.equal(run.code, 0, explain(run, stack));
      // The colour is only reachable through the projector: the image reached the model.
      assert.match(run.stdout, new RegExp(escape(red.text)), explain(run, stack));
    } finally {
      await finished.stop();
      await rm(VISION_READ_PATH, { force: true });
    }
    const turns = finished.messages.filter((event) => event.model === VISION_READ_FIXTURE.id && event.status === 200);
    assert.ok(turns.length >= 2, `the call and the answer after it: ${JSON.stringify(turns)}`);
  });

  it('agents e2e - codex exec "say hi" prints the model\'s answer', async () => {
    const run = await codex('codex-chat', 'cortex-chat');
    assert.equal(run.code, 0, explain(run, stack));
    assert.match(run.stdout, new RegExp(escape(chat.expected.text)), explain(run, stack));
  });

  it("agents e2e - codex over the Responses WebSocket: its warm-up and the turn succeed, and it prints the model's answer", async () => {
    const finished = await watchBus<RequestFinishedEvent>(stack.nc, Subjects.requestFinished);
    const run = await codex('codex-ws', 'cortex-chat', [], true);
    await finished.stop();
    assert.equal(run.code, 0, explain(run, stack));
    assert.match(run.stdout, new RegExp(escape(chat.expected.text)), explain(run, stack));
    const seen = finished.messages.map((event) => ({
      status: event.status,
      worker: event.workerId !== null,
      error: event.errorCode ?? null,
    }));
    // The warm-up is the one request no worker ran; before cortex took it, it was a 400 and Codex opened a second socket.
    assert.deepEqual(
      seen.filter((event) => !event.worker),
      [{ status: 200, worker: false, error: null }],
      JSON.stringify(seen),
    );
    assert.ok(
      seen.every((event) => event.status === 200),
      JSON.stringify(seen),
    );
  });

  it("agents e2e - codex runs the MCP tool the model calls and prints the model's answer after the output", async () => {
    const calls = join(home, 'codex-weather.log');
    const run = await codex('codex-tools', codexTools.id, codexWeatherServer(calls));
    assert.equal(run.code, 0, explain(run, stack));
    assert.deepEqual(
      await toolCalls(calls),
      [{ name: WEATHER_TOOL, arguments: codexTools.expected.toolCall?.arguments }],
      explain(run, stack),
    );
    assert.match(run.stdout, new RegExp(escape(codexTools.expected.afterToolResult?.text ?? '')), explain(run, stack));
  });

  for (const { claude: claudeFamily, codex: codexFamily } of FAMILIES) {
    it(`agents e2e - ${claudeFamily.family}: claude and codex run the MCP tool the model calls in its own syntax, then print its answer`, async () => {
      const claudeCalls = join(home, `claude-${claudeFamily.id}.log`);
      const mcpConfig = join(home, `claude-${claudeFamily.id}.json`);
      await writeFile(
        mcpConfig,
        JSON.stringify({ mcpServers: { weather: { command: process.execPath, args: [WEATHER_MCP, claudeCalls] } } }),
      );
      const name = claudeFamily.expected.call.toolCalls?.[0]?.name ?? '';
      const claudeRun = await claude(`claude-${claudeFamily.id}`, claudeFamily.id, { ENABLE_TOOL_SEARCH: 'false' }, [
        '--mcp-config',
        mcpConfig,
        '--strict-mcp-config',
        '--allowedTools',
        name,
      ]);
      assert.equal(claudeRun.code, 0, explain(claudeRun, stack));
      assert.deepEqual(
        await toolCalls(claudeCalls),
        [{ name: WEATHER_TOOL, arguments: { city: 'Paris' } }],
        explain(claudeRun, stack),
      );
      assert.match(
        claudeRun.stdout,
        new RegExp(escape(claudeFamily.expected.afterResult.content)),
        explain(claudeRun, stack),
      );

      const codexCalls = join(home, `codex-${codexFamily.id}.log`);
      const codexRun = await codex(`codex-${codexFamily.id}`, codexFamily.id, codexWeatherServer(codexCalls));
      assert.equal(codexRun.code, 0, explain(codexRun, stack));
      assert.deepEqual(
        await toolCalls(codexCalls),
        [{ name: WEATHER_TOOL, arguments: { city: 'Paris' } }],
        explain(codexRun, stack),
      );
      assert.match(
        codexRun.stdout,
        new RegExp(escape(codexFamily.expected.afterResult.content)),
        explain(codexRun, stack),
      );
    });
  }
});

/** The calls the weather MCP server logged (none: no file). */
async function toolCalls(log: string): Promise<unknown[]> {
  const text = await readFile(log, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as unknown);
}

/** Codex's config for the weather MCP server, logging its calls to `log`. */
function codexWeatherServer(log: string): string[] {
  return [
    '[mcp_servers.weather]',
    `command = ${JSON.stringify(process.execPath)}`,
    `args = ${JSON.stringify([WEATHER_MCP, log])}`,
    // exec never asks for approval, so a tool that needs it fails without running.
    'default_tools_approval_mode = "approve"',
    '',
  ];
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

describe('agents e2e - Claude Code and Codex CLI behind a stored key with limits', () => {
  const ADMIN = 'sk-admin-agents';
  let stack: TestStack;
  let home: string;
  let key: string | undefined;
  const { claude, codex } = agentRunners(() => ({ stack, home, key }));

  before(async () => {
    await installAgents();
    home = await mkdtemp(join(tmpdir(), 'cortex-agents-keys-'));
    stack = await startStack({
      models: [{ id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: CONTEXT, pinned: true, slots: 1 }],
      config: { auth: { admin_keys: [ADMIN] } },
    });
  });

  after(async () => {
    await stack?.stop();
    if (home) await rm(home, { recursive: true, force: true });
  });

  const admin = async (method: string, path: string, body?: unknown): Promise<Record<string, unknown>> => {
    const response = await fetch(`${stack.baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
      ...(body !== undefined && { body: JSON.stringify(body) }),
    });
    const answer = (await response.json()) as Record<string, unknown>;
    assert.equal(response.status, 200, JSON.stringify(answer));
    return answer;
  };
  const createKey = async (body: Record<string, unknown>): Promise<{ id: string; secret: string }> => {
    const made = (await admin('POST', '/admin/keys', body)) as { id: string; secret: string };
    await waitFor(
      async () =>
        (await fetch(`${stack.baseUrl}/v1/models`, { headers: { authorization: `Bearer ${made.secret}` } })).status ===
        200,
      2_000,
      20,
    );
    return made;
  };

  it('agents e2e - both agents answer with a limited, tiered key; every turn (the WebSocket ones too) is charged to it and recorded', async () => {
    const made = await createKey({
      name: 'agents',
      account: 'team-agents',
      tier: 3,
      limits: { requests_per_minute: 100, token_budget: { tokens: 10_000_000 } },
    });
    key = made.secret;
    const claudeRun = await claude('claude-keyed', 'cortex-chat');
    assert.equal(claudeRun.code, 0, explain(claudeRun, stack));
    assert.match(claudeRun.stdout, new RegExp(escape(chat.expected.text)), explain(claudeRun, stack));
    const codexRun = await codex('codex-keyed-ws', 'cortex-chat', [], true);
    assert.equal(codexRun.code, 0, explain(codexRun, stack));
    assert.match(codexRun.stdout, new RegExp(escape(chat.expected.text)), explain(codexRun, stack));
    // The usage records name the key and account, per API; the budget's spend is their sum.
    let rows: Array<{ api: string; requests: number; total_tokens: number }> = [];
    await waitFor(
      async () => {
        rows = (await admin('GET', `/admin/usage?key=${made.id}&group_by=account,key,api`)).data as typeof rows;
        return rows.some((r) => r.api === 'anthropic.messages') && rows.some((r) => r.api === 'openai.responses');
      },
      10_000,
      200,
    );
    const recorded = rows.reduce((sum, r) => sum + r.total_tokens, 0);
    assert.ok(recorded > 0);
    type Shown = { usage?: { token_budget?: { spent: number; reserved: number } } };
    await waitFor(
      async () => ((await admin('GET', `/admin/keys/${made.id}`)) as Shown).usage?.token_budget?.spent === recorded,
      5_000,
      100,
    );
    console.log(
      `claude and codex (WebSocket) behind a tier-3 key: ${rows.map((r) => `${r.api} ${r.requests} requests ${r.total_tokens} tokens`).join(', ')}`,
    );
  });

  it("agents e2e - with the key's budget spent, each agent stops and says so instead of answering (Claude Code with the budget message, Codex as quota exceeded)", async () => {
    const made = await createKey({ name: 'agents-spent', limits: { token_budget: { tokens: 1 } } });
    key = made.secret;
    const spend = await fetch(`${stack.baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${made.secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'cortex-chat', messages: [{ role: 'user', content: 'Hi.' }] }),
    });
    assert.equal(spend.status, 200);
    const budgetMessage = /has used its token budget/;
    const claudeRun = await claude('claude-spent', 'cortex-chat');
    assert.notEqual(claudeRun.code, 0, explain(claudeRun, stack));
    assert.match(claudeRun.stdout + claudeRun.stderr, budgetMessage, explain(claudeRun, stack));
    const codexRun = await codex('codex-spent', 'cortex-chat');
    assert.notEqual(codexRun.code, 0, explain(codexRun, stack));
    // Codex reads the error's code (insufficient_quota) and says so in its own words instead of the message.
    assert.match(codexRun.stdout + codexRun.stderr, /Quota exceeded/, explain(codexRun, stack));
  });
});

describe('agents e2e - Claude Code and Codex CLI on remote models (another cortex as the upstream)', () => {
  const UPSTREAM_KEY = 'sk-agents-upstream';
  let upstream: TestStack;
  let stack: TestStack;
  let home: string;
  const { claude, codex } = agentRunners(() => ({ stack, home }));

  before(async () => {
    await installAgents();
    home = await mkdtemp(join(tmpdir(), 'cortex-agents-remote-'));
    upstream = await startStack({
      models: [claudeTools, codexTools].map((fixture) => ({
        id: fixture.id,
        file: `fixture:${fixture.id}`,
        context_size: CONTEXT,
        pinned: true,
        slots: 1,
      })),
      config: { auth: { api_keys: [UPSTREAM_KEY] } },
    });
    // The front has no GPU worker at all: each agent's model is served by the upstream, in another format
    // than the agent speaks (Claude Code's Messages through Chat Completions, Codex's Responses through Messages).
    const url = `${upstream.baseUrl}/v1`;
    stack = await startStack({
      models: [
        { id: claudeTools.id, upstream: { url, api: 'chat', api_key_env: 'UPSTREAM_KEY' } },
        { id: codexTools.id, upstream: { url, api: 'messages', api_key_env: 'UPSTREAM_KEY' } },
      ],
      serviceEnv: { worker: { CORTEX_WORKER_ENGINE: 'remote', CORTEX_WORKER_ID: 'remote-agents', UPSTREAM_KEY } },
    });
  });

  after(async () => {
    await stack?.stop();
    await upstream?.stop();
    if (home) await rm(home, { recursive: true, force: true });
  });

  it('agents e2e - claude and codex each run the MCP tool a remote model calls and print its answer', async () => {
    const claudeCalls = join(home, 'claude-remote.log');
    const mcpConfig = join(home, 'claude-remote-mcp.json');
    await writeFile(
      mcpConfig,
      JSON.stringify({ mcpServers: { weather: { command: process.execPath, args: [WEATHER_MCP, claudeCalls] } } }),
    );
    const byClaude = await claude('claude-remote', claudeTools.id, { ENABLE_TOOL_SEARCH: 'false' }, [
      '--mcp-config',
      mcpConfig,
      '--strict-mcp-config',
      '--allowedTools',
      claudeTools.expected.toolCall?.name ?? '',
    ]);
    assert.equal(byClaude.code, 0, explain(byClaude, stack));
    assert.deepEqual(
      await toolCalls(claudeCalls),
      [{ name: WEATHER_TOOL, arguments: claudeTools.expected.toolCall?.arguments }],
      explain(byClaude, stack),
    );
    assert.match(
      byClaude.stdout,
      new RegExp(escape(claudeTools.expected.afterToolResult?.text ?? '')),
      explain(byClaude, stack),
    );
    const codexCalls = join(home, 'codex-remote.log');
    const byCodex = await codex('codex-remote', codexTools.id, codexWeatherServer(codexCalls));
    assert.equal(byCodex.code, 0, explain(byCodex, stack));
    assert.deepEqual(
      await toolCalls(codexCalls),
      [{ name: WEATHER_TOOL, arguments: codexTools.expected.toolCall?.arguments }],
      explain(byCodex, stack),
    );
    assert.match(
      byCodex.stdout,
      new RegExp(escape(codexTools.expected.afterToolResult?.text ?? '')),
      explain(byCodex, stack),
    );
  });
});
