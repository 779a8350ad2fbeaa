import type { ModelConfig } from '@cortex/config';
import { upstreamCapabilities, type ModelCapabilities, type ModelFacts } from '@cortex/contracts';

/**
 * What a model can do before any worker loaded it (a load's report replaces it): an upstream model's,
 * from the catalogue; a GGUF's, from the format its header's chat template is recognised as, and a
 * projector in the catalogue for images. Unknown (null) for a catalogue template or format of its own,
 * which only a load reads, and for a template not recognised by its text.
 */
export function beforeLoad(
  model: Pick<ModelConfig, 'upstream' | 'kind' | 'chatTemplate' | 'chatTemplateFile' | 'format' | 'mmproj'>,
  facts: ModelFacts | undefined,
): ModelCapabilities | null {
  if (model.upstream) return upstreamCapabilities(model.upstream);
  const known = facts?.chatFormat;
  if (model.kind !== 'chat' || !known || model.chatTemplate || model.chatTemplateFile) return null;
  if (model.format && model.format !== known.id) return null;
  return { tools: known.tools, reasoning: known.reasoning, format: known.id, vision: model.mmproj !== undefined };
}
