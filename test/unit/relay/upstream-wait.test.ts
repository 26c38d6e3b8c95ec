/**
 * What the relay says while its first upstream connection retries (relay/upstream-wait.ts):
 * the client's first failure at once, then one line every few seconds saying it still
 * tries and for how long more; nothing once connected or given up. Fake timers.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { upstreamWaitReport } from '../../../src/relay/upstream-wait.js';

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('upstreamWaitReport', () => {
  it('tells the first failure at once, then every 5 s that it still tries, and nothing after stop', () => {
    const lines: string[] = [];
    const report = upstreamWaitReport({ url: 'ws://box:1', deadlineMs: 300_000, log: (m) => lines.push(m), now: () => Date.now() });
    report.logger('info', 'not a warning');
    expect(lines).toEqual([]);
    report.logger('warn', 'cannot reach ws://box:1 (connect ECONNREFUSED); retrying for up to 300 s');
    expect(lines).toEqual(['cannot reach ws://box:1 (connect ECONNREFUSED); retrying for up to 300 s']);
    vi.advanceTimersByTime(4_999);
    expect(lines).toHaveLength(1);
    vi.advanceTimersByTime(1);
    expect(lines[1]).toBe('still cannot reach the upstream ws://box:1 after 5s; retrying for up to 4m55s more');
    vi.advanceTimersByTime(60_000);
    expect(lines).toHaveLength(14); // one line per 5 s, not one per attempt
    report.stop();
    vi.advanceTimersByTime(60_000);
    report.logger('warn', 'late');
    expect(lines).toHaveLength(14);
  });

  it('repeats itself while an attempt hangs (no failure told yet)', () => {
    const lines: string[] = [];
    const report = upstreamWaitReport({ url: 'ws://box:1', log: (m) => lines.push(m), now: () => Date.now() });
    vi.advanceTimersByTime(5_000);
    expect(lines).toEqual(['still connecting to the upstream ws://box:1 after 5s; retrying']);
    report.stop();
  });
});
