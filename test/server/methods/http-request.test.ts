/**
 * tether's http/request beyond Codex (tether only): a buffered body is capped (the error says
 * to stream it), and a streamed body ends when its connection goes (the upstream request is
 * aborted, nothing keeps reading for nobody).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCode } from '../../../src/protocol/index.js';
import { RawClientPool } from '../../helpers/raw-client.js';
import { startTetherServer, type TetherTarget } from '../../helpers/tether.js';

let server: TetherTarget;
let web: Server;
let base: string;
let upstreamClosed: Promise<void>;
const pool = new RawClientPool();

beforeAll(async () => {
  server = await startTetherServer({ fs: { maxReadFileBytes: 1024 } });
  let closed!: () => void;
  upstreamClosed = new Promise((resolve) => (closed = resolve));
  web = createServer((req, res) => {
    if (req.url === '/big') return void res.end(Buffer.alloc(4096, 120));
    // /endless: a body that never ends; its request closing is what the test waits for.
    res.writeHead(200);
    const timer = setInterval(() => res.write('tick\n'), 20);
    req.on('close', () => {
      clearInterval(timer);
      closed();
    });
  });
  await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', () => resolve()));
  base = `http://127.0.0.1:${(web.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await pool.dropAll();
  web.closeAllConnections();
  await new Promise((resolve) => web.close(resolve));
  await server?.stop();
});

describe('http/request limits', () => {
  it('caps a buffered body and streams a larger one', async () => {
    const c = await pool.connect(server.url);
    await c.handshake();
    const buffered = await c.call('http/request', { method: 'GET', url: `${base}/big`, headers: [], requestId: 'b' });
    expect(buffered.error).toEqual({ code: ErrorCode.InvalidParams, message: 'http/request response body exceeds 1024 bytes; ask for it with streamResponse: true' });
    const streamed = await c.call('http/request', { method: 'GET', url: `${base}/big`, headers: [], requestId: 's', streamResponse: true });
    expect(streamed.result.status).toBe(200);
    await c.waitFor((f) => f.method === 'http/request/bodyDelta' && f.params.requestId === 's' && f.params.done, 10_000, true);
    const body = c.notifications.filter((f) => f.params?.requestId === 's').map((f) => Buffer.from(f.params.deltaBase64, 'base64'));
    expect(Buffer.concat(body)).toEqual(Buffer.alloc(4096, 120));
  });

  it('ends a streamed body when its connection goes', async () => {
    const c = await pool.connect(server.url);
    await c.handshake();
    await c.request('http/request', { method: 'GET', url: `${base}/endless`, headers: [], requestId: 'e', streamResponse: true });
    await c.waitFor((f) => f.method === 'http/request/bodyDelta' && f.params.requestId === 'e', 10_000, true);
    await c.drop();
    await upstreamClosed; // the server aborted the upstream request
  });
});
