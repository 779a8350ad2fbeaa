import { Inject, Injectable } from '@nestjs/common';
import { BusClient } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { Subjects } from '@cortex/contracts';
import type { RequestContext } from '../http/request-context.js';
import { InferenceService } from '../inference/inference.service.js';
import { anthropicMcp, RESPONSES_MCP } from './mcp-dialects.js';
import { McpLoopRun } from './mcp-loop-run.js';
import { McpService } from './mcp.service.js';

/** Makes the runs of requests whose MCP tools the gateway runs, for each route that takes them (HTTP and the WebSocket). */
@Injectable()
export class McpLoops {
  constructor(
    private readonly inference: InferenceService,
    private readonly mcp: McpService,
    private readonly bus: BusClient,
    @Inject(CONFIG) private readonly config: CortexConfig,
  ) {}

  /**
   * A Responses request with `mcp` tools. `local` finds a response the caller holds itself (a
   * WebSocket's latest, which may be unstored) before the store is asked, for the approvals it answers.
   */
  responses(context: RequestContext, local?: (id: string) => unknown): McpLoopRun {
    const stored = (id: string): Promise<unknown> =>
      this.bus.request(Subjects.responsesGet, { id }, { requestId: context.id });
    return new McpLoopRun(
      this.inference,
      context,
      this.mcp,
      this.limits(),
      (id) => {
        const held = local?.(id);
        return held === undefined ? stored(id) : Promise.resolve(held);
      },
      RESPONSES_MCP,
    );
  }

  /** An Anthropic Messages request with `mcp_servers`. */
  messages(context: RequestContext): McpLoopRun {
    return new McpLoopRun(
      this.inference,
      context,
      this.mcp,
      this.limits(),
      () => Promise.reject(new Error('Anthropic messages continue no stored response')),
      anthropicMcp((label) => this.mcp.registeredUrl(label)),
    );
  }

  private limits(): { maxRounds: number; maxOutputBytes: number } {
    const { mcp } = this.config;
    return { maxRounds: mcp.maxRounds, maxOutputBytes: mcp.maxResponseOutputBytes };
  }
}
