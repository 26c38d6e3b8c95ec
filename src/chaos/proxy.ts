/**
 * A TCP proxy that produces the faults flaky links really produce, for chaos tests of a
 * tether client and server (the project's own tests and `tether chaos` for users' tests):
 * - cuts: every live connection is reset (a VPN flap, a proxy killing idle sockets), now,
 *   at fixed intervals or at random ones;
 * - a byte quota: each connection dies after N bytes (a link that drops mid-transfer);
 * - latency with jitter (order preserved, as TCP preserves it) and a bandwidth cap;
 * - black hole: bytes stop flowing in both directions but nothing is closed (a laptop that
 *   slept, a NAT that forgot the mapping). By default bytes are held, not lost, as TCP would
 *   retransmit them if the path came back; only keepalives can notice. Or dropped for good;
 * - refuse: new connections are reset at once (the server's host is unreachable).
 * It listens on 127.0.0.1 unless told otherwise; what it does is reported as events, and
 * `stats()` sums it up.
 *
 * This file accepts connections and applies the faults; one proxied connection (its pipes,
 * quota and end) is link.ts, the sums of `stats()` stats.ts, the surface's types
 * proxy-types.ts.
 */
import { EventEmitter } from 'node:events';
import net from 'node:net';
import { ProxiedConnection } from './link.js';
import type { LinkShape } from './pipe.js';
import type {
  BlackholeMode,
  ChaosProxyEvents,
  ChaosProxyOptions,
  ChaosStats,
  CloseReason,
  CutAction,
  CutAfterBytesOptions,
  CutEachAfterOptions,
  CutRandomlyOptions,
  Direction,
  FaultState,
} from './proxy-types.js';
import { ProxyTotals } from './stats.js';

export type {
  BlackholeMode,
  ChaosProxyEvents,
  ChaosProxyOptions,
  ChaosStats,
  CloseReason,
  ConnectionReport,
  CutAction,
  CutAfterBytesOptions,
  CutEachAfterOptions,
  CutRandomlyOptions,
  Direction,
  FaultState,
} from './proxy-types.js';

export class ChaosProxy extends EventEmitter<ChaosProxyEvents> {
  private readonly connections = new Set<ProxiedConnection>();
  private readonly shape: LinkShape = { latencyMs: 0, jitterMs: 0, bandwidth: 0, blackhole: false };
  private refusing = false;
  private refusals = 0;
  private cutting: FaultState['cutting'] = false;
  private quotaRule: FaultState['quota'] = false;
  /** `cutEachAfter`: a quota drawn per connection, and what to do when it is spent. */
  private eachRule: { draw: () => number; direction: Direction; action: () => CutAction } | false = false;
  private cutTimer: NodeJS.Timeout | undefined;
  private targetPort: number;
  private readonly targetHost: string;
  private readonly random: () => number;
  private nextId = 1;
  private readonly totals = new ProxyTotals();
  /** How many connections were cut so far (by cutAll, cutEvery or cutRandomly). */
  cuts = 0;

  private constructor(
    private readonly server: net.Server,
    private readonly options: ChaosProxyOptions,
  ) {
    super();
    this.targetPort = options.targetPort;
    this.targetHost = options.targetHost ?? '127.0.0.1';
    this.random = options.random ?? Math.random;
    server.on('connection', (socket) => this.accept(socket));
  }

  static async start(options: ChaosProxyOptions): Promise<ChaosProxy> {
    const server = net.createServer({ noDelay: true });
    const proxy = new ChaosProxy(server, options);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.listenPort ?? 0, options.listenHost ?? '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    return proxy;
  }

  /** A proxy in front of a loopback server given by its URL (ws://127.0.0.1:PORT). */
  static inFrontOf(url: string, options: Omit<ChaosProxyOptions, 'targetPort' | 'targetHost'> = {}): Promise<ChaosProxy> {
    const parsed = new URL(url);
    return ChaosProxy.start({ ...options, targetPort: Number(parsed.port), targetHost: parsed.hostname.replace(/^\[(.*)\]$/, '$1') });
  }

  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  get host(): string {
    return (this.server.address() as net.AddressInfo).address;
  }

  get url(): string {
    const host = this.host.includes(':') ? `[${this.host}]` : this.host;
    return `ws://${host}:${this.port}`;
  }

  get activeConnections(): number {
    return this.connections.size;
  }

  /** Forward new connections to another port (a server restarted elsewhere). */
  setTarget(port: number): void {
    this.targetPort = port;
  }

  /** Delays every chunk in each direction by `ms` ± `jitterMs` (uniform), order preserved. */
  setLatency(ms: number, jitterMs = 0): void {
    this.shape.latencyMs = Math.max(0, ms);
    this.shape.jitterMs = Math.max(0, Math.min(jitterMs, this.shape.latencyMs));
    this.changed();
  }

  /** Caps each direction of each connection to `bytesPerSecond` (0 lifts the cap). */
  setBandwidth(bytesPerSecond: number): void {
    this.shape.bandwidth = Math.max(0, bytesPerSecond);
    this.changed();
  }

  /**
   * Stops (or restarts) forwarding in both directions on every connection, without closing.
   * 'hold' keeps the bytes and delivers them when the hole is lifted; 'drop' loses them.
   */
  blackhole(on: boolean, mode: BlackholeMode = 'hold'): void {
    this.shape.blackhole = on ? mode : false;
    for (const connection of this.connections) connection.setHolding(this.shape.blackhole === 'hold');
    this.changed();
  }

  /** Reset new connections at once (true) or accept them again (false). */
  refuse(on: boolean): void {
    this.refusing = on;
    this.changed();
  }

  /** Reset only the next `count` new connections, then accept again (a flap at connect time). */
  refuseNext(count: number): void {
    this.refusals = count;
  }

  /** Resets every live connection. Returns how many were cut. */
  cutAll(): number {
    const live = [...this.connections];
    const reports = live.map((c) => c.report());
    for (const connection of live) connection.destroy('cut');
    this.cuts += live.length;
    this.emit('cut', live.length, reports);
    return live.length;
  }

  /** Cuts every live connection every `intervalMs` until stopCutting(), heal() or the signal. */
  cutEvery(intervalMs: number, { signal }: { signal?: AbortSignal } = {}): void {
    this.cutRandomly({ minMs: intervalMs, maxMs: intervalMs, signal });
  }

  /** Cuts every live connection at random intervals in [minMs, maxMs] until stopCutting() or the signal. */
  cutRandomly({ minMs, maxMs, signal, random = this.random }: CutRandomlyOptions): void {
    this.stopCutting();
    if (signal?.aborted) return;
    const next = () => {
      this.cutTimer = setTimeout(() => {
        this.cutAll();
        next();
      }, minMs + random() * Math.max(0, maxMs - minMs));
    };
    signal?.addEventListener('abort', () => this.stopCutting(), { once: true });
    this.cutting = { minMs, maxMs: Math.max(minMs, maxMs) };
    next();
    this.changed();
  }

  stopCutting(): void {
    clearTimeout(this.cutTimer);
    this.cutTimer = undefined;
    if (this.cutting) {
      this.cutting = false;
      this.changed();
    }
  }

  /**
   * Ends a connection once `bytes` more have crossed it (in `direction`): the bytes up to the
   * quota are delivered, nothing after. Applies to every live connection and to new ones,
   * until the first such cut (or, with `repeat`, until lifted).
   */
  cutAfterBytes(bytes: number, { direction = 'both', repeat = false }: CutAfterBytesOptions = {}): void {
    if (!(bytes > 0)) throw new RangeError(`cutAfterBytes: expected a positive byte count, got ${bytes}`);
    this.quotaRule = { bytes, direction, repeat };
    for (const connection of this.connections) connection.quota = { direction, remaining: bytes };
    this.changed();
  }

  /**
   * Every connection, live and new, is cut after its own quota of bytes (`draw()`, called
   * once per connection: a seeded source gives a reproducible schedule) crossed it in
   * `direction`: reset, or black-holed (see `CutEachAfterOptions`). A connection's report is
   * emitted with the cut ('close' with reason 'quota', or 'blackholed'), so a test can tell
   * what was in flight each time. Until stopCuttingAfterBytes() or heal().
   */
  cutEachAfter(draw: () => number, { direction = 'down', action = 'reset' }: CutEachAfterOptions = {}): void {
    this.stopCuttingAfterBytes();
    this.eachRule = { draw, direction, action: typeof action === 'function' ? action : () => action };
    for (const connection of this.connections) this.armEach(connection);
    this.quotaRule = { bytes: Number.NaN, direction, repeat: true };
    this.changed();
  }

  private armEach(connection: ProxiedConnection): void {
    if (!this.eachRule) return;
    const bytes = Math.max(1, Math.floor(this.eachRule.draw()));
    connection.quota = { direction: this.eachRule.direction, remaining: bytes };
    if (this.quotaRule) this.quotaRule.bytes = bytes;
  }

  /** Lifts the byte quota from live and new connections. */
  stopCuttingAfterBytes(): void {
    this.eachRule = false;
    if (!this.quotaRule) return;
    this.quotaRule = false;
    for (const connection of this.connections) connection.quota = undefined;
    this.changed();
  }

  /** Lifts every fault (cuts, quota, black hole, refusal, latency, bandwidth): the link is good again. */
  heal(): void {
    this.stopCutting();
    this.stopCuttingAfterBytes();
    this.blackhole(false);
    this.refuse(false);
    this.refusals = 0;
    this.setLatency(0);
    this.setBandwidth(0);
  }

  faults(): FaultState {
    return {
      latencyMs: this.shape.latencyMs,
      jitterMs: this.shape.jitterMs,
      bandwidth: this.shape.bandwidth,
      blackhole: this.shape.blackhole,
      refusing: this.refusing,
      cutting: this.cutting && { ...this.cutting },
      quota: this.quotaRule && { ...this.quotaRule },
    };
  }

  stats(): ChaosStats {
    return this.totals.snapshot(this.connections, this.cuts);
  }

  async close(): Promise<void> {
    this.stopCutting();
    for (const connection of [...this.connections]) connection.destroy('proxy');
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private changed(): void {
    this.emit('fault', this.faults());
  }

  private accept(client: net.Socket): void {
    if (this.refusing || this.refusals > 0) {
      if (!this.refusing) this.refusals--;
      const remote = `${client.remoteAddress}:${client.remotePort}`;
      client.on('error', () => {});
      client.resetAndDestroy();
      this.totals.refusedOne();
      this.emit('refused', remote);
      return;
    }
    client.setNoDelay(true);
    const upstream = net.connect({ port: this.targetPort, host: this.targetHost, noDelay: true });
    const connection = new ProxiedConnection(
      this.nextId++,
      client,
      upstream,
      {
        shape: () => this.shape,
        random: this.random,
        highWaterMark: this.options.highWaterMark,
        quotaSpent: (c) => this.quotaSpent(c),
      },
      (c, reason, error) => this.gone(c, reason, error),
    );
    if (this.eachRule) this.armEach(connection);
    else if (this.quotaRule) connection.quota = { direction: this.quotaRule.direction, remaining: this.quotaRule.bytes };
    this.connections.add(connection);
    this.totals.opened(this.connections.size);
    if (this.shape.blackhole === 'hold') connection.setHolding(true);
    this.emit('connection', connection.report());
  }

  private quotaSpent(connection: ProxiedConnection): void {
    const each = this.eachRule;
    if (each) {
      connection.quota = undefined;
      if (each.action() === 'blackhole') {
        connection.setHolding(true);
        this.emit('blackholed', connection.report());
      } else {
        connection.destroy('quota');
      }
      return;
    }
    if (this.quotaRule && !this.quotaRule.repeat) this.stopCuttingAfterBytes();
    void connection.endAfterQuota();
  }

  private gone(connection: ProxiedConnection, reason: CloseReason, error?: Error): void {
    if (!this.connections.delete(connection)) return;
    this.totals.closed(connection, reason);
    this.emit('close', connection.report(), reason, error);
  }
}
