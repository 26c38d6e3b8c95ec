/**
 * Issue 22 (efficiency under cuts): an upload through a link that is cut again and again
 * re-sends only what the server has not acknowledged. A 48 MiB file goes up with
 * copyToRemote (what `tether cp` runs) through the chaos proxy, which ends every connection
 * after 1.5-2.5 MiB of client-to-server bytes (seeded); everything the client pushed into
 * the proxy (forwarded, and dropped past a quota) must stay under twice the file's size —
 * base64 alone costs 4/3 — and the copy must be byte-exact. Counted in bytes, not time;
 * loopback, seeded, bounded (a copy that has sent four times the file is stopped: failed).
 * Before the fix every cut re-sent the whole 8 MiB window and the copy never got there.
 * Also: what the extension `fsWritten` (docs/protocol.md) answers, on the wire.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChaosProxy } from '../../../src/chaos/proxy.js';
import { seededRandom } from '../../../src/chaos/random.js';
import { ExecClient } from '../../../src/client/index.js';
import { copyToRemote } from '../../../src/client/fs/copy.js';
import { RawClientPool } from '../../helpers/raw-client.js';
import { startTetherServer, type TetherTarget } from '../../helpers/tether.js';

const MiB = 1024 * 1024;
const SIZE = 48 * MiB;

let target: TetherTarget;
let proxy: ChaosProxy;
let root: string;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'tether-cp-resend-'));
  target = await startTetherServer();
  proxy = await ChaosProxy.inFrontOf(target.url);
});
const pool = new RawClientPool();
afterAll(async () => {
  await pool.dropAll();
  await proxy?.close();
  await target?.stop();
  rmSync(root, { recursive: true, force: true });
});

/** Seeded bytes in which every 4 KiB differs (a block written twice or misplaced shows). */
function content(size: number, seed: number): Buffer {
  const random = seededRandom(seed);
  const out = Buffer.allocUnsafe(size);
  for (let i = 0; i < size; i += 4) out.writeUInt32LE(Math.floor(random() * 2 ** 32), i);
  for (let at = 0; at < size; at += 4096) out.writeUInt32LE(at / 4096, at);
  return out;
}

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

describe('an upload through a link cut every 1.5-2.5 MiB', () => {
  it('sends less than twice the file upstream, and the copy is byte-exact', async () => {
    const data = content(SIZE, 22);
    const local = join(root, 'big.bin');
    writeFileSync(local, data);
    const client = await ExecClient.connect(proxy.url, { clientName: 'cp-resend-test' });
    const random = seededRandom(7);
    const before = proxy.stats();
    proxy.cutEachAfter(() => Math.round((1.5 + random()) * MiB), { direction: 'up' });
    let recoveries = 0;
    client.on('recovered', () => recoveries++);
    // Bounded: a copy that has already sent four times the file is stopped (it has failed).
    const upstreamSince = () => {
      const now = proxy.stats();
      return now.up.forwarded + now.up.dropped - (before.up.forwarded + before.up.dropped);
    };
    let stopped = false;
    const watch = () => {
      if (!stopped && upstreamSince() > 4 * SIZE) {
        stopped = true;
        void client.close();
      }
    };
    proxy.on('close', watch);
    try {
      const report = await copyToRemote(client.fs, local, join(root, 'remote.bin')).catch((err: Error) => {
        if (stopped) return undefined;
        throw err;
      });
      if (report) expect(report).toMatchObject({ files: 1, bytes: SIZE });
    } finally {
      proxy.off('close', watch);
      proxy.stopCuttingAfterBytes();
      await client.close();
    }
    const after = proxy.stats();
    const upstream = after.up.forwarded + after.up.dropped - (before.up.forwarded + before.up.dropped);
    const dropped = after.up.dropped - before.up.dropped;
    const cuts = after.quotaCuts - before.quotaCuts;
    process.stderr.write(`cp-resend: ${(upstream / MiB).toFixed(1)} MiB upstream for ${SIZE / MiB} MiB (${(upstream / SIZE).toFixed(2)}x; ${(dropped / MiB).toFixed(1)} MiB of it past a cut), ${cuts} cuts, ${recoveries} recoveries\n`);
    expect(stopped, 'stopped after sending 4x the file upstream').toBe(false);
    expect(sha256(readFileSync(join(root, 'remote.bin')))).toBe(sha256(data));
    // The link really was cut, many times over (at least one cut per 2.5 MiB upstream).
    expect(cuts).toBeGreaterThanOrEqual(Math.floor(upstream / (2.5 * MiB)));
    expect(cuts).toBeGreaterThanOrEqual(15);
    expect(upstream).toBeLessThanOrEqual(2 * SIZE);
  }, 120_000);
});

describe('extension fsWritten', () => {
  async function initialized(extensions: string[]) {
    const c = await pool.connect(target.url);
    await c.request('initialize', { clientName: 'fs-written-test', tether: { version: 1, extensions } });
    c.notify('initialized', {});
    return c;
  }
  const b64 = (text: string) => Buffer.from(text).toString('base64');

  it('says which numbered block writes completed on a handle; -32601 without the extension', async () => {
    const file = pathToFileURL(join(root, 'written.txt')).href;
    const c = await initialized(['fsResume', 'fsWritten']);
    await c.request('fs/open', { handleId: 'w', path: file, mode: 'replace' });
    await c.request('fs/writeBlock', { handleId: 'w', offset: 0, chunk: b64('abc'), writeId: 7 });
    await c.request('fs/writeBlock', { handleId: 'w', offset: 3, chunk: b64('def') }); // unnumbered: not remembered
    await c.request('fs/writeBlock', { handleId: 'w', offset: 6, chunk: b64('ghi'), writeId: 2 });
    expect(await c.request('fs/written', { handleId: 'w', writeIds: [1, 2, 3, 7] })).toEqual({ writeIds: [2, 7] });
    // A failed write is not reported.
    const refused = await c.call('fs/writeBlock', { handleId: 'w', offset: 9, chunk: '!', writeId: 9 });
    expect(refused.error?.code).toBe(-32602);
    expect(await c.request('fs/written', { handleId: 'w', writeIds: [9] })).toEqual({ writeIds: [] });
    // Bounded: the latest 256 ids per handle, at most 256 asked at once.
    for (let id = 100; id < 100 + 256; id++) await c.request('fs/writeBlock', { handleId: 'w', offset: 9, chunk: b64('j'), writeId: id });
    expect((await c.request('fs/written', { handleId: 'w', writeIds: [2, 7, 100, 355] })).writeIds).toEqual([100, 355]);
    const tooMany = await c.call('fs/written', { handleId: 'w', writeIds: Array.from({ length: 257 }, (_, i) => i) });
    expect(tooMany.error).toMatchObject({ code: -32602, message: 'invalid params for fs/written: writeIds: at most 256 ids (got 257)' });
    await c.request('fs/close', { handleId: 'w' });
    expect(readFileSync(join(root, 'written.txt'), 'utf8')).toBe('abcdefghij');
    const unknown = await c.call('fs/written', { handleId: 'w', writeIds: [2] });
    expect(unknown.error).toMatchObject({ code: -32004, message: 'unknown file handle `w`' });

    const without = await initialized(['fsResume']);
    const missing = await without.call('fs/written', { handleId: 'w', writeIds: [] });
    expect(missing.error?.code).toBe(-32601);
  });
});
