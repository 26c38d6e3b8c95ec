/**
 * `http/request` against a loopback HTTP server, on tether (`npm test`) and the Codex
 * exec-server (`npm run test:interop`): the same status, headers (lower-cased, in order,
 * repeated ones kept), body, redirect handling, streamed bodies and error texts.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCode } from '../../src/protocol/index.js';
import { RawClientPool, type Frame } from '../helpers/raw-client.js';
import { isCodex, startTarget, type Target } from '../helpers/target.js';

let target: Target;
let web: Server;
let base: string;
const pool = new RawClientPool();

beforeAll(async () => {
  target = await startTarget();
  web = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString();
      if (req.url === '/redirect') return void res.writeHead(302, { location: '/echo' }).end('moved');
      if (req.url === '/see-other') return void res.writeHead(303, { location: '/echo' }).end();
      if (req.url === '/missing') return void res.writeHead(404, { 'x-reason': 'none here' }).end('nf');
      if (req.url === '/slow') return void setTimeout(() => res.writeHead(200).end('late'), 5_000).unref();
      if (req.url === '/stream') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        let n = 0;
        const next = () => {
          res.write(`part${n}\n`);
          if (++n === 3) res.end();
          else setTimeout(next, 30);
        };
        return next();
      }
      res.setHeader('x-multi', ['a', 'b']);
      res.writeHead(200, { 'content-type': 'application/json' });
      // What arrived, header names as sent on the wire (minus Host, whose port varies).
      const sent: string[] = [];
      for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
        if (req.rawHeaders[i]!.toLowerCase() !== 'host') sent.push(req.rawHeaders[i]!, req.rawHeaders[i + 1]!);
      }
      res.end(JSON.stringify({ method: req.method, url: req.url, headers: sent, body }));
    });
  });
  await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', () => resolve()));
  base = `http://127.0.0.1:${(web.address() as AddressInfo).port}`;
});
afterEach(() => pool.dropAll());
afterAll(async () => {
  web.closeAllConnections();
  await new Promise((resolve) => web.close(resolve));
  await target?.stop();
});

async function ready() {
  const c = await pool.connect(target.url);
  await c.handshake();
  return c;
}

let n = 0;
const request = (c: Awaited<ReturnType<typeof ready>>, params: Record<string, unknown>) =>
  c.call('http/request', { method: 'GET', headers: [], requestId: `r${++n}`, ...params });
const decode = (frame: Frame) => Buffer.from(frame.result.bodyBase64, 'base64').toString();
/** Headers without the ones that change between runs. */
const stable = (headers: Array<{ name: string; value: string }>) => headers.filter((h) => h.name !== 'date');

describe('http/request', () => {
  it('answers status, headers in order (lower-cased, repeats kept) and the body', async () => {
    const c = await ready();
    const get = await request(c, { url: `${base}/echo` });
    expect(get.error).toBeUndefined();
    expect(get.result.status).toBe(200);
    expect(stable(get.result.headers)).toEqual([
      { name: 'x-multi', value: 'a' },
      { name: 'x-multi', value: 'b' },
      { name: 'content-type', value: 'application/json' },
      { name: 'connection', value: 'keep-alive' },
      { name: 'keep-alive', value: 'timeout=5' },
      { name: 'transfer-encoding', value: 'chunked' },
    ]);
    expect(JSON.parse(decode(get))).toEqual({ method: 'GET', url: '/echo', headers: ['accept', '*/*'], body: '' });
    const post = await request(c, {
      method: 'POST',
      url: `${base}/echo?q=1`,
      headers: [{ name: 'X-Test', value: 'v1' }, { name: 'x-test', value: 'v2' }],
      bodyBase64: Buffer.from('hello').toString('base64'),
    });
    expect(JSON.parse(decode(post))).toEqual({ method: 'POST', url: '/echo?q=1', headers: ['x-test', 'v1', 'x-test', 'v2', 'accept', '*/*', 'content-length', '5'], body: 'hello' });
    const missing = await request(c, { url: `${base}/missing` });
    expect([missing.result.status, decode(missing), stable(missing.result.headers)[0]]).toEqual([404, 'nf', { name: 'x-reason', value: 'none here' }]);
  });

  it('follows redirects unless told to stop', async () => {
    const c = await ready();
    const followed = await request(c, { url: `${base}/redirect` });
    expect(followed.result.status).toBe(200);
    expect(JSON.parse(decode(followed))).toMatchObject({ url: '/echo', headers: ['referer', `${base}/redirect`, 'accept', '*/*'] });
    const posted = await request(c, { method: 'POST', url: `${base}/see-other`, bodyBase64: Buffer.from('x').toString('base64'), redirectPolicy: 'follow' });
    expect(JSON.parse(decode(posted))).toMatchObject({ method: 'GET', url: '/echo', body: '' });
    const stopped = await request(c, { url: `${base}/redirect`, redirectPolicy: 'stop' });
    expect([stopped.result.status, decode(stopped)]).toEqual([302, 'moved']);
    expect(stopped.result.headers[0]).toEqual({ name: 'location', value: '/echo' });
  });

  it('streams a body as bodyDelta notifications after answering with the headers', async () => {
    const c = await ready();
    const reply = await request(c, { url: `${base}/stream`, requestId: 'stream-1', streamResponse: true });
    expect(reply.result).toMatchObject({ status: 200, bodyBase64: '' });
    const last = await c.waitFor((f) => f.method === 'http/request/bodyDelta' && f.params.requestId === 'stream-1' && f.params.done, 10_000, true);
    const deltas = c.notifications.filter((f) => f.method === 'http/request/bodyDelta' && f.params.requestId === 'stream-1').map((f) => f.params);
    expect(deltas.map((d) => d.seq)).toEqual(deltas.map((_, i) => i + 1));
    expect(deltas.map((d) => Buffer.from(d.deltaBase64, 'base64').toString()).join('')).toBe('part0\npart1\npart2\n');
    expect(last.params).toEqual({ requestId: 'stream-1', seq: deltas.length, deltaBase64: '', done: true, error: null });
    expect(deltas.slice(0, -1).every((d) => d.done === false && d.error === null)).toBe(true);
    // A requestId is unique on its connection while its stream runs.
    const first = request(c, { url: `${base}/stream`, requestId: 'stream-2', streamResponse: true });
    const second = request(c, { url: `${base}/stream`, requestId: 'stream-2', streamResponse: true });
    const answers = await Promise.all([first, second]);
    const refused = answers.find((a) => a.error);
    expect(refused?.error).toEqual({ code: ErrorCode.InvalidParams, message: 'http/request streamResponse requestId `stream-2` is already active' });
    await c.waitFor((f) => f.method === 'http/request/bodyDelta' && f.params.requestId === 'stream-2' && f.params.done, 10_000, true);
  });

  it('refuses bad requests with Codex’s texts; transport failures are -32603', async () => {
    const c = await ready();
    const error = async (params: Record<string, unknown>) => (await request(c, params)).error;
    expect(await error({ url: 'ftp://127.0.0.1/' })).toEqual({ code: ErrorCode.InvalidParams, message: 'http/request only supports http and https URLs, got ftp' });
    expect(await error({ url: 'not a url' })).toEqual({ code: ErrorCode.InvalidParams, message: 'http/request url is invalid: relative URL without a base' });
    expect(await error({ method: 'BAD METHOD', url: `${base}/echo` })).toEqual({ code: ErrorCode.InvalidParams, message: 'http/request method is invalid: invalid HTTP method' });
    expect(await error({ url: `${base}/echo`, headers: [{ name: 'bad header', value: 'x' }] })).toEqual({
      code: ErrorCode.InvalidParams,
      message: 'http/request header name is invalid: invalid HTTP header name',
    });
    expect(await error({ url: 'http://127.0.0.1:9/' })).toEqual({ code: ErrorCode.InternalError, message: 'http/request failed: error sending request for url (http://127.0.0.1:9/)' });
    // Codex races two timers here and says either; tether says the first.
    const slow = `http/request failed: error sending request for url (${base}/slow)`;
    const timedOut = await error({ url: `${base}/slow`, timeoutMs: 300 });
    expect(timedOut?.code).toBe(ErrorCode.InternalError);
    if (isCodex) expect([slow, 'http/request failed: route-aware request timed out']).toContain(timedOut?.message);
    else expect(timedOut?.message).toBe(slow);
    expect((await c.call('http/request', { method: 'GET', url: `${base}/echo` })).error?.code).toBe(ErrorCode.InvalidParams);
    const fresh = await pool.connect(target.url);
    expect((await fresh.call('http/request', { method: 'GET', url: `${base}/echo`, headers: [], requestId: 'x' })).error).toEqual({
      code: ErrorCode.InvalidRequest,
      message: 'client must call initialize before using http methods',
    });
  });
});
