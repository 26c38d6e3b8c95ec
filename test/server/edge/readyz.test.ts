/**
 * `/readyz` of a server told it is not ready (TetherServer.setReady, issue #27): 503 with a
 * JSON reason until told ready, 200 after. The gate alone (http-gate.ts) on a plain HTTP
 * server. (A server on a state dir listens only once adoption is done: serve-replace checks
 * its /readyz.)
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { HttpGate } from '../../../src/server/edge/http-gate.js';

let http: Server | undefined;
afterEach(async () => {
  await new Promise<void>((resolve) => (http ? http.close(() => resolve()) : resolve()));
  http = undefined;
});

async function gate(): Promise<{ gate: HttpGate; url: string }> {
  http = createServer();
  const g = new HttpGate(http, {}, { secure: false, maxConnections: 16, loopback: true, host: '127.0.0.1', admin: null, log: () => {} });
  g.serveRequests(new Registry());
  await new Promise<void>((resolve) => http!.listen(0, '127.0.0.1', resolve));
  return { gate: g, url: `http://127.0.0.1:${(http.address() as AddressInfo).port}` };
}

describe('/readyz told not ready', () => {
  it('is 200 by default, 503 {"ready":false,"reason":"adopting"} while adopting, 200 again once done', async () => {
    const { gate: g, url } = await gate();
    expect((await fetch(`${url}/readyz`)).status).toBe(200);

    g.setNotReady('adopting');
    const res = await fetch(`${url}/readyz`);
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(await res.json()).toEqual({ ready: false, reason: 'adopting' });
    const head = await fetch(`${url}/readyz`, { method: 'HEAD' });
    expect(head.status).toBe(503);

    g.setNotReady(null);
    const after = await fetch(`${url}/readyz`);
    expect(after.status).toBe(200);
    expect(await after.text()).toBe('');
    expect((await fetch(`${url}/nothing`)).status).toBe(404);
  });
});
