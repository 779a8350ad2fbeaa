import Ajv2020 from 'ajv/dist/2020.js';
import AjvDraft7 from 'ajv';
import type { ValidateFunction } from 'ajv';
import { fail, isObject, type Json } from './fields.js';

/*
 * Client JSON schemas (response formats, tool parameters) are compiled with ajv: once when a request is
 * decoded, so a schema ajv cannot compile is a 400 naming its field, and again where the model's
 * output is checked against it. Zod writes draft 2020-12, older tools draft-07; `$schema` picks the
 * dialect. Formats are not checked (ajv-formats is not loaded) and unknown keywords are ignored: a
 * client's schema may carry vendor keywords, and rejecting those would fail requests OpenAI accepts.
 */
// Code optimisation off: it made compiling a new schema ~30 ms instead of ~1 ms, for validators run once per reply.
const options = { strict: false, validateFormats: false, allErrors: true, code: { optimize: false } } as const;
const draft2020 = new Ajv2020.default(options);
const draft7 = new AjvDraft7.default(options);

/** Compiled validators by schema text, at most this many (clients send the same few schemas again and again). */
const MAX_CACHED = 256;
const compiled = new Map<string, ValidateFunction>();

/** Compiles a JSON schema (cached by its text); throws ajv's error when it cannot. */
export function compileJsonSchema(schema: Json): ValidateFunction {
  const key = JSON.stringify(schema);
  let validate = compiled.get(key);
  if (!validate) {
    const { $schema, $id: _id, ...rest } = schema;
    const older = typeof $schema === 'string' && /draft-0[4-7]/.test($schema);
    // `$id` is dropped: ajv keeps every schema by id, and a client reusing an id with a new schema would fail.
    validate = (older ? draft7 : draft2020).compile(rest);
    if (compiled.size >= MAX_CACHED) compiled.delete(compiled.keys().next().value as string);
    compiled.set(key, validate);
  }
  return validate;
}

/** A request field that must hold a JSON schema: an object ajv compiles, else `invalid_request` naming it. */
export function jsonSchema(value: unknown, param: string): Json {
  if (!isObject(value))
    fail(
      param,
      `must be a JSON schema object, got ${value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value}`,
    );
  try {
    compileJsonSchema(value);
  } catch (error) {
    fail(param, `is not a valid JSON schema: ${(error as Error).message}`);
  }
  return value;
}

/**
 * Checks JSON text against a schema: null when it parses and validates, else a sentence saying why
 * (ajv's own wording, paths in JSON-pointer form).
 */
export function jsonSchemaMismatch(schema: Json, text: string): string | null {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return `it is not JSON (${(error as Error).message})`;
  }
  const validate = compileJsonSchema(schema);
  if (validate(value)) return null;
  return draft2020.errorsText(validate.errors, { dataVar: 'output', separator: '; ' });
}
