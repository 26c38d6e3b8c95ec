/**
 * Upgrade-time checks (docs/protocol.md, "Transport"): a browser `Origin` is refused with 403
 * (unless allow-listed), then the bearer token is checked in constant time. The texts are
 * Codex's, byte for byte.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

export const AuthMessages = {
  missing: 'missing websocket bearer token',
  invalid: 'invalid websocket bearer token',
  badHeader: 'invalid authorization header',
} as const;

export type UpgradeVerdict =
  | { ok: true; credential: Buffer; admin?: boolean }
  | { ok: false; status: 401 | 403; body: string };

export const digest = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();

const EMPTY = Buffer.alloc(0);

/** Equal-length digests compared in constant time, against every candidate (no early exit). */
function matchesAny(presented: Buffer, candidates: readonly Buffer[]): boolean {
  let found = false;
  for (const candidate of candidates) found = timingSafeEqual(presented, candidate) || found;
  return found;
}

/**
 * `expected`: the digests of the accepted tokens (each its own identity: a session belongs
 * to the token that created it), or null when auth is off. `admin`: the digest of the admin
 * token (`--admin-token-file`), accepted too, and marked so (it may list every session).
 */
export function checkUpgrade(
  req: IncomingMessage,
  expected: Buffer | readonly Buffer[] | null,
  allowedOrigins: ReadonlySet<string>,
  admin: Buffer | null = null,
): UpgradeVerdict {
  const origin = req.headers.origin;
  if (origin !== undefined && !allowedOrigins.has(origin)) return { ok: false, status: 403, body: '' };
  const accepted = expected === null ? [] : Buffer.isBuffer(expected) ? [expected] : expected;
  const header = req.headers.authorization;
  const match = header === undefined ? null : /^bearer +(\S+)\s*$/i.exec(header);
  // Equal-length digests: the comparison time says nothing about the token.
  const presented = match ? digest(match[1]!) : null;
  if (admin && presented && timingSafeEqual(presented, admin)) return { ok: true, credential: presented, admin: true };
  if (accepted.length === 0) return { ok: true, credential: EMPTY };
  if (header === undefined) return { ok: false, status: 401, body: AuthMessages.missing };
  if (!presented) return { ok: false, status: 401, body: AuthMessages.badHeader };
  if (!matchesAny(presented, accepted)) return { ok: false, status: 401, body: AuthMessages.invalid };
  return { ok: true, credential: presented };
}
