// The chaos proxy's sums (src/chaos/stats.ts), without sockets: links gone join the totals,
// live ones are added to them, and the reasons a link ended are counted.
import { describe, expect, it } from 'vitest';
import { ProxyTotals, type CountedLink } from '../../../src/chaos/stats.js';

const link = (up: number, down: number): CountedLink => ({
  up: { counters: { forwarded: up, held: 1, dropped: 0 } },
  down: { counters: { forwarded: down, held: 0, dropped: 2 } },
});

describe('ProxyTotals', () => {
  it('sums links gone and live, and counts accepts, refusals, peaks and end reasons', () => {
    const totals = new ProxyTotals();
    totals.opened(1);
    totals.opened(2);
    totals.opened(3);
    totals.refusedOne();
    totals.closed(link(10, 20), 'quota');
    totals.closed(link(1, 2), 'target-unreachable');
    totals.closed(link(0, 0), 'client');
    const stats = totals.snapshot(new Set([link(100, 200)]), 4);
    expect(stats).toMatchObject({
      accepted: 3,
      refused: 1,
      active: 1,
      peakActive: 3,
      cuts: 4,
      quotaCuts: 1,
      targetFailures: 1,
      up: { forwarded: 111, held: 4, dropped: 0 },
      down: { forwarded: 222, held: 0, dropped: 8 },
    });
    expect(stats.uptimeMs).toBeGreaterThanOrEqual(0);
    // A snapshot does not fold the live links into the totals.
    expect(totals.snapshot(new Set(), 4).up.forwarded).toBe(11);
  });
});
