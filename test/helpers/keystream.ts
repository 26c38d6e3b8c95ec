/** The digest of test/fixtures/keystream.mjs's output: BYTES bytes of AES-128-CTR keystream keyed by SEED. */
import { createCipheriv, createHash } from 'node:crypto';
import { join } from 'node:path';

export const KEYSTREAM = join(import.meta.dirname, '..', 'fixtures', 'keystream.mjs');

export function keystreamDigest(bytes: number, seed: string): string {
  const key = createHash('sha256').update(seed).digest().subarray(0, 16);
  const cipher = createCipheriv('aes-128-ctr', key, Buffer.alloc(16));
  const hash = createHash('sha256');
  const zeros = Buffer.alloc(1024 * 1024);
  for (let done = 0; done < bytes; done += zeros.length) hash.update(cipher.update(zeros.subarray(0, Math.min(zeros.length, bytes - done))));
  return hash.digest('hex');
}
