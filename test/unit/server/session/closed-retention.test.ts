/** ClosedRetention (closed-retention.ts): when a session forgets a closed process. Fake timers. */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ClosedRetention } from '../../../../src/server/session/closed-retention.js';

interface Proc {
  unacknowledged: number;
}

beforeEach(() => vi.useFakeTimers());
afterEach(() => vi.useRealTimers());

function setup(clientAcks: boolean) {
  const removed: Proc[] = [];
  const session = { attached: true, clientAcks, remove: (p: Proc) => void removed.push(p) };
  return { removed, session, retention: new ClosedRetention<Proc>(1000, session) };
}

describe('ClosedRetention', () => {
  it('removes a closed process once the retention ran out while attached, counted from the last schedule', () => {
    const { removed, retention } = setup(false);
    const p = { unacknowledged: 0 };
    retention.schedule(p);
    vi.advanceTimersByTime(600);
    retention.schedule(p); // a client attached again: the full window again
    vi.advanceTimersByTime(600);
    expect(removed).toEqual([]);
    vi.advanceTimersByTime(400);
    expect(removed).toEqual([p]);
  });

  it('keeps it while detached (until scheduled again), and with acks while output is unacknowledged', () => {
    const { removed, session, retention } = setup(true);
    const p = { unacknowledged: 5 };
    session.attached = false;
    retention.schedule(p);
    vi.advanceTimersByTime(5000);
    expect(removed).toEqual([]);
    session.attached = true;
    retention.schedule(p);
    vi.advanceTimersByTime(3000);
    expect(removed).toEqual([]);
    p.unacknowledged = 0;
    vi.advanceTimersByTime(1000);
    expect(removed).toEqual([p]);
  });

  it('cancel and clear drop the timers', () => {
    const { removed, retention } = setup(false);
    const a = { unacknowledged: 0 };
    const b = { unacknowledged: 0 };
    retention.schedule(a);
    retention.schedule(b);
    retention.cancel(a);
    vi.advanceTimersByTime(1000);
    expect(removed).toEqual([b]);
    retention.schedule(a);
    retention.clear();
    vi.advanceTimersByTime(5000);
    expect(removed).toEqual([b]);
  });
});
