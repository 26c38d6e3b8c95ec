/**
 * The gateway in-process over HTTP, in front of three real servers: server-everything
 * (stdio), an SDK Streamable HTTP server, and a command that exits at once. Exercised through
 * the status endpoints, /events (SSE) and an MCP client on /mcp.
 */
import { once } from 'node:events';
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { Gateway, parseConfig, startGatewayHttp, type GatewayHttp } from '../../../src/gateway/index.js';
import { startHttpMcpBackend, type HttpMcpBackend } from '../../helpers/http-mcp-backend.js';
import { everything, node, text } from '../../helpers/mcp-peers.js';
import { subscribeEvents } from '../../helpers/sse.js';

let backend: HttpMcpBackend;
let gateway: Gateway;
let http: GatewayHttp;

beforeAll(async () => {
  backend = await startHttpMcpBackend();
  const config = parseConfig({
    supervisor: { healthIntervalMs: 0, initialBackoffMs: 50, maxBackoffMs: 400 },
    mcpServers: {
      everything: { command: everything.command, args: everything.args },
      web: { type: 'http', url: backend.url },
      broken: { command: node, args: ['-e', 'process.exit(1)'] },
    },
  });
  gateway = new Gateway(config);
  http = await startGatewayHttp(gateway, { host: '127.0.0.1', port: 0 });
  // broken crashes three times in a row right after start: wait for its verdict.
  const brokenFailed = once(gateway.get('broken')!, 'server_failed');
  await gateway.start();
  await brokenFailed;
});

afterAll(async () => {
  await http?.close();
  await gateway?.close();
  await backend?.close();
});

async function getJson(path: string, init?: RequestInit): Promise<{ status: number; body: any }> {
  const res = await fetch(http.url + path, init);
  return { status: res.status, body: await res.json() };
}

async function mcpClient(): Promise<Client> {
  const client = new Client({ name: 'test-host', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(http.url + '/mcp')));
  return client;
}

async function subscribe() {
  return subscribeEvents(http.url + '/events');
}

describe('gateway over HTTP', () => {
  it('GET /mcp/servers answers exactly {servers:[{name,kind,status,health,attempt,nextRetryMs,lastError,connectedAt,tools}]}', async () => {
    const { status, body } = await getJson('/mcp/servers');
    expect(status).toBe(200);
    expect(Object.keys(body)).toEqual(['servers']);
    expect(body.servers.map((s: any) => s.name)).toEqual(['everything', 'web', 'broken']);
    for (const s of body.servers) {
      expect(Object.keys(s)).toEqual(['name', 'kind', 'status', 'health', 'attempt', 'nextRetryMs', 'lastError', 'reason', 'lastFailure', 'restarts', 'connectedAt', 'tools']);
    }
    const [ev, web, broken] = body.servers;
    expect(ev).toMatchObject({ kind: 'stdio', status: 'connected', health: 'healthy', attempt: 0, nextRetryMs: null, lastError: null });
    expect(new Date(ev.connectedAt).getTime()).toBeGreaterThan(0);
    expect(ev.tools).toContain('echo');
    expect(web).toMatchObject({ kind: 'http', status: 'connected', tools: expect.arrayContaining(['add', 'generation']) });
    expect(broken).toMatchObject({ kind: 'stdio', status: 'failed', nextRetryMs: null, connectedAt: null, tools: [], lastError: expect.stringContaining('exited with code 1') });
  });

  it('GET /mcp/servers/:name gives the detail; unknown names and wrong methods are clear errors', async () => {
    const { status, body } = await getJson('/mcp/servers/web');
    expect(status).toBe(200);
    expect(body).toMatchObject({ name: 'web', status: 'connected', consecutiveHealthFailures: 0, serverInfo: { name: 'test-http-backend' }, capabilities: { tools: {} } });
    expect(await getJson('/mcp/servers/nope')).toMatchObject({ status: 404, body: { error: "no server named 'nope'", servers: ['everything', 'web', 'broken'] } });
    expect((await getJson('/mcp/servers/web', { method: 'POST' })).status).toBe(405);
    expect((await getJson('/mcp/servers/web/retry')).status).toBe(405);
    expect((await getJson('/nowhere')).status).toBe(404);
  });

  it('refuses requests addressed to a non-loopback Host (DNS rebinding)', async () => {
    const status = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(http.url + '/mcp/servers', { headers: { host: 'evil.example:80' } }, (res) => {
        res.resume();
        resolve(res.statusCode!);
      });
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(403);
  });

  it('MCP on /mcp: aggregated <server>__<tool> names, forwarded calls, management tools', async () => {
    const client = await mcpClient();
    try {
      const names = (await client.listTools()).tools.map((t) => t.name);
      expect(names.slice(0, 5)).toEqual(['list_servers', 'get_server_status', 'reconnect_server', 'retry_server', 'retry_all_servers']);
      expect(names).toEqual(expect.arrayContaining(['everything__echo', 'everything__get-sum', 'web__add', 'web__generation']));
      expect(names.some((n) => n.startsWith('broken__'))).toBe(false);

      expect(text(await client.callTool({ name: 'everything__echo', arguments: { message: 'via gateway' } }))).toBe('Echo: via gateway');
      expect(text(await client.callTool({ name: 'web__add', arguments: { a: 40, b: 2 } }))).toBe('42');

      // Errors said once (not "MCP error -32602: MCP error -32602: …").
      await expect(client.callTool({ name: 'get_server_status', arguments: { name: 'bogus' } })).rejects.toThrow(
        /^MCP error -32602: get_server_status: no server named 'bogus'; servers: everything, web, broken$/,
      );
      const detail = (await client.callTool({ name: 'retry_server', arguments: { name: 'web' } })).structuredContent as Record<string, unknown>;
      expect(detail).toMatchObject({ name: 'web', status: 'connected', retryCount: 0, maxRetries: null, errorMessage: null, lastRetryTime: expect.any(String) });
      const list = await client.callTool({ name: 'list_servers', arguments: {} });
      expect((list.structuredContent as any).servers.map((s: any) => [s.name, s.status])).toEqual([
        ['everything', 'connected'],
        ['web', 'connected'],
        ['broken', 'failed'],
      ]);
      const status = await client.callTool({ name: 'get_server_status', arguments: { name: 'broken' } });
      expect(status.structuredContent).toMatchObject({ name: 'broken', status: 'failed', recentCrashes: 3 });

      await expect(client.callTool({ name: 'get_server_status', arguments: { name: 'nope' } })).rejects.toThrow(/no server named 'nope'/);
      await expect(client.callTool({ name: 'nothing__here', arguments: {} })).rejects.toThrow(/unknown tool 'nothing__here'/);
      // A backend's own error answer passes through.
      await expect(client.callTool({ name: 'everything__no-such-tool', arguments: {} })).resolves.toMatchObject({ isError: true });
    } finally {
      await client.close();
    }
  });

  it('a call to a failed server makes one attempt and explains itself as a tool error', async () => {
    const client = await mcpClient();
    try {
      const result = await client.callTool({ name: 'broken__anything', arguments: {} });
      expect(result.isError).toBe(true);
      expect(text(result)).toMatch(/MCP server 'broken' is unavailable: status failed, attempt \d+, no automatic retry \(use reconnect_server\), last error: server process exited with code 1/);
    } finally {
      await client.close();
    }
  });

  it('POST /mcp/servers/:name/retry force-reconnects; /events streams the events in order', async () => {
    const events = await subscribe();
    try {
      const snapshot = await events.next();
      expect(snapshot.event).toBe('snapshot');
      expect(snapshot.data.servers).toHaveLength(3);

      const { status, body } = await getJson('/mcp/servers/web/retry', { method: 'POST' });
      expect(status).toBe(200);
      expect(body).toMatchObject({ name: 'web', status: 'connected', attempt: 0 });
      const seen = await events.until('server_reconnected');
      expect(seen.map((e) => e.event)).toEqual(['server_disconnected', 'server_reconnecting', 'server_reconnected']);
      expect(seen[0]!.data).toMatchObject({ server: 'web', wasIntentional: true });
      expect(seen[1]!.data).toMatchObject({ server: 'web', attempt: 1, nextRetryMs: 0 });
      expect(seen[2]!.data).toMatchObject({ server: 'web', attemptsTaken: 1, capabilities: { tools: {} } });
      expect(typeof seen[2]!.data.time).toBe('string');
    } finally {
      events.close();
    }
  });

  it('POST /mcp/servers/retry-all retries what is not connected, leaving connected servers alone', async () => {
    const events = await subscribe();
    try {
      await events.next(); // snapshot
      const { status, body } = await getJson('/mcp/servers/retry-all', { method: 'POST' });
      expect(status).toBe(200);
      expect(body.servers.map((s: any) => s.name)).toEqual(['everything', 'web', 'broken']);
      // broken: reset, crashes again three times → failed; the others saw nothing.
      const seen = await events.until('server_failed');
      expect(seen.every((e) => e.data.server === 'broken')).toBe(true);
      expect(seen.map((e) => e.event)).toEqual(['server_reconnecting', 'server_reconnecting', 'server_reconnecting', 'server_failed']);
    } finally {
      events.close();
    }
  });

  it('notifies MCP clients with tools/list_changed when the aggregate changes', async () => {
    const client = await mcpClient();
    try {
      let changed!: () => void;
      const notified = new Promise<void>((r) => (changed = r));
      client.setNotificationHandler(ToolListChangedNotificationSchema, () => changed());
      backend.setExtraTools(['fresh']);
      await client.callTool({ name: 'reconnect_server', arguments: { name: 'web' } });
      await notified;
      expect((await client.listTools()).tools.map((t) => t.name)).toContain('web__fresh');
      expect(text(await client.callTool({ name: 'web__fresh', arguments: {} }))).toBe('fresh');
    } finally {
      await client.close();
    }
  });

  it('an HTTP backend that starts answering 401 shows up as requires_reauth', async () => {
    backend.setMode('unauthorized');
    try {
      const { body } = await getJson('/mcp/servers/web/retry', { method: 'POST' });
      expect(body).toMatchObject({ status: 'requires_reauth', nextRetryMs: null, lastError: expect.stringContaining('HTTP 401') });
      const list = await getJson('/mcp/servers');
      expect(list.body.servers[1]).toMatchObject({ name: 'web', status: 'requires_reauth' });
    } finally {
      backend.setMode('ok');
    }
    const { body } = await getJson('/mcp/servers/web/retry', { method: 'POST' });
    expect(body.status).toBe('connected');
  });
});
