/**
 * How many 2026-07-28 requests the gateway holds at once (pure). That era has no session, so
 * the session cap of 2025 hosts (http.ts) does not hold a 2026 host back: instead every
 * request in flight (a call waiting on its backend, a `subscriptions/listen` stream) takes a
 * place, per client and overall, and gives it back when its response ends. Past either
 * bound a request is refused at once, with which bound it met.
 */
export interface RequestLimitOptions {
  /** Requests in flight at once from all clients. */
  maxTotal: number;
  /** Requests in flight at once from one client (one address). */
  maxPerClient: number;
}

export type Admission = { ok: true; release: () => void } | { ok: false; scope: 'client' | 'total'; limit: number };

export class RequestLimiter {
  private total = 0;
  private readonly perClient = new Map<string, number>();

  constructor(private readonly opts: RequestLimitOptions) {}

  /** In flight now, overall or from `client`. */
  inFlight(client?: string): number {
    return client === undefined ? this.total : (this.perClient.get(client) ?? 0);
  }

  /** A place for one request of `client`, or why not. `release` is idempotent. */
  admit(client: string): Admission {
    const mine = this.perClient.get(client) ?? 0;
    if (mine >= this.opts.maxPerClient) return { ok: false, scope: 'client', limit: this.opts.maxPerClient };
    if (this.total >= this.opts.maxTotal) return { ok: false, scope: 'total', limit: this.opts.maxTotal };
    this.total++;
    this.perClient.set(client, mine + 1);
    let released = false;
    return {
      ok: true,
      release: () => {
        if (released) return;
        released = true;
        this.total--;
        const left = (this.perClient.get(client) ?? 1) - 1;
        if (left <= 0) this.perClient.delete(client);
        else this.perClient.set(client, left);
      },
    };
  }
}
