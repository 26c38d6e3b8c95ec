/**
 * Health for a front door (docs/fleet.md): `/livez` and `/readyz` are answered without a
 * token, even on a server that wants one for everything else. `/livez` is 200 whenever the
 * process answers HTTP, ready or not; `/readyz` is 503 with its reason while the server is
 * not ready (an embedding application's setReady(false)), 200 otherwise.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ExecClient } from '../../../src/client/index.js';
import { startServer, type TetherServer } from '../../../src/server/index.js';

let server: TetherServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

const http = (url: string) => url.replace(/^ws/, 'http');

describe('/livez and /readyz for a proxy', () => {
  it('are answered without the token the server wants for everything else', async () => {
    server = await startServer({ port: 0, token: 'secret' });
    const base = http(server.url);
    for (const path of ['/livez', '/readyz']) {
      const res = await fetch(`${base}${path}`);
      expect(res.status, path).toBe(200);
      expect(await res.text()).toBe('');
      expect((await fetch(`${base}${path}`, { method: 'HEAD' })).status, `HEAD ${path}`).toBe(200);
    }
    expect((await fetch(`${base}/metrics`)).status, 'the token still guards the rest').toBe(401);
    expect((await fetch(`${base}/livez`, { method: 'POST' })).status).toBe(404);
  });

  it('answers the WebSocket upgrade on any path (a front door that does not strip its prefix works too)', async () => {
    server = await startServer({ port: 0 });
    const client = await ExecClient.connect(`${server.url}/h/box1/`);
    try {
      const proc = client.spawn(['sh', '-c', 'echo through a path']);
      let out = '';
      proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
      expect(await proc.exited).toBe(0);
      expect(out).toBe('through a path\n');
    } finally {
      await client.close();
    }
  });

  it('/livez stays 200 while /readyz says 503 and why (not ready: adopting, or an application loading)', async () => {
    server = await startServer({ port: 0 });
    const base = http(server.url);
    server.setReady(false, 'adopting');
    expect((await fetch(`${base}/livez`)).status).toBe(200);
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toEqual({ ready: false, reason: 'adopting' });
    server.setReady(true);
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    expect((await fetch(`${base}/livez`)).status).toBe(200);
  });
});
