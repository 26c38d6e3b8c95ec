/**
 * The Codex dialect, honestly (issue 10): a raw client that asks for no extension is away
 * while its process prints 3 MiB, comes back, and catches up with `process/read` alone —
 * once in one read (`maxBytes: null`), once in 64 KiB steps — and gets every byte. While it
 * reads, the server sends none of that backlog as notifications (it holds the process's live
 * output behind it), so nothing it needs is evicted under it.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RawClient, RawClientPool } from '../../helpers/raw-client.js';
import { startTetherServer, type TetherTarget } from '../../helpers/tether.js';
import { serverInternals } from '../../../src/server/server.js';

const MiB = 1024 * 1024;
const SIZE = 3 * MiB;
const CWD = pathToFileURL(tmpdir()).href;
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const PATTERN = '0123456789abcdefghijklmnopqrstuvwxyz\n';

let target: TetherTarget;
let dir: string;
const pool = new RawClientPool();

beforeAll(async () => {
  target = await startTetherServer(); // default window (8 MiB) and retention (1 MiB)
  dir = mkdtempSync(join(tmpdir(), 'tether-catchup-'));
});

afterAll(async () => {
  await pool.dropAll();
  await target?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function until(cond: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Starts the printer, goes away, lets it print all 3 MiB; returns a resumed raw client. */
async function awayWhilePrinting(id: string): Promise<RawClient> {
  const go = join(dir, `go-${id}`);
  const a = await pool.connect(target.url);
  const { sessionId } = await a.handshake('codex-style');
  await a.request('process/start', {
    processId: id,
    argv: ['/bin/sh', '-c', `while [ ! -e '${go}' ]; do sleep 0.01; done; yes '${PATTERN.trim()}' | head -c ${SIZE}`],
    cwd: CWD,
    env: ENV,
    tty: false,
  });
  const detached = new Promise<void>((resolve) => target.server.on('session-detached', (sid: string) => sid === sessionId && resolve()));
  await a.drop();
  await detached;
  writeFileSync(go, '');
  const proc = serverInternals(target.server).sessions.get(sessionId)!.processes.get(id)!;
  await until(() => proc.closed, 'the process printed everything and closed');
  expect(existsSync(go)).toBe(true);
  const b = await pool.connect(target.url);
  expect((await b.handshake('codex-style', sessionId)).sessionId).toBe(sessionId);
  return b;
}

const expected = Buffer.alloc(SIZE, PATTERN);

describe('a Codex-dialect client that was away catches up with process/read alone', () => {
  it('in one read (maxBytes: null)', async () => {
    const b = await awayWhilePrinting('one-read');
    const r = await b.request('process/read', { processId: 'one-read', afterSeq: 0, maxBytes: null });
    const data = Buffer.concat(r.chunks.map((c: { chunk: string }) => Buffer.from(c.chunk, 'base64')));
    expect(r.chunks[0].seq).toBe(1);
    expect(data.length).toBe(SIZE);
    expect(data.equals(expected)).toBe(true);
    expect(r).toMatchObject({ exited: true, exitCode: 0, closed: true });
    // None of the backlog was pushed as notifications meanwhile.
    expect(b.notifications.filter((n) => n.method === 'process/output')).toEqual([]);
  });

  it('in 64 KiB steps', async () => {
    const b = await awayWhilePrinting('steps');
    const parts: Buffer[] = [];
    let afterSeq = 0;
    let reads = 0;
    for (;;) {
      const r = await b.request('process/read', { processId: 'steps', afterSeq, maxBytes: 64 * 1024 });
      reads++;
      for (const c of r.chunks as { seq: number; chunk: string }[]) {
        expect(c.seq).toBe(afterSeq + 1); // no gap, nothing twice
        afterSeq = c.seq;
        parts.push(Buffer.from(c.chunk, 'base64'));
      }
      if (r.chunks.length === 0 && r.closed) break;
    }
    const data = Buffer.concat(parts);
    expect(data.length).toBe(SIZE);
    expect(data.equals(expected)).toBe(true);
    expect(reads).toBeGreaterThan(SIZE / (64 * 1024) / 2);
    expect(b.notifications.filter((n) => n.method === 'process/output')).toEqual([]);
  });
});
