/**
 * The one place the supervisor listens to a tether ExecClient (the client under an exec
 * server's transport): its `retry` and `state` events, typed by ExecClient's own event map,
 * turned into two verdicts, link down and link up. The client hides short drops; a drop that
 * is not short is down whatever sits between (a refusal; a proxy or tunnel that accepts and
 * then closes; a black hole the keepalive found): at the first failed recovery attempt, or
 * once the client has been recovering for `graceMs`, whichever comes first.
 */
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { ExecClientEventMap } from '../client/client.js';
import { errorText, isRefusal } from './errors.js';

export type TetherLinkEvents = Pick<ExecClientEventMap, 'retry' | 'state' | 'restarting'>;
export type LinkRetry = TetherLinkEvents['retry'][0];
export type LinkStateChange = TetherLinkEvents['state'][0];
export type LinkRestarting = TetherLinkEvents['restarting'][0];

/** How long a recovery may run unseen before the link counts as down. */
export const LINK_GRACE_MS = 1000;

export interface TetherLinkListener {
  /** A recovery attempt failed (`error` says why; a refusal means nobody listens). */
  onRetry(event: LinkRetry): void;
  /** The session changed state (recovering, connected again, failed). */
  onState(change: LinkStateChange): void;
  /** The server closed saying it restarts and keeps the session (the client reconnects at once). */
  onRestarting(event: LinkRestarting): void;
}

/** What the supervisor hears of one exec connection's link. */
export interface LinkVerdicts {
  /** The link is down (`reason`, one line); again with a fresher reason at each failed attempt. */
  down(reason: string, attempt: number): void;
  /** The session resumed after a down or restarting verdict. */
  up(attempt: number): void;
  /**
   * The server restarts and keeps the session for `keptMs` (sessions kept across a restart): not a failure and no
   * backoff; the client is already reconnecting at once.
   */
  restarting(keptMs: number): void;
}

/** Turns the client's events into verdicts; timers only for the grace period. */
export class LinkWatch implements TetherLinkListener {
  private isDown = false;
  /** Told "restarting": refusals and the grace period are expected until the successor answers. */
  private isRestarting = false;
  private grace: NodeJS.Timeout | undefined;

  constructor(
    private readonly verdicts: LinkVerdicts,
    private readonly graceMs = LINK_GRACE_MS,
  ) {}

  onRestarting(event: LinkRestarting): void {
    this.clearGrace();
    this.isRestarting = true;
    this.isDown = true;
    this.verdicts.restarting(event.keptMs);
  }

  onRetry(event: LinkRetry): void {
    this.clearGrace();
    // A restarting server refuses connections until its successor listens: still restarting.
    if (this.isRestarting) return;
    this.isDown = true;
    const what = isRefusal(event.error) ? 'the tether server refuses connections' : 'the tether server cannot be reached';
    this.verdicts.down(`${what} (${errorText(event.error)})`, event.attempt);
  }

  onState(change: LinkStateChange): void {
    if (change.state === 'connected') {
      this.clearGrace();
      if (!this.isDown) return;
      this.isDown = false;
      this.isRestarting = false;
      this.verdicts.up(change.attempt);
    } else if (change.state === 'recovering') {
      if (this.isDown || this.grace) return;
      const why = change.reason ? ` (${change.reason})` : '';
      this.grace = setTimeout(() => {
        this.grace = undefined;
        this.isDown = true;
        this.verdicts.down(`the tether link has been down for ${(this.graceMs / 1000).toFixed(1)} s${why}`, change.attempt);
      }, this.graceMs);
      this.grace.unref?.();
    } else {
      this.dispose(); // failed: the transport closes, and that is the supervisor's to handle
    }
  }

  dispose(): void {
    this.clearGrace();
  }

  private clearGrace(): void {
    if (this.grace) clearTimeout(this.grace);
    this.grace = undefined;
  }
}

/** What the adapter needs of the client: subscribing to those two events. */
interface LinkEmitter {
  on<K extends keyof TetherLinkEvents>(event: K, listener: (...args: TetherLinkEvents[K]) => void): unknown;
}

/**
 * Subscribes `listener` to the ExecClient under `transport` (ExecStdioClientTransport's
 * `client`). False when the transport has none (not an exec transport, or a test's stand-in).
 */
export function watchTetherLink(transport: Transport, listener: TetherLinkListener): boolean {
  const client = (transport as { client?: Partial<LinkEmitter> }).client;
  if (!client || typeof client.on !== 'function') return false;
  const emitter = client as LinkEmitter;
  emitter.on('retry', (event) => listener.onRetry(event));
  emitter.on('state', (change) => listener.onState(change));
  emitter.on('restarting', (event) => listener.onRestarting(event));
  return true;
}
