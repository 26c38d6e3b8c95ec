/** The bound on 2026-07-28 requests in flight, per client and overall (request-limits.ts; issue #26). */
import { describe, expect, it } from 'vitest';
import { RequestLimiter } from '../src/gateway/request-limits.js';

describe('RequestLimiter', () => {
  it('refuses a client past its own bound, while another client still gets places', () => {
    const limiter = new RequestLimiter({ maxTotal: 10, maxPerClient: 2 });
    const a1 = limiter.admit('a');
    const a2 = limiter.admit('a');
    expect(a1.ok && a2.ok).toBe(true);
    expect(limiter.admit('a')).toEqual({ ok: false, scope: 'client', limit: 2 });
    expect(limiter.admit('b').ok).toBe(true);
    expect(limiter.inFlight('a')).toBe(2);
    expect(limiter.inFlight()).toBe(3);
  });

  it('refuses everyone past the overall bound', () => {
    const limiter = new RequestLimiter({ maxTotal: 3, maxPerClient: 2 });
    expect([limiter.admit('a'), limiter.admit('a'), limiter.admit('b')].every((x) => x.ok)).toBe(true);
    expect(limiter.admit('c')).toEqual({ ok: false, scope: 'total', limit: 3 });
  });

  it('gives the place back once per release, and forgets a client with nothing in flight', () => {
    const limiter = new RequestLimiter({ maxTotal: 2, maxPerClient: 1 });
    const first = limiter.admit('a');
    if (!first.ok) throw new Error('refused');
    first.release();
    first.release();
    expect(limiter.inFlight()).toBe(0);
    expect(limiter.inFlight('a')).toBe(0);
    expect(limiter.admit('a').ok).toBe(true);
    expect(limiter.admit('b').ok).toBe(true);
    expect(limiter.admit('c').ok).toBe(false);
  });
});
