/**
 * Outgoing http/request sockets are capped (issue 22, item 8): per session and across the
 * server, set aside in the descriptor plan. A client that opens hundreds of requests to an
 * upstream that never finishes gets a clear refusal past the cap, and never leaves the server
 * without descriptors: new connections, fs/readFile and process/start all still work.
 * `tether serve` with default options, RLIMIT_NOFILE 256 and a bounded heap.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RawClient, type Frame } from '../../helpers/raw-client.js';
import { spawnServe, type ServeProcess } from '../../helpers/serve-process.js';

let web: Server;
let base: string;
const open: ServerResponse[] = [];
let served: ServeProcess | undefined;

beforeAll(async () => {
  web = createServer((_req, res) => {
    res.writeHead(200);
    res.write('x'); // and nothing more
    open.push(res);
  });
  await new Promise<void>((resolve) => web.listen({ port: 0, host: '127.0.0.1', backlog: 1024 }, () => resolve()));
  base = `http://127.0.0.1:${(web.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await served?.stop();
  web.closeAllConnections();
  await new Promise((resolve) => web.close(resolve));
});

const ask = (c: RawClient, id: string): Promise<Frame> =>
  c.call('http/request', { method: 'GET', url: `${base}/${id}`, headers: [], requestId: id, streamResponse: true });

describe('outgoing sockets', () => {
  it('refuses requests past the cap clearly and keeps connections, files and processes working (RLIMIT_NOFILE 256)', async () => {
    served = await spawnServe(['--listen', 'ws://127.0.0.1:0'], { nofile: 256, env: { NODE_OPTIONS: '--max-old-space-size=512' } });
    const hostile = await RawClient.connect(served.url);
    await hostile.handshake('hostile');
    const replies = await Promise.all(Array.from({ length: 300 }, (_, i) => ask(hostile, `h${i}`)));
    // Another session: connects, reads a file, starts a process, and has its own share of sockets.
    const other = await RawClient.connect(served.url);
    await other.handshake('other');
    const read = await other.call('fs/readFile', { path: 'file:///etc/hostname' });
    expect(read.result?.dataBase64).toBe(readFileSync('/etc/hostname').toString('base64'));
    const started = await other.call('process/start', { processId: 'p', argv: ['true'], cwd: pathToFileURL(tmpdir()).href, env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, tty: false });
    expect(started.error).toBeUndefined();
    await other.waitClosed('p');
    expect((await ask(other, 'o1')).result?.status).toBe(200);
    // The hostile session got its share and was told plainly about the rest.
    const refused = replies.filter((r) => r.error);
    expect(replies.length - refused.length).toBeGreaterThan(0);
    expect(refused.length).toBeGreaterThan(0);
    for (const r of refused) {
      expect(r.error).toMatchObject({ code: -32603, message: expect.stringMatching(/^http\/request failed: too many outgoing connections: /) });
    }
    await Promise.all([hostile.drop(), other.drop()]);
    expect(served.stderr()).not.toMatch(/EMFILE|too many open files/i);
    await served.stop();
    expect(served.child.signalCode).not.toBe('SIGKILL');
  }, 60_000);
});
