import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from '../supervisor/index.js';
import type { Gateway, GatewayEvent } from './gateway.js';
import { createGatewayServer, hostStreamOpened } from './mcp-server.js';

export interface GatewayHttpOptions {
  host?: string;
  /** 0 = any free port. */
  port?: number;
  logger?: Logger;
  /** SSE keep-alive comment period on /events (proxies cut idle streams). Default 15000. */
  sseKeepAliveMs?: number;
  /** Largest request body accepted on /mcp. Default 4 MiB. */
  maxBodyBytes?: number;
  /** An MCP session with no request and no open stream for this long is closed. Default 30 min. */
  sessionIdleMs?: number;
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
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1', '[::1]']);

/**
 * The gateway over HTTP: Streamable HTTP MCP at /mcp (one MCP session per client), the status
 * and retry endpoints under /mcp/servers, and the supervisor events as server-sent events on
 * /events.
 */
export async function startGatewayHttp(gateway: Gateway, opts: GatewayHttpOptions = {}): Promise<GatewayHttp> {
  const host = opts.host ?? '127.0.0.1';
  const log = opts.logger ?? (() => {});
  const keepAliveMs = opts.sseKeepAliveMs ?? 15_000;
  const maxBodyBytes = opts.maxBodyBytes ?? 4 * 1024 * 1024;
  const sessions = new Map<string, Session>();
  const sseClients = new Set<ServerResponse>();
  let port = 0;
  const sessionIdleMs = opts.sessionIdleMs ?? 30 * 60_000;
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

  const http: HttpServer = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      log('error', `http ${req.method} ${req.url}: ${(err as Error)?.stack ?? String(err)}`);
      if (!res.headersSent) sendJson(res, 500, { error: 'internal error' });
      else res.end();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // DNS rebinding: a loopback gateway answers only requests addressed to loopback.
    if (LOOPBACK.has(host) && !isLoopbackHost(req.headers.host, port)) {
      sendJson(res, 403, { error: `forbidden host header: ${req.headers.host ?? '(none)'}` });
      return;
    }
    const url = new URL(req.url ?? '/', 'http://gateway');
    const route = url.pathname.replace(/\/+$/, '') || '/';
    const method = req.method ?? 'GET';

    if (route === '/mcp') return handleMcp(req, res, method);
    if (route === '/mcp/servers' && method === 'GET') return sendJson(res, 200, { servers: gateway.summaries() });
    if (route === '/mcp/servers/retry-all' && method === 'POST') return sendJson(res, 200, { servers: await gateway.retryAll() });
    const one = /^\/mcp\/servers\/([^/]+)(\/retry)?$/.exec(route);
    if (one) {
      const name = decodeURIComponent(one[1]!);
      const isRetry = one[2] !== undefined;
      if ((isRetry && method !== 'POST') || (!isRetry && method !== 'GET')) return sendJson(res, 405, { error: `method ${method} not allowed here` });
      if (!gateway.get(name)) return sendJson(res, 404, { error: `no server named '${name}'`, servers: [...gateway.supervisors.keys()] });
      return sendJson(res, 200, isRetry ? await gateway.retry(name) : gateway.detail(name));
    }
    if (route === '/events' && method === 'GET') return handleEvents(req, res);
    if (['/mcp/servers', '/mcp/servers/retry-all', '/events'].includes(route)) return sendJson(res, 405, { error: `method ${method} not allowed here` });
    sendJson(res, 404, { error: `not found: ${route}`, endpoints: ['/mcp', 'GET /mcp/servers', 'GET /mcp/servers/:name', 'POST /mcp/servers/:name/retry', 'POST /mcp/servers/retry-all', 'GET /events'] });
  }

  async function handleMcp(req: IncomingMessage, res: ServerResponse, method: string): Promise<void> {
    const sessionId = header(req, 'mcp-session-id');
    let body: unknown;
    if (method === 'POST') {
      const raw = await readBody(req, maxBodyBytes);
      if (raw === null) return sendJsonRpcError(res, 413, -32600, `request body larger than ${maxBodyBytes} bytes`);
      try {
        body = JSON.parse(raw);
      } catch {
        return sendJsonRpcError(res, 400, -32700, 'Parse error: the body is not JSON');
      }
    }
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
      if (method === 'GET') setImmediate(() => hostStreamOpened(session.server));
      await session.transport.handleRequest(req, res, body);
      return;
    }
    if (method !== 'POST' || !(Array.isArray(body) ? body.some(isInitializeRequest) : isInitializeRequest(body))) {
      return sendJsonRpcError(res, 400, -32000, 'Bad Request: no valid session id; start with an initialize request');
    }
    const server = createGatewayServer(gateway, { rootsAfterStream: true });
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        sessions.set(id, { transport, server, lastSeen: Date.now(), open: 0 });
      },
      onsessionclosed: (id) => {
        sessions.delete(id);
      },
    });
    transport.onclose = () => {
      if (transport.sessionId) sessions.delete(transport.sessionId);
    };
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  }

  function handleEvents(req: IncomingMessage, res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    // The current state first, so a subscriber never has to race a GET against the stream.
    res.write(`event: snapshot\ndata: ${JSON.stringify({ servers: gateway.summaries(), time: new Date().toISOString() })}\n\n`);
    const onEvent = (e: GatewayEvent) => res.write(`event: ${e.event}\ndata: ${JSON.stringify(e.data)}\n\n`);
    gateway.on('event', onEvent);
    const keepAlive = setInterval(() => res.write(': keep-alive\n\n'), keepAliveMs);
    keepAlive.unref();
    sseClients.add(res);
    const done = () => {
      clearInterval(keepAlive);
      gateway.off('event', onEvent);
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
      await new Promise<void>((resolve) => {
        http.close(() => resolve());
        http.closeAllConnections();
      });
    },
  };
}

function isLoopbackHost(hostHeader: string | undefined, port: number): boolean {
  if (!hostHeader) return false;
  const m = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(hostHeader);
  if (!m) return false;
  return LOOPBACK.has(m[1]!.toLowerCase()) && (m[2] === undefined || Number(m[2]) === port);
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

async function readBody(req: IncomingMessage, limit: number): Promise<string | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) return null;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value, null, 2);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function sendJsonRpcError(res: ServerResponse, status: number, code: number, message: string): void {
  sendJson(res, status, { jsonrpc: '2.0', error: { code, message }, id: null });
}
