/**
 * A session's two timers (session.ts): the TTL it lives for once detached (then it expires),
 * and, in the Codex dialect after a resume, the grace its held backlog waits for the client to
 * read it back before it is sent as notifications. Timers only, unref'd; the session says what
 * happens when they run out.
 */
export class SessionTimers {
  private ttl: NodeJS.Timeout | null = null;
  private grace: NodeJS.Timeout | null = null;

  constructor(
    /** Read when a timer starts: `ttlMs` may change with the session's life (`sessionKeep`). */
    private readonly limits: { readonly ttlMs: number; readonly resumeGraceMs: number },
    /** The TTL ran out: the session expires. */
    private readonly expire: () => void,
    /** The grace ran out: its processes send their held backlog after all. */
    private readonly releaseHolds: () => void,
  ) {}

  /** Detached: it expires after the TTL, unless a connection attaches first. */
  startTtl(): void {
    this.ttl = setTimeout(this.expire, this.limits.ttlMs);
    this.ttl.unref?.();
  }

  /** A connection attached: it no longer expires. */
  stopTtl(): void {
    if (this.ttl) {
      clearTimeout(this.ttl);
      this.ttl = null;
    }
  }

  /** Resumed in the Codex dialect: the held backlog waits the grace for the client to read it back. */
  startGrace(): void {
    this.grace = setTimeout(() => {
      this.grace = null;
      this.releaseHolds();
    }, this.limits.resumeGraceMs);
    this.grace.unref?.();
  }

  /** The connection went away: nothing is released into it. */
  stopGrace(): void {
    if (this.grace) {
      clearTimeout(this.grace);
      this.grace = null;
    }
  }

  /** The session ended: neither runs out any more. */
  stop(): void {
    this.stopTtl();
    this.stopGrace();
  }
}
