/**
 * The running clock on its own (src/client/running-clock.ts), with fake timers: steady ticks
 * count fully, a late tick within the gap allowance counts fully, a jump of the clock with
 * no tick between (the process was stopped, the laptop slept) counts as one tick, and a timer
 * on running time fires after the running time, not the wall time.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { RUNNING_MAX_GAP_MS, RUNNING_TICK_MS, RunningClock, runningTimeout } from '../../../src/client/running-clock.js';

const T0 = 1_000_000;

/** A stop of the process: the clock jumps, no timer fires meanwhile. */
function suspend(ms: number): void {
  vi.setSystemTime(Date.now() + ms);
}

let clock: RunningClock | undefined;
beforeEach(() => {
  vi.useFakeTimers({ now: T0 });
});
afterEach(() => {
  clock?.stop();
  clock = undefined;
  vi.useRealTimers();
});

describe('RunningClock', () => {
  it('steady ticks count fully, and between ticks the time since the last one counts', async () => {
    clock = new RunningClock({ now: () => Date.now() });
    await vi.advanceTimersByTimeAsync(10_000);
    expect(clock.elapsed()).toBe(10_000);
    await vi.advanceTimersByTimeAsync(RUNNING_TICK_MS / 2);
    expect(clock.elapsed()).toBe(10_000 + RUNNING_TICK_MS / 2);
  });

  it('a tick late by up to the gap allowance (a busy event loop) still counts fully', async () => {
    clock = new RunningClock({ now: () => Date.now() });
    suspend(RUNNING_MAX_GAP_MS - RUNNING_TICK_MS);
    await vi.advanceTimersByTimeAsync(RUNNING_TICK_MS);
    expect(clock.elapsed()).toBe(RUNNING_MAX_GAP_MS);
  });

  it('a 60 s jump with no tick between counts as one tick', async () => {
    clock = new RunningClock({ now: () => Date.now() });
    await vi.advanceTimersByTimeAsync(3 * RUNNING_TICK_MS);
    expect(clock.elapsed()).toBe(3 * RUNNING_TICK_MS);
    suspend(60_000);
    // Before the next tick sees the gap, at most one tick of it counts.
    expect(clock.elapsed()).toBe(4 * RUNNING_TICK_MS);
    await vi.advanceTimersByTimeAsync(RUNNING_TICK_MS);
    expect(Date.now() - T0).toBe(60_000 + 4 * RUNNING_TICK_MS);
    expect(clock.elapsed()).toBe(4 * RUNNING_TICK_MS);
    // Then it counts on as before.
    await vi.advanceTimersByTimeAsync(2 * RUNNING_TICK_MS);
    expect(clock.elapsed()).toBe(6 * RUNNING_TICK_MS);
  });

  it('never runs backwards across a jump', async () => {
    clock = new RunningClock({ now: () => Date.now() });
    const seen: number[] = [];
    for (let i = 0; i < 8; i++) {
      if (i % 3 === 1) suspend(30_000);
      if (i % 3 === 2) suspend(RUNNING_MAX_GAP_MS - 100);
      seen.push(clock.elapsed());
      await vi.advanceTimersByTimeAsync(RUNNING_TICK_MS / 2);
      seen.push(clock.elapsed());
    }
    expect(seen).toEqual([...seen].sort((a, b) => a - b));
  });

  it('a timer on running time fires after the running time, not the wall time', async () => {
    clock = new RunningClock({ now: () => Date.now() });
    let firedAt: { running: number; wall: number } | undefined;
    clock.after(5_000, () => (firedAt = { running: clock!.elapsed(), wall: Date.now() - T0 }));
    await vi.advanceTimersByTimeAsync(2_000);
    suspend(60_000);
    while (!firedAt && Date.now() - T0 < 120_000) await vi.advanceTimersByTimeAsync(100);
    // 2 s, the stop as one tick, then the 2.5 s still missing.
    expect(firedAt).toEqual({ running: 5_000, wall: 60_000 + 2_000 + RUNNING_TICK_MS + 2_500 });
  });

  it('a timer overdue on waking (the wall time passed during a stop) is armed again for the running time missing', async () => {
    let now = 0;
    const timeouts: { at: number; fn: () => void }[] = [];
    const ticks: (() => void)[] = [];
    clock = new RunningClock({
      now: () => now,
      timers: {
        setInterval: (fn) => (ticks.push(fn), 1),
        clearInterval: () => {},
        setTimeout: (fn, ms) => (timeouts.push({ at: now + ms, fn }), 2),
        clearTimeout: () => {},
      },
    });
    const fired = vi.fn();
    clock.after(5_000, fired);
    now = 60_000; // woken: the timer is due, no tick has run yet
    timeouts.shift()!.fn();
    expect(fired).not.toHaveBeenCalled();
    expect(timeouts.map((t) => t.at)).toEqual([60_000 + 5_000 - RUNNING_TICK_MS]);
  });

  it('a cancelled timer does not fire; stop() freezes the count and leaves no timer behind', async () => {
    clock = new RunningClock({ now: () => Date.now() });
    const fired = vi.fn();
    clock.after(1_000, fired).cancel();
    await vi.advanceTimersByTimeAsync(1_500);
    expect(fired).not.toHaveBeenCalled();
    clock.stop();
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(clock.elapsed()).toBe(1_500);
  });

  it('runningTimeout: fires once on running time across a jump, then leaves no timer behind', async () => {
    const fired = vi.fn();
    runningTimeout(3_000, fired, { now: () => Date.now(), unref: true });
    await vi.advanceTimersByTimeAsync(1_000);
    suspend(60_000);
    await vi.advanceTimersByTimeAsync(1_900);
    expect(fired).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(100);
    expect(fired).toHaveBeenCalledTimes(1);
    expect(Date.now() - T0).toBe(60_000 + 3_000);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('runningTimeout: cancelled, it never fires and leaves no timer behind', async () => {
    const fired = vi.fn();
    const timeout = runningTimeout(1_000, fired, { now: () => Date.now() });
    await vi.advanceTimersByTimeAsync(500);
    timeout.cancel();
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(fired).not.toHaveBeenCalled();
  });

  it('its ticks, and an unref’d timer on running time, never keep the process alive', () => {
    const unref = vi.fn();
    const handle = () => ({ unref }) as never;
    const timers = { setInterval: handle, clearInterval: () => {}, setTimeout: handle, clearTimeout: () => {} };
    runningTimeout(1_000, () => {}, { now: () => 0, timers, unref: true });
    expect(unref).toHaveBeenCalledTimes(2); // the tick and the timer
    unref.mockClear();
    runningTimeout(1_000, () => {}, { now: () => 0, timers });
    expect(unref).toHaveBeenCalledTimes(1); // the tick only: a plain timer keeps its process alive, as setTimeout
  });
});
