import { array, fail, isObject, modelName, object, optionalBoolean, optionalInteger, string } from '@cortex/contracts';

/** Documents one rerank request may score. */
export const MAX_RERANK_DOCUMENTS = 1000;

export interface RerankRequest {
  model: string;
  query: string;
  documents: string[];
  topN?: number;
  returnDocuments: boolean;
}

/**
 * A rerank body as llama.cpp's server, Jina and Cohere take it: `query`, `documents` (strings or
 * `{text}` objects), `top_n`, `return_documents` (llama.cpp's `return_text` too).
 */
export function parseRerankRequest(body: unknown): RerankRequest {
  const b = object(body, 'body');
  const model = modelName(b.model);
  const query = string(b.query, 'query');
  if (query.length === 0) fail('query', 'must not be empty');
  const items = array(b.documents, 'documents');
  if (items.length === 0) fail('documents', 'must not be an empty array');
  if (items.length > MAX_RERANK_DOCUMENTS)
    fail(
      'documents',
      `at most ${MAX_RERANK_DOCUMENTS} documents per request, got ${items.length}; send them in several requests`,
    );
  const documents = items.map((item, i) => {
    const param = `documents[${i}]`;
    const document = isObject(item)
      ? string(item.text, `${param}.text`)
      : typeof item === 'string'
        ? item
        : fail(param, 'must be a string or an object with a string `text`');
    if (document.length === 0) fail(param, 'must not be empty');
    return document;
  });
  const topN = optionalInteger(b.top_n, 'top_n', 1);
  const returnDocuments =
    optionalBoolean(b.return_documents, 'return_documents') ?? optionalBoolean(b.return_text, 'return_text') ?? false;
  return { model, query, documents, returnDocuments, ...(topN !== undefined && { topN }) };
}
