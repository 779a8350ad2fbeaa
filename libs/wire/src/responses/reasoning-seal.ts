import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

const IV_BYTES = 12;
const TAG_BYTES = 16;

/** What a seal is for: its prefix, and the associated data that binds a blob to that use. */
export interface SealPurpose {
  prefix: string;
  aad: string;
}

// Binds a sealed blob to its use: the same key sealing something else cannot be passed off as reasoning.
const REASONING: SealPurpose = { prefix: 'cortex.r1.', aad: 'cortex reasoning v1' };

/**
 * Reasoning sealed for stateless clients (`store: false` with `include: ["reasoning.encrypted_content"]`):
 * AES-256-GCM under a key every gateway and translator derive from the same secret
 * (`responses.reasoning_key`), so a reasoning item a client sends back opens on any replica and cannot be
 * read or altered on the way. The key is SHA-256 of the secret, so any secret string gives a 32-byte key.
 */
export class ReasoningSeal {
  private readonly key: Buffer;
  private readonly prefix: string;
  private readonly aad: Buffer;

  constructor(secret: string, purpose: SealPurpose = REASONING) {
    this.key = createHash('sha256').update(secret, 'utf8').digest();
    this.prefix = purpose.prefix;
    this.aad = Buffer.from(purpose.aad);
  }

  seal(text: string): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    cipher.setAAD(this.aad);
    const body = Buffer.concat([cipher.update(text, 'utf8'), cipher.final()]);
    return this.prefix + Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64url');
  }

  /** The reasoning, or undefined for blobs sealed elsewhere (another provider, another key) or altered. */
  open(sealed: string): string | undefined {
    if (!sealed.startsWith(this.prefix)) return undefined;
    const raw = Buffer.from(sealed.slice(this.prefix.length), 'base64url');
    if (raw.length < IV_BYTES + TAG_BYTES) return undefined;
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.key, raw.subarray(0, IV_BYTES));
      decipher.setAAD(this.aad);
      decipher.setAuthTag(raw.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
      return Buffer.concat([decipher.update(raw.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString('utf8');
    } catch {
      return undefined;
    }
  }
}
