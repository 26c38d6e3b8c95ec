/**
 * The tether exec-server: HTTP (`/readyz`) and WebSocket on one port, Codex-compatible
 * JSON-RPC, sessions that outlive their socket. See PROTOCOL.md.
 */
import { EventEmitter } from 'node:events';
import { createServer, type IncomingMessage, type Server as HttpServer } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { checkUpgrade, digest } from './auth.js';
import { Connection, type BackpressureMarks } from './connection.js';
import { createRpcServer, type ServerState } from './methods.js';
import type { Session } from './session.js';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface TetherServerOptions {
  /** Interface to bind; 127.0.0.1 by default (loopback only). */
  host?: string;
  /** 8765 by default; 0 picks any free port. */
  port?: number;
  /** How long a detached session lives (30 s). */
  sessionTtlMs?: number;
  /**
   * After a resume, how long the output recorded while detached is protected until the
   * client reads it back (10 s); its children stay paused meanwhile. A client that never
   * reads gets Codex's behaviour after that: oldest output evicted, children running.
   */
  resumeGraceMs?: number;
  /** Output kept per process for `process/read` (1 MiB). */
  outputRetentionBytes?: number;
  /** How long a closed process stays readable (30 s). */
  closedRetentionMs?: number;
  /** Bearer token required on the upgrade request; off when undefined. */
  token?: string;
  /** `Origin` values allowed to connect (any other Origin gets 403). */
  allowedOrigins?: string[];
  /** Largest incoming WebSocket message (16 MiB); bigger ones close the connection with 1009. */
  maxMessageBytes?: number;
  /** Live processes per session (1024). */
  maxProcessesPerSession?: number;
  /** Sessions per server, attached or detached (10000). */
  maxSessions?: number;
  /** Server → client ping interval (30 s); a connection that missed the previous pong is dropped. */
  pingIntervalMs?: number;
  /**
   * When a client tries to resume a session that is still attached (-32010), the attached
   * connection is pinged and dropped unless it answers within this time (2 s), so a socket
   * that died silently does not hold its session for a whole heartbeat period.
   */
  livenessProbeMs?: number;
  /** Send-buffer marks for backpressure (defaults 4 MiB / 1 MiB). */
  backpressure?: Partial<BackpressureMarks>;
  logger?: (level: LogLevel, msg: string) => void;
}

export const Defaults = {
  host: '127.0.0.1',
  port: 8765,
  sessionTtlMs: 30_000,
  resumeGraceMs: 10_000,
  outputRetentionBytes: 1024 * 1024,
  closedRetentionMs: 30_000,
  maxMessageBytes: 16 * 1024 * 1024,
  maxProcessesPerSession: 1024,
  maxSessions: 10_000,
  pingIntervalMs: 30_000,
  livenessProbeMs: 2_000,
  highWaterBytes: 4 * 1024 * 1024,
  lowWaterBytes: 1024 * 1024,
} as const;

const STATUS_TEXT: Record<number, string> = { 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found' };

export class TetherServer extends EventEmitter {
  readonly url: string;
  readonly port: number;
  private readonly connections = new Set<Connection>();
  private readonly state: ServerState;
  private readonly wss: WebSocketServer;
  private readonly pingTimer: NodeJS.Timeout;
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
    this.url = `ws://${host.includes(':') ? `[${host}]` : host}:${this.port}`;
    const log = opts.logger ?? (() => {});
    this.maxMessageBytes = opts.maxMessageBytes ?? Defaults.maxMessageBytes;
    this.state = {
      sessions: new Map(),
      maxSessions: opts.maxSessions ?? Defaults.maxSessions,
      livenessProbeMs: opts.livenessProbeMs ?? Defaults.livenessProbeMs,
      limits: {
        ttlMs: opts.sessionTtlMs ?? Defaults.sessionTtlMs,
        resumeGraceMs: opts.resumeGraceMs ?? Defaults.resumeGraceMs,
        closedRetentionMs: opts.closedRetentionMs ?? Defaults.closedRetentionMs,
        outputRetentionBytes: opts.outputRetentionBytes ?? Defaults.outputRetentionBytes,
        maxProcesses: opts.maxProcessesPerSession ?? Defaults.maxProcessesPerSession,
      },
      log,
      sessionHooks: {
        expired: (s) => {
          this.state.sessions.delete(s.id);
          log('info', `session ${s.shortId} expired; its processes were killed`);
          this.emit('session-expired', s.id);
        },
        detached: (s) => {
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
    const expected = opts.token !== undefined ? digest(opts.token) : null;
    const allowedOrigins = new Set(opts.allowedOrigins ?? []);
    this.wss = new WebSocketServer({
      noServer: true,
      perMessageDeflate: false,
      maxPayload: this.maxMessageBytes,
      clientTracking: false,
    });

    http.on('request', (req, res) => {
      const path = (req.url ?? '/').split('?')[0];
      const ready = path === '/readyz' && (req.method === 'GET' || req.method === 'HEAD');
      res.writeHead(ready ? 200 : 404, { 'content-length': '0' });
      res.end();
    });

    http.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.on('error', () => {});
      if (this.closing) return rejectUpgrade(socket, 503, 'server is shutting down');
      const verdict = checkUpgrade(req, expected, allowedOrigins);
      if (!verdict.ok) {
        log('info', `refused upgrade from ${req.socket.remoteAddress}: ${verdict.status} ${verdict.body || 'origin not allowed'}`);
        return rejectUpgrade(socket, verdict.status, verdict.body);
      }
      this.wss.handleUpgrade(req, socket, head, (ws) => this.onConnection(ws, verdict.credential, req, rpc, marks));
    });

    const interval = opts.pingIntervalMs ?? Defaults.pingIntervalMs;
    this.pingTimer = setInterval(() => {
      for (const conn of this.connections) {
        // No pong since the last ping and no progress: a half-open TCP connection. Drop it so its session detaches.
        if (!conn.heartbeat()) conn.ws.terminate();
      }
    }, interval);
    this.pingTimer.unref();
  }

  private onConnection(
    ws: WebSocket,
    credential: Buffer,
    req: IncomingMessage,
    rpc: ReturnType<typeof createRpcServer>,
    marks: BackpressureMarks,
  ): void {
    const remote = `${req.socket.remoteAddress}:${req.socket.remotePort}`;
    // ws closes an oversized message with a bare 1009; give the peer a reason it can act on.
    const close = ws.close.bind(ws);
    const limit = this.maxMessageBytes;
    ws.close = (code?: number, reason?: string | Buffer) =>
      close(code, code === 1009 && !reason ? `message exceeds the server's ${formatBytes(limit)} limit (max payload)` : reason);
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
   * Last resort, synchronous: SIGKILL every child's process group. Children run in their own
   * groups (so that they can be killed as a tree), which also means they would outlive a
   * crashed server: the CLI calls this on an uncaught exception and on exit.
   */
  killAllChildrenSync(): void {
    for (const s of this.state.sessions.values()) for (const p of s.processes.values()) p.killGroup('SIGKILL');
  }

  /** Stops listening, drops every connection and kills every child (process groups). */
  close(): Promise<void> {
    this.closing ??= (async () => {
      clearInterval(this.pingTimer);
      const closedHttp = new Promise<void>((resolve) => this.http.close(() => resolve()));
      for (const conn of this.connections) conn.ws.terminate();
      const sessions = [...this.state.sessions.values()];
      for (const s of sessions) s.expire();
      await Promise.all(sessions.map((s) => s.waitAllClosed(2_000)));
      this.http.closeAllConnections?.();
      await closedHttp;
      this.emit('close');
    })();
    return this.closing;
  }
}

function formatBytes(n: number): string {
  for (const [unit, size] of [['GiB', 1024 ** 3], ['MiB', 1024 ** 2], ['KiB', 1024]] as const) {
    if (n >= size && n % size === 0) return `${n / size} ${unit}`;
  }
  return `${n} bytes`;
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
}

export async function startServer(opts: TetherServerOptions = {}): Promise<TetherServer> {
  const host = opts.host ?? Defaults.host;
  const http = createServer();
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(opts.port ?? Defaults.port, host, () => {
      http.off('error', reject);
      resolve();
    });
  });
  return new TetherServer(http, opts, host);
}

export { Connection } from './connection.js';
export { Session } from './session.js';
export { ManagedProcess } from './process.js';
