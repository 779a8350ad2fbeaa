import type { ServiceStart } from '@cortex/bus';

export const APP_SERVICES = ['router', 'translator', 'metrics', 'worker', 'gateway'] as const;
export type AppService = (typeof APP_SERVICES)[number];

export function isAppService(name: string): name is AppService {
  return (APP_SERVICES as readonly string[]).includes(name);
}

/** Each app is its own build; the CLI loads its entry by path so no app imports another. */
export async function loadService(name: AppService): Promise<ServiceStart> {
  const url = new URL(`../../${name}/dist/main.js`, import.meta.url);
  const module = (await import(url.href)) as { start: ServiceStart };
  return module.start;
}
