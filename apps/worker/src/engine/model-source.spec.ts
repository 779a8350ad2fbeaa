import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { hubEndpoint, isHubTag, remoteSource, splitParts } from './model-source.js';

describe('model source', () => {
  it('model source - maps hf:<user>/<repo>/<file> onto the hub endpoint the way node-llama-cpp does', () => {
    const source = remoteSource('hf:org/repo-GGUF/sub/model.Q4_K_M.gguf', {});
    assert.deepEqual(source, {
      urls: ['https://huggingface.co/org/repo-GGUF/resolve/main/sub/model.Q4_K_M.gguf'],
      files: ['hf_org_repo-GGUF_model.Q4_K_M.gguf'],
      hub: true,
    });
  });

  it('model source - MODEL_ENDPOINT, then HF_ENDPOINT, point hf: URIs at another hub; #branch picks the branch', () => {
    assert.equal(hubEndpoint({ HF_ENDPOINT: 'http://127.0.0.1:9' }), 'http://127.0.0.1:9/');
    assert.equal(hubEndpoint({ HF_ENDPOINT: 'http://a:1/', MODEL_ENDPOINT: 'http://b:2' }), 'http://b:2/');
    assert.equal(hubEndpoint({ HF_ENDPOINT: 'not a url' }), 'https://huggingface.co/');
    const source = remoteSource('hf:org/repo/m.gguf#dev', { HF_ENDPOINT: 'http://127.0.0.1:9' });
    assert.deepEqual(source?.urls, ['http://127.0.0.1:9/org/repo/resolve/dev/m.gguf']);
    assert.equal(source?.hub, true);
  });

  it('model source - a URL is itself, a hub only on the hub host; a local path, a fixture or a quant tag is no remote file', () => {
    assert.deepEqual(remoteSource('https://example.com/x/m.gguf', {}), {
      urls: ['https://example.com/x/m.gguf'],
      files: ['m.gguf'],
      hub: false,
    });
    assert.equal(remoteSource('https://huggingface.co/o/r/resolve/main/m.gguf', {})?.hub, true);
    assert.equal(remoteSource('/models/m.gguf', {}), null);
    assert.equal(remoteSource('fixture:cortex-chat', {}), null);
    assert.equal(isHubTag('hf:org/repo:Q4_K_M'), true);
    assert.equal(remoteSource('hf:org/repo:Q4_K_M', {}), null);
  });

  it('model source - a split GGUF named by any part is all its parts, first to last', () => {
    assert.deepEqual(splitParts('http://h/m-00002-of-00003.gguf?download=true'), [
      'http://h/m-00001-of-00003.gguf?download=true',
      'http://h/m-00002-of-00003.gguf?download=true',
      'http://h/m-00003-of-00003.gguf?download=true',
    ]);
    assert.deepEqual(remoteSource('hf:o/r/m-00001-of-00002.gguf', {})?.files, [
      'hf_o_r_m-00001-of-00002.gguf',
      'hf_o_r_m-00002-of-00002.gguf',
    ]);
    assert.deepEqual(splitParts('http://h/m.gguf'), ['http://h/m.gguf']);
  });
});
