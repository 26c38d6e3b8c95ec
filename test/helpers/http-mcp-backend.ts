/**
 * A real Streamable HTTP MCP server (the SDK's McpServer + StreamableHTTPServerTransport, one
 * session per client) on 127.0.0.1 that a test can make answer 401/403, hang, go down and come
 * back on the same port (sessions lost, as after a real restart).
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

export type BackendMode = 'ok' | 'unauthorized' | 'forbidden' | 'hang';

export interface HttpMcpBackend {
  /** http://127.0.0.1:PORT/mcp */
  readonly url: string;
  readonly port: number;
  /** HTTP requests seen (all modes), to prove the absence of retries. */
  readonly requests: number;
  /** Increments on every restart(); the `generation` tool returns it. */
  readonly generation: number;
  setMode(mode: BackendMode): void;
  /** Tools offered by sessions created from now on (besides `add` and `generation`). */
  setExtraTools(names: string[]): void;
  /** Forget every session without closing anything: the next request with an old session gets 404. */
  forgetSessions(): void;
  /** Go down: close the listener and every connection; sessions are forgotten. */
  stop(): Promise<void>;
  /** Come back on the same port with no sessions (a restarted server). */
  restart(): Promise<void>;
  close(): Promise<void>;
}

export async function startHttpMcpBackend(opts: { port?: number; requireHeader?: [string, string] } = {}): Promise<HttpMcpBackend> {
  let mode: BackendMode = 'ok';
  let extraTools: string[] = [];
  let requests = 0;
  let generation = 1;
  let sessions = new Map<string, StreamableHTTPServerTransport>();
  const sockets = new Set<Socket>();
  const hung = new Set<ServerResponse>();
  let http: Server | undefined;
  let port = opts.port ?? 0;

  function makeServer(): McpServer {
    const server = new McpServer({ name: 'test-http-backend', version: '1.0.0' });
    const gen = generation;
    server.registerTool('add', { description: 'a + b', inputSchema: { a: z.number(), b: z.number() } }, async ({ a, b }) => ({
      content: [{ type: 'text', text: String(a + b) }],
    }));
    server.registerTool('generation', { description: 'which incarnation of the server answers' }, async () => ({
      content: [{ type: 'text', text: String(gen) }],
    }));
    for (const name of extraTools) {
      server.registerTool(name, { description: `extra tool ${name}` }, async () => ({ content: [{ type: 'text', text: name }] }));
    }
    return server;
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    requests++;
    if (mode === 'unauthorized' || mode === 'forbidden') {
      const status = mode === 'unauthorized' ? 401 : 403;
      res.writeHead(status, { 'content-type': 'application/json', 'www-authenticate': 'Bearer realm="test"' });
      res.end(JSON.stringify({ error: status === 401 ? 'unauthorized' : 'forbidden' }));
      return;
    }
    if (opts.requireHeader && req.headers[opts.requireHeader[0].toLowerCase()] !== opts.requireHeader[1]) {
      res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'missing credentials' }));
      return;
    }
    if (mode === 'hang') {
      hung.add(res);
      return;
    }
    let body: unknown;
    if (req.method === 'POST') {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    }
    const sid = req.headers['mcp-session-id'] as string | undefined;
    if (sid) {
      const t = sessions.get(sid);
      if (!t) {
        res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }));
        return;
      }
      await t.handleRequest(req, res, body);
      return;
    }
    if (req.method !== 'POST' || !isInitializeRequest(body)) {
      res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message: 'no session' }, id: null }));
      return;
    }
    const mine = sessions;
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => void mine.set(id, transport),
    });
    await makeServer().connect(transport);
    await transport.handleRequest(req, res, body);
  }

  async function listen(): Promise<void> {
    http = createServer((req, res) => {
      handle(req, res).catch(() => {
        if (!res.headersSent) res.writeHead(500).end();
      });
    });
    http.on('connection', (s) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    });
    await new Promise<void>((resolve, reject) => {
      http!.once('error', reject);
      http!.listen(port, '127.0.0.1', () => resolve());
    });
    port = (http.address() as AddressInfo).port;
  }

  async function stop(): Promise<void> {
    const server = http;
    http = undefined;
    if (!server) return;
    for (const t of sessions.values()) await t.close().catch(() => {});
    sessions = new Map();
    for (const res of hung) res.destroy();
    hung.clear();
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  await listen();
  return {
    get url() {
      return `http://127.0.0.1:${port}/mcp`;
    },
    get port() {
      return port;
    },
    get requests() {
      return requests;
    },
    get generation() {
      return generation;
    },
    setMode(m) {
      mode = m;
      if (m !== 'hang') {
        for (const res of hung) res.destroy();
        hung.clear();
      }
    },
    setExtraTools(names) {
      extraTools = names;
    },
    stop,
    forgetSessions() {
      sessions = new Map();
    },
    async restart() {
      await stop();
      generation++;
      await listen();
    },
    close: stop,
  };
}
