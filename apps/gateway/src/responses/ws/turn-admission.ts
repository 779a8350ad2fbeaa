import { CortexError } from '@cortex/contracts';
import type { KeyDirectory } from '../../keys/key-directory.js';
import type { KeyAdmission } from '../../limits/key-admission.js';
import { modelRefusal } from '../../http/access.js';
import type { RequestContext } from '../../http/request-context.js';
import { priorityFor } from '../../priority/priority.decider.js';

/** The route whose limits and reservation a WebSocket turn counts under. */
const PATH = '/v1/responses';

/**
 * A stored key's checks for each turn of its WebSocket, as a POST /v1/responses gets them: the key is
 * judged again (a key revoked or expired while its socket is open is refused from its next turn), its
 * models, then its and its account's limits (limits/key-admission.ts). The connection keeps the
 * SHA-256 of the key it was opened with, never the secret.
 *
 * A turn that generates also runs at the key's tier and account as they are at that turn (a key moved
 * to another tier while its socket is open moves from its next turn), lowered by the upgrade's
 * priority header as on HTTP (priority/priority.decider.ts).
 */
export class TurnAdmission {
  constructor(
    private readonly sha256: string,
    private readonly directory: KeyDirectory,
    private readonly admission: KeyAdmission,
    /** The upgrade request's `x-cortex-priority` header, already checked by its hook. */
    private readonly priorityHeader: string | string[] | undefined,
  ) {}

  /**
   * Admits one turn (a warm-up only has its key and model checked), or throws the refusal (a CortexError the turn
   * answers as its error event). The returned `done` must be called once when the turn ends: it releases the turn's
   * lease and settles its reservation with the usage it reported.
   */
  async admit(
    turn: RequestContext,
    body: Record<string, unknown>,
    bytes: number,
    generate: boolean,
  ): Promise<() => void> {
    const identity = this.directory.identifyHash(this.sha256);
    if (identity.kind === 'refused') throw identity.error;
    // Not among the stored keys any more (deleted from the bucket): the same as revoked for this socket.
    if (identity.kind === 'unknown')
      throw new CortexError(
        'unauthorized',
        'the API key this WebSocket was opened with is no longer valid: open a new connection with a valid key',
      );
    const { key } = identity.principal;
    const refusal = modelRefusal(key, body.model);
    if (refusal) throw refusal;
    // A warm-up (`generate: false`) runs no model and uses no tokens: nothing to count.
    if (!generate) return () => undefined;
    const decision = await this.admission.admit({
      key,
      requestId: turn.id,
      meter: turn.meter,
      path: PATH,
      body,
      bytes,
      background: false,
    });
    if (decision.kind === 'refuse') throw decision.error;
    turn.prioritize(priorityFor({ kind: 'stored', key }, this.priorityHeader));
    return decision.done;
  }
}
