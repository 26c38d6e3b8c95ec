/**
 * A loopback TCP proxy that produces the faults flaky links really produce, for chaos tests
 * between a tether client and a server:
 * - cut: every live connection is reset (a VPN flap, a proxy killing idle sockets);
 * - cutRandomly: cuts at random moments until stopped;
 * - latency: every chunk is delayed, order preserved;
 * - black hole: bytes stop flowing in both directions but nothing is closed (a laptop that
 *   slept, a NAT that forgot the mapping). Bytes are held, not dropped, as TCP would
 *   retransmit them if the path came back; only keepalives can notice;
 * - refuse: new connections are reset at once (the server's host is unreachable).
 * It listens on 127.0.0.1 only and forwards to a loopback target.
 */
import { EventEmitter } from 'node:events';
import net from 'node:net';

export interface ChaosProxyOptions {
  targetPort: number;
  targetHost?: string;
}

export interface CutRandomlyOptions {
  minMs: number;
  maxMs: number;
  signal?: AbortSignal;
  /** Deterministic runs (e.g. fast-check): a source of numbers in [0, 1). */
  random?: () => number;
}

/** One direction of a proxied connection: delays chunks by the proxy's latency, in order. */
class DelayedPipe {
  private queue: { chunk: Buffer; due: number }[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly to: net.Socket,
    private readonly latencyMs: () => number,
  ) {}

  push(chunk: Buffer): void {
    const latency = this.latencyMs();
    if (latency <= 0 && this.queue.length === 0) {
      this.to.write(chunk);
      return;
    }
    this.queue.push({ chunk, due: Date.now() + latency });
    this.schedule();
  }

  private schedule(): void {
    if (this.timer || this.queue.length === 0) return;
    const wait = Math.max(0, this.queue[0]!.due - Date.now());
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const now = Date.now();
      while (this.queue.length > 0 && this.queue[0]!.due <= now) {
        if (!this.to.destroyed) this.to.write(this.queue.shift()!.chunk);
        else this.queue.shift();
      }
      this.schedule();
    }, wait);
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.queue = [];
  }
}

class ProxiedConnection {
  private readonly pipes: DelayedPipe[] = [];

  constructor(
    readonly client: net.Socket,
    readonly upstream: net.Socket,
    latencyMs: () => number,
    private readonly onGone: (c: ProxiedConnection) => void,
  ) {
    const toUpstream = new DelayedPipe(upstream, latencyMs);
    const toClient = new DelayedPipe(client, latencyMs);
    this.pipes.push(toUpstream, toClient);
    client.on('data', (chunk: Buffer) => toUpstream.push(chunk));
    upstream.on('data', (chunk: Buffer) => toClient.push(chunk));
    // A half-close or an error on either side ends the whole connection, like a real link.
    for (const socket of [client, upstream]) {
      socket.on('error', () => this.destroy());
      socket.on('close', () => this.destroy());
      socket.on('end', () => this.destroy());
    }
  }

  setFlowing(flowing: boolean): void {
    for (const socket of [this.client, this.upstream]) {
      if (flowing) socket.resume();
      else socket.pause();
    }
  }

  /** An abrupt cut: both peers see a reset, not an orderly close. */
  destroy(): void {
    for (const pipe of this.pipes) pipe.dispose();
    for (const socket of [this.client, this.upstream]) {
      if (socket.destroyed) continue;
      if (typeof socket.resetAndDestroy === 'function' && socket.readyState === 'open') socket.resetAndDestroy();
      else socket.destroy();
    }
    this.onGone(this);
  }
}

export class ChaosProxy extends EventEmitter {
  private readonly connections = new Set<ProxiedConnection>();
  private latency = 0;
  private blackholed = false;
  private refusing = false;
  private cutTimer: NodeJS.Timeout | undefined;
  private targetPort: number;
  private readonly targetHost: string;
  /** How many connections were cut so far (by cutAll or cutRandomly). */
  cuts = 0;

  private constructor(
    private readonly server: net.Server,
    options: ChaosProxyOptions,
  ) {
    super();
    this.targetPort = options.targetPort;
    this.targetHost = options.targetHost ?? '127.0.0.1';
    server.on('connection', (socket) => this.accept(socket));
  }

  static async start(options: ChaosProxyOptions): Promise<ChaosProxy> {
    const server = net.createServer({ noDelay: true });
    const proxy = new ChaosProxy(server, options);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    return proxy;
  }

  /** A proxy in front of a loopback server given by its URL (ws://127.0.0.1:PORT). */
  static inFrontOf(url: string): Promise<ChaosProxy> {
    return ChaosProxy.start({ targetPort: Number(new URL(url).port) });
  }

  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  get url(): string {
    return `ws://127.0.0.1:${this.port}`;
  }

  get activeConnections(): number {
    return this.connections.size;
  }

  /** Forward new connections to another port (a server restarted elsewhere). */
  setTarget(port: number): void {
    this.targetPort = port;
  }

  setLatency(ms: number): void {
    this.latency = Math.max(0, ms);
  }

  /** Stop (or restart) forwarding in both directions on every connection, without closing. */
  blackhole(on: boolean): void {
    this.blackholed = on;
    for (const connection of this.connections) connection.setFlowing(!on);
  }

  /** Reset new connections at once (true) or accept them again (false). */
  refuse(on: boolean): void {
    this.refusing = on;
  }

  /** Resets every live connection. Returns how many were cut. */
  cutAll(): number {
    const live = [...this.connections];
    for (const connection of live) connection.destroy();
    this.cuts += live.length;
    this.emit('cut', live.length);
    return live.length;
  }

  /** Cuts every live connection at random intervals in [minMs, maxMs] until stopCutting() or the signal. */
  cutRandomly({ minMs, maxMs, signal, random = Math.random }: CutRandomlyOptions): void {
    this.stopCutting();
    const next = () => {
      if (signal?.aborted) return;
      this.cutTimer = setTimeout(() => {
        this.cutAll();
        next();
      }, minMs + random() * Math.max(0, maxMs - minMs));
    };
    signal?.addEventListener('abort', () => this.stopCutting(), { once: true });
    next();
  }

  stopCutting(): void {
    clearTimeout(this.cutTimer);
    this.cutTimer = undefined;
  }

  /** Lifts every fault (random cuts, black hole, refusal, latency): the link is good again. */
  heal(): void {
    this.stopCutting();
    this.blackhole(false);
    this.refuse(false);
    this.setLatency(0);
  }

  async close(): Promise<void> {
    this.stopCutting();
    for (const connection of [...this.connections]) connection.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: net.Socket): void {
    if (this.refusing) {
      client.on('error', () => {});
      client.resetAndDestroy();
      return;
    }
    client.setNoDelay(true);
    const upstream = net.connect({ port: this.targetPort, host: this.targetHost, noDelay: true });
    const connection = new ProxiedConnection(client, upstream, () => this.latency, (c) => this.connections.delete(c));
    this.connections.add(connection);
    if (this.blackholed) connection.setFlowing(false);
    this.emit('connection');
  }
}
