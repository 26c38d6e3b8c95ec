/**
 * Whether a connection's peer is still there: the server heartbeat (a ping each interval, two
 * unanswered in a row drop it, one that queued behind a draining backlog excused), the probe
 * of a connection whose session someone tries to resume, the send-stall clock (how long the
 * send buffer has been non-empty without a write completing), and the deadline for `initialize`.
 *
 * The connection keeps its public `alive` flag (a pong since the last ping); this sets it,
 * pings, and terminates the socket when the peer is gone.
 */
import { performance } from 'node:perf_hooks';
import type WebSocket from 'ws';

/** What liveness needs of its connection. */
export interface LivenessLink {
  readonly ws: WebSocket;
  readonly closed: boolean;
  readonly session: object | null;
  /** The session it watches read-only (extension `attach`): initialized as well. */
  readonly watching: object | null;
  /** Pong seen since the last ping. */
  alive: boolean;
}

/**
 * Whether the ping of the heartbeat that ends now counts as missed: unanswered, and not
 * excused — a ping that queued behind a backlog which has since drained in part is late, not
 * lost (a slow reader behind megabytes of output sees it late, but it is reading).
 */
export function pongMissed(alive: boolean, backloggedAtPing: boolean, pingAt: number, progressAt: number): boolean {
  return !alive && !(backloggedAtPing && progressAt > pingAt);
}

export class Liveness {
  /** Heartbeats in a row whose ping went unanswered (and unexcused): two drop the connection. */
  private missedPongs = 0;
  private backloggedAtPing = false;
  private pingAt = 0;
  /**
   * When the send buffer last moved: a write reached the kernel (its callback ran) or the
   * buffer was seen empty. Only completed writes count: a frame merely queued behind a peer
   * that stopped reading (a ping, more output) is no progress.
   */
  private progressAt = performance.now();
  private probeTimer: NodeJS.Timeout | null = null;
  private initializeTimer: NodeJS.Timeout | null = null;

  constructor(private readonly link: LivenessLink) {}

  /** A pong arrived: the peer is there (and a probe is answered). */
  pong(): void {
    this.link.alive = true;
    if (this.probeTimer) {
      clearTimeout(this.probeTimer);
      this.probeTimer = null;
    }
  }

  /** A write reached the kernel: the send buffer moved. */
  progressed(): void {
    this.progressAt = performance.now();
  }

  /**
   * Server heartbeat, every ping interval: false (drop it) when the peer missed two pongs in
   * a row; `afterPing` runs once the ping was written. A peer that reads nothing at all is the
   * send-stall rule's (`stalledFor`).
   */
  heartbeat(afterPing: () => void): boolean {
    const ws = this.link.ws;
    if (this.link.alive) this.missedPongs = 0;
    else if (pongMissed(this.link.alive, this.backloggedAtPing, this.pingAt, this.progressAt)) this.missedPongs++;
    if (this.missedPongs >= 2) return false;
    this.link.alive = false;
    this.pingAt = performance.now();
    this.backloggedAtPing = ws.bufferedAmount > 0;
    ws.ping(undefined, undefined, afterPing);
    return true;
  }

  /** How long the send buffer has been non-empty without any write completing (0 when it is empty or moving). */
  stalledFor(now: number): number {
    if (this.link.ws.bufferedAmount === 0) {
      this.progressAt = now;
      return 0;
    }
    return now - this.progressAt;
  }

  /** Closes the connection unless it has a session within `ms`. */
  requireInitializeWithin(ms: number): void {
    const ws = this.link.ws;
    this.initializeTimer = setTimeout(() => {
      this.initializeTimer = null;
      if (this.link.closed || this.link.session || this.link.watching) return;
      ws.close(1008, `no initialize within ${ms} ms`);
      // Do not wait 30 s for the close handshake of a peer that may never answer.
      setTimeout(() => ws.terminate(), 1000).unref();
    }, ms);
    this.initializeTimer.unref();
  }

  /** Pings now; without a pong within `timeoutMs` the socket is terminated. */
  probe(timeoutMs: number): void {
    const ws = this.link.ws;
    if (this.link.closed || this.probeTimer) return;
    this.probeTimer = setTimeout(() => {
      this.probeTimer = null;
      if (!this.link.closed) ws.terminate();
    }, timeoutMs);
    this.probeTimer.unref?.();
    try {
      ws.ping();
    } catch {
      ws.terminate();
    }
  }

  /** The connection is gone: no timer of its runs. */
  dispose(): void {
    if (this.probeTimer) clearTimeout(this.probeTimer);
    if (this.initializeTimer) clearTimeout(this.initializeTimer);
  }
}
