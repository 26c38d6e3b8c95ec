/**
 * The acceptance scenario of issue 5: one gateway with three servers (exec through a tether
 * server, local stdio, Streamable HTTP), used by an MCP client on /mcp, survives each fault
 * with the statuses and events described.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Gateway, parseConfig, startGatewayHttp, type GatewayHttp } from '../../src/gateway/index.js';
import { startHttpMcpBackend, type HttpMcpBackend } from '../helpers/http-mcp-backend.js';
import { everything, text } from '../helpers/mcp-peers.js';
import { subscribeEvents, type SseEvent, type SseSubscription } from '../helpers/sse.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';

let tether: TetherTarget;
let backend: HttpMcpBackend;
let gateway: Gateway;
let http: GatewayHttp;
let client: Client;
let events: SseSubscription;

beforeAll(async () => {
  tether = await startTetherServer({});
  backend = await startHttpMcpBackend();
  const config = parseConfig({
    supervisor: { healthIntervalMs: 0, initialBackoffMs: 50, maxBackoffMs: 400 },
    mcpServers: {
      remote: { command: everything.command, args: everything.args, tether: { url: tether.url, recoveryDeadlineMs: 10_000 } },
      // A 1 s call timeout: only progress keeps the long-running tool below alive.
      local: { command: everything.command, args: everything.args, supervisor: { requestTimeoutMs: 1000 } },
      web: { url: backend.url },
    },
  });
  gateway = new Gateway(config);
  http = await startGatewayHttp(gateway, { port: 0 });
  await gateway.start();
  client = new Client({ name: 'host', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${http.url}/mcp`)));
  events = await subscribeEvents(`${http.url}/events`);
  const snapshot = await events.next();
  expect(snapshot.data.servers.map((s: { status: string }) => s.status)).toEqual(['connected', 'connected', 'connected']);
}, 60_000);

afterAll(async () => {
  events?.close();
  await client?.close();
  await http?.close();
  await gateway?.close();
  await backend?.close();
  await tether?.stop();
});

/** Events for `server` until its server_reconnected, other servers' events dropped. */
async function recovery(server: string): Promise<SseEvent[]> {
  const seen = await events.until((e) => e.data.server === server && e.event === 'server_reconnected');
  return seen.filter((e) => e.data.server === server);
}

describe('gateway with exec, stdio and http servers', () => {
  it('aggregates all three', async () => {
    const names = (await client.listTools()).tools.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(['remote__echo', 'local__echo', 'web__add']));
    expect(text(await client.callTool({ name: 'remote__echo', arguments: { message: 'r' } }))).toBe('Echo: r');
  });

  it('exec: the tether server restarts (session lost) → reconnecting → connected, usable', async () => {
    const port = tether.server.port;
    await tether.stop();
    tether = await startTetherServer({ port });
    const seen = await recovery('remote');
    expect(seen[0]).toMatchObject({ event: 'server_disconnected', data: { wasIntentional: false } });
    expect(seen.slice(1, -1).every((e) => e.event === 'server_reconnecting')).toBe(true);
    expect(seen.at(-1)!.data.attemptsTaken).toBeGreaterThanOrEqual(1);
    expect(text(await client.callTool({ name: 'remote__echo', arguments: { message: 'after restart' } }))).toBe('Echo: after restart');
  });

  it('stdio: the server is SIGKILLed → restarted at once, usable', async () => {
    const pid = gateway.detail('local')!.pid!;
    process.kill(pid, 'SIGKILL');
    const seen = await recovery('local');
    expect(seen.map((e) => e.event)).toEqual(['server_disconnected', 'server_reconnecting', 'server_reconnected']);
    expect(seen[0]!.data.reason).toMatch(/SIGKILL/);
    expect(seen[1]!.data).toMatchObject({ attempt: 1, nextRetryMs: 0 });
    expect(text(await client.callTool({ name: 'local__echo', arguments: { message: 'again' } }))).toBe('Echo: again');
  });

  it('http: the server goes down → calls explain, status reconnecting; it comes back → connected', async () => {
    await backend.stop();
    const down = await client.callTool({ name: 'web__add', arguments: { a: 1, b: 1 } });
    expect(down.isError).toBe(true);
    expect(text(down)).toMatch(/MCP server 'web' is unavailable: status reconnecting, attempt \d+, next retry in [\d.]+ s, last error: /);
    const status = await client.callTool({ name: 'get_server_status', arguments: { name: 'web' } });
    expect(status.structuredContent).toMatchObject({ status: 'reconnecting', lastError: expect.any(String) });
    await backend.restart();
    const seen = await recovery('web');
    expect(seen[0]!.event).toBe('server_disconnected');
    expect(text(await client.callTool({ name: 'web__add', arguments: { a: 2, b: 2 } }))).toBe('4');
  });

  it('relays progress, which keeps a long tool alive past the call timeout', async () => {
    const progress: number[] = [];
    const result = await client.callTool(
      { name: 'local__trigger-long-running-operation', arguments: { duration: 1.5, steps: 3 } },
      undefined,
      { onprogress: (p) => progress.push(p.progress), timeout: 10_000 },
    );
    expect(result.isError).toBeFalsy();
    // The last report races the result: the SDK handles responses before notifications that
    // arrived in the same read, and drops progress for a finished request (at either hop).
    expect(progress.slice(0, 2)).toEqual([1, 2]);
    expect([[1, 2], [1, 2, 3]]).toContainEqual(progress);
  });
});
