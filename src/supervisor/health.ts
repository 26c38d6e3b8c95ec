/**
 * Health probes of one connected MCP server: an MCP ping (tools/list when the server does not
 * implement ping, or speaks 2026-07-28, which has no ping: a cheap real request instead)
 * every healthIntervalMs ± healthJitter. Probes only warn (healthy ↔
 * degraded after healthFailureThreshold failures in a row); a probe that finds the link
 * itself broken hands it to the supervisor as a loss.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { applyJitter } from '../util/backoff.js';
import { errorText, isConnectionClosed, isMethodNotFound, isTransportLoss } from './errors.js';
import type { Logger, ServerHealth, SupervisorOptions } from './types.js';

export type HealthOptions = Pick<SupervisorOptions, 'healthIntervalMs' | 'healthJitter' | 'healthTimeoutMs' | 'healthFailureThreshold'>;

/** What the monitor needs of its supervisor. */
export interface HealthHost<C> {
  /** `conn` is the supervisor's current connection. */
  isCurrent(conn: C): boolean;
  /** ... and the supervisor is connected through it. */
  isLive(conn: C): boolean;
  clientOf(conn: C): Client;
  /** The connection's era has no `ping` (2026-07-28). */
  pingless?(conn: C): boolean;
  /** A probe found the link broken (refused, session unknown): a transport loss. */
  onLinkLost(conn: C, reason: string): void;
  onDegraded(consecutiveFailures: number, lastError: string): void;
  onRestored(): void;
}

export class HealthMonitor<C> {
  private _health: ServerHealth = 'unknown';
  private timer: NodeJS.Timeout | undefined;
  private _consecutiveFailures = 0;
  private _lastError: string | null = null;
  private _lastCheckAt: number | null = null;
  private pingUnsupported = false;

  constructor(
    private readonly options: HealthOptions,
    private readonly host: HealthHost<C>,
    private readonly random: () => number,
    private readonly log: Logger,
    private readonly name: string,
  ) {}

  /** `unknown` until a first check (a connection that initializes and lists is one). */
  get health(): ServerHealth {
    return this._health;
  }
  get consecutiveFailures(): number {
    return this._consecutiveFailures;
  }
  get lastError(): string | null {
    return this._lastError;
  }
  get lastCheckAt(): number | null {
    return this._lastCheckAt;
  }

  /** A connection initialized and listed at `at`: that is a first check, passed. Returns whether health was degraded. */
  connected(at: number): boolean {
    const wasDegraded = this._health === 'degraded';
    this._health = 'healthy';
    this._lastCheckAt = at;
    this._consecutiveFailures = 0;
    this.pingUnsupported = false;
    return wasDegraded;
  }

  /** Probes `conn` after the next interval (and after each probe while it stays live). */
  schedule(conn: C): void {
    this.stop();
    if (this.options.healthIntervalMs <= 0) return;
    const delay = applyJitter(this.options.healthIntervalMs, this.options.healthJitter, this.random);
    this.timer = setTimeout(() => void this.probe(conn), delay);
    // Health checks alone must not keep a process alive.
    this.timer.unref?.();
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** One health probe; only warns (degraded/restored), never reconnects. */
  private async probe(conn: C): Promise<void> {
    if (!this.host.isLive(conn)) return;
    const client = this.host.clientOf(conn);
    const opts = { timeout: this.options.healthTimeoutMs };
    try {
      if (!this.pingUnsupported && !this.host.pingless?.(conn)) {
        try {
          await client.ping(opts);
        } catch (err) {
          if (!isMethodNotFound(err)) throw err;
          this.pingUnsupported = true;
          this.log('info', `[${this.name}] ping unsupported, health checks use tools/list`);
          await client.listTools(undefined, opts);
        }
      } else {
        await client.listTools(undefined, opts);
      }
      if (!this.host.isCurrent(conn)) return;
      this._lastCheckAt = Date.now();
      this._consecutiveFailures = 0;
      if (this._health === 'degraded') {
        this._health = 'healthy';
        this.log('info', `[${this.name}] health restored`);
        this.host.onRestored();
      }
    } catch (err) {
      if (!this.host.isCurrent(conn)) return;
      if (isTransportLoss(err) && !isConnectionClosed(err)) {
        // Not a slow or unwell server but a broken link (refused, session unknown): that is a
        // transport loss, and a loss reconnects whoever notices it.
        this.host.onLinkLost(conn, errorText(err));
        return;
      }
      this._lastCheckAt = Date.now();
      this._consecutiveFailures += 1;
      this._lastError = errorText(err);
      this.log('warn', `[${this.name}] health check failed (${this._consecutiveFailures}): ${this._lastError}`);
      if (this._health === 'healthy' && this._consecutiveFailures >= this.options.healthFailureThreshold) {
        this._health = 'degraded';
        this.host.onDegraded(this._consecutiveFailures, this._lastError);
      }
    } finally {
      if (this.host.isLive(conn)) this.schedule(conn);
    }
  }
}
