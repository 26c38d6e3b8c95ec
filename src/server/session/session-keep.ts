/**
 * How long a session outlives a drop (extension `sessionKeep`): the client asks, the server
 * grants within its limits. Never less than the session TTL (`--session-ttl`: what every
 * session gets, Codex clients included), never more than the maximum (`--max-session-ttl`).
 */

/** Node's timers hold at most 2^31-1 ms (24.8 days); a longer one fires after 1 ms. */
export const MAX_KEEP_MS = 2 ** 31 - 1;

export interface KeepLimits {
  /** The session TTL: what a session that asks nothing gets. */
  ttlMs: number;
  /** The longest keep granted. */
  maxTtlMs: number;
}

/** The server's keep limits from its options: the maximum is at least the TTL, and both fit a timer. */
export function keepLimits(ttlMs: number, maxTtlMs: number): KeepLimits {
  const ttl = Math.min(Math.max(1, ttlMs), MAX_KEEP_MS);
  return { ttlMs: ttl, maxTtlMs: Math.min(Math.max(ttl, maxTtlMs), MAX_KEEP_MS) };
}

/** What a client asking `askedMs` is granted (`previousMs`, else the TTL, when it asks nothing). */
export function grantKeep(askedMs: number | null | undefined, limits: KeepLimits, previousMs?: number): number {
  if (askedMs === null || askedMs === undefined) return previousMs ?? limits.ttlMs;
  return Math.max(limits.ttlMs, Math.min(askedMs, limits.maxTtlMs));
}
