/**
 * tether-only: limits answer with clear errors and never crash the server; retention
 * behaves as docs/protocol.md says while attached (oldest evicted, a visible gap).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ErrorCode } from '../../../src/protocol/index.js';
import { RawClient } from '../../helpers/raw-client.js';
import { disposeStateDir, makeStateDir } from '../../helpers/server-process.js';
import { tetherAfterEach } from '../../helpers/tether-per-test.js';
import { serverInternals } from '../../../src/server/server.js';

const CWD = pathToFileURL(tmpdir()).href;
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

const servers = tetherAfterEach();
const { pool } = servers;

const client = (): Promise<RawClient> => pool.connect(servers.target.url);

describe('limits', () => {
  it('closes a connection that sends a message over the size limit with 1009, and keeps serving', async () => {
    await servers.start({ maxMessageBytes: 64 * 1024 });
    const c = await client();
    await c.handshake();
    c.send({ id: 99, method: 'environment/status', params: { pad: 'x'.repeat(100 * 1024) } });
    const closed = await c.closed;
    expect(closed.code).toBe(1009);
    expect(closed.reason).toMatch(/max payload/i);
    const d = await client();
    await d.handshake();
    expect(await d.request('environment/status', {})).toEqual({ status: 'ready' });
  });

  it('refuses processes beyond the per-session limit with -32600 naming it, and counts only live ones', async () => {
    await servers.start({ maxProcessesPerSession: 2 });
    const c = await client();
    await c.handshake();
    const start = (id: string, argv: string[]) => c.call('process/start', { processId: id, argv, cwd: CWD, env: ENV, tty: false });
    expect((await start('a', ['sleep', '30'])).result).toBeDefined();
    expect((await start('b', ['sleep', '30'])).result).toBeDefined();
    const refused = await start('c', ['sleep', '30']);
    expect(refused.error?.code).toBe(ErrorCode.InvalidRequest);
    expect(refused.error?.message).toMatch(/too many processes.*2.*--max-processes/);
    await c.request('process/terminate', { processId: 'b' });
    await c.waitClosed('b');
    expect((await start('c', ['sleep', '30'])).result).toBeDefined(); // b closed: room again
    await c.request('process/terminate', { processId: 'a' });
    await c.request('process/terminate', { processId: 'c' });
  });

  it('refuses sessions beyond the limit with -32600 naming it; resuming an existing one still works', async () => {
    await servers.start({ maxSessions: 1 });
    const a = await client();
    const { sessionId } = await a.handshake();
    const b = await client();
    const refused = await b.call('initialize', { clientName: 'b' });
    expect(refused.error?.code).toBe(ErrorCode.InvalidRequest);
    expect(refused.error?.message).toMatch(/too many sessions.*1.*--max-sessions/);
    await a.close();
    let resumed;
    for (let i = 0; i < 100 && !resumed; i++) {
      const r = await b.call('initialize', { clientName: 'b', resumeSessionId: sessionId });
      if (r.result) resumed = r.result;
      else await new Promise((res) => setTimeout(res, 20)); // until the server saw the close
    }
    expect(resumed?.sessionId).toBe(sessionId);
  });

  it('allows a listed Origin and refuses others', async () => {
    const target = await servers.start({ allowedOrigins: ['https://ok.example'] });
    const ok = await pool.connect(target.url, { headers: { origin: 'https://ok.example' } });
    await ok.handshake();
    await expect(RawClient.connect(target.url, { headers: { origin: 'https://evil.example' } })).rejects.toMatchObject({ status: 403 });
  });

  it('evicts the oldest output while attached: a read after the fact shows the gap', async () => {
    await servers.start({ outputRetentionBytes: 64 * 1024 });
    const c = await client();
    await c.handshake();
    await c.request('process/start', {
      processId: 'big',
      argv: ['/bin/sh', '-c', `yes 0123456789abcdef | head -c ${1024 * 1024}`],
      cwd: CWD,
      env: ENV,
      tty: false,
    });
    await c.waitClosed('big', 20_000);
    expect(c.outputBuffer('big').length).toBe(1024 * 1024); // the live stream lost nothing
    const r = await c.request('process/read', { processId: 'big', afterSeq: 0 });
    expect(r.chunks[0].seq).toBeGreaterThan(1);
    const kept = r.chunks.reduce((n: number, ch: { chunk: string }) => n + Buffer.from(ch.chunk, 'base64').length, 0);
    expect(kept).toBeLessThanOrEqual(64 * 1024);
    expect(kept).toBeGreaterThan(0);
    expect(r.closed).toBe(true);
  });

  it('forgets a closed process after the closed-retention time (while attached)', async () => {
    const target = await servers.start({ closedRetentionMs: 100 });
    const c = await client();
    await c.handshake();
    await c.request('process/start', { processId: 'x', argv: ['/bin/true'], cwd: CWD, env: ENV, tty: false });
    await c.waitClosed('x');
    expect((await c.call('process/read', { processId: 'x' })).result).toBeDefined();
    const session = [...serverInternals(target.server).sessions.values()][0]!;
    const start = Date.now();
    while (session.processes.has('x') && Date.now() - start < 5_000) await new Promise((r) => setTimeout(r, 20));
    const gone = await c.call('process/read', { processId: 'x' });
    expect(gone.error).toEqual({ code: ErrorCode.InvalidRequest, message: 'unknown process id x' });
    // and the id may be used again
    expect((await c.call('process/start', { processId: 'x', argv: ['/bin/true'], cwd: CWD, env: ENV, tty: false })).result).toBeDefined();
  });

  it('keeps a closed process readable while detached, beyond the closed-retention time', async () => {
    const target = await servers.start({ closedRetentionMs: 50, sessionTtlMs: 10_000 });
    const c = await client();
    const { sessionId } = await c.handshake();
    await c.request('process/start', { processId: 'x', argv: ['/bin/sh', '-c', 'sleep 0.2; echo done'], cwd: CWD, env: ENV, tty: false });
    const detached = new Promise((r) => servers.target.server.once('session-detached', r));
    await c.drop();
    await detached;
    const session = serverInternals(target.server).sessions.get(sessionId)!;
    const proc = session.processes.get('x')!;
    await proc.whenClosed;
    // A witness: an attached session's process closed after x is forgotten once the retention
    // time is over (an event), so x's retention time is over too; x must still be there.
    const w = await client();
    await w.handshake('witness');
    const witness = [...serverInternals(target.server).sessions.values()].find((s) => s !== session)!;
    await w.request('process/start', { processId: 'w', argv: ['/bin/true'], cwd: CWD, env: ENV, tty: false });
    await w.waitClosed('w');
    const start = Date.now();
    while (witness.processes.has('w') && Date.now() - start < 5_000) await new Promise((r) => setTimeout(r, 10));
    expect(witness.processes.has('w')).toBe(false);
    expect(session.processes.has('x')).toBe(true);
    const b = await client();
    await b.handshake('b', sessionId);
    const r = await b.request('process/read', { processId: 'x' });
    expect(r).toMatchObject({ exited: true, exitCode: 0, closed: true });
    expect(Buffer.from(r.chunks[0].chunk, 'base64').toString()).toBe('done\n');
  });

  it('answers a write only once the child took it (its stdin pipe has room), so input cannot pile up', async () => {
    await servers.start({});
    const c = await client();
    await c.handshake();
    await c.request('process/start', { processId: 'deaf', argv: ['sleep', '30'], cwd: CWD, env: ENV, tty: false, pipeStdin: true });
    const big = Buffer.alloc(1024 * 1024, 'x').toString('base64');
    const reply = c.call('process/write', { processId: 'deaf', chunk: big, writeId: 'w1' });
    let answered = false;
    void reply.then(() => (answered = true));
    // Other requests are still served meanwhile.
    expect(await c.request('environment/status', {})).toEqual({ status: 'ready' });
    expect(answered).toBe(false);
    expect(await c.request('process/terminate', { processId: 'deaf' })).toEqual({ running: true });
    expect((await reply).result).toEqual({ status: 'accepted' });
  });

  it('refuses ids of megabytes (8 MiB process ids, writeIds, a client name) with -32602 saying so; nothing is kept, nothing else is affected', async () => {
    const dir = makeStateDir('self');
    try {
      const target = await servers.start({ stateDir: dir, adoptWithinMs: 5_000 });
      const c = await client();
      const { sessionId } = await c.handshake();
      const huge = 'p'.repeat(8 * 1024 * 1024);
      const start = (id: string) => c.call('process/start', { processId: id, argv: ['sleep', '30'], cwd: CWD, env: ENV, tty: false, pipeStdin: true });
      for (let i = 0; i < 3; i++) {
        const refused = await start(`${i}${huge}`);
        expect(refused.error?.code).toBe(ErrorCode.InvalidParams);
        expect(refused.error?.message).toBe('invalid params for process/start: processId: processId is 8388609 characters long; at most 1024 are allowed');
      }
      // The longest id allowed works; the refused ones left nothing behind.
      const longest = 'q'.repeat(1024);
      expect((await start(longest)).result).toEqual({ processId: longest, sandboxType: 'none' });
      const session = serverInternals(target.server).sessions.get(sessionId)!;
      expect([...session.processes.keys()]).toEqual([longest]);
      for (const method of ['process/read', 'process/terminate', 'process/signal']) {
        const refused = await c.call(method, { processId: huge, signal: 'interrupt' });
        expect(refused.error?.code).toBe(ErrorCode.InvalidParams);
        expect(refused.error?.message).toMatch(/processId is 8388608 characters long; at most 1024 are allowed$/);
      }
      const write = await c.call('process/write', { processId: longest, chunk: '', writeId: huge });
      expect(write.error?.message).toMatch(/writeId: writeId is 8388608 characters long; at most 1024 are allowed$/);
      expect((await c.call('process/write', { processId: longest, chunk: 'aGkK', writeId: 'w'.repeat(1024) })).result).toEqual({ status: 'accepted' });
      // The session's record names the one process, and stays small.
      const records = readdirSync(join(dir, 'sessions')).filter((name) => name.endsWith('.json'));
      await expect.poll(() => JSON.parse(readFileSync(join(dir, 'sessions', records[0]!), 'utf8')).processes.map((p: { processId: string }) => p.processId)).toEqual([longest]);
      expect(statSync(join(dir, 'sessions', records[0]!)).size).toBeLessThan(16 * 1024);
      // Another client, with a client name of megabytes: refused; with a sane one: served.
      const d = await client();
      const named = await d.call('initialize', { clientName: huge });
      expect(named.error?.code).toBe(ErrorCode.InvalidParams);
      expect(named.error?.message).toMatch(/clientName: clientName is 8388608 characters long; at most 1024 are allowed$/);
      await d.handshake();
      expect(await d.request('environment/status', {})).toEqual({ status: 'ready' });
      await c.request('process/terminate', { processId: longest });
      await c.waitClosed(longest);
    } finally {
      await servers.stopNow();
      await disposeStateDir(dir);
    }
  });
});
