import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv2020 from 'ajv/dist/2020.js';

const SPEC = join('shared', 'specs', 'openresponses-openapi.json');
const BASE = 'https://cortex.invalid/openresponses.json';

/** `../shared/specs/openresponses-openapi.json` beside the repository, or OPENRESPONSES_SPEC. */
export function openResponsesSpecPath(): string {
  if (process.env.OPENRESPONSES_SPEC) return process.env.OPENRESPONSES_SPEC;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    for (const candidate of [join(dir, SPEC), join(dir, '..', SPEC)]) if (existsSync(candidate)) return candidate;
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`${SPEC} not found: set OPENRESPONSES_SPEC`);
    dir = parent;
  }
}

/** Validates Responses bodies and stream events against the OpenResponses OpenAPI document with ajv. */
export class OpenResponsesSchema {
  private readonly ajv = new Ajv2020.default({ strict: false, allErrors: true });
  private readonly events = new Map<string, string>();

  constructor(path = openResponsesSpecPath()) {
    const doc = JSON.parse(readFileSync(path, 'utf8')) as {
      components: { schemas: Record<string, { properties?: { type?: { enum?: string[] } } }> };
      paths: unknown;
    };
    this.ajv.addSchema({ $id: BASE, components: doc.components, paths: doc.paths });
    for (const [name, schema] of Object.entries(doc.components.schemas)) {
      const type = schema.properties?.type?.enum?.[0];
      if (name.endsWith('StreamingEvent') && type) this.events.set(type, name);
    }
  }

  /** Error text when `value` is not a valid `components.schemas[name]`, else null. */
  check(name: string, value: unknown): string | null {
    const validate = this.ajv.getSchema(`${BASE}#/components/schemas/${name}`);
    if (!validate) return `no schema ${name}`;
    return validate(value) ? null : this.ajv.errorsText(validate.errors);
  }

  /** Error text when a stream event does not match the schema the spec has for its type. */
  checkEvent(event: { type: string }): string | null {
    const name = this.events.get(event.type);
    return name ? this.check(name, event) : `the spec has no event ${event.type}`;
  }
}
