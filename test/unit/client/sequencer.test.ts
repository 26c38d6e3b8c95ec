/** The ordering/dedup/inference core of the client, without any I/O. */
import { describe, expect, it } from 'vitest';
import { Sequencer, type ProcessEvent } from '../../../src/client/sequencer.js';
import type { ProcessReadResult } from '../../../src/protocol/index.js';
import { reconnectDelayMs } from '../../../src/client/backoff.js';

const out = (seq: number, text = `o${seq}`): ProcessEvent => ({ type: 'output', seq, stream: 'stdout', data: Buffer.from(text) });
const chunk = (seq: number, text = `o${seq}`) => ({ seq, stream: 'stdout' as const, chunk: Buffer.from(text).toString('base64') });
const read = (r: Partial<ProcessReadResult>): ProcessReadResult => ({
  chunks: [],
  nextSeq: 1,
  exited: false,
  exitCode: null,
  closed: false,
  failure: null,
  sandboxDenied: false,
  ...r,
});
const seqs = (events: ProcessEvent[]) => events.map((e) => `${e.type}:${e.seq}`);

describe('Sequencer', () => {
  it('delivers in seq order, holding early events and dropping duplicates', () => {
    const s = new Sequencer();
    expect(seqs(s.push(out(2)))).toEqual([]);
    expect(s.hasHole).toBe(true);
    expect(seqs(s.push(out(1)))).toEqual(['output:1', 'output:2']);
    expect(seqs(s.push(out(1)))).toEqual([]);
    expect(seqs(s.push(out(2)))).toEqual([]);
    expect(s.lastDelivered).toBe(2);
    expect(s.hasHole).toBe(false);
  });

  it('merges a catch-up read with notifications already held, inferring exit and close', () => {
    const s = new Sequencer();
    s.push(out(1));
    s.push(out(3)); // arrived on the new connection before the read answer
    const { events, gap } = s.mergeRead(1, read({ chunks: [chunk(2), chunk(3)], nextSeq: 6, exited: true, exitCode: 3, closed: true }));
    expect(gap).toBeNull();
    expect(seqs(events)).toEqual(['output:2', 'output:3', 'exit:4', 'close:5']);
    expect(events[2]).toMatchObject({ exitCode: 3 });
    expect(s.done).toBe(true);
  });

  it('places the exit among output printed after it (exit 2, late output 3, close 4)', () => {
    const s = new Sequencer();
    s.push(out(1));
    const { events } = s.mergeRead(1, read({ chunks: [chunk(3)], nextSeq: 5, exited: true, exitCode: 0, closed: true }));
    expect(seqs(events)).toEqual(['exit:2', 'output:3', 'close:4']);
  });

  it('infers an exit without close while output pipes are still open', () => {
    const s = new Sequencer();
    const { events } = s.mergeRead(0, read({ chunks: [chunk(1)], nextSeq: 3, exited: true, exitCode: 130 }));
    expect(seqs(events)).toEqual(['output:1', 'exit:2']);
  });

  it('reports an evicted range as a gap naming the missing seqs', () => {
    const s = new Sequencer();
    s.push(out(1));
    const { events, gap } = s.mergeRead(1, read({ chunks: [chunk(7), chunk(8)], nextSeq: 9 }));
    expect(events).toEqual([]);
    expect(gap).toEqual({ fromSeq: 2, toSeq: 6 });
  });

  it('a gap with an exit: the exit is not counted as lost', () => {
    const s = new Sequencer();
    const { gap } = s.mergeRead(0, read({ chunks: [chunk(4)], nextSeq: 7, exited: true, exitCode: 0, closed: true }));
    expect(gap).toEqual({ fromSeq: 1, toSeq: 3 }); // 5 = exit, 6 = close
  });

  it('ignores a read that brings nothing new', () => {
    const s = new Sequencer();
    s.push(out(1));
    s.push(out(2));
    const { events, gap } = s.mergeRead(0, read({ chunks: [chunk(1), chunk(2)], nextSeq: 3 }));
    expect(gap).toBeNull();
    expect(events).toEqual([]);
  });
});

describe('reconnectDelayMs', () => {
  it('tries at once, then short jittered doubling delays capped at 2 s', () => {
    expect(reconnectDelayMs(1)).toBe(0);
    expect(reconnectDelayMs(2, () => 0)).toBe(50);
    expect(reconnectDelayMs(2, () => 0.999)).toBeLessThanOrEqual(100);
    expect(reconnectDelayMs(3, () => 0)).toBe(100);
    expect(reconnectDelayMs(30, () => 0.999)).toBeLessThanOrEqual(2000);
    expect(reconnectDelayMs(30, () => 0)).toBe(1000);
  });
});
