/**
 * How many upstream sessions the relay opens at once (remote-backend.ts). Each downstream
 * session opens one; past `limit` in flight the rest wait their turn, in the order they
 * came. While the upstream is down an open retries until its recovery deadline, so this
 * bounds the retries running (and the clients holding memory for them) whatever the number
 * of downstream sessions, and at recovery the upstream sees at most `limit` new sessions at
 * once, the oldest first. A waiter that leaves (its downstream session closed or expired)
 * costs nothing more. Pure: no timer, no socket.
 */
export class OpenGate {
  private running = 0;
  /** Waiters in arrival order (a Set keeps insertion order and removes in O(1)). */
  private readonly waiting = new Set<() => void>();

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`OpenGate: limit must be a positive integer (got ${limit})`);
  }

  /** Opens in flight now. */
  get inFlight(): number {
    return this.running;
  }

  /** Opens waiting for a turn. */
  get queued(): number {
    return this.waiting.size;
  }

  /**
   * Resolves with `release` (call it once the open is over, whatever its outcome) when it is
   * this caller's turn; rejects with `signal`'s reason if it is aborted first.
   */
  acquire(signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(signal.reason as Error);
    if (this.running < this.limit && this.waiting.size === 0) return Promise.resolve(this.take());
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        this.waiting.delete(turn);
        reject(signal!.reason);
      };
      const turn = () => {
        signal?.removeEventListener('abort', onAbort);
        resolve(this.take());
      };
      this.waiting.add(turn);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  private take(): () => void {
    this.running++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.running--;
      const next = this.waiting.values().next();
      if (!next.done) {
        this.waiting.delete(next.value);
        next.value();
      }
    };
  }
}
