import { CortexError, isObject } from '@cortex/contracts';

/** A call waiting for approval, as its `mcp_approval_request` item has it. */
export interface ApprovalRequest {
  readonly id: string;
  readonly serverLabel: string;
  readonly name: string;
  readonly arguments: string;
}

/** An `mcp_approval_response` of a request's input, and the call it answers. */
export interface ApprovalAnswer {
  /** The input item itself: the loop puts the call it let run in its place. */
  readonly item: unknown;
  /** Where it stood (`input[3]`), for errors. */
  readonly param: string;
  readonly approve: boolean;
  readonly reason?: string;
  readonly request: ApprovalRequest;
}

/**
 * The approval responses of a body, each with the request it answers: found among the body's own
 * input items (a client that keeps its history), else in the response the body continues
 * (`previous_response_id`, read with `previous`). One that answers no request is a 400 naming it.
 */
export async function approvalAnswers(
  body: Record<string, unknown>,
  previous: (id: string) => Promise<unknown>,
): Promise<ApprovalAnswer[]> {
  const input = Array.isArray(body.input) ? (body.input as unknown[]) : [];
  const responses = input
    .map((item, i) => ({ item, param: `input[${i}]` }))
    .filter(({ item }) => isObject(item) && item.type === 'mcp_approval_response');
  if (responses.length === 0) return [];
  const requests = new Map<string, ApprovalRequest>();
  const collect = (items: unknown): void => {
    if (!Array.isArray(items)) return;
    for (const item of items) {
      const request = approvalRequestOf(item);
      if (request) requests.set(request.id, request);
    }
  };
  collect(input);
  const previousId = body.previous_response_id;
  if (typeof previousId === 'string' && responses.some(({ item }) => !requests.has(requestIdOf(item)))) {
    const stored = await previous(previousId);
    if (isObject(stored)) collect(stored.output);
  }
  return responses.map(({ item, param }) => {
    const record = item as Record<string, unknown>;
    const id = requestIdOf(item);
    if (!id) invalid(`${param}.approval_request_id`, 'is required');
    if (typeof record.approve !== 'boolean') invalid(`${param}.approve`, 'must be true or false');
    const request = requests.get(id);
    if (!request)
      invalid(
        `${param}.approval_request_id`,
        `'${id}' is no mcp_approval_request of this input or of the previous response`,
      );
    return {
      item,
      param,
      approve: record.approve as boolean,
      ...(typeof record.reason === 'string' && { reason: record.reason }),
      request,
    };
  });
}

function requestIdOf(item: unknown): string {
  return isObject(item) && typeof item.approval_request_id === 'string' ? item.approval_request_id : '';
}

function approvalRequestOf(item: unknown): ApprovalRequest | null {
  if (!isObject(item) || item.type !== 'mcp_approval_request') return null;
  const { id, server_label: label, name } = item;
  if (typeof id !== 'string' || typeof label !== 'string' || typeof name !== 'string') return null;
  return { id, serverLabel: label, name, arguments: typeof item.arguments === 'string' ? item.arguments : '' };
}

function invalid(param: string, message: string): never {
  throw new CortexError('invalid_request', `${param}: ${message}`, { param });
}
