/**
 * tether-only: a fast producer cannot make the server's memory grow. While attached, a slow
 * reader makes the server stop reading the child's pipes (the child blocks) and nothing is
 * dropped; while detached, the child is read until its window is full, then blocks.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { Connection } from '../../../src/server/connection/connection.js';
import type { ManagedProcess } from '../../../src/server/output/process.js';
import { blockedWriting } from '../../helpers/procs.js';
import { RawClient } from '../../helpers/raw-client.js';
import { startTetherServer, type TetherTarget } from '../../helpers/tether.js';
import { serverInternals } from '../../../src/server/server.js';

const CWD = pathToFileURL(tmpdir()).href;
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const KiB = 1024;
const MiB = 1024 * KiB;

let target: TetherTarget | undefined;
afterEach(async () => {
  await target?.stop();
  target = undefined;
});

async function until(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('backpressure', () => {
  it('blocks the child while the client does not read, then delivers every byte in order', async () => {
    target = await startTetherServer({
      outputRetentionBytes: 256 * KiB,
      backpressure: { highWaterBytes: 512 * KiB, lowWaterBytes: 128 * KiB },
    });
    const conns: Connection[] = [];
    serverInternals(target.server).onConnection((conn: Connection) => conns.push(conn));
    const c = await RawClient.connect(target.url);
    const { sessionId } = await c.handshake();
    const size = 64 * MiB;
    const socket = (c.ws as unknown as { _socket: Socket })._socket;
    socket.pause(); // a reader that stopped reading (the kernel buffers fill, then the server's)
    c.send({ id: 'start', method: 'process/start', params: { processId: 'dump', argv: ['head', '-c', String(size), '/dev/zero'], cwd: CWD, env: ENV, tty: false } });
    const session = serverInternals(target.server).sessions.get(sessionId)!;
    await until(() => session.processes.has('dump'), 'the process started');
    const proc = session.processes.get('dump') as ManagedProcess;
    await until(() => proc.isPaused, 'the server paused the child');
    const readAtPause = proc.bytesRead;
    // The child ends up asleep in write(2) on its full stdout (an event, not a fixed wait), the
    // server still paused, having read a bounded amount since it paused.
    await until(() => blockedWriting(proc.pid, 1), 'the child is blocked writing its stdout');
    expect(proc.isPaused).toBe(true);
    expect(proc.bytesRead).toBeLessThan(readAtPause + 256 * KiB);
    expect(proc.bytesRead).toBeLessThan(24 * MiB);
    expect(conns[0]!.ws.bufferedAmount).toBeLessThan(2 * MiB);
    expect(proc.retained).toBeLessThanOrEqual(2 * MiB);

    let received = 0;
    let lastSeq = 0;
    let contiguous = true;
    c.on('notification', (n) => {
      if (n.method !== 'process/output' || n.params.processId !== 'dump') return;
      if (n.params.seq !== lastSeq + 1) contiguous = false;
      lastSeq = n.params.seq;
      received += Buffer.from(n.params.chunk, 'base64').length;
      c.notifications.length = 0; // keep the test's own memory flat
    });
    socket.resume();
    await c.waitFor((f) => f.method === 'process/closed' && f.params.processId === 'dump', 60_000);
    expect(contiguous).toBe(true);
    expect(received).toBe(size);
    await c.close();
  });

  it('reads a detached child only up to its window, then blocks it; resuming lets it finish', async () => {
    target = await startTetherServer({ outputWindowBytes: 128 * KiB, outputRetentionBytes: 64 * KiB, sessionTtlMs: 30_000 });
    const c = await RawClient.connect(target.url);
    const { sessionId } = await c.handshake();
    // `yes` starts once detached: output an attached client already received may be evicted,
    // and how much that is would depend on timing.
    const go = join(mkdtempSync(join(tmpdir(), 'tether-bp-')), 'go');
    const argv = ['/bin/sh', '-c', `while [ ! -e '${go}' ]; do sleep 0.01; done; exec yes`];
    await c.request('process/start', { processId: 'yes', argv, cwd: CWD, env: ENV, tty: false });
    const detached = new Promise((r) => target!.server.once('session-detached', r));
    await c.drop();
    await detached;
    writeFileSync(go, '');
    const proc = serverInternals(target.server).sessions.get(sessionId)!.processes.get('yes') as ManagedProcess;
    await until(() => proc.isPaused, 'the detached child was paused');
    const read = proc.bytesRead;
    await until(() => blockedWriting(proc.pid, 1), 'the detached child is blocked writing its stdout');
    expect(proc.isPaused).toBe(true);
    expect(proc.bytesRead).toBeLessThan(read + 128 * KiB); // blocked, not read and dropped
    expect(proc.unacknowledged).toBeGreaterThanOrEqual(128 * KiB);
    expect(proc.retained).toBeLessThan(128 * KiB + 64 * KiB + 256 * KiB); // window + retention + one read (256 KiB at most)

    const b = await RawClient.connect(target.url);
    await b.handshake('b', sessionId);
    const r = await b.request('process/read', { processId: 'yes', afterSeq: 0 });
    expect(r.chunks[0].seq).toBe(1); // nothing evicted while detached
    // Reading the backlog released the child: live output flows again.
    await b.waitFor((f) => f.method === 'process/output' && f.params.processId === 'yes', 10_000);
    expect(await b.request('process/terminate', { processId: 'yes' })).toEqual({ running: true });
    await b.waitClosed('yes');
    await b.close();
    rmSync(dirname(go), { recursive: true, force: true });
  });

  it('lets a resumed client that never reads its backlog get the child running again after the grace', async () => {
    target = await startTetherServer({ outputRetentionBytes: 64 * KiB, resumeGraceMs: 200 });
    const c = await RawClient.connect(target.url);
    const { sessionId } = await c.handshake();
    await c.request('process/start', { processId: 'yes', argv: ['yes'], cwd: CWD, env: ENV, tty: false });
    const detached = new Promise((r) => target!.server.once('session-detached', r));
    await c.drop();
    await detached;
    const proc = serverInternals(target.server).sessions.get(sessionId)!.processes.get('yes') as ManagedProcess;
    await until(() => proc.isPaused, 'the detached child was paused');
    const b = await RawClient.connect(target.url);
    await b.handshake('b', sessionId);
    // No read: once the grace is over, live output flows again and the backlog is evictable.
    await b.waitFor((f) => f.method === 'process/output' && f.params.processId === 'yes', 10_000);
    const r = await b.request('process/read', { processId: 'yes', afterSeq: 0 });
    expect(r.chunks[0].seq).toBeGreaterThan(1);
    expect(await b.request('process/terminate', { processId: 'yes' })).toEqual({ running: true });
    await b.waitClosed('yes');
    await b.close();
  });

  it('error answers to a client that sends unparsable frames without reading wait within the mark: its socket stops being read, nothing is lost', async () => {
    target = await startTetherServer();
    const conns: Connection[] = [];
    serverInternals(target.server).onConnection((conn: Connection) => conns.push(conn));
    const c = await RawClient.connect(target.url);
    await c.handshake();
    const socket = (c.ws as unknown as { _socket: Socket })._socket;
    socket.pause();
    // 300,000 one-byte frames that are not JSON (masked with key 0), each answered with a
    // -32700 of ~90 bytes: 2 MB asking for 27 MB, written at once.
    const junk = Buffer.from([0x81, 0x80 | 1, 0, 0, 0, 0, 0x78]);
    const count = 300_000;
    socket.write(Buffer.concat(Array.from({ length: count }, () => junk)));
    c.send({ id: 7, method: 'environment/status', params: {} });
    // Held back: the server stops reading the socket, and its send buffer stays near its mark.
    const server = target.server;
    await until(() => {
      expect(serverInternals(server).memory.heldBy('send'), 'send buffer').toBeLessThan(4 * MiB);
      return conns.some((conn) => conn.ws.isPaused);
    }, 'the server stops reading the flooder', 60_000);
    // Once it reads, every frame is answered: all the errors, then the request after them.
    socket.resume();
    const status = await c.waitFor((f) => f.id === 7, 60_000);
    expect(status.result).toEqual({ status: 'ready' });
    expect(c.frames.filter((f) => f.id === null && f.error?.code === -32700)).toHaveLength(count);
    await c.close();
  }, 120_000);
});
