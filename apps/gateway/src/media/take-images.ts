import { CortexError, requestImages, type CanonicalImage, type CanonicalRequest } from '@cortex/contracts';
import type { ImagesConfig } from '@cortex/config';
import { resolveImage, type ImageSource, type ResolvedImage } from './image-source.js';

/**
 * The request with every image read, for a model that takes images: URLs fetched, base64 decoded,
 * each checked for its type, size and address (see resolveImage), all of them within the request's
 * bounds (`gateway.images`). A worker then gets only bytes of a known type and size. Errors are 400s
 * naming the image's part.
 */
export async function takeImages(request: CanonicalRequest, caps: ImagesConfig): Promise<CanonicalRequest> {
  const images = requestImages(request);
  if (images.length === 0) return request;
  const over = images[caps.maxPerRequest];
  if (over)
    throw new CortexError(
      'invalid_request',
      `${over.part}: a request may carry at most ${caps.maxPerRequest} images ` +
        `(gateway.images.max_per_request); this one carries ${images.length}`,
      { param: over.part },
    );
  const limits = { maxBytes: caps.maxBytes, fetchTimeoutMs: caps.fetchTimeoutMs, allowPrivate: caps.allowPrivateUrls };
  const read = await Promise.all(images.map((image) => resolveImage(sourceOf(image), image.part, limits)));
  let total = 0;
  read.forEach((image, i) => {
    total += image.bytes.length;
    const part = images[i]?.part ?? '';
    if (total > caps.maxRequestBytes)
      throw new CortexError(
        'invalid_request',
        `${part}: the request's images come to more than ${caps.maxRequestBytes} bytes ` +
          '(gateway.images.max_request_bytes); send fewer or smaller images',
        { param: part },
      );
  });
  const byPart = new Map(images.map((image, i) => [image, read[i] as ResolvedImage]));
  return {
    ...request,
    messages: request.messages.map((message) =>
      message.images ? { ...message, images: message.images.map((image) => taken(image, byPart.get(image))) } : message,
    ),
  };
}

function sourceOf(image: CanonicalImage): ImageSource {
  if (image.url !== undefined) return { kind: 'url', url: image.url };
  return { kind: 'base64', data: image.data ?? '', ...(image.mediaType && { mediaType: image.mediaType }) };
}

function taken(image: CanonicalImage, read: ResolvedImage | undefined): CanonicalImage {
  if (!read) return image;
  const { at, part, detail } = image;
  return {
    at,
    part,
    data: read.bytes.toString('base64'),
    mediaType: read.mediaType,
    width: read.width,
    height: read.height,
    ...(detail && { detail }),
  };
}
