/** The product's name, which the console's header always shows first. */
export const PRODUCT_NAME = 'cortex';

/** A leading product name and what separates it from the rest (`cortex lab`, `Cortex: prod`, `cortex-staging`). */
const LEADING_NAME = new RegExp(`^${PRODUCT_NAME}(?:[\\s:·|/–—-]+|$)`, 'i');

/**
 * What the console's header shows after the product name, from `gateway.console_title`: the title
 * without a product name it already starts with, so that the default title (`cortex`) and titles such
 * as `cortex lab` do not read "cortex cortex" or "cortex cortex lab". Empty: the product name alone.
 */
export function consoleHeading(title: string): string {
  return title.trim().replace(LEADING_NAME, '').trim();
}
