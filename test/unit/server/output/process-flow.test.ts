// The parts split out of server/process.ts (ManagedProcess), each without a process or a
// socket: writeId memory, the pause clock, process/read's long polls (fake timers), reads cut
// into chunks, the output held under the memory budget, the exit's grace, and the signal names.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { WriteIds } from '../../../../src/server/output/write-ids.js';
import { PauseClock } from '../../../../src/server/output/pause-clock.js';
import { NewsWaiters } from '../../../../src/server/output/news-waiters.js';
import { appendRead, chunkLimit, CODEX_MAX_CHUNK_BYTES } from '../../../../src/server/output/output-chunks.js';
import { HeldOutput } from '../../../../src/server/output/held-output.js';
import { MemoryBudget } from '../../../../src/server/memory/memory-budget.js';
import { osSignal, protocolSignal } from '../../../../src/protocol/signals.js';
import { ExitGrace, EXIT_WITHOUT_EOF_GRACE_MS } from '../../../../src/server/output/exit-grace.js';

describe('WriteIds', () => {
  it('remembers at least the last `keep` ids, forgetting the oldest half past twice that', () => {
    const ids = new WriteIds(4);
    for (let i = 0; i < 8; i++) ids.add(`w${i}`);
    expect(ids.size).toBe(8);
    expect(ids.has('w0')).toBe(true);
    ids.add('w8');
    expect(ids.size).toBe(5);
    expect(ids.has('w3')).toBe(false);
    for (let i = 4; i <= 8; i++) expect(ids.has(`w${i}`)).toBe(true);
  });
});

describe('PauseClock', () => {
  it('adds up the time not read, and says when the decision changed', () => {
    let now = 100;
    const clock = new PauseClock(() => now);
    expect(clock.reading).toBe(false);
    now = 130;
    expect(clock.pausedMs).toBe(30);
    expect(clock.set(false)).toBe(false);
    expect(clock.set(true)).toBe(true);
    now = 200;
    expect(clock.pausedMs).toBe(30);
    expect(clock.set(false)).toBe(true);
    now = 210;
    expect(clock.pausedMs).toBe(40);
  });
});

describe('NewsWaiters', () => {
  afterEach(() => vi.useRealTimers());

  it('resolves at once with news, without a wait, or when already aborted', async () => {
    const waiters = new NewsWaiters();
    await waiters.wait(() => true, 1000);
    await waiters.wait(() => false, 0);
    await waiters.wait(() => false, 1000, AbortSignal.abort());
    expect(waiters.size).toBe(0);
  });

  it('resolves on a wake that brings news, keeps waiting on one that does not, and times out', async () => {
    vi.useFakeTimers();
    const waiters = new NewsWaiters();
    let news = false;
    let done = false;
    void waiters.wait(() => news, 1000).then(() => (done = true));
    waiters.wake();
    await vi.advanceTimersByTimeAsync(10);
    expect(done).toBe(false);
    expect(waiters.size).toBe(1);
    news = true;
    waiters.wake();
    await vi.advanceTimersByTimeAsync(0);
    expect(done).toBe(true);
    expect(waiters.size).toBe(0);

    let timedOut = false;
    void waiters.wait(() => false, 500).then(() => (timedOut = true));
    await vi.advanceTimersByTimeAsync(499);
    expect(timedOut).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(timedOut).toBe(true);
    expect(waiters.size).toBe(0);
  });

  it('resolves when its signal aborts', async () => {
    vi.useFakeTimers();
    const waiters = new NewsWaiters();
    const abort = new AbortController();
    let done = false;
    void waiters.wait(() => false, 10_000, abort.signal).then(() => (done = true));
    abort.abort();
    await vi.advanceTimersByTimeAsync(0);
    expect(done).toBe(true);
    expect(waiters.size).toBe(0);
  });
});

describe('output chunks', () => {
  it('caps a Codex client at a pipe read', () => {
    expect(chunkLimit(1 << 20, false)).toBe(CODEX_MAX_CHUNK_BYTES);
    expect(chunkLimit(1 << 20, true)).toBe(1 << 20);
    expect(chunkLimit(1000, false)).toBe(1000);
  });

  it('cuts a read at the chunk size and at the end of the block being filled', () => {
    const chunks: string[] = [];
    let fits = 5;
    const memory = {
      get fits() {
        return fits;
      },
      copy(bytes: Uint8Array) {
        fits = fits - bytes.length || 8; // a full block: the next one is fresh
        return Buffer.from(bytes);
      },
    };
    appendRead({ append: (stream, data) => chunks.push(`${stream}:${data}`) }, memory, 4, 'stdout', Buffer.from('abcdefghijklm'));
    expect(chunks).toEqual(['stdout:abcd', 'stdout:e', 'stdout:fghi', 'stdout:jklm']);
  });
});

describe('HeldOutput', () => {
  it('counts history (at least what the blocks hold beyond the unacknowledged) and unacknowledged, reporting changes', () => {
    const budget = new MemoryBudget(1000);
    const deltas: number[] = [];
    const held = new HeldOutput(budget, (d) => deltas.push(d));
    expect(held.budgeted).toBe(true);
    held.update({ historyBytes: 10, unackedBytes: 50, arenaHeldBytes: 100 });
    expect(budget.heldBy('output')).toBe(50);
    expect(budget.heldBy('unacked')).toBe(50);
    held.update({ historyBytes: 10, unackedBytes: 50, arenaHeldBytes: 100 });
    held.update({ historyBytes: 80, unackedBytes: 0, arenaHeldBytes: 20 });
    expect(deltas).toEqual([100, -20]);
    held.close();
    expect(budget.used).toBe(0);
    expect(deltas).toEqual([100, -20, -80]);
  });

  it('counts nothing without a budget', () => {
    const deltas: number[] = [];
    const held = new HeldOutput(undefined, (d) => deltas.push(d));
    held.update({ historyBytes: 10, unackedBytes: 50, arenaHeldBytes: 100 });
    held.close();
    expect(held.budgeted).toBe(false);
    expect(held.pressured).toBe(false);
    expect(deltas).toEqual([]);
  });
});

describe('signal names', () => {
  it('maps the protocol names to OS signals', () => {
    expect(osSignal('interrupt')).toBe('SIGINT');
    expect(osSignal('terminate')).toBe('SIGTERM');
    expect(osSignal('kill')).toBe('SIGKILL');
    expect(osSignal('user2')).toBe('SIGUSR2');
  });

  it('maps what kill(signal) takes (a Node name, a Linux number, a protocol name) to the protocol name, both ways consistent', () => {
    for (const name of ['interrupt', 'terminate', 'kill', 'hangup', 'quit', 'user1', 'user2'] as const) {
      expect(protocolSignal(name)).toBe(name);
      expect(protocolSignal(osSignal(name))).toBe(name);
    }
    expect(protocolSignal(15)).toBe('terminate');
    expect(protocolSignal(10)).toBe('user1');
    expect(protocolSignal('SIGWINCH')).toBeUndefined();
    expect(protocolSignal(99)).toBeUndefined();
    expect(protocolSignal('toString')).toBeUndefined();
  });
});

describe('ExitGrace', () => {
  afterEach(() => vi.useRealTimers());

  it('reports an exit whose pipes stay open after the grace, and not once settled', async () => {
    vi.useFakeTimers();
    const grace = new ExitGrace();
    expect(grace.hasExited).toBe(false);
    expect(grace.settle()).toBe(null);
    let due = 0;
    grace.exited(3, () => due++);
    expect(grace.hasExited).toBe(true);
    await vi.advanceTimersByTimeAsync(EXIT_WITHOUT_EOF_GRACE_MS - 1);
    expect(due).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(due).toBe(1);
    expect(grace.settle()).toBe(3);

    const closed = new ExitGrace();
    closed.exited(0, () => due++);
    expect(closed.settle()).toBe(0); // the pipes closed first
    await vi.advanceTimersByTimeAsync(EXIT_WITHOUT_EOF_GRACE_MS * 2);
    expect(due).toBe(1);
  });

  it('has no grace without a callback (a pty)', async () => {
    vi.useFakeTimers();
    const grace = new ExitGrace();
    grace.exited(1);
    expect(vi.getTimerCount()).toBe(0);
    expect(grace.settle()).toBe(1);
  });
});
