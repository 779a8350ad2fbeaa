import type { ChatFormat } from './chat-format.js';
import { deriveFormat, type ProbeRender } from './derive.js';
import { fingerprint, formatById, FORMATS } from './families.js';

/** A model's output format and how it was chosen, for the load log (`recognised in its chat template`). */
export interface ChosenFormat {
  format: ChatFormat;
  chosenBy: string;
}

/**
 * The format a model writes, chosen the same way for every engine: the catalogue's `format` where it
 * names one, else the one whose fingerprint its chat template `source` shows, else the markers the
 * template itself writes (deriveFormat over `probe`, where the template can be rendered), else plain
 * text with `<think>` reasoning. Throws for a `format` cortex does not know.
 */
export function chooseFormat(
  spec: { readonly format?: string; readonly chatTemplate?: string },
  source: string,
  probe: ProbeRender | null,
): ChosenFormat {
  const named = spec.format ? formatById(spec.format) : undefined;
  if (spec.format && !named)
    throw new Error(`its format '${spec.format}' is not one cortex knows (${Object.keys(FORMATS).join(', ')})`);
  const whose = spec.chatTemplate ? "the catalogue's" : 'its';
  if (named) return { format: named, chosenBy: 'named by the catalogue' };
  if (!source) return { format: FORMATS.plain, chosenBy: 'no chat template' };
  const known = fingerprint(source);
  if (known) return { format: known, chosenBy: `recognised in ${whose} chat template` };
  // No fingerprint: the markers as the template itself writes them, compared across renders.
  const derived = probe ? deriveFormat(probe) : null;
  return derived
    ? { format: derived, chosenBy: `derived from ${whose} chat template` }
    : { format: FORMATS.plain, chosenBy: `none recognised in ${whose} chat template` };
}
