/**
 * The one retry loop of the client's requests: a try whose connection died before the
 * answer (`ConnectionLostError`) is made again on the next connection. What "again" means
 * (the same params, a question about what happened first) is the caller's: each try is
 * told how many earlier ones lost their connection.
 */
import type { Connection } from './connection.js';
import { ConnectionLostError } from './errors.js';

export interface RetryPlan<T> {
  /**
   * Checked before each try, before waiting for a connection: a `{ value }` ends it with
   * that value and no request (the process exited meanwhile, say). `lost` as in `attempt`.
   */
  before?(lost: number): { value: T } | undefined;
  /** One try on `connection`; `lost`: how many earlier tries lost their connection. */
  attempt(connection: Connection, lost: number): Promise<T>;
}

/** Runs `plan` until a try is answered (or fails otherwise); `ready` waits while recovering and rejects once failed. */
export async function retryOnLoss<T>(ready: () => Promise<Connection>, plan: RetryPlan<T>): Promise<T> {
  for (let lost = 0; ; lost++) {
    const done = plan.before?.(lost);
    if (done) return done.value;
    const connection = await ready();
    try {
      return await plan.attempt(connection, lost);
    } catch (err) {
      if (!(err instanceof ConnectionLostError)) throw err;
    }
  }
}
