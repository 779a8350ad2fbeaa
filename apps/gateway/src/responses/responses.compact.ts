import type { FastifyReply, FastifyRequest } from 'fastify';
import { CortexError, decodeCompactionPlan, NO_USAGE, Subjects } from '@cortex/contracts';
import {
  compactionItem,
  compactResource,
  type CompactionSeal,
  decodeResponsesItems,
  sessionFromHeaders,
  type CompactResource,
} from '@cortex/wire';
import { toCortexError } from '../http/error-response.js';
import type { InferenceService } from '../inference/inference.service.js';
import { contextOf } from '../http/request-context.js';

/**
 * `POST /v1/responses/compact`: the translator rebuilds the conversation and splits it; the model that
 * serves `model` writes the summary of the older part (a generation placed like any other); the result
 * is the summary as a compaction item followed by the latest items verbatim. A window with nothing older
 * than its latest user turn gets a compaction item with an empty summary and runs no generation.
 */
export class ResponsesCompactor {
  private readonly seal: CompactionSeal;

  constructor(private readonly inference: InferenceService) {
    this.seal = inference.responses.compactionSeal;
  }

  async compact(req: FastifyRequest, reply: FastifyReply, requestId: string): Promise<CompactResource> {
    const session = sessionFromHeaders(req.headers, this.inference.config.gateway.sessionHeaders);
    const run = this.inference.open('openai.responses', contextOf(req));
    // Listening from the start: a client gone while the translator plans gets no generation either.
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) run.cancel('client disconnected');
    });
    const plan = await this.inference.bus.request(
      Subjects.responsesCompaction,
      { dialect: 'openai.responses', body: req.body, ...(session && { session }) },
      { requestId, decode: readPlan },
    );
    // Nothing older than the latest user turn: the window still gets its compaction item (an empty
    // summary, which later prompts leave out), so a client can always tell a compacted window.
    if (!plan.request) return compactResource(plan.recent, compactionItem('', this.seal), NO_USAGE);
    run.use(plan.request);
    let summary = '';
    let usage = NO_USAGE;
    try {
      for await (const event of await run.start()) {
        if (event.type === 'error') throw CortexError.fromBody(event.error);
        if (event.type === 'text') summary += event.text;
        if (event.type === 'finish') usage = event.usage;
      }
    } catch (thrown) {
      run.fail(toCortexError(thrown), false);
      throw thrown;
    } finally {
      run.finish();
    }
    if (summary.trim().length === 0)
      throw new CortexError(
        'invalid_output',
        `${plan.request.model} wrote an empty summary; try again, or compact with a larger model`,
      );
    return compactResource(plan.recent, compactionItem(summary.trim(), this.seal), usage);
  }
}

/** The translator's plan, the items it keeps read as Responses items (their reader lives beside their type, in @cortex/wire). */
function readPlan(value: unknown) {
  const plan = decodeCompactionPlan(value);
  return { ...plan, recent: decodeResponsesItems(plan.recent, 'recent') };
}
