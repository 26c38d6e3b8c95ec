import { describe, expect, it } from 'vitest';
import { grantKeep, keepLimits, MAX_KEEP_MS } from '../../../../src/server/session/session-keep.js';

describe('grantKeep', () => {
  const limits = keepLimits(30_000, 3_600_000);

  it('grants what is asked within [ttl, max]', () => {
    expect(grantKeep(600_000, limits)).toBe(600_000);
    expect(grantKeep(10 * 3_600_000, limits)).toBe(3_600_000);
    expect(grantKeep(1, limits)).toBe(30_000);
    expect(grantKeep(0, limits)).toBe(30_000);
  });

  it('without an ask: the previous grant, else the TTL', () => {
    expect(grantKeep(undefined, limits)).toBe(30_000);
    expect(grantKeep(null, limits, 600_000)).toBe(600_000);
  });

  it('keeps the maximum at least the TTL, and both within what a timer holds', () => {
    expect(keepLimits(60_000, 1000)).toEqual({ ttlMs: 60_000, maxTtlMs: 60_000 });
    expect(keepLimits(30_000, 2 ** 40)).toEqual({ ttlMs: 30_000, maxTtlMs: MAX_KEEP_MS });
    expect(keepLimits(2 ** 40, 1000)).toEqual({ ttlMs: MAX_KEEP_MS, maxTtlMs: MAX_KEEP_MS });
  });
});
