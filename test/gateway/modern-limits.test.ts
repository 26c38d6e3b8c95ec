/**
 * A hostile or careless 2026-07-28 host cannot get around the gateway's limits (issue #26):
 * its requests have no session, so each one in flight takes a place (per client address and
 * overall); past the bound it gets HTTP 429 with a JSON-RPC error that says so, the places
 * come back when its requests end, and a 2025 host beside it keeps working.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { Readable } from 'node:stream';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client as ClientV2, StreamableHTTPClientTransport as StreamableHttpV2 } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Gateway, parseConfig, startGatewayHttp, type GatewayHttp } from '../../src/gateway/index.js';
import { node, repoRoot, text } from '../helpers/mcp-peers.js';

const dir = mkdtempSync(path.join(tmpdir(), 'tether-gw-modern-limits-'));
const cancelLog = path.join(dir, 'cancel.log');
const PER_CLIENT = 4;
let gateway: Gateway;
let http: GatewayHttp;

beforeAll(async () => {
  gateway = new Gateway(
    parseConfig({
      supervisor: { healthIntervalMs: 0 },
      mcpServers: { modern: { command: node, args: [path.join(repoRoot, 'test/fixtures/mcp-v2-server.mjs'), 'modern'], env: { V2_CANCEL_LOG: cancelLog } } },
    }),
  );
  http = await startGatewayHttp(gateway, { port: 0, maxRequestsPerClient: PER_CLIENT, maxRequests: 32 });
  await gateway.start();
}, 60_000);

afterAll(async () => {
  await http?.close();
  await gateway?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** fetch over node:http from another loopback address (another client, as the gateway sees it). */
function fetchFrom(localAddress: string): typeof fetch {
  return ((url: string | URL, init: RequestInit = {}) =>
    new Promise<Response>((resolve, reject) => {
      const req = httpRequest(url, { method: init.method ?? 'GET', headers: Object.fromEntries(new Headers(init.headers)), localAddress, signal: init.signal ?? undefined }, (res) => {
        const headers = new Headers();
        for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') headers.set(k, v);
        resolve(new Response(res.statusCode === 204 ? null : (Readable.toWeb(res) as ReadableStream), { status: res.statusCode, headers }));
      });
      req.on('error', reject);
      req.end(typeof init.body === 'string' ? init.body : undefined);
    })) as typeof fetch;
}

const started = () => (existsSync(cancelLog) ? readFileSync(cancelLog, 'utf8').split('\n').filter((l) => l === 'started').length : 0);

describe('2026-07-28 requests are bounded like 2025 sessions', () => {
  it('past the bound of requests in flight from one client: 429 with a clear error; a 2025 host beside it works; places come back', async () => {
    const hostile = new ClientV2({ name: 'v2-hostile', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
    await hostile.connect(new StreamableHttpV2(new URL(`${http.url}/mcp`)));
    const aborter = new AbortController();
    try {
      const holding = Array.from({ length: PER_CLIENT }, () => hostile.callTool({ name: 'modern__wait', arguments: {} }, { signal: aborter.signal }).catch((e: unknown) => e));
      await expect.poll(started, { timeout: 20_000 }).toBe(PER_CLIENT);

      // Many more at once: each refused at once, saying why.
      const refused = await Promise.all(Array.from({ length: 8 }, () => hostile.callTool({ name: 'modern__echo', arguments: { message: 'x' } }).then(() => null, (e: unknown) => e)));
      for (const error of refused) expect(String((error as Error)?.message)).toMatch(/too many 2026-07-28 requests in flight from this client \(4\)/);
      // What the wire says: HTTP 429, Retry-After, a JSON-RPC error with the request's id.
      const raw = await fetch(`${http.url}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': {} } } }),
      });
      expect(raw.status).toBe(429);
      expect(raw.headers.get('retry-after')).toBe('1');
      expect(await raw.json()).toMatchObject({ jsonrpc: '2.0', id: 7, error: { code: -32000, message: expect.stringMatching(/too many 2026-07-28 requests/) } });

      // A 2025 host next to it keeps working.
      const polite = new Client({ name: 'v1-polite', version: '1.0.0' });
      await polite.connect(new StreamableHTTPClientTransport(new URL(`${http.url}/mcp`)));
      try {
        expect((await polite.listTools()).tools.map((t) => t.name)).toContain('modern__echo');
        expect(text(await polite.callTool({ name: 'modern__echo', arguments: { message: 'still here' } }))).toBe('Echo (modern): still here');
      } finally {
        await polite.close();
      }

      // Its own requests ending give the places back.
      aborter.abort();
      await Promise.all(holding);
      await expect
        .poll(async () => hostile.callTool({ name: 'modern__echo', arguments: { message: 'again' } }).then(text, (e: unknown) => String(e)), { timeout: 10_000 })
        .toBe('Echo (modern): again');
    } finally {
      await hostile.close();
    }
  }, 60_000);
});

describe('the overall bound on 2026-07-28 requests', () => {
  it('holds across clients: a second client address is refused once all clients together hold the overall bound', async () => {
    const small = await startGatewayHttp(gateway, { port: 0, maxRequestsPerClient: 2, maxRequests: 3, maxRequestsPerNetwork: 3 });
    const pin = { versionNegotiation: { mode: { pin: '2026-07-28' as const } } };
    const a = new ClientV2({ name: 'v2-a', version: '1.0.0' }, pin);
    const b = new ClientV2({ name: 'v2-b', version: '1.0.0' }, pin);
    await a.connect(new StreamableHttpV2(new URL(`${small.url}/mcp`)));
    await b.connect(new StreamableHttpV2(new URL(`${small.url}/mcp`), { fetch: fetchFrom('127.0.0.2') }));
    const aborter = new AbortController();
    const before = started();
    try {
      const wait = (client: ClientV2) => client.callTool({ name: 'modern__wait', arguments: {} }, { signal: aborter.signal }).catch((e: unknown) => e);
      const holding = [wait(a), wait(a), wait(b)];
      await expect.poll(started, { timeout: 20_000 }).toBe(before + 3);
      const echo = (client: ClientV2) => client.callTool({ name: 'modern__echo', arguments: { message: 'x' } }).then(text, (e: unknown) => String(e));
      expect(await echo(b)).toMatch(/too many 2026-07-28 requests in flight \(3 from all clients\)/);
      expect(await echo(a)).toMatch(/too many 2026-07-28 requests in flight from this client \(2\)/);
      aborter.abort();
      await Promise.all(holding);
      await expect.poll(() => echo(b), { timeout: 10_000 }).toBe('Echo (modern): x');
    } finally {
      await a.close();
      await b.close();
      await small.close();
    }
  }, 60_000);
});

describe('one host with many addresses', () => {
  it('holds at most its network share (half the total): a client on several loopback addresses cannot take every place', async () => {
    const small = await startGatewayHttp(gateway, { port: 0, maxRequestsPerClient: 2, maxRequests: 8 });
    const pin = { versionNegotiation: { mode: { pin: '2026-07-28' as const } } };
    const addresses = ['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5'];
    const clients = addresses.map((address) => new ClientV2({ name: `v2-${address}`, version: '1.0.0' }, pin));
    await Promise.all(clients.map((c, i) => c.connect(new StreamableHttpV2(new URL(`${small.url}/mcp`), { fetch: fetchFrom(addresses[i]!) }))));
    const aborter = new AbortController();
    const before = started();
    try {
      const wait = (client: ClientV2) => client.callTool({ name: 'modern__wait', arguments: {} }, { signal: aborter.signal }).then(() => 'answered', (e: unknown) => String(e));
      // Two addresses, two calls each: loopback's share (4 of 8) is held.
      const holding = [wait(clients[0]!), wait(clients[0]!), wait(clients[1]!), wait(clients[1]!)];
      await expect.poll(started, { timeout: 20_000 }).toBe(before + 4);
      // A third and a fourth address of the same host get nothing more: refused at once, saying why.
      for (const client of clients.slice(2)) expect(await wait(client)).toMatch(/too many 2026-07-28 requests in flight from this client's network \(4\)/);
      expect(started()).toBe(before + 4);
      aborter.abort();
      await Promise.all(holding);
      const echo = (client: ClientV2) => client.callTool({ name: 'modern__echo', arguments: { message: 'x' } }).then(text, (e: unknown) => String(e));
      await expect.poll(() => echo(clients[3]!), { timeout: 10_000 }).toBe('Echo (modern): x');
    } finally {
      await Promise.all(clients.map((c) => c.close()));
      await small.close();
    }
  }, 60_000);
});
