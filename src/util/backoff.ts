/**
 * Every retry delay in tether, pure: exponential growth capped at a maximum, then jitter so
 * that many peers restarted together do not retry in lockstep. Randomness is injected (a
 * source of numbers in [0, 1)) so tests can pin it. Attempt numbers start at 1.
 *
 * Used by the MCP supervisor (reconnect policy, health-probe spread), the exec client
 * (session recovery) and the client's retry of a write to a process still starting.
 */

export interface ExponentialPolicy {
  /** Delay of attempt 1. */
  initialMs: number;
  /** Growth per attempt. */
  factor: number;
  /** Cap (before any jitter). */
  maxMs: number;
}

/**
 * The supervisor's reconnect policy: exponential from `initialMs`, multiplied by `factor` per
 * attempt, capped at `maxMs`, then spread by ±`jitter`.
 */
export interface BackoffPolicy extends ExponentialPolicy {
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

/** `initialMs * factor^(attempt-1)`, capped at `maxMs` (attempt is 1-based; below 1 counts as 1). */
export function exponentialDelay(attempt: number, policy: ExponentialPolicy): number {
  const n = Math.max(1, Math.floor(attempt));
  // A huge attempt number overflows to Infinity; the cap still applies.
  const raw = policy.initialMs * Math.pow(policy.factor, n - 1);
  return Number.isFinite(raw) ? Math.min(raw, policy.maxMs) : policy.maxMs;
}

/** The delay before retry number `attempt` (1-based), jitter excluded. */
export function baseDelay(attempt: number, policy: BackoffPolicy = DEFAULT_BACKOFF): number {
  return exponentialDelay(attempt, policy);
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

/** "Equal jitter": uniformly in [ms/2, ms], rounded to whole ms. */
export function halfJitter(ms: number, random: () => number = Math.random): number {
  return Math.round(ms / 2 + (random() * ms) / 2);
}

/** The exec client's recovery waits before the immediate attempt: 100 ms doubling to 2 s. */
const RECONNECT: ExponentialPolicy = { initialMs: 100, factor: 2, maxMs: 2000 };

/**
 * Exec client reconnect delays: the first attempt goes at once (most drops are a single
 * reset), then short, doubling, half-jittered waits (100 ms … 2 s) so a server that restarts
 * is not hit by every client in lockstep. Attempt numbers start at 1.
 */
export function reconnectDelayMs(attempt: number, random: () => number = Math.random): number {
  if (attempt <= 1) return 0;
  return halfJitter(exponentialDelay(attempt - 1, RECONNECT), random);
}

/** After a restart notice: 100 ms growing by half to 500 ms. */
const RESTART: ExponentialPolicy = { initialMs: 100, factor: 1.5, maxMs: 500 };

/**
 * Exec client reconnect delays after the server said it restarts and keeps the session
 * (close 1012, protocol/close-reasons.ts): the first attempt goes at once, then short
 * half-jittered waits that stop growing at 500 ms, so the client is back as soon as the new
 * server listens instead of sleeping through a backoff meant for a link that flaps.
 */
export function restartRetryDelayMs(attempt: number, random: () => number = Math.random): number {
  if (attempt <= 1) return 0;
  return halfJitter(exponentialDelay(attempt - 1, RESTART), random);
}

/** A write to a process the server is still starting is re-sent after 5 ms, doubling to 100 ms (no jitter). */
const STARTING_WRITE: ExponentialPolicy = { initialMs: 5, factor: 2, maxMs: 100 };

/** Wait before re-sending a write answered `starting` (`tries` answered so far, from 0). */
export function startingWriteDelayMs(tries: number): number {
  return exponentialDelay(tries + 1, STARTING_WRITE);
}
