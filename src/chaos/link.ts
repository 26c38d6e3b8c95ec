/**
 * One proxied connection (a link): the client's socket and the one to the target, a fault
 * pipe each way (pipe.ts), the byte quota it may still spend, and how it ends — a reset of
 * both sides, or an end of stream once a quota's bytes are out. Either side going away ends
 * the whole link, as a real one would. The proxy (proxy.ts) accepts links and applies faults.
 */
import type net from 'node:net';
import { performance } from 'node:perf_hooks';
import { FaultPipe, type LinkShape } from './pipe.js';
import type { CloseReason, ConnectionReport, Direction } from './proxy-types.js';

/** The byte quota a connection may still spend before it is cut. */
export interface Quota {
  direction: Direction;
  remaining: number;
}

export class ProxiedConnection {
  readonly openedAt = performance.now();
  readonly up: FaultPipe;
  readonly down: FaultPipe;
  quota: Quota | undefined;
  private ended = false;
  /** Between the end of a quota and both sides closing. */
  private ending = false;

  constructor(
    readonly id: number,
    readonly client: net.Socket,
    readonly upstream: net.Socket,
    private readonly proxy: { shape: () => LinkShape; random: () => number; highWaterMark?: number; quotaSpent(c: ProxiedConnection): void },
    private readonly onGone: (c: ProxiedConnection, reason: CloseReason, error?: Error) => void,
  ) {
    const pipeOptions = (direction: 'up' | 'down') => ({
      shape: proxy.shape,
      random: proxy.random,
      highWaterMark: proxy.highWaterMark,
      quota: (length: number) => this.take(direction, length),
    });
    this.up = new FaultPipe(client, upstream, pipeOptions('up'));
    this.down = new FaultPipe(upstream, client, pipeOptions('down'));
    // A half-close or an error on either side ends the whole connection, like a real link.
    let connected = false;
    upstream.once('connect', () => (connected = true));
    const sides: [net.Socket, CloseReason][] = [
      [client, 'client'],
      [upstream, 'target'],
    ];
    for (const [socket, side] of sides) {
      const reason = (): CloseReason => (side === 'target' && !connected ? 'target-unreachable' : side);
      const gone = (err?: Error) => {
        // Ending after a quota: both sides close on their own once they have read it all.
        if (this.ending) {
          if (this.client.destroyed && this.upstream.destroyed) this.destroy('quota');
          return;
        }
        this.destroy(reason(), err);
      };
      socket.on('error', (err) => gone(err));
      socket.on('close', () => gone());
      socket.on('end', () => gone());
    }
  }

  get remote(): string {
    return `${this.client.remoteAddress}:${this.client.remotePort}`;
  }

  report(): ConnectionReport {
    return {
      id: this.id,
      remote: this.remote,
      ageMs: Math.round(performance.now() - this.openedAt),
      up: { ...this.up.counters },
      down: { ...this.down.counters },
    };
  }

  setHolding(holding: boolean): void {
    this.up.setHolding(holding);
    this.down.setHolding(holding);
  }

  /**
   * Ends the connection once the quota's bytes are out. Each side sees end-of-stream right
   * after its last byte rather than a reset: a reset makes the kernel discard bytes that
   * arrived but were not read yet, so the count the peer sees would depend on timing. What
   * is still open after a second is reset.
   */
  async endAfterQuota(): Promise<void> {
    await Promise.all([this.up.finish(), this.down.finish()]);
    if (this.ended) return;
    this.ending = true;
    for (const socket of [this.client, this.upstream]) socket.end();
    setTimeout(() => this.destroy('quota'), 1000).unref();
  }

  /** An abrupt cut (or the end after a quota, or a peer gone): both peers see a reset. */
  destroy(reason: CloseReason, error?: Error): void {
    if (this.ended) return;
    this.ended = true;
    this.up.dispose();
    this.down.dispose();
    for (const socket of [this.client, this.upstream]) {
      if (socket.destroyed) continue;
      if (typeof socket.resetAndDestroy === 'function' && socket.readyState === 'open') socket.resetAndDestroy();
      else socket.destroy();
    }
    this.onGone(this, this.ending ? 'quota' : reason, error);
  }

  private take(direction: 'up' | 'down', length: number): number {
    const quota = this.quota;
    if (!quota || (quota.direction !== 'both' && quota.direction !== direction)) return length;
    if (quota.remaining <= 0) return 0;
    const allowed = Math.min(length, quota.remaining);
    quota.remaining -= allowed;
    // After the pipe has queued what it was allowed (hence the microtask).
    if (quota.remaining === 0) queueMicrotask(() => this.proxy.quotaSpent(this));
    return allowed;
  }
}
