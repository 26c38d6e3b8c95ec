/**
 * The server's HTTP side, before any WebSocket exists: the connection cap (every accepted
 * socket counts; one too many is answered 503 at once), the Host / Origin / token gate of an
 * upgrade, and the plain HTTP routes (`/livez`, `/readyz`, `/metrics`, 404 for the rest).
 */
import { STATUS_CODES, type IncomingMessage, type Server as HttpServer } from 'node:http';
import { isIP, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Registry } from 'prom-client';
import { isAllowedLoopbackHost } from '../../util/loopback.js';
import type { Logger } from '../../util/logger.js';
import { checkUpgrade, digest, type UpgradeVerdict } from './auth.js';
import { serveMetrics } from './metrics.js';

export interface HttpGateOptions {
  /** Over TLS the cap's refusal waits for the handshake, so it is said inside the TLS session. */
  secure: boolean;
  maxConnections: number;
  /** The listener is bound to a loopback address: only then is `Host` checked. */
  loopback: boolean;
  /** The host the server was asked to listen on (a name given is one of its own names). */
  host: string;
  /** The admin token's digest, or null. */
  admin: Buffer | null;
  log: Logger;
}

/** Who may connect: the server's options of the same names (options.ts). */
export interface AccessOptions {
  /** The token a client must present (with `tokens`, any of them). */
  token?: string;
  tokens?: string[];
  /** `Origin`s accepted besides none (a browser's page elsewhere is refused). */
  allowedOrigins?: string[];
  /** On a loopback listener, `Host` names accepted besides the loopback ones. */
  allowedHosts?: string[];
}

export class HttpGate {
  /** Every open TCP socket, upgraded or not: what the connection cap counts. */
  private open = 0;
  /** Every accepted TCP socket still open: a stop destroys what its peers keep open. */
  private readonly sockets = new Set<Socket>();
  private readonly expected: Buffer[] | null;
  private readonly allowedOrigins: ReadonlySet<string>;
  private readonly allowedHosts: ReadonlySet<string> | null;
  /** Why `/readyz` says 503 (e.g. "adopting": a successor is still adopting its predecessor's keepers), or null when ready. */
  private notReadyReason: string | null = null;

  constructor(
    private readonly http: HttpServer,
    access: AccessOptions,
    private readonly o: HttpGateOptions,
  ) {
    const tokens = [...(access.token !== undefined ? [access.token] : []), ...(access.tokens ?? [])];
    this.expected = tokens.length > 0 ? tokens.map(digest) : null;
    this.allowedOrigins = new Set(access.allowedOrigins ?? []);
    // Only a loopback listener knows which names are its own; elsewhere the token guards.
    // The name it was given (localhost, devbox.localhost) is one of them.
    const ownNames = isIP(o.host) ? [] : [o.host.toLowerCase().replace(/\.$/, '')];
    this.allowedHosts = o.loopback ? new Set([...ownNames, ...(access.allowedHosts ?? []).map((h) => h.toLowerCase())]) : null;

    // Every accepted TCP socket costs a descriptor, TLS handshake done or not: count them all.
    http.on('connection', (socket: Socket) => {
      this.open++;
      this.sockets.add(socket);
      socket.once('close', () => {
        this.open--;
        this.sockets.delete(socket);
      });
      if (!o.secure && this.open > o.maxConnections) refuseSocket(socket, this.atCapacityReason(), o.log);
    });
    // Over TLS the refusal must be said inside the TLS session, or the client reads garbage.
    if (o.secure) {
      http.on('secureConnection', (socket: Socket) => {
        if (this.open > o.maxConnections) refuseSocket(socket, this.atCapacityReason(), o.log);
      });
    }
  }

  /** Open TCP sockets (WebSocket and HTTP), as the connection cap counts them. */
  get openSockets(): number {
    return this.open;
  }

  /** `/readyz` answers 503 with `{"ready":false,"reason":…}` until called with null (restart adoption: "adopting"). */
  setNotReady(reason: string | null): void {
    this.notReadyReason = reason;
  }

  /** Serves the plain HTTP requests: `/metrics` (from `metrics`), `/livez`, `/readyz`, 404 for the rest. */
  serveRequests(metrics: Registry): void {
    const log = this.o.log;
    this.http.on('request', (req, res) => {
      if (refused.has(req.socket)) return;
      const badHost = this.hostRefusal(req);
      if (badHost) {
        res.writeHead(403, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(badHost) });
        res.end(badHost);
        return;
      }
      const path = (req.url ?? '/').split('?')[0];
      if (path === '/metrics') {
        serveMetrics(req, res, metrics, (r) => this.checkCredentials(r)).catch((err: unknown) => {
          log('error', `/metrics: ${(err as Error).message}`);
          if (!res.headersSent) res.writeHead(500);
          res.end();
        });
        return;
      }
      const probe = req.method === 'GET' || req.method === 'HEAD';
      // Alive: the process answers HTTP, ready or not (adopting, told not ready).
      if (path === '/livez' && probe) {
        res.writeHead(200, { 'content-length': '0' });
        res.end();
        return;
      }
      const ready = path === '/readyz' && probe;
      if (ready && this.notReadyReason !== null) {
        const body = JSON.stringify({ ready: false, reason: this.notReadyReason });
        res.writeHead(503, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        res.end(req.method === 'HEAD' ? undefined : body);
        return;
      }
      res.writeHead(ready ? 200 : 404, { 'content-length': '0' });
      res.end();
    });
  }

  /**
   * The gate of an upgrade: the verdict when it may become a WebSocket, or null once it was
   * answered (503 while `closing`, 403 for a foreign Host or Origin, 401 for a bad token) or
   * belongs to a socket already refused at accept time.
   */
  admitUpgrade(req: IncomingMessage, socket: Duplex, closing: boolean): Extract<UpgradeVerdict, { ok: true }> | null {
    const log = this.o.log;
    socket.on('error', () => {});
    if (refused.has(socket)) return null;
    if (closing) return rejectUpgrade(socket, 503, 'server is shutting down');
    const badHost = this.hostRefusal(req);
    if (badHost) {
      log('info', `refused upgrade from ${req.socket.remoteAddress}: ${badHost}`);
      return rejectUpgrade(socket, 403, badHost);
    }
    const verdict = this.checkCredentials(req);
    if (!verdict.ok) {
      log('info', `refused upgrade from ${req.socket.remoteAddress}: ${verdict.status} ${verdict.body || 'origin not allowed'}`);
      return rejectUpgrade(socket, verdict.status, verdict.body);
    }
    return verdict;
  }

  /**
   * What the HTTP server does not track: a rejected upgrade (or a refused socket) whose peer
   * keeps its side open would hold a stop forever.
   */
  destroySockets(): void {
    for (const socket of this.sockets) socket.destroy();
  }

  private checkCredentials(req: IncomingMessage): UpgradeVerdict {
    return checkUpgrade(req, this.expected, this.allowedOrigins, this.o.admin);
  }

  private hostRefusal(req: IncomingMessage): string | null {
    return this.allowedHosts && !isAllowedLoopbackHost(req.headers.host, this.allowedHosts)
      ? `host not allowed: ${JSON.stringify(req.headers.host)} (this server listens on loopback and accepts only loopback names; add one with --allow-host)`
      : null;
  }

  private atCapacityReason(): string {
    return `too many connections: this server allows at most ${this.o.maxConnections} at once (--max-connections); try again later`;
  }
}

/** Sockets answered 503 at accept time: the HTTP parser may still emit their request; it is ignored. */
const refused = new WeakSet<object>();

/** The head of a plain-text HTTP/1.1 answer written straight to a socket. */
function responseHead(status: number, headers: string[]): string {
  return `${[`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}`, ...headers].join('\r\n')}\r\n\r\n`;
}

/**
 * Over the cap: answer 503 at once, before the request arrives (an HTTP/1.1 client reads a
 * response whenever it comes), then keep reading what the peer sends (closing with unread
 * bytes would reset the connection and lose the answer) until it closes, at most 2 s.
 */
function refuseSocket(socket: Socket, reason: string, log: Logger): void {
  refused.add(socket);
  log('warn', `refused a connection from ${socket.remoteAddress}: ${reason}`);
  socket.on('error', () => {});
  const head = responseHead(503, [
    'content-type: text/plain; charset=utf-8',
    `content-length: ${Buffer.byteLength(reason)}`,
    'retry-after: 1',
    'connection: close',
  ]);
  socket.end(`${head}${reason}`);
  setTimeout(() => socket.destroy(), 2000).unref();
}

function rejectUpgrade(socket: Duplex, status: number, body: string): null {
  const head = responseHead(status, [
    ...(body ? ['content-type: text/plain; charset=utf-8'] : []),
    `content-length: ${Buffer.byteLength(body)}`,
    'connection: close',
  ]);
  socket.end(`${head}${body}`);
  // A peer that keeps its side open after the answer would hold the descriptor (and a place
  // under the connection cap) for as long as it likes: 2 s to read the answer, then closed.
  setTimeout(() => socket.destroy(), 2000).unref();
  return null;
}
