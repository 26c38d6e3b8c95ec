/**
 * `--keep-last`: the output log's drop decision on its own (src/server/output/log/output-log.ts).
 * At its keep-last size, or with a full window that cannot spill, the log drops its OLDEST
 * unacknowledged chunks instead of pausing the child, records each dropped run of seqs as a
 * gap (first..last, bytes), tells it once per connection before the next entry, again after a
 * rewind until the client acknowledges past it; the seqs after a gap are exact.
 */
import { describe, expect, it } from 'vitest';
import { OutputLog, shouldReadChild, type OutputLogOptions } from '../../../../../src/server/output/log/output-log.js';
import { MemorySpill } from '../../../../helpers/memory-spill.js';

const opts = (o: Partial<OutputLogOptions> = {}): OutputLogOptions => ({ windowBytes: 40, retentionBytes: 0, maxChunkBytes: 8, clientAcks: true, ...o });
const piece = (i: number) => Buffer.from(`<${String(i).padStart(6, '0')}>`); // 8 bytes: one chunk each
const reads = (log: OutputLog) =>
  shouldReadChild({ finished: false, attached: true, unackedBytes: log.memoryUnackedBytes, unsentBytes: log.unsentBytes, windowBytes: log.options.windowBytes, readAheadBytes: Infinity, memoryPressured: false });

describe('keep-last: the drop decision and the gap', () => {
  it('without keep-last nothing is dropped: the child pauses at the window (unchanged)', () => {
    const log = new OutputLog(opts());
    for (let i = 1; i <= 10; i++) log.append('stdout', piece(i));
    expect(reads(log)).toBe(false);
    expect(log.pendingGaps).toEqual([]);
    expect(log.takeGap()).toBeUndefined();
  });

  it('at the keep-last size the oldest unacknowledged chunks go, as one numbered gap, and the child is never paused', () => {
    const log = new OutputLog(opts({ keepLastBytes: 24, windowBytes: 1000 }));
    for (let i = 1; i <= 10; i++) {
      log.append('stdout', piece(i));
      expect(reads(log)).toBe(true);
    }
    // 10 chunks of 8 bytes, 24 kept: seqs 1..7 dropped, 8..10 kept.
    expect(log.pendingGaps).toEqual([{ first: 1, last: 7, bytes: 56 }]);
    expect(log.unackedBytes).toBe(24);
    expect(log.takeGap()).toEqual({ first: 1, last: 7, bytes: 56 });
    expect(log.takeGap()).toBeUndefined(); // told once per connection
    const sent: number[] = [];
    for (let e = log.takeNext(); e; e = log.takeNext()) {
      expect(e.kind).toBe('output');
      if (e.kind === 'output') expect(e.data).toEqual(piece(e.seq));
      sent.push(e.seq);
    }
    expect(sent).toEqual([8, 9, 10]);
  });

  it('a gap is told again after a rewind until the client acknowledges past it', () => {
    const log = new OutputLog(opts({ keepLastBytes: 16, windowBytes: 1000 }));
    for (let i = 1; i <= 5; i++) log.append('stdout', piece(i));
    expect(log.takeGap()).toEqual({ first: 1, last: 3, bytes: 24 });
    expect(log.takeNext()?.seq).toBe(4);
    log.rewind(); // the connection went away before the client acknowledged
    expect(log.takeGap()).toEqual({ first: 1, last: 3, bytes: 24 });
    expect(log.takeNext()?.seq).toBe(4);
    log.acknowledge(4);
    log.rewind();
    expect(log.takeGap()).toBeUndefined();
    expect(log.takeNext()?.seq).toBe(5);
  });

  it('chunks already sent (in flight) may be dropped too: the gap still names them, sending goes on after it', () => {
    const log = new OutputLog(opts({ keepLastBytes: 16, windowBytes: 1000 }));
    log.append('stdout', piece(1));
    log.append('stdout', piece(2));
    expect(log.takeNext()?.seq).toBe(1);
    for (let i = 3; i <= 6; i++) log.append('stdout', piece(i));
    expect(log.pendingGaps).toEqual([{ first: 1, last: 4, bytes: 32 }]);
    expect(log.takeGap()).toEqual({ first: 1, last: 4, bytes: 32 });
    expect(log.takeNext()?.seq).toBe(5);
  });

  it('with a spill, the spill quota comes first: at its refusal the oldest (spilled) chunks are dropped, never a pause', () => {
    const spill = new MemorySpill();
    const log = new OutputLog(opts({ spill, keepLastBytes: 1 << 20, windowBytes: 16 }));
    for (let i = 1; i <= 4; i++) log.append('stdout', piece(i));
    expect(log.spilledBytes).toBeGreaterThan(0);
    spill.refuse = 'output-disk-quota';
    for (let i = 5; i <= 20; i++) {
      log.append('stdout', piece(i));
      expect(reads(log)).toBe(true);
    }
    const [gap] = log.pendingGaps;
    expect(gap!.first).toBe(1);
    expect(log.pendingGaps).toHaveLength(1);
    const after = gap!.last + 1;
    expect(log.takeGap()).toEqual(gap);
    const sent: number[] = [];
    for (let e = log.takeNext(); e; e = log.takeNext()) {
      if (e.kind === 'output') expect(e.data).toEqual(piece(e.seq));
      sent.push(e.seq);
    }
    expect(sent).toEqual(Array.from({ length: 20 - after + 1 }, (_, k) => after + k));
  });

  it('never drops an event: output after the exit is not dropped past it', () => {
    const log = new OutputLog(opts({ keepLastBytes: 8, windowBytes: 1000 }));
    log.append('stdout', piece(1));
    log.recordExit(0);
    log.append('stdout', piece(3));
    log.append('stdout', piece(4));
    expect(log.pendingGaps).toEqual([{ first: 1, last: 1, bytes: 8 }]);
    expect(log.kept().map((e) => e.seq)).toEqual([2, 3, 4]);
  });
});
