/**
 * Extension `keepLast` on the wire: `process/start` `keepLastBytes` is validated (-32602), a
 * client that did not negotiate it (a Codex client) never sees a gap and its process pauses at
 * the window as always; a tether client that asked for it and does not acknowledge gets one
 * `process/gap` naming the dropped seqs before the next output, every seq after it exact and
 * in order, and the process runs to its close without a single ack.
 */
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { RawClient, RpcReplyError } from '../../helpers/raw-client.js';
import { tetherAfterEach } from '../../helpers/tether-per-test.js';

const servers = tetherAfterEach();
const { pool } = servers;

const cwd = pathToFileURL(process.cwd()).href;
const COUNT = 60_000; // `seq 1 COUNT`: 348,894 bytes
const expected = Array.from({ length: COUNT }, (_, i) => `${i + 1}\n`).join('');

async function open(extensions: string[] | null): Promise<RawClient> {
  const c = await pool.connect(servers.target.url);
  await c.request('initialize', { clientName: 'keep-last-test', ...(extensions ? { tether: { version: 1, extensions } } : {}) });
  c.notify('initialized', {});
  return c;
}

describe('keepLast', () => {
  it('refuses an invalid keepLastBytes with -32602', async () => {
    await servers.start({});
    const c = await open(['acks', 'keepLast']);
    for (const bad of [0, -1, 1.5, 'big']) {
      const err = await c.request('process/start', { processId: `p${String(bad)}`, argv: ['true'], cwd, env: {}, tty: false, keepLastBytes: bad }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RpcReplyError);
      expect((err as RpcReplyError).error.code).toBe(-32602);
      expect((err as RpcReplyError).error.message).toContain('keepLastBytes');
    }
  });

  it('a client that acknowledges nothing is told each dropped run, every seq after it exact; the process closes', async () => {
    await servers.start({ outputWindowBytes: 64 * 1024 });
    const c = await open(['acks', 'keepLast']);
    await c.request('process/start', { processId: 'p', argv: ['seq', '1', String(COUNT)], cwd, env: {}, tty: false, keepLastBytes: 16 * 1024 });
    await c.waitClosed('p', 30_000);
    const frames = c.notifications.filter((f: any) => f.params?.processId === 'p');
    const gaps = frames.filter((f: any) => f.method === 'process/gap');
    expect(gaps.length).toBeGreaterThanOrEqual(1);
    const out = frames.filter((f: any) => f.method === 'process/output') as any[];
    // Each gap reaches past what came before it (it may name seqs already sent but not
    // acknowledged: those were in flight when dropped), and the next event follows it exactly.
    let lastSeq = 0;
    for (const f of frames as any[]) {
      if (f.method === 'process/gap') {
        expect(f.params.reason).toBe('keep-last');
        expect(f.params.firstSeq).toBeLessThanOrEqual(lastSeq + 1);
        expect(f.params.bytes).toBeGreaterThan(0);
        f.skips = f.params.lastSeq > lastSeq; // else it names only seqs already delivered
        lastSeq = Math.max(lastSeq, f.params.lastSeq);
      } else {
        expect(f.params.seq).toBe(lastSeq + 1);
        lastSeq = f.params.seq;
      }
    }
    // Between gaps, what arrived is exact: each run of output is the producer's next bytes
    // after the previous run (later in its output), and the last run ends with its last line.
    const runs: string[] = [''];
    for (const f of frames as any[]) {
      if (f.method === 'process/gap' && f.skips) runs.push('');
      else if (f.method === 'process/output') runs[runs.length - 1] += Buffer.from(f.params.chunk, 'base64').toString();
    }
    let at = 0;
    for (const run of runs.filter((r) => r.length > 0)) {
      const found = expected.indexOf(run, at);
      expect(found).toBeGreaterThanOrEqual(at);
      at = found + run.length;
    }
    expect(at).toBe(expected.length);
    const got = out.reduce((n, f) => n + Buffer.from(f.params.chunk, 'base64').length, 0);
    expect(got).toBeLessThan(expected.length);
  });

  it('through a reconnect the gap is told again before the first event, until the client acknowledges past it', async () => {
    const target = await servers.start({ outputWindowBytes: 64 * 1024, sessionTtlMs: 60_000 });
    const extensions = ['acks', 'keepLast'];
    const first = await pool.connect(target.url);
    const { sessionId } = await first.request('initialize', { clientName: 'keep-last-test', tether: { version: 1, extensions } });
    first.notify('initialized', {});
    await first.request('process/start', { processId: 'p', argv: ['seq', '1', String(COUNT)], cwd, env: {}, tty: false, keepLastBytes: 16 * 1024 });
    await first.waitClosed('p', 30_000);
    const told = first.notifications.filter((f: any) => f.method === 'process/gap') as any[];
    expect(told.length).toBeGreaterThanOrEqual(1);
    const lastDropped = Math.max(...told.map((f) => f.params.lastSeq as number));
    await first.drop(); // nothing acknowledged

    const resume = async (delivered: number): Promise<RawClient> => {
      const c = await pool.connect(servers.target.url);
      await c.request('initialize', { clientName: 'keep-last-test', resumeSessionId: sessionId, tether: { version: 1, extensions, delivered: { p: delivered } } });
      c.notify('initialized', {});
      await c.waitClosed('p', 30_000);
      return c;
    };
    const second = await resume(0);
    const frames = second.notifications.filter((f: any) => f.params?.processId === 'p') as any[];
    expect(frames[0].method).toBe('process/gap');
    expect(frames[0].params.lastSeq).toBe(lastDropped);
    expect(frames[1].params.seq).toBe(lastDropped + 1);
    const closeSeq = frames[frames.length - 1].params.seq as number;
    // Acknowledged past the gap: a later resume is not told it again.
    second.notify('process/ack', { processId: 'p', seq: lastDropped + 1 });
    await second.request('process/read', { processId: 'p', afterSeq: closeSeq }); // the ack is read before this answer
    await second.drop();
    const third = await resume(lastDropped + 1);
    const again = third.notifications.filter((f: any) => f.params?.processId === 'p') as any[];
    expect(again.some((f) => f.method === 'process/gap')).toBe(false);
    expect(again[again.length - 1].params.seq).toBe(closeSeq);
  });

  it('without the extension keepLastBytes is ignored: no gap, every byte', async () => {
    await servers.start({ outputWindowBytes: 64 * 1024 });
    const c = await open(null); // a Codex client
    await c.request('process/start', { processId: 'p', argv: ['seq', '1', String(COUNT)], cwd, env: {}, tty: false, keepLastBytes: 1024 });
    await c.waitClosed('p', 30_000);
    expect(c.notifications.some((f: any) => f.method === 'process/gap')).toBe(false);
    expect(c.output('p')).toBe(expected);
  });
});
