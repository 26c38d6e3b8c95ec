/**
 * The output spill's files (src/server/restart/spill-files.ts): chunks written in seq order
 * come back byte for byte; acknowledged segments are unlinked and their disk given back; a
 * successor reopens what is left (up to what its keeper dropped), a record cut short by a
 * crash cut off; and a full filesystem (a 1 MiB tmpfs, root only) refuses a chunk whole
 * ("output-disk-full") without crashing or losing what was written, and takes again once freed.
 */
import { execFileSync } from 'node:child_process';
import { appendFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DiskQuota } from '../../../src/server/restart/disk-quota.js';
import { SpillFiles } from '../../../src/server/restart/spill-files.js';

const dirs: string[] = [];
const mounts: string[] = [];
afterEach(() => {
  for (const m of mounts.splice(0)) execFileSync('umount', [m]);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'tether-spill-'));
  dirs.push(d);
  return d;
};
const chunk = (seq: number, n = 1000) => Buffer.alloc(n, seq % 251);
const quota = (total = 1 << 30) => new DiskQuota({ totalBytes: total, sessionBytes: total });

describe('SpillFiles', () => {
  it('reads back what it wrote, frees acknowledged segments, gives their disk back', () => {
    const q = quota();
    const spill = SpillFiles.create(join(tmp(), 'p'), q.account('t', 's'), 4096);
    for (let seq = 1; seq <= 20; seq++) expect(spill.append(seq, seq % 2 ? 'stdout' : 'stderr', chunk(seq))).toBe(null);
    expect(spill.bytes).toBe(20_000);
    for (let seq = 1; seq <= 20; seq++) expect(spill.read(seq, 1000).equals(chunk(seq))).toBe(true);
    const segments = readdirSync(spill.dir).length;
    expect(segments).toBeGreaterThan(4);
    spill.freeThrough(12);
    expect(spill.bytes).toBe(8000);
    expect(readdirSync(spill.dir).length).toBeLessThan(segments);
    expect(spill.read(13, 1000).equals(chunk(13))).toBe(true);
    spill.freeThrough(20);
    expect(readdirSync(spill.dir)).toEqual([]);
    expect(q.usedBytes).toBe(0);
    spill.close();
  });

  it('a successor reopens it: the records up to what the keeper dropped, a record cut short cut off', () => {
    const dir = join(tmp(), 'p');
    const spill = SpillFiles.create(dir, quota().account('t', 's'), 1 << 20);
    for (let seq = 3; seq <= 10; seq++) spill.append(seq, 'stdout', chunk(seq));
    // The predecessor died mid-write: half a record at the end.
    const [segment] = readdirSync(dir);
    appendFileSync(join(dir, segment!), Buffer.alloc(20, 1));
    const again = SpillFiles.reopen(dir, quota().account('t', 's'), 8);
    expect(again.records().map((r) => r.seq)).toEqual([3, 4, 5, 6, 7, 8]);
    expect(again.read(8, 1000).equals(chunk(8))).toBe(true);
    // It goes on after them.
    expect(again.append(11, 'stderr', chunk(11))).toBe(null);
    expect(again.read(11, 1000).equals(chunk(11))).toBe(true);
  });

  it('refuses a chunk past its quota (nothing written)', () => {
    const spill = SpillFiles.create(join(tmp(), 'p'), quota(2100).account('t', 's'));
    expect(spill.append(1, 'stdout', chunk(1))).toBe(null);
    expect(spill.append(2, 'stdout', chunk(2))).toBe(null);
    expect(spill.append(3, 'stdout', chunk(3))).toBe('output-disk-quota');
    expect(spill.records().map((r) => r.seq)).toEqual([1, 2]);
  });

  it.skipIf(process.getuid?.() !== 0)('a full filesystem (1 MiB tmpfs): refused whole as output-disk-full, nothing lost, takes again once freed (root only: mounting needs it)', () => {
    const mnt = tmp();
    try {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', mnt]);
    } catch (err) {
      console.warn(`skipped: cannot mount a tmpfs (${(err as Error).message})`);
      return;
    }
    mounts.push(mnt);
    mkdirSync(join(mnt, 'spill'));
    const spill = SpillFiles.create(join(mnt, 'spill', 'p'), quota().account('t', 's'), 256 * 1024);
    let seq = 0;
    let refusal: string | null = null;
    while (!refusal && seq < 10_000) refusal = spill.append(++seq, 'stdout', chunk(seq, 50_000));
    expect(refusal).toBe('output-disk-full');
    const written = seq - 1;
    expect(written).toBeGreaterThan(5);
    for (let s = 1; s <= written; s++) expect(spill.read(s, 50_000).equals(chunk(s, 50_000))).toBe(true);
    spill.freeThrough(written - 2);
    expect(spill.append(seq, 'stdout', chunk(seq, 50_000))).toBe(null);
    expect(spill.read(seq, 50_000).equals(chunk(seq, 50_000))).toBe(true);
    spill.close();
  });
});
