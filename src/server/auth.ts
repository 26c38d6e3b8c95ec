/**
 * Upgrade-time checks (PROTOCOL.md sections 1-2): a browser `Origin` is refused with 403
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
  | { ok: true; credential: Buffer }
  | { ok: false; status: 401 | 403; body: string };

export const digest = (token: string): Buffer => createHash('sha256').update(token, 'utf8').digest();

const EMPTY = Buffer.alloc(0);

export function checkUpgrade(req: IncomingMessage, expectedDigest: Buffer | null, allowedOrigins: ReadonlySet<string>): UpgradeVerdict {
  const origin = req.headers.origin;
  if (origin !== undefined && !allowedOrigins.has(origin)) return { ok: false, status: 403, body: '' };
  if (!expectedDigest) return { ok: true, credential: EMPTY };
  const header = req.headers.authorization;
  if (header === undefined) return { ok: false, status: 401, body: AuthMessages.missing };
  const match = /^bearer +(\S+)\s*$/i.exec(header);
  if (!match) return { ok: false, status: 401, body: AuthMessages.badHeader };
  // Equal-length digests: the comparison time says nothing about the token.
  const presented = digest(match[1]!);
  if (!timingSafeEqual(presented, expectedDigest)) return { ok: false, status: 401, body: AuthMessages.invalid };
  return { ok: true, credential: presented };
}
