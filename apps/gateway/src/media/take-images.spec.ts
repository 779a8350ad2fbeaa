import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ImagesConfig } from '@cortex/config';
import { solidPng } from '@cortex/fixtures';
import { CortexError, type CanonicalImage, type CanonicalRequest } from '@cortex/contracts';
import { takeImages } from './take-images.js';

const RED = solidPng(8, 6, [255, 0, 0]);
const BLUE = solidPng(2, 2, [0, 0, 255]);

const request = (...images: Array<Omit<CanonicalImage, 'at' | 'part'>>): CanonicalRequest => ({
  model: 'm',
  messages: [
    { role: 'system', content: 'be brief' },
    {
      role: 'user',
      content: 'compare these',
      images: images.map((image, i) => ({ at: 13, part: `messages[0].content[${i + 1}]`, ...image })),
    },
  ],
  sampling: {},
  stream: false,
});

const caps = (changes: Partial<ImagesConfig> = {}): ImagesConfig =>
  Object.assign(new ImagesConfig(), { allowPrivateUrls: true }, changes);

describe('take images', () => {
  let server: Server;
  let base = '';
  before(async () => {
    server = createServer((req, res) => {
      if (req.url === '/blue.png') res.writeHead(200).end(BLUE);
      else res.writeHead(404).end();
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => new Promise((done) => server.close(done)));

  it('take images - a request without images is returned as it is', async () => {
    const plain = request();
    delete plain.messages[1]?.images;
    assert.equal(await takeImages(plain, caps()), plain);
  });

  it('take images - base64 and URL images become bytes of the type and size read from them, in place', async () => {
    const taken = await takeImages(
      request({ data: RED.toString('base64'), mediaType: 'image/jpeg', detail: 'high' }, { url: `${base}/blue.png` }),
      caps(),
    );
    assert.equal(taken.messages[0]?.images, undefined);
    assert.deepEqual(taken.messages[1]?.images, [
      {
        at: 13,
        part: 'messages[0].content[1]',
        data: RED.toString('base64'),
        mediaType: 'image/png',
        width: 8,
        height: 6,
        detail: 'high',
      },
      {
        at: 13,
        part: 'messages[0].content[2]',
        data: BLUE.toString('base64'),
        mediaType: 'image/png',
        width: 2,
        height: 2,
      },
    ]);
  });

  it('take images - too many images, too many bytes together, and a URL to a private address are 400s naming the part', async () => {
    const refusal = async (work: Promise<unknown>, part: string, why: RegExp): Promise<void> => {
      const error = await work.then(
        () => assert.fail('expected a refusal'),
        (e: unknown) => e,
      );
      assert.ok(error instanceof CortexError && error.status === 400, String(error));
      assert.equal(error.extra.param, part);
      assert.match(error.message, why);
    };
    const red = { data: RED.toString('base64') };
    await refusal(
      takeImages(request(red, red, red), caps({ maxPerRequest: 2 })),
      'messages[0].content[3]',
      /at most 2 images \(gateway\.images\.max_per_request\); this one carries 3/,
    );
    await refusal(
      takeImages(request(red, red), caps({ maxRequestBytes: RED.length + 10 })),
      'messages[0].content[2]',
      /more than \d+ bytes \(gateway\.images\.max_request_bytes\)/,
    );
    await refusal(
      takeImages(request(red, { url: `${base}/blue.png` }), caps({ allowPrivateUrls: false })),
      'messages[0].content[2]',
      /non-public address/,
    );
  });
});
