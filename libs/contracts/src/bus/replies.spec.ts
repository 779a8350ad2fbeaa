import 'reflect-metadata';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '../errors/error-codes.js';
import {
  decodeCatalogue,
  decodeDecodedRequest,
  decodeEstimate,
  decodeFleetView,
  decodePlacement,
  decodePullReply,
  decodeReply,
  decodeServicePing,
  decodeTokenCount,
  decodeUnloadResult,
} from './replies.js';
import { upstreamCapabilities, upstreamHost } from '../fleet/upstream.js';

/** The reader throws `invalid_request` whose param is the field at fault. */
function rejects(read: () => unknown, param: string): void {
  assert.throws(
    read,
    (error: Error) => error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === param,
    param,
  );
}

const entry = {
  id: 'm',
  ownedBy: 'cortex',
  created: 1,
  contextSize: 2048,
  pinned: false,
  priority: 0,
  loaded: true,
  locations: [{ workerId: 'w1', state: 'ready', inFlight: 0, queued: 0 }],
  capabilities: null,
};

describe('reply decoders', () => {
  it('reply decoders - an estimate carries the header facts when the worker read them; older workers send bytes alone', () => {
    const facts = {
      architecture: 'llama',
      parameters: 1.5e9,
      quantization: 'MOSTLY_Q4_K_M',
      fileBytes: 1e9,
      trainedContextLength: 32768,
      tools: true,
      reasoning: false,
    };
    assert.deepEqual(decodeEstimate({ bytes: 5, facts }), { bytes: 5, facts });
    assert.deepEqual(decodeEstimate({ bytes: 5 }), { bytes: 5 });
    rejects(() => decodeEstimate({ bytes: 5, facts: { trainedContextLength: 'long' } }), 'facts.trainedContextLength');
    rejects(() => decodeCatalogue([{ ...entry, facts: { tools: 'yes' } }]), 'catalogue[0].facts.tools');
  });

  it('reply decoders - an upstream model names its format, host and fallbacks', () => {
    const remote = {
      ...entry,
      upstream: { api: 'messages', host: 'api.anthropic.com' },
      fallback: ['local-chat'],
      capabilities: upstreamCapabilities({ api: 'messages', reasoning: true, vision: false }),
    };
    assert.deepEqual(decodeCatalogue([remote]), [remote]);
    rejects(() => decodeCatalogue([{ ...remote, upstream: { api: 'grpc', host: 'h' } }]), 'catalogue[0].upstream.api');
    rejects(() => decodeCatalogue([{ ...remote, fallback: [3] }]), 'catalogue[0].fallback[0]');
  });

  it('upstream - its capabilities come from the catalogue; its host is all a person is shown of its URL', () => {
    assert.deepEqual(upstreamCapabilities({ api: 'chat', reasoning: false, vision: true }), {
      tools: true,
      reasoning: false,
      vision: true,
      format: 'upstream chat',
      completions: false,
    });
    assert.equal(upstreamHost('https://user:secret@gpu-box:8080/v1?x=1'), 'gpu-box:8080');
    assert.equal(upstreamHost('not a url'), '');
  });

  it("reply decoders - the router's pull reply is the model and each worker's result", () => {
    const pulled = [{ model: 'm', workerId: 'w1', path: '/models/m.gguf', bytes: 5 }];
    assert.deepEqual(decodePullReply({ model: 'm', pulled }), { model: 'm', pulled });
    rejects(() => decodePullReply({ model: 'm' }), 'pulled');
    rejects(() => decodePullReply({ model: 'm', pulled: [{ ...pulled[0], bytes: 'big' }] }), 'bytes');
  });

  it('reply decoders - the envelope is ok data or an error body', () => {
    assert.deepEqual(decodeReply({ ok: true, data: 3 }), { ok: true, data: 3 });
    assert.deepEqual(decodeReply({ ok: false, error: { code: 'busy', message: 'full' } }), {
      ok: false,
      error: { code: 'busy', message: 'full' },
    });
    rejects(() => decodeReply('nope'), 'reply');
    rejects(() => decodeReply({ ok: 1 }), 'ok');
    rejects(() => decodeReply({ ok: false, error: { message: 'no code' } }), 'error');
  });

  it('reply decoders - good replies come back typed and whole', () => {
    assert.deepEqual(decodePlacement({ model: 'm', workerId: 'w1', coldStart: true }), {
      model: 'm',
      workerId: 'w1',
      coldStart: true,
    });
    assert.deepEqual(decodePlacement({ model: 'm', workerId: 'w1', coldStart: false, reuseMs: 1000 }), {
      model: 'm',
      workerId: 'w1',
      coldStart: false,
      reuseMs: 1000,
    });
    assert.deepEqual(decodeTokenCount({ model: 'm', inputTokens: 12 }), { model: 'm', inputTokens: 12 });
    assert.deepEqual(decodeCatalogue([entry]), [entry]);
    const ping = { service: 'router', id: 'r1', host: 'h', pid: 5, uptimeS: 3, ready: true };
    assert.deepEqual(decodeServicePing(ping), ping);
  });

  it('reply decoders - a bad field is named by its path', () => {
    rejects(() => decodePlacement({ model: 'm', workerId: 'w1' }), 'coldStart');
    rejects(() => decodePlacement({ model: 'm', workerId: 'w1', coldStart: false, reuseMs: 0.5 }), 'reuseMs');
    rejects(() => decodeTokenCount({ model: 'm', inputTokens: -1 }), 'inputTokens');
    rejects(() => decodeUnloadResult({ model: 'm', workerId: 'w', cancelled: 0, reason: 'bored' }), 'reason');
    rejects(
      () =>
        decodeCatalogue([entry, { ...entry, locations: [{ workerId: 'w2', state: 'gone', inFlight: 0, queued: 0 }] }]),
      'catalogue[1].locations[0].state',
    );
    rejects(
      () => decodeCatalogue([{ ...entry, capabilities: { tools: true, reasoning: 'yes', vision: false } }]),
      'catalogue[0].capabilities.reasoning',
    );
    rejects(
      () => decodeDecodedRequest({ request: { model: 'm', messages: [{ role: 'robot', content: '' }] } }),
      'request.messages[0].role',
    );
    rejects(
      () => decodeServicePing({ service: 'router', id: 'r1', host: 'h', pid: 5, uptimeS: 3, ready: 'yes' }),
      'ready',
    );
  });

  it("reply decoders - a fleet view is checked down to its workers' models", () => {
    const worker = {
      workerId: 'w1',
      host: 'h',
      pid: 1,
      up: true,
      draining: false,
      lastSeenMs: 10,
      device: { name: 'cpu', kind: 'cpu', totalBytes: 1, freeBytes: 1 },
      memory: { budgetBytes: 1, usedBytes: 0, freeBytes: 1 },
      models: [{ id: 'm', state: 'ready', inFlight: 0, queued: 0, slots: 1, lastUsedAt: 0 }],
    };
    const fleet = { routerId: 'r1', workers: [worker], catalogue: [entry] };
    assert.deepEqual(decodeFleetView(fleet), fleet);
    rejects(
      () =>
        decodeFleetView({
          ...fleet,
          workers: [{ ...worker, memory: { budgetBytes: 1, usedBytes: '0', freeBytes: 1 } }],
        }),
      'workers[0].memory.usedBytes',
    );
    rejects(
      () => decodeFleetView({ ...fleet, workers: [{ ...worker, models: [{ id: 'm', state: 'asleep' }] }] }),
      'workers[0].models[0].state',
    );
  });
});
