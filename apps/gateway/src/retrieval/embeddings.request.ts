import {
  array,
  fail,
  integer,
  modelName,
  object,
  oneOf,
  optionalInteger,
  optionalString,
  type RetrievalInput,
} from '@cortex/contracts';

/** OpenAI's bound on inputs per embeddings request. */
export const MAX_EMBEDDING_INPUTS = 2048;

export interface EmbeddingsRequest {
  model: string;
  inputs: RetrievalInput[];
  encodingFormat: 'float' | 'base64';
  dimensions?: number;
}

/**
 * An OpenAI embeddings body: `input` is a string, an array of strings, an array of token ids (one
 * input) or an array of such arrays; never empty. Every error names the field at fault.
 */
export function parseEmbeddingsRequest(body: unknown): EmbeddingsRequest {
  const b = object(body, 'body');
  const model = modelName(b.model);
  optionalString(b.user, 'user');
  const encodingFormat =
    b.encoding_format === undefined || b.encoding_format === null
      ? 'float'
      : oneOf(b.encoding_format, 'encoding_format', ['float', 'base64'] as const);
  const dimensions = optionalInteger(b.dimensions, 'dimensions', 1);
  return { model, inputs: parseInputs(b.input), encodingFormat, ...(dimensions !== undefined && { dimensions }) };
}

function parseInputs(input: unknown): RetrievalInput[] {
  if (input === undefined || input === null) fail('input', 'is required: a string, an array of strings, or token ids');
  if (typeof input === 'string') return [text(input, 'input')];
  const items = array(input, 'input');
  if (items.length === 0) fail('input', 'must not be an empty array');
  if (items.every((item) => typeof item === 'number')) return [tokens(items, 'input')];
  if (items.length > MAX_EMBEDDING_INPUTS)
    fail(
      'input',
      `at most ${MAX_EMBEDDING_INPUTS} inputs per request, got ${items.length}; send them in several requests`,
    );
  const stringsFirst = typeof items[0] === 'string';
  return items.map((item, i) => {
    const param = `input[${i}]`;
    if (stringsFirst) {
      if (typeof item !== 'string')
        fail(param, 'must be a string like the inputs before it (inputs are all strings or all token arrays)');
      return text(item, param);
    }
    if (!Array.isArray(item)) fail(param, 'must be a string, or an array of token ids like the inputs before it');
    return tokens(item, param);
  });
}

function text(value: string, param: string): string {
  if (value.length === 0) fail(param, 'must not be empty');
  return value;
}

function tokens(value: unknown[], param: string): number[] {
  if (value.length === 0) fail(param, 'must not be an empty array of token ids');
  return value.map((id, i) => integer(id, `${param}[${i}]`, 0));
}
