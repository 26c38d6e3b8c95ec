/**
 * `--keep-last` in the client's sequencer: a `process/gap` the server tells lets delivery jump
 * over the dropped seqs, reporting only what the client had not delivered; a gap told again
 * after a reconnect (or naming seqs already delivered) is passed over silently; a gap told
 * before the output preceding it arrived waits for that output.
 */
import { describe, expect, it } from 'vitest';
import { Sequencer, type ProcessEvent } from '../../../src/client/sequencer.js';

const out = (seq: number): ProcessEvent => ({ type: 'output', seq, stream: 'stdout', data: Buffer.from(`o${seq}`) });
const seqs = (events: ProcessEvent[]) => events.map((e) => e.seq);

describe('Sequencer.skip (keep-last gaps)', () => {
  it('jumps over the dropped seqs and reports the range it had not delivered', () => {
    const s = new Sequencer();
    expect(seqs(s.push(out(1)))).toEqual([1]);
    expect(seqs(s.push(out(2)))).toEqual([2]);
    // The gap names 1..7 (1 and 2 were in flight when dropped): only 3..7 were missed.
    expect(s.skip(1, 7)).toEqual([]);
    expect(s.takeSkipped()).toEqual([{ fromSeq: 3, toSeq: 7 }]);
    expect(s.lastDelivered).toBe(7);
    expect(seqs(s.push(out(8)))).toEqual([8]);
    expect(s.hasHole).toBe(false);
  });

  it('a gap told again (a reconnect) or at or below what was delivered is silent', () => {
    const s = new Sequencer();
    s.skip(1, 4);
    expect(s.takeSkipped()).toEqual([{ fromSeq: 1, toSeq: 4 }]);
    s.push(out(5));
    expect(s.skip(1, 4)).toEqual([]);
    expect(s.takeSkipped()).toEqual([]);
    expect(s.lastDelivered).toBe(5);
  });

  it('a gap ahead of undelivered output waits for it, then delivery jumps', () => {
    const s = new Sequencer();
    expect(s.skip(3, 5)).toEqual([]);
    expect(s.takeSkipped()).toEqual([]);
    expect(seqs(s.push(out(6)))).toEqual([]);
    expect(seqs(s.push(out(1)))).toEqual([1]);
    expect(seqs(s.push(out(2)))).toEqual([2, 6]);
    expect(s.takeSkipped()).toEqual([{ fromSeq: 3, toSeq: 5 }]);
  });

  it('a process/read filling the hole before a told gap does not count the dropped seqs as lost', () => {
    const s = new Sequencer();
    s.skip(3, 5);
    s.push(out(6));
    const chunk = (seq: number) => ({ seq, stream: 'stdout' as const, chunk: Buffer.from(`o${seq}`).toString('base64') });
    const { events, gap } = s.mergeRead(0, { chunks: [chunk(1), chunk(2), chunk(6)], nextSeq: 7, exited: false, exitCode: null, closed: false, failure: null, sandboxDenied: false });
    expect(gap).toBeNull();
    expect(seqs(events)).toEqual([1, 2, 6]);
  });
});
