import {
  fail,
  object,
  optionalString,
  requestImages,
  string,
  type CanonicalImage,
  type CanonicalRequest,
  type Json,
} from '@cortex/contracts';

/** An audio, file or document part: refused, because no engine here reads them (images: see refuseImages). */
export function rejectMedia(path: string, what: string, model: string | undefined): never {
  const named = model === undefined ? 'this model' : `model '${model}'`;
  return fail(
    path,
    `${what} are not supported: ${named} takes no audio, files or documents (no engine here reads them); ` +
      'send the content as text instead',
  );
}

/** What a dialect calls its image parts, for the refusal of one. */
const IMAGE_PARTS: Record<string, string> = {
  'openai.chat': 'image_url parts',
  'openai.responses': 'input_image parts',
  'anthropic.messages': 'image blocks',
};

/**
 * A decoded request's images are refused for a model that takes none (its catalogue entry names no
 * projector), naming the first image's part, the model, and where a client can see which models do.
 * Decoders keep images (`CanonicalMessage.images`) so that the gateway decides, once, for every
 * dialect and every path a body takes (decoded there or by the translator).
 */
export function refuseImages(request: Pick<CanonicalRequest, 'model' | 'messages'>, dialect: string): void {
  const first = requestImages(request)[0];
  if (!first) return;
  fail(
    first.part,
    `${IMAGE_PARTS[dialect] ?? 'images'} are not supported: model '${request.model}' takes text only ` +
      '(its catalogue entry names no projector, mmproj), so GET /v1/models lists capabilities.vision: false ' +
      'for it; send the content as text, or ask a model with vision',
  );
}

/**
 * A message's content as its parts arrive: text, and images where they stand in it (the offset into
 * the text so far). Text parts join with `separator` (none in OpenAI's dialects, a new line between
 * Anthropic's blocks); an image takes no separator of its own.
 */
export class ContentParts {
  private text = '';
  private readonly images: CanonicalImage[] = [];
  private texts = 0;

  constructor(private readonly separator = '') {}

  addText(text: string): void {
    if (this.texts++ > 0) this.text += this.separator;
    this.text += text;
  }

  addImage(image: Omit<CanonicalImage, 'at'>): void {
    this.images.push({ at: this.text.length, ...image });
  }

  /** The message's `content`, and `images` when it had any. */
  get message(): { content: string; images?: CanonicalImage[] } {
    return this.images.length > 0 ? { content: this.text, images: this.images } : { content: this.text };
  }
}

/** Where `url` points: a base64 data URI's bytes and type, or an http(s) URL for the gateway to fetch. */
function imageFromUrl(url: string, part: string): Omit<CanonicalImage, 'at' | 'part'> {
  const data = /^data:([^;,]*)((?:;[^;,]*)*);base64,/i.exec(url);
  if (data) return { data: url.slice(data[0].length), mediaType: (data[1] ?? '').toLowerCase() };
  if (/^data:/i.test(url)) fail(part, 'an image data URI must be base64 (data:image/png;base64,…)');
  if (!/^https?:\/\//i.test(url)) fail(part, 'an image URL must be http, https or a base64 data URI');
  return { url };
}

/** OpenAI's `image_url` part (`{ image_url: { url, detail } }`, or the Responses form `{ image_url: url, detail }`). */
export function openaiImage(part: Json, path: string): Omit<CanonicalImage, 'at'> {
  const nested = typeof part.image_url === 'object' && part.image_url !== null;
  const holder = nested ? object(part.image_url, `${path}.image_url`) : part;
  const url = string(holder[nested ? 'url' : 'image_url'], nested ? `${path}.image_url.url` : `${path}.image_url`);
  const detail = optionalString(holder.detail, `${path}${nested ? '.image_url' : ''}.detail`);
  if (detail !== undefined && detail !== 'auto' && detail !== 'low' && detail !== 'high')
    fail(
      `${path}${nested ? '.image_url' : ''}.detail`,
      `must be one of auto, low, high (got ${JSON.stringify(detail)})`,
    );
  return { part: path, ...imageFromUrl(url, path), ...(detail && { detail }) };
}

/** Anthropic's `image` block: `source` is `{ type: 'base64', media_type, data }` or `{ type: 'url', url }`. */
export function anthropicImage(block: Json, path: string): Omit<CanonicalImage, 'at'> {
  const source = object(block.source, `${path}.source`);
  const type = string(source.type, `${path}.source.type`);
  if (type === 'base64')
    return {
      part: path,
      data: string(source.data, `${path}.source.data`),
      mediaType: string(source.media_type, `${path}.source.media_type`).toLowerCase(),
    };
  if (type === 'url') {
    const url = string(source.url, `${path}.source.url`);
    if (!/^https?:\/\//i.test(url)) fail(`${path}.source.url`, 'an image URL must be http or https');
    return { part: path, url };
  }
  return fail(
    `${path}.source.type`,
    `an image source must be base64 or url (got '${type}'); file ids are not kept here`,
  );
}
