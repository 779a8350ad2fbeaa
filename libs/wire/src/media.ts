import { fail } from '@cortex/contracts';

/**
 * An image (or audio, file, document) part: refused, because node-llama-cpp, the inference backend,
 * has no vision input yet, so no model here takes one. Names the model and where a client can see it.
 */
export function rejectMedia(path: string, what: string, model: string | undefined): never {
  const named = model === undefined ? 'this model' : `model '${model}'`;
  return fail(
    path,
    `${what} are not supported: ${named} takes text only. node-llama-cpp, ` +
      'the inference backend, has no vision (image), audio or file input yet, ' +
      'so GET /v1/models lists capabilities.vision: false for ' +
      `${model === undefined ? 'every model' : `'${model}'`}; send the content as text instead`,
  );
}
