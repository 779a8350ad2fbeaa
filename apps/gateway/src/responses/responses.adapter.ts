import { BusClient } from '@cortex/bus';
import type { CortexConfig } from '@cortex/config';
import { decodeStored, Subjects, type ErrorBody } from '@cortex/contracts';
import {
  ReasoningSeal,
  responsesErrorPayload,
  ResponsesAggregator,
  ResponsesStreamEncoder,
  type ResponseResource,
  type ResponsesFrame,
  type ResponsesState,
} from '@cortex/wire';
import type { DialectAdapter, ResponseMeta } from '../inference/dialect.js';
import { responsesStateOf } from './responses.state.js';

/** The adapter as `config.responses` sets it up. */
export function responsesAdapterFor(bus: BusClient, config: CortexConfig): DialectAdapter {
  return responsesAdapter(bus, config.responses.reasoningEvents, config.responses.reasoningKey);
}

/**
 * Responses rendering: numbered events from `response.created` to a terminal event carrying the full
 * resource, or one resource body. The finished response is stored (through the translator, which owns
 * the store) before the client sees it finish, so a follow-up with `previous_response_id` always finds it.
 */
function responsesAdapter(
  bus: BusClient,
  reasoningEvents: 'openai' | 'openresponses',
  reasoningKey?: string,
): DialectAdapter {
  const seal = reasoningKey ? new ReasoningSeal(reasoningKey) : undefined;
  const options = (state: ResponsesState, meta: ResponseMeta) => {
    const sealReasoning = seal && state.sealReasoning ? (text: string) => seal.seal(text) : undefined;
    return {
      id: state.responseId,
      createdAt: state.createdAt,
      echo: state.echo,
      reasoningEvents,
      ...(sealReasoning && { sealReasoning }),
      ...(state.toolNamespaces && { toolNamespaces: state.toolNamespaces }),
      ...(meta.servedBy && { servedBy: meta.servedBy }),
    };
  };
  const save = async (state: ResponsesState, resource: ResponseResource): Promise<void> => {
    if (state.store) await bus.request(Subjects.responsesStore, { state, resource }, { decode: decodeStored });
  };
  return {
    dialect: 'openai.responses',
    stream(_request, meta, decoded) {
      const state = responsesStateOf(decoded);
      const encoder = new ResponsesStreamEncoder(options(state, meta));
      // The final event's frames, rendered but held back until the response is stored.
      let last: ResponsesFrame[] = [];
      return {
        terminator: true,
        frames: (event) => (last = encoder.encode(event)),
        errorFrames: (error) => (encoder.isEnded ? failInstead(last, error) : encoder.fail(error)),
        settle: () => save(state, encoder.resource()),
      };
    },
    complete(_request, meta, decoded) {
      const state = responsesStateOf(decoded);
      const aggregator = new ResponsesAggregator(options(state, meta));
      return {
        add: (event) => aggregator.add(event),
        body: () => aggregator.body(),
        settle: () => save(state, aggregator.resource()),
      };
    },
  };
}

/**
 * The stream had finished but storing the response failed (the translator is gone), so its terminal
 * frame was never sent: send the frames before it, then `error` and `response.failed` in its place,
 * numbered on from where it stood. A client that then reads the response by id would not find it,
 * so `response.completed` would be a lie.
 */
function failInstead(held: ResponsesFrame[], error: ErrorBody): ResponsesFrame[] {
  const terminal = held.at(-1)?.data;
  if (!terminal || !('response' in terminal)) return [];
  const sequence = terminal.sequence_number;
  const response: ResponseResource = {
    ...terminal.response,
    status: 'failed',
    completed_at: null,
    incomplete_details: null,
    error: { code: error.code, message: error.message },
  };
  return [
    ...held.slice(0, -1),
    {
      event: 'error',
      data: {
        type: 'error',
        code: error.code,
        message: error.message,
        param: error.param ?? null,
        error: responsesErrorPayload(error),
        sequence_number: sequence,
      },
    },
    { event: 'response.failed', data: { type: 'response.failed', response, sequence_number: sequence + 1 } },
  ];
}
