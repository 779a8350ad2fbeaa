import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { RequestFinishedEvent } from '@cortex/contracts';
import { CortexMetrics } from './request.metrics.js';

const finished = (requestId: string, queueMs: number, tier?: number): RequestFinishedEvent => ({
  requestId,
  model: 'm',
  workerId: 'w1',
  dialect: 'openai.chat',
  stream: true,
  status: 200,
  errorCode: null,
  finishReason: 'stop',
  usage: { promptTokens: 3, cachedPromptTokens: 0, completionTokens: 4, reasoningTokens: 0 },
  timings: { ttftMs: 1, promptMs: 1, decodeTokensPerSecond: 10, durationMs: 5, queueMs },
  durationMs: 6,
  coldStart: false,
  placeMs: 1,
  finishedAt: 1,
  ...(tier !== undefined && { tier }),
});

describe('request metrics', () => {
  it('request metrics - MCP tool calls by server, tool and outcome; past 512 pairs a new one is counted as other', async () => {
    const metrics = new CortexMetrics();
    const call = (server: string, tool: string, outcome: 'ok' | 'timeout', durationMs: number) =>
      metrics.recordMcpCall({ requestId: 'r', server, tool, outcome, durationMs, at: 1 });
    call('docs', 'search', 'ok', 200);
    call('docs', 'search', 'timeout', 1_500);
    for (let i = 0; i < 511; i++) call('many', `tool_${i}`, 'ok', 1);
    call('late', 'one', 'ok', 1);
    call('docs', 'search', 'ok', 100);
    const text = await metrics.registry.metrics();
    assert.match(text, /^cortex_mcp_tool_calls_total\{server="docs",tool="search",outcome="ok"\} 2$/m);
    assert.match(text, /^cortex_mcp_tool_calls_total\{server="docs",tool="search",outcome="timeout"\} 1$/m);
    assert.match(text, /^cortex_mcp_tool_call_seconds_sum\{server="docs",tool="search"\} 1\.8$/m);
    assert.match(text, /^cortex_mcp_tool_calls_total\{server="other",tool="other",outcome="ok"\} 1$/m);
    assert.doesNotMatch(text, /server="late"/);
  });

  it('request metrics - queue wait is counted by the tier each request ran at; events without a tier only in the total', async () => {
    const metrics = new CortexMetrics();
    metrics.recordRequest(finished('a', 2_000, 7));
    metrics.recordRequest(finished('b', 20, 7));
    metrics.recordRequest(finished('c', 3_000, 0));
    metrics.recordRequest(finished('d', 10));
    const text = await metrics.registry.metrics();
    assert.match(text, /^cortex_request_queue_tier_seconds_count\{model="m",tier="7"\} 2$/m);
    assert.match(text, /^cortex_request_queue_tier_seconds_sum\{model="m",tier="7"\} 2\.02$/m);
    assert.match(text, /^cortex_request_queue_tier_seconds_count\{model="m",tier="0"\} 1$/m);
    assert.match(text, /^cortex_request_queue_tier_seconds_bucket\{le="0.025",model="m",tier="7"\} 1$/m);
    assert.match(text, /^cortex_request_queue_seconds_count\{model="m",worker="w1"\} 4$/m);
  });

  it('request metrics - prompt tokens reused: all cached ones, and those restored from the prompt cache beyond the slots', async () => {
    const metrics = new CortexMetrics();
    const usage = (cached: number, restored?: number): RequestFinishedEvent => ({
      ...finished('r', 1),
      usage: {
        promptTokens: 900,
        cachedPromptTokens: cached,
        ...(restored !== undefined && { restoredPromptTokens: restored }),
        completionTokens: 4,
        reasoningTokens: 0,
      },
    });
    metrics.recordRequest(usage(800));
    metrics.recordRequest(usage(700, 700));
    metrics.recordRequest(usage(0));
    const text = await metrics.registry.metrics();
    assert.match(text, /^cortex_prompt_tokens_total\{model="m",api="openai.chat"\} 2700$/m);
    assert.match(text, /^cortex_cached_prompt_tokens_total\{model="m"\} 1500$/m);
    assert.match(text, /^cortex_restored_prompt_tokens_total\{model="m"\} 700$/m);
  });

  it(
    "request metrics - a gateway's refusals: what grew since its " +
      'last status, by reason; a restarted gateway counts from 0 again',
    async () => {
      const metrics = new CortexMetrics();
      const status = (instance: string, refusals: Record<string, number>) => ({
        service: 'gateway',
        instance,
        connected: true,
        reconnects: 0,
        intervalMs: 5_000,
        refusals,
      });
      metrics.recordBus(status('g1', { too_many_uploads: 3 }));
      metrics.recordBus(status('g1', { too_many_uploads: 5, ws_rate: 1 }));
      metrics.recordBus(status('g2', { too_many_uploads: 2 }));
      // g1 restarted under the same name: its counts start again.
      metrics.recordBus(status('g1', { too_many_uploads: 1 }));
      const text = await metrics.registry.metrics();
      assert.match(text, /^cortex_gateway_refusals_total\{reason="too_many_uploads"\} 8$/m);
      assert.match(text, /^cortex_gateway_refusals_total\{reason="ws_rate"\} 1$/m);
    },
  );

  it("request metrics - the fleet's verdict: 1 for the one it is now, 0 for the others, and the models nothing can serve", async () => {
    const metrics = new CortexMetrics();
    metrics.recordHealth({
      status: 'degraded',
      reasons: ['x'],
      unservable: ['a', 'b'],
      workers: { up: 0, down: 1, draining: 0 },
    });
    let text = await metrics.registry.metrics();
    assert.match(text, /^cortex_fleet_health\{status="degraded"\} 1$/m);
    assert.match(text, /^cortex_fleet_health\{status="ok"\} 0$/m);
    assert.match(text, /^cortex_fleet_unservable_models 2$/m);
    metrics.recordHealth({ status: 'ok', reasons: [], unservable: [], workers: { up: 1, down: 0, draining: 0 } });
    text = await metrics.registry.metrics();
    assert.match(text, /^cortex_fleet_health\{status="ok"\} 1$/m);
    assert.match(text, /^cortex_fleet_health\{status="degraded"\} 0$/m);
    assert.match(text, /^cortex_fleet_health\{status="impaired"\} 0$/m);
    assert.match(text, /^cortex_fleet_unservable_models 0$/m);
  });
});
