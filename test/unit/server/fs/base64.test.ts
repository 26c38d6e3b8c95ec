/**
 * The strict base64 decoder of the fs methods: accepts exactly canonical padded base64 (what
 * Rust's STANDARD engine accepts) and otherwise reports the crate's error texts (checked on
 * the Codex binary, see fs-protocol.both.test.ts). Property: agrees with a plain reference.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeBase64 } from '../../../../src/server/fs/base64.js';

const CANONICAL = /^[A-Za-z0-9+/]*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const reference = (s: string) => s.length % 4 === 0 && CANONICAL.test(s) && Buffer.from(s, 'base64').toString('base64') === s;
const symbols = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_! \né';

describe('decodeBase64', () => {
  it('accepts exactly the canonical encodings (fast path and reference agree)', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 40 }).map((b) => Buffer.from(b).toString('base64')),
          fc.array(fc.constantFrom(...symbols), { maxLength: 14 }).map((a) => a.join('')),
        ),
        (text) => {
          const result = decodeBase64(text);
          expect(result.ok).toBe(reference(text));
          if (result.ok) expect(result.bytes.toString('base64')).toBe(text);
          else expect(result.message).toMatch(/^(Invalid symbol \d+, offset \d+\.|Invalid padding|Invalid input length: \d+|Invalid last symbol \d+, offset \d+\.)$/);
        },
      ),
      { numRuns: 3000, seed: 14 },
    );
  });

  it('decodes a MiB quickly and exactly', () => {
    const data = Buffer.alloc(1024 * 1024, 0xa5);
    const result = decodeBase64(data.toString('base64'));
    expect(result.ok && result.bytes.equals(data)).toBe(true);
  });
});
