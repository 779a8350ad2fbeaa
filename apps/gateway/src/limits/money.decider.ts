import type { TokenPrice } from '@cortex/contracts';
import type { ReservationBound } from './reservation.js';

/**
 * Money budgets count whole billionths of `billing.currency` (the usage records' `cost`, through
 * `billionthsOf`), so a budget's spend is a sum of integers and stays exact. These are the pure parts:
 * what a request reserves at its model's price, and how an amount reads in a message.
 */

/** Billionths of the currency one token costs at a price of 1 per million tokens. */
const BILLIONTHS_PER_TOKEN = 1_000;

/**
 * The most a request within `bound` can cost at `price`, in billionths rounded up. Every prompt token
 * is priced at the dearer of the input and cached-input prices, because which tokens a worker finds
 * cached is known only once it ran; every output token at the output price. Null: the model has no
 * price, so nothing bounds what it would spend.
 */
export function moneyReservation(bound: ReservationBound, price: TokenPrice | undefined): number | null {
  if (!price) return null;
  const input = Math.max(price.input, price.cachedInput ?? price.input);
  return Math.ceil((bound.prompt * input + bound.output * price.output) * BILLIONTHS_PER_TOKEN);
}

/** Billionths as a decimal amount, exactly: at least two decimals, at most nine (`50.00`, `0.000012345`). */
export function formatMoney(billionths: number): string {
  const sign = billionths < 0 ? '-' : '';
  const whole = Math.floor(Math.abs(billionths) / 1e9);
  const fraction = String(Math.abs(billionths) % 1e9)
    .padStart(9, '0')
    .replace(/0+$/, '')
    .padEnd(2, '0');
  return `${sign}${whole}.${fraction}`;
}
