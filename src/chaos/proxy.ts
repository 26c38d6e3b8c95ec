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
 */
import { EventEmitter } from 'node:events';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { FaultPipe, type LinkShape, type PipeCounters } from './pipe.js';

export interface ChaosProxyOptions {
  targetPort: number;
  targetHost?: string;
  /** Where to listen (default 127.0.0.1, any free port). */
  listenHost?: string;
  listenPort?: number;
  /** Deterministic jitter and random cuts: a source of numbers in [0, 1). */
  random?: () => number;
  /** Queued bytes per direction and connection before the sender is paused (default 1 MiB). */
  highWaterMark?: number;
}

export interface CutRandomlyOptions {
  minMs: number;
  maxMs: number;
  signal?: AbortSignal;
  /** Deterministic runs (e.g. fast-check): a source of numbers in [0, 1). */
  random?: () => number;
}

/** 'up': client to target; 'down': target to client; 'both': the two added up. */
export type Direction = 'up' | 'down' | 'both';

export interface CutAfterBytesOptions {
  direction?: Direction;
  /** Every connection, now and later, gets the quota (default: only until the first cut). */
  repeat?: boolean;
}

export interface CutEachAfterOptions {
  /** Which bytes count (default 'down': what the target sends, e.g. a server's output). */
  direction?: Direction;
  /**
   * What happens once the quota crossed: 'reset' (default) resets both sides at once, so
   * whatever is still in flight (socket buffers, the peer's unread bytes) is lost;
   * 'blackhole' stops that connection in both directions without closing it (only a
   * keepalive can tell; the connection closes when a peer gives up on it). A function is
   * asked at each cut (a seeded mix of both).
   */
  action?: CutAction | (() => CutAction);
}

export type CutAction = 'reset' | 'blackhole';

export type BlackholeMode = 'hold' | 'drop';

/** What a connection did, as reported when it opens, closes or is cut. */
export interface ConnectionReport {
  id: number;
  /** The client's address and port. */
  remote: string;
  ageMs: number;
  /** Client to target: forwarded, still held (lost if the connection is cut now), dropped. */
  up: PipeCounters;
  /** Target to client. */
  down: PipeCounters;
}

/** Why a connection ended. */
export type CloseReason = 'cut' | 'quota' | 'client' | 'target' | 'target-unreachable' | 'proxy';

/** The faults in force right now. */
export interface FaultState {
  latencyMs: number;
  jitterMs: number;
  bandwidth: number;
  blackhole: false | BlackholeMode;
  refusing: boolean;
  cutting: false | { minMs: number; maxMs: number };
  quota: false | { bytes: number; direction: Direction; repeat: boolean };
}

export interface ChaosStats {
  /** Since the proxy started, in ms. */
  uptimeMs: number;
  accepted: number;
  refused: number;
  active: number;
  peakActive: number;
  /** Connections reset by a cut (cutAll, interval cuts). */
  cuts: number;
  /** Connections ended by a byte quota. */
  quotaCuts: number;
  targetFailures: number;
  up: PipeCounters;
  down: PipeCounters;
}

export interface ChaosProxyEvents {
  connection: [report: ConnectionReport];
  /** `cutEachAfter` with action 'blackhole' stopped a connection (it stays open). */
  blackholed: [report: ConnectionReport];
  close: [report: ConnectionReport, reason: CloseReason, error?: Error];
  cut: [count: number, reports: ConnectionReport[]];
  refused: [remote: string];
  fault: [state: FaultState];
}

const zero = (): PipeCounters => ({ forwarded: 0, held: 0, dropped: 0 });
const add = (into: PipeCounters, more: PipeCounters) => {
  into.forwarded += more.forwarded;
  into.held += more.held;
  into.dropped += more.dropped;
};

/** The byte quota a connection may still spend before it is cut. */
interface Quota {
  direction: Direction;
  remaining: number;
}

class ProxiedConnection {
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
  private readonly startedAt = performance.now();
  private nextId = 1;
  private readonly totals = {
    accepted: 0,
    refused: 0,
    peakActive: 0,
    quotaCuts: 0,
    targetFailures: 0,
    up: zero(),
    down: zero(),
  };
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
    const up = { ...this.totals.up };
    const down = { ...this.totals.down };
    for (const connection of this.connections) {
      add(up, connection.up.counters);
      add(down, connection.down.counters);
    }
    return {
      uptimeMs: Math.round(performance.now() - this.startedAt),
      accepted: this.totals.accepted,
      refused: this.totals.refused,
      active: this.connections.size,
      peakActive: this.totals.peakActive,
      cuts: this.cuts,
      quotaCuts: this.totals.quotaCuts,
      targetFailures: this.totals.targetFailures,
      up,
      down,
    };
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
      this.totals.refused++;
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
    this.totals.accepted++;
    this.totals.peakActive = Math.max(this.totals.peakActive, this.connections.size);
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
    add(this.totals.up, connection.up.counters);
    add(this.totals.down, connection.down.counters);
    if (reason === 'quota') this.totals.quotaCuts++;
    if (reason === 'target-unreachable') this.totals.targetFailures++;
    this.emit('close', connection.report(), reason, error);
  }
}
