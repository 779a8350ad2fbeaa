import { BusClient } from '@cortex/bus';
import { Subjects } from '@cortex/contracts';
import { ReasoningSeal, ResponsesAggregator, ResponsesStreamEncoder, type ResponseResource, type ResponsesState } from '@cortex/wire';
import type { DialectAdapter } from '../inference/dialect.js';

/**
 * Responses rendering: numbered events from `response.created` to a terminal event carrying the full
 * resource, or one resource body. The finished response is stored (through the translator, which owns
 * the store) before the client sees it finish, so a follow-up with `previous_response_id` always finds it.
 */
export function responsesAdapter(bus: BusClient, reasoningEvents: 'openai' | 'openresponses', reasoningKey?: string): DialectAdapter {
  const seal = reasoningKey ? new ReasoningSeal(reasoningKey) : undefined;
  const options = (state: unknown) => {
    const s = state as ResponsesState;
    const sealReasoning = seal && s.sealReasoning ? (text: string) => seal.seal(text) : undefined;
    return { id: s.responseId, createdAt: s.createdAt, echo: s.echo, reasoningEvents, ...(sealReasoning && { sealReasoning }), ...(s.toolNamespaces && { toolNamespaces: s.toolNamespaces }) };
  };
  const save = async (state: unknown, resource: ResponseResource): Promise<void> => {
    if ((state as ResponsesState).store) await bus.request(Subjects.responsesStore, { state, resource });
  };
  return {
    dialect: 'openai.responses',
    stream(_request, _meta, state) {
      const encoder = new ResponsesStreamEncoder(options(state));
      return {
        terminator: true,
        frames: (event) => encoder.encode(event),
        errorFrames: (error) => encoder.fail(error),
        settle: () => save(state, encoder.resource()),
      };
    },
    complete(_request, _meta, state) {
      const aggregator = new ResponsesAggregator(options(state));
      return {
        add: (event) => aggregator.add(event),
        body: () => aggregator.body(),
        settle: () => save(state, aggregator.resource()),
      };
    },
  };
}
