/**
 * Time limits on promises, written once: every wait that must not hang (a close, a connect, a
 * child's exit) goes through these, and none leaves a timer behind to hold the event loop.
 */

export class TimeoutError extends Error {
  override readonly name = 'TimeoutError';
  constructor(
    message: string,
    readonly timeoutMs: number,
  ) {
    super(message);
  }
}

/**
 * The promise's outcome, or a `TimeoutError` after `ms` (the message says what timed out).
 * The promise itself is not cancelled: its late result is ignored.
 */
export async function withTimeout<T>(promise: Promise<T>, ms: number, what = 'operation'): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(`${what} timed out after ${ms} ms`, ms)), ms);
    timer.unref?.();
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Waits for the promise to settle, at most `ms`: true if it settled (resolved or rejected)
 * in time, false if the time ran out. Never rejects: for best-effort waits (a close, a drain).
 */
export async function settleWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
    timer.unref?.();
  });
  try {
    return await Promise.race([promise.then(() => true, () => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves after `ms`, or at once when `signal` aborts (never rejects). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** The longest delay a Node timer holds: a longer one fires after 1 ms (with a warning). */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Why `value` cannot be a duration option in milliseconds (not a number, negative, or past
 * what a timer holds — a 1000 h session TTL would otherwise expire sessions at once), or null.
 */
export function invalidDuration(value: unknown): string | null {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) return 'must be a non-negative number of milliseconds';
  if (value > MAX_TIMER_MS) return `must be at most ${MAX_TIMER_MS} ms (about 24.8 days), what a timer can hold`;
  return null;
}
