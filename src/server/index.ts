/**
 * The tether exec-server: HTTP (`/readyz`) and WebSocket on one port, Codex-compatible
 * JSON-RPC, sessions that outlive their socket. See docs/protocol.md.
 */
import { EventEmitter } from 'node:events';
import { createServer, type IncomingMessage, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP, type AddressInfo, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { isAllowedLoopbackHost, isLoopbackName } from '../util/loopback.js';
import { checkUpgrade, digest } from './auth.js';
import { serverCapacity } from './capacity.js';
import { defaultMaxConnections, defaultMaxHttpSockets, DescriptorBudget, descriptorLimit } from './descriptors.js';
import { Connection, type BackpressureMarks } from './connection.js';
import type { MemoryBudget } from './memory-budget.js';
import { OutputShares } from './fair-share.js';
import { FsDefaults, type FsServerLimits } from './fs/methods.js';
import { createRpcServer, type ServerState } from './methods.js';
import { prepareKeepers } from './keeper.js';
import { protectServerProcess } from './native.js';
import { createMetricsRegistry, serveMetrics } from './metrics.js';
import { ServerMonitor } from './monitor.js';
import type { OutputLimits } from './process.js';
import type { Session } from './session.js';
import type { Logger } from '../util/logger.js';
import { invalidDuration } from '../util/timeouts.js';
import { giveCloseReason } from '../util/ws-internals.js';

export type { LogLevel } from '../util/logger.js';

export interface TetherServerOptions {
  /** Interface to bind; 127.0.0.1 by default (loopback only). */
  host?: string;
  /** 8765 by default; 0 picks any free port. */
  port?: number;
  /** How long a detached session lives (30 s). */
  sessionTtlMs?: number;
  /**
   * Codex dialect (no `acks`): after a resume, how long the output recorded while detached
   * waits for the client to read it back with `process/read` (2 s); live output of that
   * process waits behind it. A client that does not read it gets it as notifications then.
   */
  resumeGraceMs?: number;
  /**
   * Output per process not acknowledged by the client (sent and unsent) at which the server
   * stops reading the child, so it blocks on write (8 MiB): what memory a process can take,
   * and, with `acks`, what can be in flight (throughput per process is at most window / RTT).
   */
  outputWindowBytes?: number;
  /** Acknowledged output kept per process for `process/read` (1 MiB). */
  outputRetentionBytes?: number;
  /** How long a closed process stays readable (30 s). */
  closedRetentionMs?: number;
  /** Bearer token required on the upgrade request; off when undefined. */
  token?: string;
  /**
   * Serve `wss://` (TLS) with this certificate chain and private key (PEM). Without it the
   * server speaks plain `ws://`, fit for loopback or behind a TLS proxy.
   */
  tls?: { cert: string | Buffer; key: string | Buffer };
  /** More tokens accepted besides `token`, each its own identity (sessions belong to the token that created them). */
  tokens?: string[];
  /**
   * A token that may also list every session (`session/list`, `tether ps`); it is accepted
   * like any token. Without it each client lists only the sessions of its own token.
   */
  adminToken?: string;
  /** Audit lines carry the whole argv (by default only argv[0]: arguments can hold secrets). */
  auditArgv?: boolean;
  /** `Origin` values allowed to connect (any other Origin gets 403). */
  allowedOrigins?: string[];
  /**
   * On a loopback listener, `Host` names accepted besides loopback ones (localhost,
   * *.localhost, 127.0.0.0/8, ::1); any other Host gets 403 (DNS rebinding). The port in
   * the header is never compared (ssh -L forwards from another port).
   */
  allowedHosts?: string[];
  /**
   * Listening on a non-loopback address without a token is refused at start (anyone who
   * reaches the port could run commands); true overrides that (`--insecure-no-token`).
   */
  insecureNoToken?: boolean;
  /**
   * Resolves `host` when it is a name (default: the system resolver, as `listen` would). A
   * loopback name (localhost, *.localhost) is trusted only once it resolves to a loopback
   * address, and the server binds that very address. Injectable for tests.
   */
  lookup?: (hostname: string) => Promise<{ address: string; family: number }>;
  /** Largest incoming WebSocket message (16 MiB); bigger ones close the connection with 1009. */
  maxMessageBytes?: number;
  /**
   * Requests in flight per connection (4096): each waiting one (a long-poll) holds memory,
   * so past this a new request is answered -32600 at once.
   */
  maxInflightRequests?: number;
  /** Live processes per session (1024). */
  maxProcessesPerSession?: number;
  /**
   * Bytes of everything clients and children can make the server hold (output not yet
   * acknowledged or kept for replay, queued input, send buffers, file data): from 90 % of it
   * the sessions over their fair share pause, and at 100 % they are refused new processes
   * (fair-share.ts). Default: a quarter
   * of the memory limit (RAM, or the cgroup's if lower), at most 1 GiB.
   */
  memoryBudgetBytes?: number;
  /**
   * Processes (and their keepers) on the whole server at once. Default: derived from the
   * descriptor limit (what connections, files and the server keep aside, at 4 per process)
   * and the machine's process ids.
   */
  maxServerProcesses?: number;
  /** tty processes on the whole server at once. Default: kernel.pty.max less kernel.pty.reserve, at most the process cap. */
  maxPtys?: number;
  /** Sessions per server, attached or detached (10000). */
  maxSessions?: number;
  /**
   * Sessions one token may have at once, attached or detached (256; with auth off every
   * client counts as one token). The memory budget's output is shared fairly between tokens,
   * then between each token's sessions (server/fair-share.ts): this bounds the sessions a
   * token can split its share into.
   */
  maxSessionsPerToken?: number;
  /** Server → client ping interval (30 s); a connection that misses two pongs in a row is dropped. */
  pingIntervalMs?: number;
  /**
   * A connection whose send buffer holds bytes and has not moved for this long (30 s) is
   * dropped and its session detaches: a client that stops reading cannot pin its session,
   * and its paused children, forever.
   */
  stallTimeoutMs?: number;
  /**
   * A connection must complete `initialize` this soon after its upgrade, and a socket must
   * send its HTTP request headers this soon after it opens (5 s); otherwise it is closed.
   */
  initializeTimeoutMs?: number;
  /**
   * Open sockets (WebSocket and plain HTTP) at most; one more is answered HTTP 503 with the
   * reason. Default: a quarter of the descriptor limit (RLIMIT_NOFILE), at most 10,000, so
   * the server refuses clearly long before accept() would fail with EMFILE.
   */
  maxConnections?: number;
  /**
   * When a client tries to resume a session that is still attached (-32010), the attached
   * connection is pinged and dropped unless it answers within this time (2 s), so a socket
   * that died silently does not hold its session for a whole heartbeat period.
   */
  livenessProbeMs?: number;
  /** Send-buffer marks: events wait in the output logs above the high mark until the buffer drains to the low one (1 MiB / 256 KiB). */
  backpressure?: Partial<BackpressureMarks>;
  /** Limits of the filesystem methods: readFile size, handles, memory (see `FsDefaults`). */
  fs?: Partial<FsServerLimits>;
  logger?: Logger;
}

export const Defaults = {
  host: '127.0.0.1',
  port: 8765,
  sessionTtlMs: 30_000,
  resumeGraceMs: 2_000,
  outputWindowBytes: 8 * 1024 * 1024,
  outputRetentionBytes: 1024 * 1024,
  /** Output read ahead of an attached connection's send buffer, and the largest joined chunk. */
  readAheadBytes: 1024 * 1024,
  maxChunkBytes: 1024 * 1024,
  /** Largest process/read answer (decoded bytes). */
  readCapBytes: 8 * 1024 * 1024,
  closedRetentionMs: 30_000,
  maxMessageBytes: 16 * 1024 * 1024,
  maxProcessesPerSession: 1024,
  maxInflightRequests: 4096,
  maxSessions: 10_000,
  maxSessionsPerToken: 256,
  pingIntervalMs: 30_000,
  stallTimeoutMs: 30_000,
  initializeTimeoutMs: 5_000,
  livenessProbeMs: 2_000,
  highWaterBytes: 1024 * 1024,
  lowWaterBytes: 256 * 1024,
} as const;

const STATUS_TEXT: Record<number, string> = { 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 503: 'Service Unavailable' };

export class TetherServer extends EventEmitter {
  readonly url: string;
  readonly port: number;
  /** Bound to a loopback address (decided on the address bound, not on the name given). */
  readonly loopback: boolean;
  private readonly connections = new Set<Connection>();
  private readonly state: ServerState;
  private readonly wss: WebSocketServer;
  private readonly pingTimer: NodeJS.Timeout;
  private readonly stallTimer: NodeJS.Timeout;
  /** Every open TCP socket, upgraded or not: what the connection cap counts. */
  private openSockets = 0;
  /** Every accepted TCP socket still open: a stop destroys what its peers keep open. */
  private readonly sockets = new Set<Socket>();
  readonly maxConnections: number;
  /** The server-wide memory budget (what every byte holder reports to). */
  readonly memory: MemoryBudget;
  private closing: Promise<void> | null = null;
  private readonly maxMessageBytes: number;

  /** Use `startServer`. */
  constructor(
    private readonly http: HttpServer,
    opts: TetherServerOptions,
    host: string,
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
    const descriptors = new DescriptorBudget(descriptorLimitNow, () => Math.max(0, this.maxConnections - this.openSockets));
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
    this.state = {
      sessions: new Map(),
      descriptors,
      memory: capacity.memory,
      capacity: capacity.processes,
      maxSessions: opts.maxSessions ?? Defaults.maxSessions,
      maxSessionsPerToken: opts.maxSessionsPerToken ?? Defaults.maxSessionsPerToken,
      shares: new OutputShares(capacity.memory),
      livenessProbeMs: opts.livenessProbeMs ?? Defaults.livenessProbeMs,
      limits: {
        ttlMs: opts.sessionTtlMs ?? Defaults.sessionTtlMs,
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
      sessionHooks: {
        expired: (s) => {
          this.state.sessions.delete(s.id);
          this.state.monitor.sessionEnded(s);
          log('info', `session ${s.shortId} expired; its processes were killed`);
          this.emit('session-expired', s.id);
        },
        detached: (s) => {
          this.state.monitor.sessionDetached(s);
          log('info', `session ${s.shortId} detached; expires in ${s.limits.ttlMs} ms unless resumed`);
          this.emit('session-detached', s.id);
        },
      },
    };
    const rpc = createRpcServer(this.state);
    const marks: BackpressureMarks = {
      highWaterBytes: opts.backpressure?.highWaterBytes ?? Defaults.highWaterBytes,
      lowWaterBytes: opts.backpressure?.lowWaterBytes ?? Defaults.lowWaterBytes,
    };
    const tokens = [...(opts.token !== undefined ? [opts.token] : []), ...(opts.tokens ?? [])];
    const expected = tokens.length > 0 ? tokens.map(digest) : null;
    const admin = this.state.adminCredential;
    const allowedOrigins = new Set(opts.allowedOrigins ?? []);
    // Only a loopback listener knows which names are its own; elsewhere the token guards.
    // The name it was given (localhost, devbox.localhost) is one of them.
    const ownNames = isIP(host) ? [] : [host.toLowerCase().replace(/\.$/, '')];
    const allowedHosts = this.loopback ? new Set([...ownNames, ...(opts.allowedHosts ?? []).map((h) => h.toLowerCase())]) : null;
    const hostRefusal = (req: IncomingMessage): string | null =>
      allowedHosts && !isAllowedLoopbackHost(req.headers.host, allowedHosts)
        ? `host not allowed: ${JSON.stringify(req.headers.host)} (this server listens on loopback and accepts only loopback names; add one with --allow-host)`
        : null;
    this.wss = new WebSocketServer({
      noServer: true,
      perMessageDeflate: false,
      maxPayload: this.maxMessageBytes,
      clientTracking: false,
    });

    const initializeTimeoutMs = opts.initializeTimeoutMs ?? Defaults.initializeTimeoutMs;
    const maxInflight = opts.maxInflightRequests ?? Defaults.maxInflightRequests;
    // A socket that never finishes its request headers is closed (408) as soon as it is late.
    http.headersTimeout = initializeTimeoutMs;
    http.requestTimeout = initializeTimeoutMs;
    // Every accepted TCP socket costs a descriptor, TLS handshake done or not: count them all.
    http.on('connection', (socket: Socket) => {
      this.openSockets++;
      this.sockets.add(socket);
      socket.once('close', () => {
        this.openSockets--;
        this.sockets.delete(socket);
      });
      if (!secure && this.openSockets > this.maxConnections) refuseSocket(socket, this.atCapacityReason(), log);
    });
    // Over TLS the refusal must be said inside the TLS session, or the client reads garbage.
    if (secure) {
      http.on('secureConnection', (socket: Socket) => {
        if (this.openSockets > this.maxConnections) refuseSocket(socket, this.atCapacityReason(), log);
      });
    }

    const metrics = createMetricsRegistry({
      monitor: this.state.monitor,
      sessions: this.state.sessions,
      connections: () => this.connections.size,
      sockets: () => this.openSockets,
      limits: {
        sessions: this.state.maxSessions,
        connections: this.maxConnections,
        processesPerSession: this.state.limits.maxProcesses,
        outputRetentionBytes: this.state.limits.output.retentionBytes,
      },
      memory: capacity.memory,
      capacity: capacity.processes,
      shares: this.state.shares,
    });

    http.on('request', (req, res) => {
      if (refused.has(req.socket)) return;
      const badHost = hostRefusal(req);
      if (badHost) {
        res.writeHead(403, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(badHost) });
        res.end(badHost);
        return;
      }
      const path = (req.url ?? '/').split('?')[0];
      if (path === '/metrics') {
        serveMetrics(req, res, metrics, (r) => checkUpgrade(r, expected, allowedOrigins, admin)).catch((err: unknown) => {
          log('error', `/metrics: ${(err as Error).message}`);
          if (!res.headersSent) res.writeHead(500);
          res.end();
        });
        return;
      }
      const ready = path === '/readyz' && (req.method === 'GET' || req.method === 'HEAD');
      res.writeHead(ready ? 200 : 404, { 'content-length': '0' });
      res.end();
    });

    http.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.on('error', () => {});
      if (refused.has(socket)) return;
      if (this.closing) return rejectUpgrade(socket, 503, 'server is shutting down');
      const badHost = hostRefusal(req);
      if (badHost) {
        log('info', `refused upgrade from ${req.socket.remoteAddress}: ${badHost}`);
        return rejectUpgrade(socket, 403, badHost);
      }
      const verdict = checkUpgrade(req, expected, allowedOrigins, admin);
      if (!verdict.ok) {
        log('info', `refused upgrade from ${req.socket.remoteAddress}: ${verdict.status} ${verdict.body || 'origin not allowed'}`);
        return rejectUpgrade(socket, verdict.status, verdict.body);
      }
      this.wss.handleUpgrade(req, socket, head, (ws) => {
        const conn = this.onConnection(ws, verdict.credential, req, rpc, marks);
        conn.requireInitializeWithin(initializeTimeoutMs);
        conn.maxInflight = maxInflight;
        conn.maxRequestBytes = this.maxMessageBytes;
        conn.useMemoryBudget(this.memory);
        conn.receiveStallMs = stallMs;
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

    const stallMs = opts.stallTimeoutMs ?? Defaults.stallTimeoutMs;
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
  }

  private onConnection(
    ws: WebSocket,
    credential: Buffer,
    req: IncomingMessage,
    rpc: ReturnType<typeof createRpcServer>,
    marks: BackpressureMarks,
  ): Connection {
    const remote = `${req.socket.remoteAddress}:${req.socket.remotePort}`;
    // ws closes an oversized message with a bare 1009; give the peer a reason it can act on.
    giveCloseReason(ws, 1009, `message exceeds the server's ${formatBytes(this.maxMessageBytes)} limit (max payload)`);
    const conn = new Connection(ws, credential, rpc, marks, remote);
    this.connections.add(conn);
    this.state.log('debug', `connection from ${remote}`);
    ws.on('error', (err) => this.state.log('warn', `connection ${remote}: ${err.message}`));
    ws.on('close', (code, reason) => {
      this.connections.delete(conn);
      this.state.log('debug', `connection ${remote} closed (${code}${reason.length ? ` ${reason.toString()}` : ''})`);
      conn.onClosed();
    });
    this.emit('connection', conn);
    return conn;
  }

  private atCapacityReason(): string {
    return `too many connections: this server allows at most ${this.maxConnections} at once (--max-connections); try again later`;
  }

  /** Open TCP sockets (WebSocket and HTTP), as the connection cap counts them. */
  get socketCount(): number {
    return this.openSockets;
  }

  /** Live sessions (attached or detached). */
  get sessionCount(): number {
    return this.state.sessions.size;
  }

  /** Sessions by id, for tests and diagnostics. */
  get sessions(): ReadonlyMap<string, Session> {
    return this.state.sessions;
  }

  /** Pids of every process of every session (for orphan checks). */
  childPids(): number[] {
    const pids: number[] = [];
    for (const s of this.state.sessions.values()) for (const p of s.processes.values()) if (p.pid) pids.push(p.pid);
    return pids;
  }

  /**
   * Last resort, synchronous (the CLI calls it on an uncaught exception and on exit): every
   * process's keeper is told to kill its tree. A server that dies without calling it loses
   * nothing either: each keeper sees its control socket close and does the same.
   */
  killAllChildrenSync(): void {
    for (const s of this.state.sessions.values()) s.killAllSync();
  }

  /** Stops listening, drops every connection and kills every child and its descendants. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      clearInterval(this.pingTimer);
      clearInterval(this.stallTimer);
      const closedHttp = new Promise<void>((resolve) => this.http.close(() => resolve()));
      for (const conn of this.connections) conn.ws.terminate();
      const sessions = [...this.state.sessions.values()];
      for (const s of sessions) s.expire();
      await Promise.all(sessions.map((s) => s.waitAllClosed(2_000)));
      this.http.closeAllConnections?.();
      // What the HTTP server does not track: a rejected upgrade (or a refused socket) whose
      // peer keeps its side open would hold the stop forever.
      for (const socket of this.sockets) socket.destroy();
      await closedHttp;
      this.emit('close');
    })();
    return this.closing;
  }
}

function outputLimits(opts: TetherServerOptions): OutputLimits {
  const windowBytes = opts.outputWindowBytes ?? Defaults.outputWindowBytes;
  return {
    windowBytes,
    retentionBytes: opts.outputRetentionBytes ?? Defaults.outputRetentionBytes,
    readAheadBytes: Math.min(Defaults.readAheadBytes, windowBytes),
    // A quarter window at most: a chunk is acknowledged whole, so several must fit in the
    // window for the child to be read while the client acknowledges (window/4: how acks batch).
    maxChunkBytes: Math.max(1, Math.min(Defaults.maxChunkBytes, Math.floor(windowBytes / 4))),
    readCapBytes: Defaults.readCapBytes,
  };
}

function formatBytes(n: number): string {
  for (const [unit, size] of [['GiB', 1024 ** 3], ['MiB', 1024 ** 2], ['KiB', 1024]] as const) {
    if (n >= size && n % size === 0) return `${n / size} ${unit}`;
  }
  return `${n} bytes`;
}

/** Sockets answered 503 at accept time: the HTTP parser may still emit their request; it is ignored. */
const refused = new WeakSet<object>();

/**
 * Over the cap: answer 503 at once, before the request arrives (an HTTP/1.1 client reads a
 * response whenever it comes), then keep reading what the peer sends (closing with unread
 * bytes would reset the connection and lose the answer) until it closes, at most 2 s.
 */
function refuseSocket(socket: Socket, reason: string, log: Logger): void {
  refused.add(socket);
  log('warn', `refused a connection from ${socket.remoteAddress}: ${reason}`);
  socket.on('error', () => {});
  socket.end(
    `HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(reason)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n${reason}`,
  );
  setTimeout(() => socket.destroy(), 2000).unref();
}

function rejectUpgrade(socket: Duplex, status: number, body: string): void {
  const text = STATUS_TEXT[status] ?? 'Error';
  const headers = [
    `HTTP/1.1 ${status} ${text}`,
    ...(body ? ['content-type: text/plain; charset=utf-8'] : []),
    `content-length: ${Buffer.byteLength(body)}`,
    'connection: close',
  ];
  socket.end(`${headers.join('\r\n')}\r\n\r\n${body}`);
  // A peer that keeps its side open after the answer would hold the descriptor (and a place
  // under the connection cap) for as long as it likes: 2 s to read the answer, then closed.
  setTimeout(() => socket.destroy(), 2000).unref();
}

/** `startServer` refused an unsafe configuration (before listening). */
export class InsecureConfigError extends Error {
  override readonly name = 'InsecureConfigError';
}

export async function startServer(opts: TetherServerOptions = {}): Promise<TetherServer> {
  // Before anything of a session exists: children must not reach the server's memory or descriptors.
  protectServerProcess();
  prepareKeepers();
  for (const [key, value] of Object.entries(opts)) {
    const invalid = key.endsWith('Ms') && value !== undefined ? invalidDuration(value) : null;
    if (invalid) throw new RangeError(`startServer: ${key} ${invalid} (got ${String(value)})`);
  }
  const host = opts.host ?? Defaults.host;
  const guarded = opts.token !== undefined || opts.insecureNoToken === true;
  const refuse = (where: string) =>
    new InsecureConfigError(
      `refusing to listen on ${where} without a token: anyone who reaches this port could run commands as this user ` +
        `(give a token with --token-file or TETHER_TOKEN, or accept the risk with --insecure-no-token)`,
    );
  if (!guarded && !isLoopbackName(host)) throw refuse(host);
  // A loopback *name* is only a claim (a resolver, /etc/hosts, can point it anywhere): decide
  // on the address it resolves to, and bind that very address, before anything listens.
  let bindAddress = host;
  if (!guarded && isIP(host.replace(/^\[(.*)\]$/, '$1')) === 0) {
    const resolved = await (opts.lookup ?? dnsLookup)(host);
    if (!isLoopbackName(resolved.address)) throw refuse(`${host} (it resolves to ${resolved.address}, not a loopback address)`);
    bindAddress = resolved.address;
  }
  const initializeTimeoutMs = opts.initializeTimeoutMs ?? Defaults.initializeTimeoutMs;
  const checkEvery = Math.max(50, Math.min(1000, Math.floor(initializeTimeoutMs / 4)));
  const http: HttpServer = opts.tls
    ? // A TLS handshake that never finishes is an idle socket too.
      createHttpsServer({ ...opts.tls, handshakeTimeout: initializeTimeoutMs, connectionsCheckingInterval: checkEvery })
    : createServer({ connectionsCheckingInterval: checkEvery });
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(opts.port ?? Defaults.port, bindAddress, () => {
      http.off('error', reject);
      resolve();
    });
  });
  // And once more on what was actually bound.
  const bound = (http.address() as AddressInfo | null)?.address ?? '';
  if (!guarded && !isLoopbackName(bound)) {
    await new Promise<void>((resolve) => http.close(() => resolve()));
    throw refuse(`${host} (bound to ${bound}, not a loopback address)`);
  }
  return new TetherServer(http, opts, host);
}

export { Connection } from './connection.js';
export { Session } from './session.js';
export { ManagedProcess } from './process.js';
