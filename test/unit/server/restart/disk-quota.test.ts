/**
 * The disk the output spill may use (src/server/restart/disk-quota.ts): per session, server
 * wide, and the total shared per token: while two tokens want disk, neither holds more than
 * half; a token alone may use it all; what is given back is taken again.
 */
import { describe, expect, it } from 'vitest';
import { DiskQuota, defaultDiskTotal, diskShareBytes } from '../../../../src/server/restart/disk-quota.js';

const MiB = 1024 * 1024;

describe('DiskQuota', () => {
  it('a session takes up to its limit, then is refused; what it gives back it may take again', () => {
    const q = new DiskQuota({ totalBytes: 100, sessionBytes: 30 });
    const a = q.account('tokenA', 's1');
    expect(a.take(30)).toBe(null);
    expect(a.take(1)).toBe('output-disk-quota');
    a.give(10);
    expect(a.take(10)).toBe(null);
    expect(q.usedBytes).toBe(30);
    // Another session of the same token has its own limit.
    expect(q.account('tokenA', 's2').take(30)).toBe(null);
  });

  it('a token alone may use the whole total; once another token wants disk, neither takes past half', () => {
    const q = new DiskQuota({ totalBytes: 100, sessionBytes: 1000 });
    const a = q.account('tokenA', 'a');
    expect(a.take(60)).toBe(null); // alone: past half is fine
    const b = q.account('tokenB', 'b');
    expect(b.take(40)).toBe(null);
    expect(b.take(10)).toBe('output-disk-quota'); // the total is spent
    // B wants disk now: A may not take more while it holds past half.
    a.give(20); // A holds 40
    expect(a.take(20)).toBe('output-disk-quota');
    expect(a.take(10)).toBe(null); // A holds 50: its half
    expect(b.take(10)).toBe(null); // B holds 50: its half
    expect(q.usedBytes).toBe(100);
  });

  it('a refused token stops counting once it no longer wants disk', () => {
    const q = new DiskQuota({ totalBytes: 100, sessionBytes: 1000 });
    const a = q.account('tokenA', 'a');
    expect(a.take(100)).toBe(null);
    expect(q.account('tokenB', 'b').take(1)).toBe('output-disk-quota');
    q.forget('tokenB');
    a.give(50);
    expect(a.take(50)).toBe(null);
  });

  it('the default total is a quarter of the free space, at most 16 GiB', () => {
    expect(defaultDiskTotal(400 * MiB)).toBe(100 * MiB);
    expect(defaultDiskTotal(1024 * 1024 * MiB)).toBe(16 * 1024 * MiB);
    expect(diskShareBytes(100, 3)).toBe(33);
  });
});
