import type { UpstreamSpec } from '@cortex/contracts';
import type { CortexConfig, ModelConfig } from './config.schema.js';

/** What a worker needs to estimate or load a catalogue model: its source, context, slots and draft. */
export interface ModelSource {
  source: string;
  contextSize: number;
  slots: number;
  /** The draft model's source, or `lookup`; absent without speculative decoding. */
  draft?: string;
  /** Embedding and ranking models get contexts of their kind; absent: chat. */
  kind?: 'embedding' | 'ranking';
  /** The pinned SHA-256 of `source`, checked after a download. */
  sha256?: string;
  /** A vision model's projector source (the catalogue's `mmproj`). */
  mmproj?: string;
  /** The catalogue's chat template and output format, over the GGUF's own. */
  chatTemplate?: string;
  format?: string;
  /** Served from an upstream (`source` is then its URL), by a remote worker. */
  upstream?: UpstreamSpec;
}

/**
 * The load source of a catalogue model. A `draft` naming another catalogue model (by id) is that
 * model's file; anything else is a source of its own (a path, `hf:` URI or `fixture:`), or `lookup`.
 */
export function modelSource(config: Pick<CortexConfig, 'models'>, model: ModelConfig): ModelSource {
  if (model.upstream) {
    const { upstream } = model;
    return { source: upstream.url, contextSize: model.contextSize, slots: upstream.maxConcurrency, upstream };
  }
  const source: ModelSource = { source: model.file ?? '', contextSize: model.contextSize, slots: model.slots };
  if (model.kind !== 'chat') source.kind = model.kind;
  if (model.sha256) source.sha256 = model.sha256;
  if (model.chatTemplate) source.chatTemplate = model.chatTemplate;
  if (model.format) source.format = model.format;
  if (model.mmproj) source.mmproj = model.mmproj;
  if (model.draft)
    source.draft =
      model.draft === 'lookup' ? 'lookup' : (config.models.find((m) => m.id === model.draft)?.file ?? model.draft);
  return source;
}
