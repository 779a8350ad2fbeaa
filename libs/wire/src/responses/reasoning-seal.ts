import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

const PREFIX = 'cortex.r1.';
const IV_BYTES = 12;
const TAG_BYTES = 16;
// Binds a sealed blob to its use: the same key sealing something else cannot be passed off as reasoning.
const AAD = Buffer.from('cortex reasoning v1');

/**
 * Reasoning sealed for stateless clients (`store: false` with `include: ["reasoning.encrypted_content"]`):
 * AES-256-GCM under a key every gateway and translator derive from the same secret
 * (`responses.reasoning_key`), so a reasoning item a client sends back opens on any replica and cannot be
 * read or altered on the way. The key is SHA-256 of the secret, so any secret string gives a 32-byte key.
 */
export class ReasoningSeal {
  private readonly key: Buffer;

  constructor(secret: string) {
    this.key = createHash('sha256').update(secret, 'utf8').digest();
  }

  seal(text: string): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    cipher.setAAD(AAD);
    const body = Buffer.concat([cipher.update(text, 'utf8'), cipher.final()]);
    return PREFIX + Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64url');
  }

  /** The reasoning, or undefined for blobs sealed elsewhere (another provider, another key) or altered. */
  open(sealed: string): string | undefined {
    if (!sealed.startsWith(PREFIX)) return undefined;
    const raw = Buffer.from(sealed.slice(PREFIX.length), 'base64url');
    if (raw.length < IV_BYTES + TAG_BYTES) return undefined;
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.key, raw.subarray(0, IV_BYTES));
      decipher.setAAD(AAD);
      decipher.setAuthTag(raw.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
      return Buffer.concat([decipher.update(raw.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString('utf8');
    } catch {
      return undefined;
    }
  }
}
