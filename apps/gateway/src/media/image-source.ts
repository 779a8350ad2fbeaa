import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';
import { imageSize } from 'image-size';
import { CortexError } from '@cortex/contracts';

/** The image formats a vision model's projector reads (llama.cpp decodes them with stb_image). */
export type ImageType = 'image/png' | 'image/jpeg' | 'image/gif' | 'image/webp';

/** Where one image part's bytes come from, as its dialect gave them. */
export type ImageSource = { kind: 'base64'; data: string; mediaType?: string } | { kind: 'url'; url: string };

/** An image part made canonical: its bytes, their type (read from the bytes), and its size in pixels. */
export interface ResolvedImage {
  mediaType: ImageType;
  bytes: Buffer;
  width: number;
  height: number;
}

/** What one request's images may take (`gateway.images`). */
export interface ImageLimits {
  /** Bytes of one image, decoded. */
  maxBytes: number;
  /** How long fetching one image's URL may take, redirects included. */
  fetchTimeoutMs: number;
  /** Fetch URLs that resolve to loopback, private, link-local or other non-public addresses. */
  allowPrivate: boolean;
}

const MAX_REDIRECTS = 3;

/**
 * An image part's bytes: a data URI or base64 decoded, a URL fetched (http or https only, within the
 * time and size limits, every address it resolves to checked, redirects followed and checked again).
 * The type is read from the bytes, not taken from the client; bytes that are not a PNG, JPEG, GIF or
 * WebP image are refused. Every error is a 400 naming `part` (e.g. `messages[0].content[1]`).
 */
export async function resolveImage(source: ImageSource, part: string, limits: ImageLimits): Promise<ResolvedImage> {
  const bytes =
    source.kind === 'base64' ? decodeBase64(source.data, part, limits) : await fetchImage(source.url, part, limits);
  return readImage(bytes, part);
}

function decodeBase64(data: string, part: string, limits: ImageLimits): Buffer {
  // Three bytes for every four characters: the size is known before anything is decoded.
  if (Math.floor((data.length * 3) / 4) > limits.maxBytes + 2) throw tooLarge(part, limits);
  const cleaned = data.replace(/\s+/g, '');
  if (!/^[A-Za-z0-9+/_-]*={0,2}$/.test(cleaned))
    throw invalid(part, 'its base64 data has characters base64 does not use; send the bytes base64-encoded');
  const bytes = Buffer.from(cleaned, 'base64');
  if (bytes.length > limits.maxBytes) throw tooLarge(part, limits);
  return bytes;
}

/** The type and size in pixels of `bytes`, read from its header; a 400 naming `part` when it is no image we take. */
export function readImage(bytes: Buffer, part: string): ResolvedImage {
  if (bytes.length === 0) throw invalid(part, 'the image is empty');
  const mediaType = sniff(bytes);
  if (!mediaType)
    throw invalid(
      part,
      `the bytes are not a PNG, JPEG, GIF or WebP image (they start ${bytes.subarray(0, 8).toString('hex')})`,
    );
  let size: { width?: number; height?: number };
  try {
    size = imageSize(bytes);
  } catch (error) {
    throw invalid(part, `the ${mediaType} image is corrupt: ${(error as Error).message}`);
  }
  if (!size.width || !size.height) throw invalid(part, `the ${mediaType} image is corrupt: it has no width or height`);
  return { mediaType, bytes, width: size.width, height: size.height };
}

/** The type the first bytes say (magic numbers), not what the client claims. */
function sniff(bytes: Buffer): ImageType | null {
  if (bytes.length >= 8 && bytes.readUInt32BE(0) === 0x89504e47 && bytes.readUInt32BE(4) === 0x0d0a1a0a)
    return 'image/png';
  if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return 'image/jpeg';
  if (bytes.length >= 6 && /^GIF8[79]a$/.test(bytes.subarray(0, 6).toString('latin1'))) return 'image/gif';
  if (
    bytes.length >= 12 &&
    bytes.subarray(0, 4).toString('latin1') === 'RIFF' &&
    bytes.subarray(8, 12).toString('latin1') === 'WEBP'
  )
    return 'image/webp';
  return null;
}

/**
 * The address kinds a URL may resolve to without `allowPrivate`: only public unicast. Loopback,
 * private (RFC 1918, fc00::/7), link-local (cloud metadata at 169.254.169.254 among them), carrier-grade
 * NAT, multicast, unspecified and reserved ranges would let a client make the gateway read its own
 * network.
 */
export function publicAddress(address: string): boolean {
  if (!ipaddr.isValid(address)) return false;
  let parsed = ipaddr.parse(address);
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress())
    parsed = (parsed as ipaddr.IPv6).toIPv4Address();
  return parsed.range() === 'unicast';
}

/**
 * A DNS lookup that refuses a host any of whose addresses is not public: the socket then connects to
 * the very address checked, so a name that answers differently the second time (DNS rebinding) gains
 * nothing. A refusal is an error with the code `CORTEX_ADDRESS_REFUSED` (the MCP client's fetch uses it too).
 */
export function guardedLookup(allowPrivate: boolean): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses: LookupAddress[]) => {
      if (error) return callback(error, '', 4);
      const refused = allowPrivate ? undefined : addresses.find((a) => !publicAddress(a.address));
      if (refused)
        return callback(
          Object.assign(new Error(`${hostname} resolves to ${refused.address}, a non-public address`), {
            code: 'CORTEX_ADDRESS_REFUSED',
          }),
          '',
          4,
        );
      if (options.all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, addresses);
      const first = addresses[0];
      if (!first) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), '', 4);
      callback(null, first.address, first.family);
    });
  };
}

async function fetchImage(url: string, part: string, limits: ImageLimits): Promise<Buffer> {
  const deadline = AbortSignal.timeout(limits.fetchTimeoutMs);
  let target = url;
  for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
    let parsed: URL;
    try {
      parsed = new URL(target);
    } catch {
      throw invalid(part, `its URL is not a valid URL: ${JSON.stringify(target.slice(0, 200))}`);
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')
      throw invalid(part, `its URL must be http, https or a base64 data URI (got ${parsed.protocol})`);
    // A literal address skips the lookup: it is checked here.
    const host = parsed.hostname.replace(/^\[|\]$/g, '');
    if (ipaddr.isValid(host) && !limits.allowPrivate && !publicAddress(host))
      throw invalid(
        part,
        `its URL names ${host}, a non-public address; the gateway fetches public addresses only (gateway.images.allow_private_urls)`,
      );
    const response = await get(parsed, limits, deadline, part);
    const status = response.statusCode ?? 0;
    if (status >= 300 && status < 400 && response.headers.location) {
      response.resume();
      target = new URL(response.headers.location, parsed).toString();
      continue;
    }
    if (status !== 200) {
      response.resume();
      throw invalid(
        part,
        `fetching its URL answered HTTP ${status}; send a URL that answers 200, or the image as base64`,
      );
    }
    return readBody(response, part, limits, deadline);
  }
  throw invalid(part, `its URL redirected more than ${MAX_REDIRECTS} times`);
}

function get(url: URL, limits: ImageLimits, signal: AbortSignal, part: string): Promise<IncomingMessage> {
  const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: 'GET', signal, lookup: guardedLookup(limits.allowPrivate), headers: { accept: 'image/*' } },
      resolve,
    );
    req.on('error', (error: NodeJS.ErrnoException) => reject(fetchError(error, url, part, limits)));
    req.end();
  });
}

function readBody(response: IncomingMessage, part: string, limits: ImageLimits, signal: AbortSignal): Promise<Buffer> {
  const declared = Number(response.headers['content-length']);
  if (Number.isFinite(declared) && declared > limits.maxBytes) {
    response.destroy();
    return Promise.reject(tooLarge(part, limits));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    response.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limits.maxBytes) {
        response.destroy();
        reject(tooLarge(part, limits));
      } else chunks.push(chunk);
    });
    let ended = false;
    response.on('end', () => {
      ended = true;
      resolve(Buffer.concat(chunks));
    });
    // Aborted by the deadline, or the server hung up mid-body: 'error' may or may not come, 'close' does.
    const cut = (why: string): void =>
      reject(signal.aborted ? timedOut(part, limits) : invalid(part, `its URL's body could not be read: ${why}`));
    response.on('error', (error) => cut(error.message));
    response.on('close', () => {
      if (!ended) cut('the connection closed before the end');
    });
  });
}

function fetchError(error: NodeJS.ErrnoException, url: URL, part: string, limits: ImageLimits): CortexError {
  if (error.code === 'CORTEX_ADDRESS_REFUSED')
    return invalid(
      part,
      `its URL's host ${error.message}; the gateway fetches public addresses only (gateway.images.allow_private_urls)`,
    );
  if (error.name === 'AbortError' || error.name === 'TimeoutError') return timedOut(part, limits);
  return invalid(
    part,
    `its URL could not be fetched (${url.host}: ${error.code ?? error.message}); send a reachable URL, or the image as base64`,
  );
}

function timedOut(part: string, limits: ImageLimits): CortexError {
  return invalid(
    part,
    `fetching its URL took longer than ${limits.fetchTimeoutMs} ms (gateway.images.fetch_timeout_ms); send the image as base64`,
  );
}

function tooLarge(part: string, limits: ImageLimits): CortexError {
  return invalid(
    part,
    `the image is larger than ${limits.maxBytes} bytes (gateway.images.max_bytes); send a smaller one`,
  );
}

function invalid(part: string, why: string): CortexError {
  return new CortexError('invalid_request', `${part}: ${why}`, { param: part });
}
