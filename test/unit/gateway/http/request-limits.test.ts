/** What the gateway's requests in flight may hold: per client, per network and overall, in count and weighed bytes (request-limits.ts). */
import { describe, expect, it } from 'vitest';
import { networkOf, RequestLimiter } from '../../../../src/gateway/http/request-limits.js';
import { requestWeight } from '../../../../src/gateway/http/request-weight.js';

describe('RequestLimiter', () => {
  it('refuses a client past its own bound, while another client still gets places', () => {
    const limiter = new RequestLimiter({ maxTotal: 10, maxPerClient: 2 });
    const a1 = limiter.admit('a');
    const a2 = limiter.admit('a');
    expect(a1.ok && a2.ok).toBe(true);
    expect(limiter.admit('a')).toEqual({ ok: false, scope: 'client', what: 'requests', limit: 2 });
    expect(limiter.admit('b').ok).toBe(true);
    expect(limiter.inFlight('a')).toBe(2);
    expect(limiter.inFlight()).toBe(3);
  });

  it('refuses everyone past the overall bound', () => {
    const limiter = new RequestLimiter({ maxTotal: 3, maxPerClient: 2, maxPerNetwork: 3 });
    expect([limiter.admit('a'), limiter.admit('a'), limiter.admit('b')].every((x) => x.ok)).toBe(true);
    expect(limiter.admit('c')).toEqual({ ok: false, scope: 'total', what: 'requests', limit: 3 });
  });

  it('gives the place back once per release, and forgets a client with nothing in flight', () => {
    const limiter = new RequestLimiter({ maxTotal: 2, maxPerClient: 1 });
    const first = limiter.admit('a', 10);
    if (!first.ok) throw new Error('refused');
    first.release();
    first.release();
    expect([limiter.inFlight(), limiter.bytesInFlight()]).toEqual([0, 0]);
    expect(limiter.inFlight('a')).toBe(0);
    expect(limiter.admit('a').ok).toBe(true);
    expect(limiter.admit('b').ok).toBe(true);
    expect(limiter.admit('c').ok).toBe(false);
  });

  it('bounds weighed bytes per client and overall; one request heavier than a client may hold is refused as such', () => {
    const limiter = new RequestLimiter({ maxTotal: 100, maxPerClient: 100, maxTotalBytes: 1000, maxBytesPerClient: 400, maxBytesPerNetwork: 1000 });
    expect(limiter.admit('a', 401)).toEqual({ ok: false, scope: 'request', what: 'bytes', limit: 400 });
    expect(limiter.admit('a', 300).ok).toBe(true);
    expect(limiter.admit('a', 200)).toEqual({ ok: false, scope: 'client', what: 'bytes', limit: 400 });
    expect(limiter.admit('a', 100).ok).toBe(true);
    expect(limiter.admit('b', 400).ok).toBe(true);
    expect(limiter.admit('c', 300)).toEqual({ ok: false, scope: 'total', what: 'bytes', limit: 1000 });
    expect(limiter.admit('c', 200).ok).toBe(true);
    expect(limiter.bytesInFlight()).toBe(1000);
  });

  it('one network (many addresses, many sessions) holds at most its share: half the total by default, the rest left to the others', () => {
    const limiter = new RequestLimiter({ maxTotal: 256, maxPerClient: 64, maxTotalBytes: 1024, maxBytesPerClient: 256 });
    // A client on 127.0.0.2, 127.0.0.3, …: four addresses fill loopback's 128, not the total.
    let admitted = 0;
    for (let i = 2; i < 40; i++) for (let j = 0; j < 64; j++) if (limiter.admit(`127.0.0.${i}`, 1, networkOf(`127.0.0.${i}`)).ok) admitted++;
    expect(admitted).toBe(128);
    expect(limiter.admit('127.9.9.9', 1, 'loopback')).toEqual({ ok: false, scope: 'network', what: 'requests', limit: 128 });
    // Another host still gets its places, up to its own share.
    for (let j = 0; j < 64; j++) expect(limiter.admit('192.0.2.7', 1, networkOf('192.0.2.7')).ok).toBe(true);
    expect(limiter.admit('192.0.2.8', 1, networkOf('192.0.2.8')).ok).toBe(true);
    // In bytes too: one network holds at most half the total's.
    const bytes = new RequestLimiter({ maxTotal: 256, maxPerClient: 64, maxTotalBytes: 1000, maxBytesPerClient: 200 });
    for (let i = 0; i < 5; i++) bytes.admit(`s${i}`, 200, 'loopback');
    expect(bytes.bytesInFlight()).toBe(400);
    expect(bytes.admit('s9', 200, 'loopback')).toEqual({ ok: false, scope: 'network', what: 'bytes', limit: 500 });
    expect(bytes.admit('other', 200, '192.0.2.7').ok).toBe(true);
  });
});

describe('networkOf', () => {
  it('groups all of loopback, an IPv6 /64, and IPv4-mapped addresses as their IPv4', () => {
    expect(['127.0.0.1', '127.44.3.2', '::1', '::ffff:127.0.0.5'].map(networkOf)).toEqual(['loopback', 'loopback', 'loopback', 'loopback']);
    expect(networkOf('2001:db8:1:2::5')).toBe(networkOf('2001:db8:1:2:ffff:1:2:3'));
    expect(networkOf('2001:db8:1:2::5')).not.toBe(networkOf('2001:db8:1:3::5'));
    expect(networkOf('::ffff:192.0.2.7')).toBe('192.0.2.7');
    expect(networkOf('192.0.2.7')).not.toBe(networkOf('192.0.2.8'));
  });
});

describe('requestWeight', () => {
  it('weighs a body by what parsing it would make, before it is parsed', () => {
    const pad = Buffer.from(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","_meta":{"pad":[${'{},'.repeat(100_000)}{}]}}}`);
    const { weight, id } = requestWeight(pad);
    expect(id).toBe(7);
    expect(weight).toBeGreaterThan(200_000 * 64);
    const flat = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 'a', method: 'tools/call', params: { name: 'x', arguments: { data: 'A'.repeat(300_000) } } }));
    expect(requestWeight(flat).weight).toBeLessThan(2 * flat.length + 64 * 20);
  });
});
