import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  applyJitter,
  backoffDelay,
  baseDelay,
  DEFAULT_BACKOFF,
  exponentialDelay,
  halfJitter,
  reconnectDelayMs,
  startingWriteDelayMs,
  type BackoffPolicy,
} from '../../../src/util/backoff.js';

// The formulas util/backoff.ts replaced, copied verbatim before they were deleted
// (src/supervisor/backoff.ts, src/client/backoff.ts, the inline wait in client.ts's write()).
const oldSupervisor = {
  baseDelay(attempt: number, policy: BackoffPolicy = DEFAULT_BACKOFF): number {
    const n = Math.max(1, Math.floor(attempt));
    const raw = policy.initialMs * Math.pow(policy.factor, n - 1);
    return Number.isFinite(raw) ? Math.min(raw, policy.maxMs) : policy.maxMs;
  },
  backoffDelay(attempt: number, policy: BackoffPolicy = DEFAULT_BACKOFF, random: () => number = Math.random): number {
    return oldSupervisor.applyJitter(oldSupervisor.baseDelay(attempt, policy), policy.jitter, random);
  },
  applyJitter(ms: number, jitter: number, random: () => number = Math.random): number {
    const r = Math.min(Math.max(random(), 0), 1);
    return Math.max(0, Math.round(ms * (1 + jitter * (2 * r - 1))));
  },
};
const oldClient = {
  reconnectDelayMs(attempt: number, random: () => number = Math.random): number {
    if (attempt <= 1) return 0;
    const ceiling = Math.min(2000, 100 * 2 ** (attempt - 2));
    return Math.round(ceiling / 2 + (random() * ceiling) / 2);
  },
};

const oldStartingWrite = (starting: number) => Math.min(100, 5 * 2 ** Math.min(starting, 5));

const randoms = [0, 1e-9, 0.1, 0.25, 0.3333, 0.5, 0.6, 0.75, 0.9, 0.999999];
const attempts = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 20, 30, 100, 1100, 10_000];
const policies: BackoffPolicy[] = [
  DEFAULT_BACKOFF,
  { initialMs: 100, factor: 3, maxMs: 1000, jitter: 0 },
  { initialMs: 250, factor: 1.5, maxMs: 60_000, jitter: 0.5 },
  { initialMs: 1, factor: 10, maxMs: 1e6, jitter: 1 },
];

describe('util/backoff: the same delays as the formulas it replaced', () => {
  it('supervisor backoff (baseDelay, backoffDelay, applyJitter)', () => {
    for (const p of policies) {
      for (const a of attempts) {
        expect(baseDelay(a, p)).toBe(oldSupervisor.baseDelay(a, p));
        for (const r of randoms) expect(backoffDelay(a, p, () => r)).toBe(oldSupervisor.backoffDelay(a, p, () => r));
      }
    }
    for (const ms of [0, 1, 999, 30_000, 180_000]) for (const j of [0, 0.1, 0.2, 1]) for (const r of randoms) expect(applyJitter(ms, j, () => r)).toBe(oldSupervisor.applyJitter(ms, j, () => r));
  });

  it('exec client reconnect delays (reconnectDelayMs)', () => {
    for (const a of attempts) for (const r of randoms) expect(reconnectDelayMs(a, () => r)).toBe(oldClient.reconnectDelayMs(a, () => r));
  });

  it("client write retry while a process is 'starting'", () => {
    for (let s = 0; s < 40; s++) expect(startingWriteDelayMs(s)).toBe(oldStartingWrite(s));
  });

  it('property: equal for any integer attempt and random in [0, 1)', () => {
    fc.assert(
      fc.property(fc.integer({ min: -5, max: 5000 }), fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), (a, r) => {
        expect(backoffDelay(a, DEFAULT_BACKOFF, () => r)).toBe(oldSupervisor.backoffDelay(a, DEFAULT_BACKOFF, () => r));
        expect(reconnectDelayMs(a, () => r)).toBe(oldClient.reconnectDelayMs(a, () => r));
      }),
    );
  });
});

describe('util/backoff', () => {
  it('exponentialDelay grows by factor from initialMs and stops at the cap (attempt < 1 counts as 1)', () => {
    const p = { initialMs: 10, factor: 2, maxMs: 100 };
    expect([0, 1, 2, 3, 4, 5, 6].map((a) => exponentialDelay(a, p))).toEqual([10, 10, 20, 40, 80, 100, 100]);
    expect(exponentialDelay(1e6, p)).toBe(100);
  });

  it('halfJitter stays within [ms/2, ms]', () => {
    expect(halfJitter(1000, () => 0)).toBe(500);
    expect(halfJitter(1000, () => 0.5)).toBe(750);
    expect(halfJitter(1000, () => 0.999999)).toBe(1000);
  });

  it('applyJitter stays within ±jitter and never goes negative, whatever random returns', () => {
    expect(applyJitter(1000, 0.1, () => 0)).toBe(900);
    expect(applyJitter(1000, 0.1, () => 0.5)).toBe(1000);
    expect(applyJitter(1000, 2, () => 0)).toBe(0);
    expect(applyJitter(1000, 0.1, () => 5)).toBe(1100);
  });

  it('reconnectDelayMs: immediate first attempt, then 100 ms doubling to 2 s, half-jittered', () => {
    expect(reconnectDelayMs(1)).toBe(0);
    expect([2, 3, 4, 5, 6, 7].map((a) => reconnectDelayMs(a, () => 0.999999))).toEqual([100, 200, 400, 800, 1600, 2000]);
  });

  it('startingWriteDelayMs: 5 ms doubling to 100 ms', () => {
    expect([0, 1, 2, 3, 4, 5, 9].map(startingWriteDelayMs)).toEqual([5, 10, 20, 40, 80, 100, 100]);
  });
});
