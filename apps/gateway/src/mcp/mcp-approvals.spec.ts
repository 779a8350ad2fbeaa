import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { approvalAnswers } from './mcp-approvals.js';

const request = {
  type: 'mcp_approval_request',
  id: 'mcpr_1',
  server_label: 's',
  name: 'echo',
  arguments: '{"message":"hi"}',
};
const answer = (id: string, approve: unknown = true) => ({
  type: 'mcp_approval_response',
  approval_request_id: id,
  approve,
});
const nothingStored = (): Promise<unknown> => assert.fail('the stored response was asked for');

describe('mcp approvals', () => {
  it('mcp approvals - an answer finds its request in the input, else in the response the body continues', async () => {
    assert.deepEqual(await approvalAnswers({ input: 'hi' }, nothingStored), []);
    const inline = answer('mcpr_1');
    const [found] = await approvalAnswers({ input: [request, inline] }, nothingStored);
    assert.equal(found?.item, inline);
    assert.equal(found?.param, 'input[1]');
    assert.deepEqual(found?.request, { id: 'mcpr_1', serverLabel: 's', name: 'echo', arguments: '{"message":"hi"}' });
    const asked: string[] = [];
    const stored = async (id: string): Promise<unknown> => {
      asked.push(id);
      return { output: [{ type: 'message' }, request] };
    };
    const [chained] = await approvalAnswers(
      { previous_response_id: 'resp_1', input: [answer('mcpr_1', false)] },
      stored,
    );
    assert.deepEqual(asked, ['resp_1']);
    assert.equal(chained?.approve, false);
    assert.equal(chained?.request.name, 'echo');
  });

  it('mcp approvals - an answer to no request, or without its fields, is a 400 naming it', async () => {
    const refused = async (body: Record<string, unknown>, param: string, message: RegExp): Promise<void> =>
      assert.rejects(
        approvalAnswers(body, async () => ({ output: [] })),
        (error: Error & { extra?: { param?: string } }) => {
          assert.equal(error.extra?.param, param);
          assert.match(error.message, message);
          return true;
        },
      );
    await refused({ input: [answer('mcpr_2')] }, 'input[0].approval_request_id', /'mcpr_2' is no mcp_approval_request/);
    await refused(
      { previous_response_id: 'resp_1', input: ['x', answer('mcpr_2')] },
      'input[1].approval_request_id',
      /of this input or of the previous response/,
    );
    await refused(
      { input: [{ type: 'mcp_approval_response', approve: true }] },
      'input[0].approval_request_id',
      /required/,
    );
    await refused({ input: [request, answer('mcpr_1', 'yes')] }, 'input[1].approve', /true or false/);
  });
});
