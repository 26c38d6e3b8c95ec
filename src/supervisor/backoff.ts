/**
 * Reconnect delays: exponential from `initialMs`, multiplied by `factor` per attempt, capped at
 * `maxMs`, then spread by ±`jitter` so that many gateways restarted together do not retry in
 * lockstep. Pure: the random source is injected so tests can pin it.
 */
export interface BackoffPolicy {
  /** Delay before the first retry. Default 1000. */
  initialMs: number;
  /** Growth per attempt. Default 2. */
  factor: number;
  /** Cap before jitter. Default 180000. */
  maxMs: number;
  /** Relative spread, 0.1 = ±10 %. Default 0.1. */
  jitter: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = { initialMs: 1000, factor: 2, maxMs: 180_000, jitter: 0.1 };

/** The delay before retry number `attempt` (1-based), jitter excluded. */
export function baseDelay(attempt: number, policy: BackoffPolicy = DEFAULT_BACKOFF): number {
  const n = Math.max(1, Math.floor(attempt));
  // A huge attempt number overflows to Infinity; the cap still applies.
  const raw = policy.initialMs * Math.pow(policy.factor, n - 1);
  return Number.isFinite(raw) ? Math.min(raw, policy.maxMs) : policy.maxMs;
}

/** `baseDelay` spread uniformly over ±jitter; `random` returns [0, 1). */
export function backoffDelay(attempt: number, policy: BackoffPolicy = DEFAULT_BACKOFF, random: () => number = Math.random): number {
  return applyJitter(baseDelay(attempt, policy), policy.jitter, random);
}

/** `ms` moved by up to ±`jitter` of itself, never negative, rounded to whole ms. */
export function applyJitter(ms: number, jitter: number, random: () => number = Math.random): number {
  const r = Math.min(Math.max(random(), 0), 1);
  return Math.max(0, Math.round(ms * (1 + jitter * (2 * r - 1))));
}
