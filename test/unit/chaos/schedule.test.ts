import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { ChaosPlan, isActive, nextChange, type PlanClock, type ScheduledFault, type Window } from '../../../src/chaos/schedule.js';
import type { ChaosProxy, FaultState } from '../../../src/chaos/proxy.js';

describe('fault windows', () => {
  it('between: from the start of the window up to (not including) its end', () => {
    const w: Window = { kind: 'between', fromMs: 10, toMs: 20 };
    expect([9, 10, 19, 20].map((t) => isActive(w, t))).toEqual([false, true, true, false]);
    expect([0, 10, 15, 20].map((t) => nextChange(w, t))).toEqual([10, 20, 20, undefined]);
    expect(nextChange({ kind: 'between', fromMs: 5, toMs: Infinity }, 6)).toBeUndefined();
  });

  it('periodic: the last `for` of every period, so the link starts healthy', () => {
    const w: Window = { kind: 'periodic', forMs: 5, everyMs: 30 };
    expect([0, 24, 25, 29, 30, 55].map((t) => isActive(w, t))).toEqual([false, false, true, true, false, true]);
    expect([0, 25, 29, 30].map((t) => nextChange(w, t))).toEqual([25, 30, 30, 55]);
  });

  it('nextChange is exactly where isActive flips (any window, any time)', () => {
    const window = fc.oneof(
      fc.record({ kind: fc.constant('between' as const), fromMs: fc.nat(1000), toMs: fc.nat(1000) }).map((w) => ({ ...w, toMs: w.fromMs + w.toMs + 1 })),
      fc.record({ kind: fc.constant('periodic' as const), forMs: fc.integer({ min: 1, max: 100 }), everyMs: fc.integer({ min: 2, max: 200 }) }).filter((w) => w.forMs < w.everyMs),
    );
    fc.assert(
      fc.property(window, fc.nat(5000), (w, t) => {
        const next = nextChange(w, t);
        if (next === undefined) return;
        expect(next).toBeGreaterThan(t);
        for (let u = t; u < next; u++) expect(isActive(w, u)).toBe(isActive(w, t));
        expect(isActive(w, next)).toBe(!isActive(w, t));
      }),
      { numRuns: 300, seed: 16 },
    );
  });
});

/** A clock the test moves by hand, and a proxy that records what it is told. */
function harness() {
  let now = 0;
  const timers: { at: number; fn: () => void }[] = [];
  const clock: PlanClock = {
    now: () => now,
    setTimeout: (fn, ms) => {
      const timer = { at: now + ms, fn };
      timers.push(timer);
      return timer;
    },
    clearTimeout: (t) => timers.splice(timers.indexOf(t as (typeof timers)[number]) >>> 0, 1),
  };
  const state: FaultState = { latencyMs: 0, jitterMs: 0, bandwidth: 0, blackhole: false, refusing: false, cutting: false, quota: false };
  const proxy = {
    setLatency: (ms: number, jitterMs = 0) => Object.assign(state, { latencyMs: ms, jitterMs }),
    setBandwidth: (b: number) => (state.bandwidth = b),
    blackhole: (on: boolean, mode = 'hold') => (state.blackhole = on ? (mode as 'hold') : false),
    refuse: (on: boolean) => (state.refusing = on),
    cutRandomly: ({ minMs, maxMs }: { minMs: number; maxMs: number }) => (state.cutting = { minMs, maxMs }),
    stopCutting: () => (state.cutting = false),
    cutAfterBytes: (bytes: number, { direction, repeat }: { direction: 'both'; repeat: boolean }) => (state.quota = { bytes, direction, repeat }),
    stopCuttingAfterBytes: () => (state.quota = false),
    heal() {
      Object.assign(state, { latencyMs: 0, jitterMs: 0, bandwidth: 0, blackhole: false, refusing: false, cutting: false, quota: false });
    },
  };
  const advanceTo = (t: number) => {
    for (;;) {
      timers.sort((a, b) => a.at - b.at);
      const due = timers[0];
      if (!due || due.at > t) break;
      timers.shift();
      now = due.at;
      due.fn();
    }
    now = t;
  };
  return { clock, state, proxy: proxy as unknown as ChaosProxy, advanceTo, timers };
}

describe('ChaosPlan', () => {
  it('applies each fault within its window, the last given winning an overlap, and heals on stop', () => {
    const h = harness();
    const plan: ScheduledFault[] = [
      { fault: { kind: 'latency', ms: 50, jitterMs: 10 }, window: { kind: 'always' } },
      { fault: { kind: 'latency', ms: 500, jitterMs: 0 }, window: { kind: 'between', fromMs: 100, toMs: 200 } },
      { fault: { kind: 'blackhole', mode: 'drop' }, window: { kind: 'periodic', forMs: 50, everyMs: 300 } },
      { fault: { kind: 'refuse' }, window: { kind: 'between', fromMs: 150, toMs: Infinity } },
      { fault: { kind: 'reset', minMs: 10, maxMs: 20 }, window: { kind: 'between', fromMs: 0, toMs: 120 } },
      { fault: { kind: 'resetAfter', bytes: 4096, direction: 'both' }, window: { kind: 'always' } },
    ];
    const chaos = new ChaosPlan(h.proxy, plan, h.clock);
    chaos.start();
    expect(h.state).toMatchObject({ latencyMs: 50, jitterMs: 10, blackhole: false, refusing: false, cutting: { minMs: 10, maxMs: 20 }, quota: { bytes: 4096, repeat: true } });
    h.advanceTo(100);
    expect(h.state).toMatchObject({ latencyMs: 500, jitterMs: 0 });
    h.advanceTo(120);
    expect(h.state.cutting).toBe(false);
    h.advanceTo(150);
    expect(h.state.refusing).toBe(true);
    h.advanceTo(200);
    expect(h.state.latencyMs).toBe(50);
    h.advanceTo(250);
    expect(h.state.blackhole).toBe('drop');
    h.advanceTo(300);
    expect(h.state.blackhole).toBe(false);
    h.advanceTo(560);
    expect(h.state.blackhole).toBe('drop');
    chaos.stop();
    expect(h.timers).toHaveLength(0);
    expect(h.state).toMatchObject({ latencyMs: 0, blackhole: false, refusing: false, quota: false });
  });
});
