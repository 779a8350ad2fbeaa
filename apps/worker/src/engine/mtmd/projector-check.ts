import { readGgufFileInfo } from 'node-llama-cpp';

/*
 * llama.cpp's clip loader says why it refused a projector only on stderr (the JS error is "Failed to
 * initialize multimodal context"), and a projector missing a tensor its warm-up needs crashes the
 * process. So the header is checked here first, for what the loader requires of every vision
 * projector and of the `mlp` (LLaVA-1.5) one, and a load fails with a reason instead.
 */

/** A projector's header: its metadata by dotted key, and its tensors' dimensions by name. */
export interface ProjectorHeader {
  metadata: Readonly<Record<string, unknown>>;
  tensors: ReadonlyMap<string, readonly number[]>;
}

/** Keys clip's loader refuses a vision projector without (`Key not found`). */
const VISION_KEYS = [
  'clip.projector_type',
  'clip.vision.image_size',
  'clip.vision.patch_size',
  'clip.vision.embedding_length',
  'clip.vision.feed_forward_length',
  'clip.vision.block_count',
  'clip.vision.attention.head_count',
  'clip.vision.attention.layer_norm_epsilon',
  'clip.vision.projection_dim',
] as const;

/** The tensors an `mlp` projector's graph reads: without one, clip's warm-up dereferences null. */
const MLP_TENSORS = [
  'v.patch_embd.weight',
  'v.position_embd.weight',
  'mm.0.weight',
  'mm.0.bias',
  'mm.2.weight',
  'mm.2.bias',
];

/** What is wrong with a projector for a text model `textWidth` wide (its embedding length); null when nothing is. */
export function projectorProblem(header: ProjectorHeader, textWidth: number | undefined): string | null {
  const { metadata, tensors } = header;
  const architecture = metadata['general.architecture'];
  if (architecture !== undefined && architecture !== 'clip')
    return `its architecture is ${String(architecture)}, not clip: this is not a projector (mmproj) file`;
  if (metadata['clip.has_vision_encoder'] !== true) return 'it has no vision encoder (clip.has_vision_encoder)';
  const missing = VISION_KEYS.filter((key) => metadata[key] === undefined);
  if (missing.length > 0) return `it lacks ${missing.join(', ')}`;
  for (const key of ['clip.vision.image_mean', 'clip.vision.image_std']) {
    const value = metadata[key];
    if (!Array.isArray(value) || value.length < 3) return `${key} must list at least 3 values`;
  }
  if (!tensors.has('v.patch_embd.weight')) return 'it lacks the tensor v.patch_embd.weight';
  if (metadata['clip.projector_type'] !== 'mlp') return null;
  const absent = MLP_TENSORS.filter((name) => !tensors.has(name));
  if (absent.length > 0) return `its mlp projector lacks the tensors ${absent.join(', ')}`;
  const width = tensors.get('mm.2.weight')?.[1];
  if (textWidth !== undefined && width !== textWidth)
    return `it writes embeddings ${width} wide, but the text model's are ${textWidth} (mmproj and model do not match)`;
  return null;
}

/** A GGUF's metadata flattened to dotted keys (node-llama-cpp nests them by their dots). */
function flatten(node: unknown, prefix = '', out: Record<string, unknown> = {}): Record<string, unknown> {
  if (node !== null && typeof node === 'object' && !Array.isArray(node) && !ArrayBuffer.isView(node)) {
    for (const [key, value] of Object.entries(node)) flatten(value, prefix ? `${prefix}.${key}` : key, out);
  } else out[prefix] = node;
  return out;
}

/** Reads both headers and throws, naming the projector and what is wrong, when it cannot serve the model. */
export async function checkProjector(projectorPath: string, modelPath: string): Promise<void> {
  const read = (path: string) => readGgufFileInfo(path, { readTensorInfo: true, logWarnings: false });
  const [projector, model] = await Promise.all([
    read(projectorPath).catch((error: unknown) => {
      throw new Error(`mmproj ${projectorPath} is not a readable GGUF file: ${(error as Error).message}`, {
        cause: error,
      });
    }),
    read(modelPath),
  ]);
  const modelMeta = flatten(model.metadata);
  const width = modelMeta[`${String(modelMeta['general.architecture'])}.embedding_length`];
  const problem = projectorProblem(
    {
      metadata: flatten(projector.metadata),
      tensors: new Map((projector.tensorInfo ?? []).map((t) => [t.name, t.dimensions.map(Number)])),
    },
    typeof width === 'number' ? width : undefined,
  );
  if (problem) throw new Error(`mmproj ${projectorPath} cannot be loaded: ${problem}`);
}
