import { createHash, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import type { Logger, ServerSummary } from '../../supervisor/index.js';
import type { Gateway, GatewayEvent } from '../gateway.js';
import { AccessControl } from './access.js';
import { createGatewayServer, hostStreamOpened } from '../mcp-server.js';
import { createModernHttp, type ModernHttp } from '../modern-host.js';
import { RequestAdmission } from './admission.js';
import { header, readBody, sendJson, sendJsonRpcError } from './http-io.js';
import { LOGIN_PAGE_HTML, STATUS_PAGE_HTML } from './status-page.js';

export interface GatewayHttpOptions {
  host?: string;
  /** 0 = any free port. */
  port?: number;
  logger?: Logger;
  /** SSE keep-alive comment period on /events (proxies cut idle streams). Default 15000. */
  sseKeepAliveMs?: number;
  /** Largest request body accepted on /mcp (413 beyond it). Default 4 MiB. */
  maxBodyBytes?: number;
  /**
   * /mcp POSTs whose body is still arriving, at once (16): each holds up to `maxBodyBytes`, so
   * this bounds what unfinished uploads can make the gateway hold. One more is answered 503
   * with Retry-After. A body must arrive within `bodyTimeoutMs`.
   */
  maxPendingBodies?: number;
  /** Bodies still arriving at once from one client address (4); one more is answered 503. */
  maxPendingBodiesPerClient?: number;
  /** How long a request (headers and body) may take to arrive; a slower one is cut (408). Default 30 s. */
  bodyTimeoutMs?: number;
  /**
   * MCP sessions at once (256). At the cap a new session evicts the one idle the longest (no
   * open stream; its client gets 404 and initializes again); with none idle it is answered 503.
   */
  maxSessions?: number;
  /**
   * Requests in flight at once (a call waiting on its backend, a `subscriptions/listen`
   * stream), both MCP eras: from all clients (256); from one client (64), which is one 2025
   * MCP session or one 2026-07-28 client address; from one network (half of `maxRequests`),
   * which is every client on one host's addresses (all of loopback is one, an IPv6 /64 one).
   * One more is answered 429 with Retry-After, saying which bound it met.
   */
  maxRequests?: number;
  maxRequestsPerClient?: number;
  maxRequestsPerNetwork?: number;
  /**
   * What the requests in flight may hold, weighed before they are parsed (request-weight.ts:
   * twice a body's bytes plus 64 bytes per JSON value it makes): from all clients (256 MiB),
   * from one client (64 MiB: also the heaviest one request, refused 413 beyond it), from one
   * network (half the total). One more is answered 429 (413 when it alone is too heavy).
   */
  maxRequestMemory?: number;
  maxRequestMemoryPerClient?: number;
  maxRequestMemoryPerNetwork?: number;
  /** Older names of `maxRequests` and `maxRequestsPerClient`. */
  maxModernRequests?: number;
  maxModernRequestsPerClient?: number;
  /** An MCP session with no request and no open stream for this long is closed. Default 10 min. */
  sessionIdleMs?: number;
  /** Required on every endpoint but /healthz and /readyz (Bearer, or the status page's cookie). */
  token?: string;
  /** Origins besides the gateway's own allowed to call it from a browser. */
  allowedOrigins?: string[];
  /** Host names besides loopback (and the bound address) requests may be addressed to. */
  allowedHosts?: string[];
}

export interface GatewayHttp {
  /** http://HOST:PORT */
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

interface Session {
  transport: StreamableHTTPServerTransport;
  server: Server;
  lastSeen: number;
  /** Open responses (a GET event stream, a streaming POST): the client is there. */
  open: number;
  /** Its GET event stream, while one is open. */
  stream?: SessionStream;
}

/** A 2025 session's GET event stream: bytes its server sent to it, and bytes written out. */
interface SessionStream {
  res: ServerResponse;
  sent: number;
  written: number;
}

/** What SSE adds to a message on the stream (`event: message\ndata: …\n\n`). */
const SSE_FRAMING_BYTES = 24;

/** What may wait unread for one /events subscriber before its stream is closed. */
const MAX_EVENT_BACKLOG_BYTES = 1024 * 1024;

/** The page's one inline script, allowed by its hash and nothing else. */
const PAGE_SCRIPT_HASH = createHash('sha256').update(/<script>([^]*)<\/script>/.exec(STATUS_PAGE_HTML)![1]!).digest('base64');
const PAGE_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'cache-control': 'no-store',
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  // Not no-referrer: with it, Chromium sends `Origin: null` on the login form's POST.
  'referrer-policy': 'same-origin',
  'content-security-policy': `default-src 'none'; script-src 'sha256-${PAGE_SCRIPT_HASH}'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
};

/**
 * The gateway over HTTP: Streamable HTTP MCP at /mcp (one MCP session per client), the status
 * and retry endpoints under /mcp/servers, and the supervisor events as server-sent events on
 * /events.
 */
export async function startGatewayHttp(gateway: Gateway, opts: GatewayHttpOptions = {}): Promise<GatewayHttp> {
  const host = opts.host ?? '127.0.0.1';
  const log = opts.logger ?? (() => {});
  const keepAliveMs = opts.sseKeepAliveMs ?? 15_000;
  const sessions = new Map<string, Session>();
  /** The 2026-07-28 handler, made at the first request that could be one. */
  let modern: Promise<ModernHttp> | undefined;
  const sseClients = new Set<ServerResponse>();
  let port = 0;
  const sessionIdleMs = opts.sessionIdleMs ?? 10 * 60_000;
  const maxSessions = opts.maxSessions ?? 256;
  /** Upload places, weighing and the shares of requests in flight (admission.ts). */
  const admission = new RequestAdmission(opts);
  /** initialize requests under way: sessions about to exist. */
  let initializing = 0;
  const access = new AccessControl({ bindHost: host, port: () => port, token: opts.token, allowedOrigins: opts.allowedOrigins, allowedHosts: opts.allowedHosts });
  // Clients that vanish without DELETE would otherwise keep their session forever.
  const sweeper = setInterval(() => {
    const now = Date.now();
    for (const [id, session] of sessions) {
      if (session.open === 0 && now - session.lastSeen > sessionIdleMs) {
        sessions.delete(id);
        log('debug', `closing idle MCP session ${id.slice(0, 8)}`);
        void session.server.close().catch(() => {});
      }
    }
  }, Math.min(60_000, Math.max(1000, sessionIdleMs / 4)));
  sweeper.unref();

  const http: HttpServer = createServer({ requestTimeout: opts.bodyTimeoutMs ?? 30_000 }, (req, res) => {
    handle(req, res).catch((err: unknown) => {
      log('error', `http ${req.method} ${req.url}: ${(err as Error)?.stack ?? String(err)}`);
      if (!res.headersSent) sendJson(res, 500, { error: 'internal error' });
      else res.end();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Host and Origin on every endpoint (see access.ts).
    const addressing = access.checkAddressing(req);
    if (!addressing.ok) return sendJson(res, addressing.status, { error: addressing.error });
    const url = new URL(req.url ?? '/', 'http://gateway');
    const route = url.pathname.replace(/\/+$/, '') || '/';
    const method = req.method ?? 'GET';

    // Probes answer without the token (and say no more than ready or not).
    if (route === '/healthz' && method === 'GET') return sendJson(res, 200, { ok: true });
    if (route === '/readyz' && method === 'GET') {
      const { ready, servers } = gateway.readiness();
      const authorized = access.checkToken(req).ok;
      return sendJson(res, ready ? 200 : 503, authorized ? { ready, servers } : { ready });
    }
    if (route === '/' && method === 'GET') return handlePage(req, res, url);
    if (route === '/login' && method === 'POST') return handleLogin(req, res);

    const auth = access.checkToken(req);
    if (!auth.ok) {
      res.setHeader('www-authenticate', 'Bearer realm="tether-gateway"');
      return sendJson(res, auth.status, { error: auth.error });
    }

    if (route === '/mcp') return handleMcp(req, res, method);
    if (route === '/mcp/servers' && method === 'GET') return sendJson(res, 200, { servers: gateway.summaries() });
    if (route === '/mcp/servers/retry-all' && method === 'POST') return sendJson(res, 200, { servers: await gateway.retryAll() });
    const one = /^\/mcp\/servers\/([^/]+)(\/retry)?$/.exec(route);
    if (one) {
      let name: string;
      try {
        name = decodeURIComponent(one[1]!);
      } catch {
        return sendJson(res, 400, { error: `malformed path: bad percent-encoding in ${JSON.stringify(one[1])}` });
      }
      const isRetry = one[2] !== undefined;
      if ((isRetry && method !== 'POST') || (!isRetry && method !== 'GET')) return sendJson(res, 405, { error: `method ${method} not allowed here` });
      if (!gateway.get(name)) return sendJson(res, 404, { error: `no server named '${name}'`, servers: [...gateway.supervisors.keys()] });
      return sendJson(res, 200, isRetry ? await gateway.retry(name) : gateway.detail(name));
    }
    if (route === '/events' && method === 'GET') return handleEvents(req, res);
    if (['/mcp/servers', '/mcp/servers/retry-all', '/events', '/', '/login', '/healthz', '/readyz'].includes(route)) return sendJson(res, 405, { error: `method ${method} not allowed here` });
    sendJson(res, 404, {
      error: `not found: ${route}`,
      endpoints: ['GET /', '/mcp', 'GET /mcp/servers', 'GET /mcp/servers/:name', 'POST /mcp/servers/:name/retry', 'POST /mcp/servers/retry-all', 'GET /events', 'GET /healthz', 'GET /readyz'],
    });
  }

  /** The status page; with a token configured, `?token=` is traded once for the page's cookie. */
  function handlePage(req: IncomingMessage, res: ServerResponse, url: URL): void {
    const offered = url.searchParams.get('token');
    if (access.tokenRequired && offered !== null) {
      if (!access.isToken(offered)) return sendHtml(res, 401, LOGIN_PAGE_HTML);
      // Trade it for the cookie and drop it from the address bar.
      res.writeHead(303, { location: '/', 'set-cookie': access.issueCookie(), 'cache-control': 'no-store' });
      res.end();
      return;
    }
    if (!access.checkToken(req).ok) return sendHtml(res, 401, LOGIN_PAGE_HTML);
    sendHtml(res, 200, STATUS_PAGE_HTML);
  }

  async function handleLogin(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const raw = await readBody(req, 4096);
    const token = raw === null ? null : new URLSearchParams(raw.toString('utf8')).get('token');
    if (!access.tokenRequired) {
      res.writeHead(303, { location: '/' });
      res.end();
      return;
    }
    if (token === null || !access.isToken(token.trim())) return sendHtml(res, 401, LOGIN_PAGE_HTML);
    res.writeHead(303, { location: '/', 'set-cookie': access.issueCookie(), 'cache-control': 'no-store' });
    res.end();
  }

  async function handleMcp(req: IncomingMessage, res: ServerResponse, method: string): Promise<void> {
    const sessionId = header(req, 'mcp-session-id');
    let body: unknown;
    let text: string | undefined;
    // 404 tells a Streamable HTTP client its session is gone and it must initialize again;
    // before its body is read, so a made-up session id is not a share of its own.
    if (sessionId && !sessions.has(sessionId)) return sendJsonRpcError(res, 404, -32001, 'Session not found');
    if (method === 'POST') {
      text = (await admission.admit(req, res, sessionId))?.toString('utf8');
      if (text === undefined) return;
      try {
        body = JSON.parse(text);
      } catch {
        return sendJsonRpcError(res, 400, -32700, 'Parse error: the body is not JSON');
      }
    }
    // 2026-07-28: no session, a `_meta` envelope on every request (modern-host.ts).
    if (text !== undefined && !sessionId && (await (await (modern ??= createModernHttp(gateway))).serve(req, res, text, body))) return;
    if (sessionId) {
      const session = sessions.get(sessionId);
      // 404 tells a Streamable HTTP client its session is gone and it must initialize again.
      if (!session) return sendJsonRpcError(res, 404, -32001, 'Session not found');
      session.lastSeen = Date.now();
      session.open++;
      res.once('close', () => {
        session.open--;
        session.lastSeen = Date.now();
      });
      if (method === 'GET') {
        // The session's stream carries what the gateway sends unasked (list changes, log
        // messages): what is sent to it and not yet written out is counted, and a host that
        // stops reading it is cut once that passes the bound, as an /events subscriber is.
        const stream: SessionStream = { res, sent: 0, written: 0 };
        const write = res.write.bind(res) as (chunk: unknown, ...rest: unknown[]) => boolean;
        res.write = ((chunk: unknown, ...rest: unknown[]) => {
          stream.written += typeof chunk === 'string' ? Buffer.byteLength(chunk) : ((chunk as Uint8Array | undefined)?.byteLength ?? 0);
          return write(chunk, ...rest);
        }) as typeof res.write;
        session.stream = stream;
        res.once('close', () => {
          if (session.stream === stream) session.stream = undefined;
        });
        setImmediate(() => hostStreamOpened(session.server));
      }
      await session.transport.handleRequest(req, res, body);
      return;
    }
    if (method !== 'POST' || !(Array.isArray(body) ? body.some(isInitializeRequest) : isInitializeRequest(body))) {
      return sendJsonRpcError(res, 400, -32000, 'Bad Request: no valid session id; start with an initialize request');
    }
    // At the cap: the session idle the longest gives way (its client starts again on 404).
    while (sessions.size + initializing >= maxSessions) {
      let oldest: [string, Session] | null = null;
      for (const entry of sessions) if (entry[1].open === 0 && (!oldest || entry[1].lastSeen < oldest[1].lastSeen)) oldest = entry;
      if (!oldest) {
        res.setHeader('retry-after', '5');
        return sendJsonRpcError(res, 503, -32000, `too many MCP sessions (${maxSessions}, each with an open stream): retry later`);
      }
      sessions.delete(oldest[0]);
      log('info', `MCP session cap (${maxSessions}) reached: closing the session idle the longest, ${oldest[0].slice(0, 8)}`);
      void oldest[1].server.close().catch(() => {});
    }
    const server = createGatewayServer(gateway, { rootsAfterStream: true });
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        const session: Session = { transport, server, lastSeen: Date.now(), open: 0 };
        sessions.set(id, session);
        // What goes to the GET stream (not an answer to a request) waits there for the host to
        // read it: past the bound, the stream is closed (the host opens a new one).
        const send = transport.send.bind(transport);
        transport.send = (message, options) => {
          const stream = session.stream;
          if (stream && options?.relatedRequestId === undefined && !('result' in message || 'error' in message)) {
            stream.sent += Buffer.byteLength(JSON.stringify(message)) + SSE_FRAMING_BYTES;
            const waiting = stream.sent - stream.written;
            if (waiting > MAX_EVENT_BACKLOG_BYTES) {
              log('info', `MCP session ${id.slice(0, 8)} not reading its stream (${waiting} bytes waiting): closing the stream`);
              session.stream = undefined;
              stream.res.destroy();
              return Promise.resolve();
            }
          }
          return send(message, options);
        };
      },
      onsessionclosed: (id) => {
        sessions.delete(id);
      },
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    initializing++;
    try {
      await server.connect(transport);
      await transport.handleRequest(req, res, body);
    } finally {
      initializing--;
    }
    // An initialize that failed (or was answered without a session) leaves nothing behind.
    if (!transport.sessionId || !sessions.has(transport.sessionId)) void server.close().catch(() => {});
  }

  function handleEvents(req: IncomingMessage, res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    // The current state first, so a subscriber never has to race a GET against the stream.
    res.write(`event: snapshot\ndata: ${JSON.stringify({ servers: gateway.summaries(), time: new Date().toISOString() })}\n\n`);
    // A subscriber that does not read is cut once this much waits for it (it reconnects to a
    // fresh snapshot), so it cannot make the gateway hold every event since it stopped.
    const send = (chunk: string) => {
      if (res.writableLength > MAX_EVENT_BACKLOG_BYTES) {
        log('info', `/events subscriber not reading (${res.writableLength} bytes waiting): closing its stream`);
        done();
        res.destroy();
        return;
      }
      res.write(chunk);
    };
    const onEvent = (e: GatewayEvent) => send(`event: ${e.event}\ndata: ${JSON.stringify(e.data)}\n\n`);
    // Every change of a server's summary, whole: what the status page renders.
    const onStatus = (summary: ServerSummary) => send(`event: server_status\ndata: ${JSON.stringify({ server: summary.name, ...summary, time: new Date().toISOString() })}\n\n`);
    gateway.on('event', onEvent);
    gateway.on('status', onStatus);
    const keepAlive = setInterval(() => send(': keep-alive\n\n'), keepAliveMs);
    keepAlive.unref();
    sseClients.add(res);
    const done = () => {
      clearInterval(keepAlive);
      gateway.off('event', onEvent);
      gateway.off('status', onStatus);
      sseClients.delete(res);
    };
    req.on('close', done);
    res.on('error', done);
  }

  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(opts.port ?? 8766, host, () => {
      http.off('error', reject);
      resolve();
    });
  });
  port = (http.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  const url = `http://${shownHost}:${port}`;

  return {
    url,
    port,
    async close() {
      clearInterval(sweeper);
      for (const res of sseClients) res.end();
      sseClients.clear();
      await Promise.all([...sessions.values()].map((s) => s.server.close().catch(() => {})));
      sessions.clear();
      await modern?.then((m) => m.close()).catch(() => {});
      await new Promise<void>((resolve) => {
        http.close(() => resolve());
        http.closeAllConnections();
      });
    },
  };
}

function sendHtml(res: ServerResponse, status: number, html: string): void {
  res.writeHead(status, { ...PAGE_HEADERS, 'content-length': Buffer.byteLength(html) });
  res.end(html);
}
