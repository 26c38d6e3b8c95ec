/**
 * Who may use the gateway's HTTP listener (issue 15): Host (the name, not the port) and
 * Origin on every endpoint, the optional token (Bearer, or the status page's cookie), and
 * the probes /healthz and /readyz.
 */
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Gateway, parseConfig, startGatewayHttp, type GatewayHttp } from '../../../src/gateway/index.js';
import { everything, node } from '../../helpers/mcp-peers.js';

/** A raw request (fetch cannot set Host or Origin freely). */
function raw(url: string, opts: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: opts.method ?? 'GET', headers: opts.headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
      // An event stream never ends: the status line is enough.
      if (String(res.headers['content-type']).startsWith('text/event-stream')) {
        resolve({ status: res.statusCode!, headers: res.headers, body: '' });
        req.destroy();
      }
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

const ENDPOINTS: [string, string][] = [
  ['GET', '/'],
  ['GET', '/mcp/servers'],
  ['GET', '/mcp/servers/ev'],
  ['POST', '/mcp/servers/ev/retry'],
  ['POST', '/mcp/servers/retry-all'],
  ['GET', '/events'],
  ['POST', '/mcp'],
  ['GET', '/readyz'],
];

describe('gateway HTTP access: Host and Origin', () => {
  let gateway: Gateway;
  let http: GatewayHttp;
  beforeAll(async () => {
    gateway = new Gateway(parseConfig({ supervisor: { healthIntervalMs: 0 }, mcpServers: { ev: { command: everything.command, args: everything.args } } }));
    http = await startGatewayHttp(gateway, { port: 0 });
    await gateway.start();
  });
  afterAll(async () => {
    await http?.close();
    await gateway?.close();
  });

  it('a foreign Origin is refused on every endpoint, POST retry-all included; the gateway\'s own origin passes', async () => {
    for (const [method, path] of ENDPOINTS) {
      const res = await raw(http.url + path, { method, headers: { origin: 'https://evil.example' } });
      expect([path, res.status]).toEqual([path, 403]);
    }
    // Another port on localhost is another origin (a dev server's page).
    expect((await raw(`${http.url}/mcp/servers/retry-all`, { method: 'POST', headers: { origin: 'http://localhost:3000' } })).status).toBe(403);
    expect((await raw(`${http.url}/mcp/servers/retry-all`, { method: 'POST', headers: { origin: 'null' } })).status).toBe(403);
    expect((await raw(`${http.url}/mcp/servers/retry-all`, { method: 'POST', headers: { origin: http.url } })).status).toBe(200);
    expect((await raw(`${http.url}/mcp/servers`, { headers: { origin: `http://localhost:${http.port}` } })).status).toBe(200);
  });

  it('Host: a non-loopback name is refused everywhere; a loopback name on another port (a forwarded port) passes', async () => {
    for (const [method, path] of ENDPOINTS) {
      const res = await raw(http.url + path, { method, headers: { host: `evil.example:${http.port}` } });
      expect([path, res.status]).toEqual([path, 403]);
    }
    expect((await raw(`${http.url}/mcp/servers`, { headers: { host: 'localhost:9999' } })).status).toBe(200);
    expect((await raw(`${http.url}/mcp/servers`, { headers: { host: '[::1]' } })).status).toBe(200);
  });

  it('/healthz and /readyz', async () => {
    expect(await raw(`${http.url}/healthz`)).toMatchObject({ status: 200 });
    const ready = await raw(`${http.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(JSON.parse(ready.body)).toEqual({ ready: true, servers: { ev: 'connected' } });
  });
});

describe('gateway HTTP access: token', () => {
  const token = 'correct-horse-battery-staple';
  let gateway: Gateway;
  let http: GatewayHttp;
  beforeAll(async () => {
    // A server whose first attempt never ends: /readyz says not ready meanwhile.
    gateway = new Gateway(parseConfig({ mcpServers: { slow: { command: node, args: ['-e', 'setInterval(() => {}, 1000)'], supervisor: { connectTimeoutMs: 60_000 } } } }));
    http = await startGatewayHttp(gateway, { port: 0, token });
    void gateway.start();
  });
  afterAll(async () => {
    await http?.close();
    await gateway?.close();
  });

  it('every endpoint but the probes wants the token; a wrong one is refused', async () => {
    for (const [method, path] of ENDPOINTS.filter(([, p]) => p !== '/readyz')) {
      const res = await raw(http.url + path, { method });
      expect([path, res.status]).toEqual([path, 401]);
    }
    expect((await raw(`${http.url}/mcp/servers`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
    expect((await raw(`${http.url}/mcp/servers`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
  });

  it('/readyz is open but says only whether the gateway is ready (503 while a server is still connecting)', async () => {
    const res = await raw(`${http.url}/readyz`);
    expect(res.status).toBe(503);
    expect(JSON.parse(res.body)).toEqual({ ready: false });
    const authorized = await raw(`${http.url}/readyz`, { headers: { authorization: `Bearer ${token}` } });
    expect(JSON.parse(authorized.body)).toEqual({ ready: false, servers: { slow: 'connecting' } });
  });

  it('the status page trades the token once for an HttpOnly SameSite=Strict cookie, which then opens the API and /events', async () => {
    expect((await raw(`${http.url}/?token=wrong`)).status).toBe(401);
    const traded = await raw(`${http.url}/?token=${token}`);
    expect(traded.status).toBe(303);
    expect(traded.headers.location).toBe('/');
    const setCookie = String(traded.headers['set-cookie']);
    expect(setCookie).toMatch(/^tether_gateway=[\w-]+; HttpOnly; SameSite=Strict; Path=\/$/);
    expect(setCookie).not.toContain(token);
    const cookie = setCookie.split(';')[0]!;
    expect((await raw(`${http.url}/`, { headers: { cookie } })).status).toBe(200);
    expect((await raw(`${http.url}/mcp/servers`, { headers: { cookie } })).status).toBe(200);
    expect((await raw(`${http.url}/events`, { headers: { cookie } })).status).toBe(200);
    expect((await raw(`${http.url}/mcp/servers`, { headers: { cookie: 'tether_gateway=forged' } })).status).toBe(401);
    // The login form does the same without the token in the address bar.
    const form = await raw(`${http.url}/login`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', origin: http.url }, body: `token=${token}` });
    expect(form.status).toBe(303);
    expect(String(form.headers['set-cookie'])).toMatch(/HttpOnly; SameSite=Strict/);
  });
});
