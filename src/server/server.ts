/**
 * The tether exec-server: HTTP (`/readyz`, `/metrics`) and WebSocket on one port,
 * Codex-compatible JSON-RPC, sessions that outlive their socket. See docs/protocol.md.
 * The options are in options.ts, the HTTP side before an upgrade (cap, Host/Origin/token,
 * routes) in http-gate.ts; how it starts (the unsafe configurations refused, the bind, the
 * state dir opened) in server-start.ts.
 */
import { EventEmitter } from 'node:events';
import type { IncomingMessage, Server as HttpServer } from 'node:http';
import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { isLoopbackName } from '../util/loopback.js';
import { formatExactBytes } from '../util/format.js';
import { digest, HttpGate, createMetricsRegistry } from './edge/index.js';
import { serverCapacity, defaultMaxConnections, defaultMaxHttpSockets, DescriptorBudget, descriptorLimit, type MemoryBudget, OutputShares } from './memory/index.js';
import { Connection, type BackpressureMarks } from './connection/index.js';
import { FsDefaults, type FsRegistration, type FsServerLimits } from './fs/index.js';
import { createRpcServer, type MethodsState } from './methods/index.js';
import type { ServerBackend } from './backend/index.js';
import { localBackend } from './local/index.js';
import { keepLimits, ServerMonitor, type Session } from './session/index.js';
import { Defaults, outputLimits, type TetherServerOptions } from './options.js';
import type { KeptServer } from './restart/index.js';
import { giveCloseReason } from '../util/ws-internals.js';
import { listeningFd } from '../util/node-internals.js';
import { stopClose } from '../protocol/close-reasons.js';

/** How long a stopping server waits for a client to answer its close frame before cutting the socket. */
const STOP_CLOSE_GRACE_MS = 1_000;

/** A connection the server took (the `connection` event's payload). */
export interface ConnectionInfo {
  /** Where it comes from: the peer's `address:port`, or `stdio`. */
  readonly remote: string;
}

/** The events of a `TetherServer`. */
export interface TetherServerEvents {
  /** A WebSocket passed the gate and became a connection (before `initialize`). */
  connection: [connection: ConnectionInfo];
  /** A detached session was not resumed in time: it and its processes are gone. */
  'session-expired': [sessionId: string];
  /** A session lost its connection; it lives `sessionTtlMs` unless resumed. */
  'session-detached': [sessionId: string];
  /** `close()` finished: nothing listens, every child is gone. */
  close: [];
}

/**
 * What tether's own modules and tests reach inside a server (`serverInternals`): not part of
 * the public entry (index.ts), which exports neither this nor the accessor.
 * @internal
 */
export interface ServerInternals {
  /** Sessions by id (attached or detached). */
  readonly sessions: ReadonlyMap<string, Session>;
  /** The server-wide memory budget (what every byte holder reports to). */
  readonly memory: MemoryBudget;
  /** Each connection as it is made (before `initialize`), the internal object behind the `connection` event. */
  onConnection(listener: (conn: Connection) => void): void;
}

const internalsOf = new WeakMap<TetherServer, ServerInternals>();

/** The internals of `server`, for tether's own modules and tests (never exported by index.ts). @internal */
export function serverInternals(server: TetherServer): ServerInternals {
  return internalsOf.get(server)!;
}

export class TetherServer extends EventEmitter<TetherServerEvents> {
  readonly url: string;
  readonly port: number;
  /** Bound to a loopback address (decided on the address bound, not on the name given). */
  readonly loopback: boolean;
  private readonly connections = new Set<Connection>();
  private readonly state: MethodsState;
  private readonly wss: WebSocketServer;
  private readonly gate: HttpGate;
  private readonly pingTimer: NodeJS.Timeout;
  private readonly stallTimer: NodeJS.Timeout;
  readonly maxConnections: number;
  /** The server-wide memory budget (what every byte holder reports to). */
  private readonly memory: MemoryBudget;
  /** Each new Connection, for `serverInternals(server).onConnection`. */
  private readonly connectionListeners: Array<(conn: Connection) => void> = [];
  private closing: Promise<void> | null = null;
  /** The largest message accepted (`maxMessageBytes`). @internal */
  readonly maxMessageBytes: number;
  private readonly rpc: ReturnType<typeof createRpcServer>['rpc'];
  /** The fs methods' per-session state (a restore rebuilds a record's watches and handles there). */
  private readonly fsRegistration: FsRegistration;
  private readonly marks: BackpressureMarks;
  private readonly maxInflight: number;
  private readonly stallMs: number;

  /**
   * A server on `http` (listening already, or never: stdio). Use `startServer`; tether's own
   * start (server-start.ts) calls this. `backend`: where the work is done (backend.ts), prepared already.
   * @internal
   */
  static create(http: HttpServer, opts: TetherServerOptions, host: string, backend: ServerBackend = localBackend): TetherServer {
    return new TetherServer(http, opts, host, backend);
  }

  private constructor(
    private readonly http: HttpServer,
    opts: TetherServerOptions,
    host: string,
    backend: ServerBackend,
  ) {
    super();
    const address = http.address();
    this.port = typeof address === 'object' && address ? address.port : (opts.port ?? Defaults.port);
    this.loopback = typeof address === 'object' && address !== null && isLoopbackName(address.address);
    const secure = opts.tls !== undefined;
    this.url = `${secure ? 'wss' : 'ws'}://${host.includes(':') ? `[${host}]` : host}:${this.port}`;
    const log = opts.logger ?? (() => {});
    this.maxMessageBytes = opts.maxMessageBytes ?? Defaults.maxMessageBytes;
    const descriptorLimitNow = descriptorLimit();
    this.maxConnections = opts.maxConnections ?? defaultMaxConnections(descriptorLimitNow);
    const descriptors = new DescriptorBudget(descriptorLimitNow, () => Math.max(0, this.maxConnections - this.socketCount));
    const fs: FsServerLimits = {
      ...FsDefaults,
      // Descriptors held by fs scale with the limit, so they leave room for connections and processes.
      maxOpenFiles: Math.max(16, Math.min(FsDefaults.maxOpenFiles, Math.floor(descriptorLimitNow / 8))),
      maxOperations: Math.max(8, Math.min(FsDefaults.maxOperations, Math.floor(descriptorLimitNow / 32))),
      ...opts.fs,
    };
    const httpSockets = defaultMaxHttpSockets(descriptorLimitNow);
    const capacity = serverCapacity({
      descriptorLimit: descriptorLimitNow,
      maxConnections: this.maxConnections,
      filesDescriptors: fs.maxOpenFiles + fs.maxOperations,
      httpSockets,
      memoryBudgetBytes: opts.memoryBudgetBytes,
      maxServerProcesses: opts.maxServerProcesses,
      maxPtys: opts.maxPtys,
    });
    log('info', capacity.summary);
    this.memory = capacity.memory;
    const keep = keepLimits(opts.sessionTtlMs ?? Defaults.sessionTtlMs, opts.maxSessionTtlMs ?? Defaults.maxSessionTtlMs);
    this.state = {
      sessions: new Map(),
      keep,
      descriptors,
      memory: capacity.memory,
      capacity: capacity.processes,
      maxSessions: opts.maxSessions ?? Defaults.maxSessions,
      maxSessionsPerToken: opts.maxSessionsPerToken ?? Defaults.maxSessionsPerToken,
      shares: new OutputShares(capacity.memory),
      livenessProbeMs: opts.livenessProbeMs ?? Defaults.livenessProbeMs,
      limits: {
        ttlMs: keep.ttlMs,
        resumeGraceMs: opts.resumeGraceMs ?? Defaults.resumeGraceMs,
        closedRetentionMs: opts.closedRetentionMs ?? Defaults.closedRetentionMs,
        output: outputLimits(opts),
        maxProcesses: opts.maxProcessesPerSession ?? Defaults.maxProcessesPerSession,
      },
      fs,
      httpSockets,
      log,
      monitor: new ServerMonitor(log, { auditArgv: opts.auditArgv ?? false }),
      adminCredential: opts.adminToken !== undefined ? digest(opts.adminToken) : null,
      backend,
      sessionHooks: {
        processesChanged: (s) => this.kept?.save(s),
        expired: (s) => {
          this.state.sessions.delete(s.id);
          this.kept?.remove(s.id);
          this.state.monitor.sessionEnded(s);
          log('info', `session ${s.shortId} expired; its processes were killed`);
          this.emit('session-expired', s.id);
        },
        detached: (s) => {
          this.state.monitor.sessionDetached(s);
          // debug: a reconnect is one info line, its resume's (which says how long it was detached).
          log('debug', `session ${s.shortId} detached; expires in ${s.limits.ttlMs} ms unless resumed`);
          this.emit('session-detached', s.id);
        },
      },
    };
    ({ rpc: this.rpc, fs: this.fsRegistration } = createRpcServer(this.state));
    this.marks = {
      highWaterBytes: opts.backpressure?.highWaterBytes ?? Defaults.highWaterBytes,
      lowWaterBytes: opts.backpressure?.lowWaterBytes ?? Defaults.lowWaterBytes,
    };
    this.wss = new WebSocketServer({
      noServer: true,
      perMessageDeflate: false,
      maxPayload: this.maxMessageBytes,
      clientTracking: false,
    });

    const initializeTimeoutMs = opts.initializeTimeoutMs ?? Defaults.initializeTimeoutMs;
    this.maxInflight = opts.maxInflightRequests ?? Defaults.maxInflightRequests;
    const stallMs = (this.stallMs = opts.stallTimeoutMs ?? Defaults.stallTimeoutMs);
    // A socket that never finishes its request headers is closed (408) as soon as it is late.
    http.headersTimeout = initializeTimeoutMs;
    http.requestTimeout = initializeTimeoutMs;
    this.gate = new HttpGate(http, opts, {
      secure,
      maxConnections: this.maxConnections,
      loopback: this.loopback,
      host,
      admin: this.state.adminCredential,
      log,
    });

    const metrics = createMetricsRegistry({
      monitor: this.state.monitor,
      sessions: this.state.sessions,
      connections: () => this.connections.size,
      sockets: () => this.socketCount,
      limits: {
        sessions: this.state.maxSessions,
        connections: this.maxConnections,
        processesPerSession: this.state.limits.maxProcesses,
        outputRetentionBytes: this.state.limits.output.retentionBytes,
      },
      memory: capacity.memory,
      capacity: capacity.processes,
      shares: this.state.shares,
      stateDirSaveFailures: () => this.kept?.saveFailures ?? 0,
    });

    this.gate.serveRequests(metrics);

    http.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      const verdict = this.gate.admitUpgrade(req, socket, this.closing !== null);
      if (!verdict) return;
      this.wss.handleUpgrade(req, socket, head, (ws) => {
        // ws closes an oversized message with a bare 1009; give the peer a reason it can act on.
        giveCloseReason(ws, 1009, `message exceeds the server's ${formatExactBytes(this.maxMessageBytes)} limit (max payload)`);
        const conn = this.onConnection(ws, verdict.credential, `${req.socket.remoteAddress}:${req.socket.remotePort}`);
        conn.requireInitializeWithin(initializeTimeoutMs);
        conn.meterReceiving(socket as Socket);
      });
    });

    const interval = opts.pingIntervalMs ?? Defaults.pingIntervalMs;
    this.pingTimer = setInterval(() => {
      for (const conn of this.connections) {
        if (conn.heartbeat()) continue;
        // Two pings unanswered: a half-open TCP connection. Drop it so its session detaches.
        log('info', `connection ${conn.remote} missed two pongs: dropped`);
        conn.ws.terminate();
      }
    }, interval);
    this.pingTimer.unref();

    this.stallTimer = setInterval(
      () => {
        const now = performance.now();
        for (const conn of this.connections) {
          if (conn.stalledFor(now) < stallMs) continue;
          log('info', `connection ${conn.remote} stopped reading (${conn.ws.bufferedAmount} bytes unsent for ${stallMs} ms): dropped`);
          conn.ws.terminate();
        }
      },
      Math.max(20, Math.min(1000, stallMs / 4)),
    );
    this.stallTimer.unref();

    internalsOf.set(this, {
      sessions: this.state.sessions,
      memory: this.memory,
      onConnection: (listener) => this.connectionListeners.push(listener),
    });
  }

  /** A state dir (restart adoption): kept processes, session records, and what a predecessor left (kept-server.ts). */
  private kept: KeptServer | null = null;

  /**
   * Uses the opened state dir (startServer, right after construction, before any client can
   * connect): what a predecessor left is restored, and processes are kept from now on.
   * @internal
   */
  useStateDir(kept: KeptServer): void {
    this.kept = kept;
    this.state.kept = kept;
    kept.restore({ ...this.state, fsRegistration: this.fsRegistration });
  }

  /**
   * Serves one link that is not a WebSocket upgrade (stdio-listener.ts): `socket` behaves as
   * the part of a `ws` WebSocket a Connection uses. Same methods, sessions and limits; no
   * token (the link is its own credential), and no binary frames.
   * @internal
   */
  adopt(socket: WebSocket, remote: string): Connection {
    const conn = this.onConnection(socket, Buffer.alloc(0), remote);
    conn.binaryFrames = false;
    return conn;
  }

  private onConnection(ws: WebSocket, credential: Buffer, remote: string): Connection {
    const conn = new Connection(ws, credential, this.rpc, this.marks, remote);
    conn.maxInflight = this.maxInflight;
    conn.maxRequestBytes = this.maxMessageBytes;
    conn.useMemoryBudget(this.memory);
    conn.receiveStallMs = this.stallMs;
    this.connections.add(conn);
    this.state.log('debug', `connection from ${remote}`);
    ws.on('error', (err) => this.state.log('warn', `connection ${remote}: ${err.message}`));
    ws.on('close', (code, reason) => {
      this.connections.delete(conn);
      this.state.log('debug', `connection ${remote} closed (${code}${reason.length ? ` ${reason.toString()}` : ''})`);
      conn.onClosed();
    });
    for (const listener of this.connectionListeners) listener(conn);
    this.emit('connection', { remote });
    return conn;
  }

  /**
   * Whether `/readyz` says ready (200) or 503 `{"ready":false,"reason":REASON}`: for an
   * application embedding the server (say, one that loads its own state first). Ready unless
   * told otherwise. A server on a state dir needs no call: it listens only once it has adopted
   * its predecessor's sessions, so its first 200 already means adoption is done.
   */
  setReady(ready: boolean, reason = 'not ready'): void {
    this.gate.setNotReady(ready ? null : reason);
  }

  /** @internal The listening socket's descriptor (what `tether serve --replace` hands to a successor), or null once closed. */
  get listeningFd(): number | null {
    return listeningFd(this.http);
  }

  /** Open TCP sockets (WebSocket and HTTP), as the connection cap counts them. */
  get socketCount(): number {
    return this.gate.openSockets;
  }

  /** Live sessions (attached or detached). */
  get sessionCount(): number {
    return this.state.sessions.size;
  }

  /**
   * Ends the session `id` at once, as its client's `session/close` would (the relay's
   * `closeOnDetach`: nobody can resume it); no session of that id: nothing.
   * @internal
   */
  closeSession(id: string): void {
    this.state.sessions.get(id)?.close();
  }

  /** Pids of every process of every session (for orphan checks). */
  childPids(): number[] {
    const pids: number[] = [];
    for (const s of this.state.sessions.values()) for (const p of s.processes.values()) if (p.pid) pids.push(p.pid);
    return pids;
  }

  /**
   * @internal (the `tether serve` command's exit path)
   * Last resort, synchronous (the CLI calls it on an uncaught exception and on exit): every
   * process's keeper is told to kill its tree. A server that dies without calling it loses
   * nothing either: each keeper sees its control socket close and does the same.
   */
  killAllChildrenSync(evenKept = false): void {
    for (const s of this.state.sessions.values()) s.killAllSync(evenKept);
  }

  /** @internal How long a kept stop keeps the processes for a successor (0 without a state dir). */
  get keptForMs(): number {
    return this.kept?.adoptWithinMs ?? 0;
  }

  /** What a stop keeps of the sessions: `{ keptMs }` when kept for a successor (clients told "restarting"), else null ("stopped"). */
  private keptOnStop(keep: boolean): { keptMs: number } | null {
    return keep && this.kept ? { keptMs: this.kept.adoptWithinMs } : null;
  }

  /**
   * Stops listening, tells every client why (docs/protocol.md), closes every connection. With
   * a state dir (restart adoption) it keeps by default: clients are told "restarting" (1012), and
   * every keeper is let go of alive for a successor to adopt within `adoptWithinMs`.
   * `{ keep: false }`, or no state dir: "stopped" (1001), and every child and its
   * descendants are killed.
   */
  close(options: { keep?: boolean } = {}): Promise<void> {
    this.closing ??= (async () => {
      const keep = options.keep !== false && this.kept !== null;
      clearInterval(this.pingTimer);
      clearInterval(this.stallTimer);
      const closedHttp = new Promise<void>((resolve) => this.http.close(() => resolve()));
      // Every client is told why before its socket goes (restart adoption): the close frame goes out
      // first, so no event of a process killed below can overtake it.
      const { code, reason } = stopClose(this.keptOnStop(keep));
      const goodbyes = [...this.connections].map((conn) => conn.closeWith(code, reason, STOP_CLOSE_GRACE_MS));
      const sessions = [...this.state.sessions.values()];
      if (keep) {
        this.kept!.handOver(sessions);
        this.state.sessions.clear();
        await Promise.all(goodbyes);
      } else {
        for (const s of sessions) s.expire();
        await Promise.all([...goodbyes, ...sessions.map((s) => s.waitAllClosed(2_000))]);
      }
      this.http.closeAllConnections?.();
      this.gate.destroySockets();
      await closedHttp;
      await this.kept?.close();
      this.emit('close');
    })();
    return this.closing;
  }
}

