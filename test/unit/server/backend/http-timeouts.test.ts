/** http/request's default deadlines (issue 22, item 7), on fake timers: connect and idle, never a total one. */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HttpTimeoutDefaults, RequestTimeouts } from '../../../../src/server/backend/http-timeouts.js';

beforeEach(() => void vi.useFakeTimers());
afterEach(() => void vi.useRealTimers());

function timeouts() {
  const expired: string[] = [];
  const t = new RequestTimeouts(HttpTimeoutDefaults, (reason) => expired.push(reason.message));
  return { t, expired };
}

describe('http/request timeouts', () => {
  it('defaults: 30 s to connect, 60 s without a byte', () => {
    expect(HttpTimeoutDefaults).toEqual({ connectMs: 30_000, idleMs: 60_000 });
  });

  it('gives up on a connection not made within 30 s', () => {
    const { t, expired } = timeouts();
    t.connecting();
    vi.advanceTimersByTime(29_999);
    expect(expired).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(expired).toEqual(['could not connect within 30 s']);
  });

  it('never cuts a body that keeps coming, however long, and ends one that stops for 60 s', () => {
    const { t, expired } = timeouts();
    t.connecting();
    t.activity(); // connected
    for (let minute = 0; minute < 60; minute++) {
      vi.advanceTimersByTime(59_000);
      t.activity(); // a byte
    }
    expect(expired).toEqual([]);
    vi.advanceTimersByTime(60_000);
    expect(expired).toEqual(['no data for 60 s']);
  });

  it('does not count the server’s own waiting (its client, its memory) as idle, and is silent once stopped', () => {
    const { t, expired } = timeouts();
    t.activity();
    t.pause();
    vi.advanceTimersByTime(10 * 60_000);
    expect(expired).toEqual([]);
    t.activity();
    t.stop();
    vi.advanceTimersByTime(10 * 60_000);
    expect(expired).toEqual([]);
  });
});
