import { checkTemplateOptions } from '@cortex/contracts';

/** The reasoning efforts the dialects name (OpenAI's, and Anthropic's `max`, read as `high`). */
export const REASONING_EFFORTS = ['none', 'minimal', 'low', 'medium', 'high'] as const;

/**
 * What a request gives the model's chat template: the client's own template options (`kwargs`,
 * checked by `param`) over the reasoning controls its dialect carries (`reasoning_effort`,
 * `enable_thinking`), which templates such as gpt-oss's and Qwen3's read. Undefined when there are
 * none: the template then uses its defaults.
 */
export function templateOptions(
  kwargs: unknown,
  param: string,
  controls: Record<string, unknown>,
): Record<string, unknown> | undefined {
  const own = kwargs === undefined || kwargs === null ? {} : checkTemplateOptions(kwargs, param);
  const options = checkTemplateOptions({ ...controls, ...own }, param);
  return Object.keys(options).length > 0 ? options : undefined;
}
