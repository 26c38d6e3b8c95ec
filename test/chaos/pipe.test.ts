/**
 * One direction of the chaos proxy (src/chaos/pipe.ts) on its own: fake sockets, fake timers
 * and an injected clock, so the times below are exact.
 */
import { EventEmitter } from 'node:events';
import type net from 'node:net';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { FaultPipe, type LinkShape } from '../../src/chaos/pipe.js';

class FakeSocket extends EventEmitter {
  destroyed = false;
  writableNeedDrain = false;
  /** What was written, with the clock's time of each write. */
  readonly writes: Array<{ at: number; data: string }> = [];
  constructor(private readonly clock: () => number) {
    super();
  }
  write(chunk: Buffer, callback?: () => void): boolean {
    this.writes.push({ at: this.clock(), data: chunk.toString() });
    callback?.();
    return true;
  }
  pause(): this {
    return this;
  }
  resume(): this {
    return this;
  }
}

describe('FaultPipe latency', () => {
  let now = 0;
  const clock = () => now;
  const shape: LinkShape = { latencyMs: 10, jitterMs: 0, bandwidth: 0, blackhole: false };
  let source: FakeSocket;
  let destination: FakeSocket;

  beforeEach(() => {
    vi.useFakeTimers();
    now = 0;
    source = new FakeSocket(clock);
    destination = new FakeSocket(clock);
    new FaultPipe(source as unknown as net.Socket, destination as unknown as net.Socket, {
      shape: () => shape,
      quota: (length) => length,
      random: () => 0.5,
      now: clock,
    });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** Moves the clock (and the fake timers) forward by `ms`. */
  const advance = (ms: number) => {
    for (let i = 0; i < ms; i++) {
      now = Math.floor(now) + 1;
      vi.advanceTimersByTime(1);
    }
  };

  it('delivers each chunk its latency after it arrived, and never before', () => {
    source.emit('data', Buffer.from('a'));
    advance(9);
    expect(destination.writes).toEqual([]);
    advance(1);
    expect(destination.writes).toEqual([{ at: 10, data: 'a' }]);
  });

  it('a chunk that follows another by a fraction of a millisecond leaves with it, not a whole timer tick later', () => {
    // Node's timers fire in whole milliseconds: a chunk due 0.3 ms after the one the timer
    // fired for used to wait for the next tick, 0.7 ms late (more on a loaded machine), on
    // every message that follows another closely (an answer, then the output it announced).
    source.emit('data', Buffer.from('a'));
    now = 0.3;
    source.emit('data', Buffer.from('b'));
    advance(10);
    expect(destination.writes).toEqual([
      { at: 10, data: 'a' },
      { at: 10, data: 'b' },
    ]);
  });

  it('a chunk due more than half a millisecond later waits for its own timer (at most half a tick early or late)', () => {
    source.emit('data', Buffer.from('a'));
    now = 0.7;
    source.emit('data', Buffer.from('b'));
    advance(10);
    expect(destination.writes).toEqual([{ at: 10, data: 'a' }]);
    advance(1);
    expect(destination.writes).toEqual([
      { at: 10, data: 'a' },
      { at: 11, data: 'b' },
    ]);
  });
});
