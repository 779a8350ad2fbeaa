import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CortexError } from '@cortex/contracts';
import { parseHubTag, resolveHubTag } from './hub-tag.js';

/** A hub on a real socket: each manifest path answers what `answers` holds (status, body), and every request's headers are kept. */
describe('hub tag', () => {
  let server: Server;
  let endpoint: string;
  let dir: string;
  const answers = new Map<string, [number, string]>();
  const asked: Array<{ path: string; headers: IncomingHttpHeaders }> = [];
  const lines: string[] = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cortex-hub-tag-'));
    server = createServer((req, res) => {
      asked.push({ path: req.url ?? '', headers: req.headers });
      const [status, body] = answers.get(req.url ?? '') ?? [404, 'Entry not found'];
      res.writeHead(status, { 'content-type': 'application/json' }).end(body);
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });

  after(async () => {
    server.closeAllConnections();
    await new Promise((done) => server.close(done));
    await rm(dir, { recursive: true, force: true });
  });

  const options = (over: Partial<Parameters<typeof resolveHubTag>[1]> = {}) => ({
    model: 'tagged',
    modelsDir: dir,
    log: (line: string) => void lines.push(line),
    env: { HF_ENDPOINT: endpoint },
    ...over,
  });
  const manifest = (file: unknown): string => JSON.stringify({ ggufFile: { rfilename: file } });
  const failsWith = (message: RegExp) => (error: unknown) =>
    error instanceof CortexError && error.code === 'model_load_failed' && message.test(error.message);

  it('hub tag - the parts of a tag, `latest` without one; anything else is refused with the form to write', () => {
    assert.deepEqual(parseHubTag('hf:org/models:Q4_K_M'), { user: 'org', repo: 'models', tag: 'Q4_K_M' });
    assert.deepEqual(parseHubTag('hf:org/models'), { user: 'org', repo: 'models', tag: 'latest' });
    assert.throws(() => parseHubTag('hf:org/models:'), failsWith(/is not a hub tag: write hf:<user>\/<repo>:<quant>/));
    assert.throws(() => parseHubTag('hf:org/mo dels:Q4'), failsWith(/is not a hub tag/));
  });

  it('hub tag - asks the manifest as llama.cpp does (its user agent, the token), answers the file it names and remembers it', async () => {
    answers.set('/v2/org/models/manifests/Q4_K_M', [200, manifest('sub/models.Q4_K_M.gguf')]);
    const from = asked.length;
    assert.equal(
      await resolveHubTag('hf:org/models:Q4_K_M', options({ token: 'hf_secret' })),
      'hf:org/models/sub/models.Q4_K_M.gguf',
    );
    const [request] = asked.slice(from);
    assert.equal(request?.path, '/v2/org/models/manifests/Q4_K_M');
    assert.equal(request?.headers['user-agent'], 'llama-cpp');
    assert.equal(request?.headers.authorization, 'Bearer hf_secret');
    assert.equal(
      (await readFile(join(dir, 'hf_org_models_Q4_K_M.tag'), 'utf8')).trim(),
      'hf:org/models/sub/models.Q4_K_M.gguf',
    );
  });

  it('hub tag - a refusal, an unknown tag and a manifest without a GGUF file are errors naming the model and what to do', async () => {
    answers.set('/v2/org/private/manifests/Q4_K_M', [401, '{}']);
    answers.set('/v2/org/odd/manifests/Q4_K_M', [200, manifest('../../etc/passwd.gguf')]);
    answers.set('/v2/org/empty/manifests/Q4_K_M', [200, '{}']);
    await assert.rejects(
      resolveHubTag('hf:org/private:Q4_K_M', options()),
      failsWith(/^tagged: the hub's manifest for hf:org\/private:Q4_K_M .* answered 401: set HF_TOKEN/),
    );
    await assert.rejects(
      resolveHubTag('hf:org/models:Q2_K', options()),
      failsWith(
        /^tagged: .* answered 404: no repository org\/models with a tag Q2_K; check the names, or name the file itself/,
      ),
    );
    await assert.rejects(
      resolveHubTag('hf:org/odd:Q4_K_M', options()),
      failsWith(/names no GGUF file \(ggufFile\.rfilename\)/),
    );
    await assert.rejects(resolveHubTag('hf:org/empty:Q4_K_M', options()), failsWith(/names no GGUF file/));
  });

  it('hub tag - a hub that fails or cannot be reached: the remembered answer stands in only while its file is whole on disk', async () => {
    answers.set('/v2/org/kept/manifests/Q8_0', [200, manifest('kept.Q8_0.gguf')]);
    assert.equal(await resolveHubTag('hf:org/kept:Q8_0', options()), 'hf:org/kept/kept.Q8_0.gguf');
    answers.set('/v2/org/kept/manifests/Q8_0', [503, '{}']);
    // The file it named is not on disk yet: nothing to stand in.
    await assert.rejects(
      resolveHubTag('hf:org/kept:Q8_0', options()),
      failsWith(/answered 503: the hub failed; try again later/),
    );
    await writeFile(join(dir, 'hf_org_kept_kept.Q8_0.gguf'), 'GGUF');
    lines.length = 0;
    assert.equal(await resolveHubTag('hf:org/kept:Q8_0', options()), 'hf:org/kept/kept.Q8_0.gguf');
    assert.match(
      lines.join('\n'),
      /answered 503: .*; loading hf:org\/kept\/kept\.Q8_0\.gguf, which hf:org\/kept:Q8_0 named when it was last asked/,
    );
    // No hub at all (a closed port).
    const closed = createServer();
    await new Promise<void>((done) => closed.listen(0, '127.0.0.1', done));
    const gone = `http://127.0.0.1:${(closed.address() as AddressInfo).port}/`;
    await new Promise((done) => closed.close(done));
    assert.equal(
      await resolveHubTag('hf:org/kept:Q8_0', options({ env: { HF_ENDPOINT: gone } })),
      'hf:org/kept/kept.Q8_0.gguf',
    );
    // A hub that answers "no such tag" is not stood in for: the tag is gone.
    answers.set('/v2/org/kept/manifests/Q8_0', [404, '{}']);
    await assert.rejects(resolveHubTag('hf:org/kept:Q8_0', options()), failsWith(/answered 404/));
  });
});
