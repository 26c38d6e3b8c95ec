/** Watchers yield to the writer (watcher-turn.ts): the policy, pure. */
import { describe, expect, it } from 'vitest';
import { WATCHER_BUSY_BYTES, WATCHER_YIELD_MS, watcherMaxBytes, watcherTurn } from '../../../../src/server/methods/watcher-turn.js';

describe('a watcher’s turn', () => {
  it('while the writer streams: the answer waits its turn and is small', () => {
    const turn = watcherTurn(true);
    expect(turn).toEqual({ waitMs: WATCHER_YIELD_MS, capBytes: WATCHER_BUSY_BYTES });
    expect(watcherMaxBytes(null, turn)).toBe(WATCHER_BUSY_BYTES);
    expect(watcherMaxBytes(8 * 1024 * 1024, turn)).toBe(WATCHER_BUSY_BYTES);
    expect(watcherMaxBytes(100, turn)).toBe(100);
  });
  it('more watchers share the turn: each waits longer, so together they take about as much as eight', () => {
    expect(watcherTurn(true, 8).waitMs).toBe(WATCHER_YIELD_MS);
    expect(watcherTurn(true, 9).waitMs).toBe(2 * WATCHER_YIELD_MS);
    expect(watcherTurn(true, 100).waitMs).toBe(13 * WATCHER_YIELD_MS);
    expect(watcherTurn(false, 100).waitMs).toBe(0);
  });
  it('a writer caught up (or none): at once, the read’s own maxBytes', () => {
    const turn = watcherTurn(false);
    expect(turn).toEqual({ waitMs: 0, capBytes: null });
    expect(watcherMaxBytes(null, turn)).toBeNull();
    expect(watcherMaxBytes(100, turn)).toBe(100);
  });
});
