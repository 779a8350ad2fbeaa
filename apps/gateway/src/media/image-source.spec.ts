import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { solidPng } from '@cortex/fixtures';
import { CortexError } from '@cortex/contracts';
import { publicAddress, readImage, resolveImage, type ImageLimits } from './image-source.js';

const PNG = solidPng(4, 3, [255, 0, 0]);
const LIMITS: ImageLimits = { maxBytes: 64 * 1024, fetchTimeoutMs: 2_000, allowPrivate: true };
const PART = 'messages[0].content[1]';

/** The 400 `work` fails with, checked to name the part. */
async function refusal(work: Promise<unknown>): Promise<string> {
  const error = await work.then(
    () => assert.fail('expected a refusal'),
    (e: unknown) => e,
  );
  assert.ok(error instanceof CortexError, String(error));
  assert.equal(error.status, 400);
  assert.equal(error.extra.param, PART);
  assert.ok(error.message.startsWith(`${PART}: `), error.message);
  return error.message;
}

describe('image source', () => {
  it('image source - public addresses are public unicast only', () => {
    const table: Array<[string, boolean]> = [
      ['8.8.8.8', true],
      ['2001:4860:4860::8888', true],
      ['127.0.0.1', false],
      ['::1', false],
      ['10.1.2.3', false],
      ['172.16.0.1', false],
      ['192.168.1.1', false],
      ['169.254.169.254', false],
      ['100.64.0.1', false],
      ['0.0.0.0', false],
      ['fc00::1', false],
      ['fe80::1', false],
      ['::ffff:127.0.0.1', false],
      ['::ffff:8.8.8.8', true],
      ['224.0.0.1', false],
      ['not an address', false],
    ];
    for (const [address, expected] of table) assert.equal(publicAddress(address), expected, address);
  });

  it('image source - base64 bytes are read for their type and size; the type is what the bytes say', async () => {
    const image = await resolveImage(
      { kind: 'base64', data: PNG.toString('base64'), mediaType: 'image/jpeg' },
      PART,
      LIMITS,
    );
    assert.equal(image.mediaType, 'image/png');
    assert.deepEqual([image.width, image.height], [4, 3]);
    assert.deepEqual(image.bytes, PNG);
  });

  it('image source - corrupt, foreign, empty, oversized and malformed base64 images are refused, naming the part', async () => {
    const corrupt = Buffer.concat([PNG.subarray(0, 8), Buffer.from('not a header at all')]);
    assert.match(
      await refusal(resolveImage({ kind: 'base64', data: corrupt.toString('base64') }, PART, LIMITS)),
      /corrupt/,
    );
    assert.match(
      await refusal(
        resolveImage({ kind: 'base64', data: Buffer.from('%PDF-1.7 hello').toString('base64') }, PART, LIMITS),
      ),
      /not a PNG, JPEG, GIF or WebP image/,
    );
    assert.match(await refusal(resolveImage({ kind: 'base64', data: '' }, PART, LIMITS)), /empty/);
    assert.match(
      await refusal(resolveImage({ kind: 'base64', data: PNG.toString('base64') }, PART, { ...LIMITS, maxBytes: 16 })),
      /larger than 16 bytes \(gateway\.images\.max_bytes\)/,
    );
    assert.match(await refusal(resolveImage({ kind: 'base64', data: 'iVBOR*w0KGgo=' }, PART, LIMITS)), /base64/);
  });

  it('image source - the magic numbers of each format are told apart', () => {
    const gif = Buffer.from('R0lGODlhAQABAIAAAP///wAAACwAAAAAAQABAAACAkQBADs=', 'base64');
    assert.equal(readImage(gif, PART).mediaType, 'image/gif');
    const jpeg = Buffer.from(
      [
        '/9j/4AAQSkZJRgABAQEASABIAAD/2wBDAP////////////////////////////////////////////////////////',
        '//////////////////////////////wAALCAABAAEBAREA/8QAFAABAAAAAAAAAAAAAAAAAAAAA//EABQQAQAAAAAA',
        'AAAAAAAAAAAAAAD/2gAIAQEAAD8AN//Z',
      ].join(''),
      'base64',
    );
    assert.equal(readImage(jpeg, PART).mediaType, 'image/jpeg');
    assert.equal(readImage(PNG, PART).mediaType, 'image/png');
  });

  describe('image source - URLs, from a server of the test', () => {
    let server: Server;
    let base = '';
    const hung = new Set<import('node:http').ServerResponse>();
    before(async () => {
      server = createServer((req, res) => {
        if (req.url === '/red.png') return res.writeHead(200, { 'content-type': 'image/png' }).end(PNG);
        if (req.url === '/big.png') return res.writeHead(200, { 'content-length': String(10 * 1024 * 1024) }).end();
        if (req.url === '/endless.png') {
          res.writeHead(200);
          const write = (): void => {
            if (res.write(Buffer.alloc(16 * 1024))) setImmediate(write);
            else res.once('drain', write);
          };
          return write();
        }
        if (req.url === '/hang.png') return hung.add(res);
        if (req.url?.startsWith('/loop')) return res.writeHead(302, { location: '/loop' }).end();
        if (req.url === '/moved.png') return res.writeHead(301, { location: '/red.png' }).end();
        res.writeHead(404).end('no such image');
      });
      await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
      base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    });
    after(async () => {
      for (const res of hung) res.destroy();
      server.closeAllConnections();
      await new Promise((done) => server.close(done));
    });

    it('image source - a URL is fetched and read, redirects followed', async () => {
      const image = await resolveImage({ kind: 'url', url: `${base}/moved.png` }, PART, LIMITS);
      assert.equal(image.mediaType, 'image/png');
      assert.deepEqual(image.bytes, PNG);
    });

    it('image source - a URL to a private address is refused unless allowed, by literal and by name', async () => {
      const strict = { ...LIMITS, allowPrivate: false };
      assert.match(
        await refusal(resolveImage({ kind: 'url', url: `${base}/red.png` }, PART, strict)),
        /non-public address/,
      );
      const port = (server.address() as AddressInfo).port;
      assert.match(
        await refusal(resolveImage({ kind: 'url', url: `http://localhost:${port}/red.png` }, PART, strict)),
        /localhost resolves to .*non-public address/,
      );
    });

    it('image source - too large (declared or streamed), missing, slow, looping and non-http URLs are refused', async () => {
      const small = { ...LIMITS, maxBytes: 100 * 1024 };
      assert.match(await refusal(resolveImage({ kind: 'url', url: `${base}/big.png` }, PART, small)), /larger than/);
      assert.match(
        await refusal(resolveImage({ kind: 'url', url: `${base}/endless.png` }, PART, small)),
        /larger than/,
      );
      assert.match(await refusal(resolveImage({ kind: 'url', url: `${base}/missing.png` }, PART, LIMITS)), /HTTP 404/);
      assert.match(
        await refusal(resolveImage({ kind: 'url', url: `${base}/hang.png` }, PART, { ...LIMITS, fetchTimeoutMs: 200 })),
        /longer than 200 ms/,
      );
      assert.match(
        await refusal(resolveImage({ kind: 'url', url: `${base}/loop` }, PART, LIMITS)),
        /redirected more than/,
      );
      assert.match(
        await refusal(resolveImage({ kind: 'url', url: 'file:///etc/passwd' }, PART, LIMITS)),
        /http, https/,
      );
      assert.match(await refusal(resolveImage({ kind: 'url', url: 'not a url' }, PART, LIMITS)), /not a valid URL/);
    });
  });
});
