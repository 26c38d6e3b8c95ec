/**
 * The cap on outgoing `http/request` connections (http/request): each request in flight holds one
 * socket (its own, never pooled), counted per session and across the server. The server-wide
 * cap is set aside in the descriptor plan (descriptors.ts, capacity.ts), so requests can never
 * take the descriptors that connections, processes and files were promised. Over a cap the
 * request is refused at once with a reason that names it; nothing waits.
 */

export interface HttpSocketLimits {
  /** Outgoing sockets across the server. */
  max: number;
  /** Outgoing sockets one session may hold. */
  perSession: number;
}

export class OutgoingSockets {
  private total = 0;
  private readonly bySession = new Map<object, number>();

  constructor(readonly limits: HttpSocketLimits) {}

  get open(): number {
    return this.total;
  }

  /** Takes a socket for `owner` (give it back with the returned function), or says why not. */
  take(owner: object): { give: () => void } | { refusal: string } {
    const mine = this.bySession.get(owner) ?? 0;
    if (mine >= this.limits.perSession) {
      return {
        refusal:
          `too many outgoing connections: this session has ${mine} http/request in flight, at most ${this.limits.perSession} ` +
          `per session (${this.limits.max} across the server); wait for some to finish`,
      };
    }
    if (this.total >= this.limits.max) {
      return {
        refusal:
          `too many outgoing connections: ${this.total} http/request are in flight on this server, at most ${this.limits.max} ` +
          `(derived from its descriptor limit); wait for some to finish`,
      };
    }
    this.total++;
    this.bySession.set(owner, mine + 1);
    let given = false;
    return {
      give: () => {
        if (given) return;
        given = true;
        this.total--;
        const left = (this.bySession.get(owner) ?? 1) - 1;
        if (left > 0) this.bySession.set(owner, left);
        else this.bySession.delete(owner);
      },
    };
  }
}
