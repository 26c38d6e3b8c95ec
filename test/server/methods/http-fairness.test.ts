/**
 * http/request cannot starve fs (issue 22, item 7): buffered bodies that trickle in for as long
 * as they like draw on their own session's share, never on the fs data budget, so another
 * session's small fs/readFile is answered meanwhile. `tether serve` with default options and
 * a bounded heap; the upstream is a loopback server that sends one byte and then nothing.
 */
import { readFileSync } from 'node:fs';
import { createServer, type ServerResponse, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RawClient } from '../../helpers/raw-client.js';
import { spawnServe, type ServeProcess } from '../../helpers/serve-process.js';

let web: Server;
let base: string;
const trickling: ServerResponse[] = [];
let arrived: (() => void) | undefined;
let served: ServeProcess | undefined;

beforeAll(async () => {
  web = createServer((_req, res) => {
    res.writeHead(200); // no content-length: a buffered body reserves the whole cap (8 MiB)
    res.write('x');
    trickling.push(res);
    arrived?.();
  });
  await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', () => resolve()));
  base = `http://127.0.0.1:${(web.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await served?.stop();
  web.closeAllConnections();
  await new Promise((resolve) => web.close(resolve));
});

describe('http/request and fs fairness', () => {
  it('eight trickling buffered bodies of one session leave another session’s fs/readFile answered', async () => {
    served = await spawnServe(['--listen', 'ws://127.0.0.1:0'], { env: { NODE_OPTIONS: '--max-old-space-size=512' } });
    const hostile = await RawClient.connect(served.url);
    await hostile.handshake('hostile');
    const all = new Promise<void>((resolve) => (arrived = () => trickling.length >= 8 && resolve()));
    const bodies = Array.from({ length: 8 }, (_, i) => hostile.call('http/request', { method: 'GET', url: `${base}/slow/${i}`, headers: [], requestId: `r${i}` }));
    await all; // every request reached upstream and got its first byte
    const other = await RawClient.connect(served.url);
    await other.handshake('other');
    const read = await other.call('fs/readFile', { path: 'file:///etc/hostname' });
    expect(read.result?.dataBase64).toBe(readFileSync('/etc/hostname').toString('base64'));
    // The bodies were never lost: once they end, each is answered whole.
    for (const res of trickling) res.end('y');
    for (const reply of await Promise.all(bodies)) expect(Buffer.from(reply.result.bodyBase64, 'base64').toString()).toBe('xy');
    await Promise.all([hostile.drop(), other.drop()]);
    await served.stop();
    expect(served.child.signalCode).not.toBe('SIGKILL');
  }, 30_000);
});
