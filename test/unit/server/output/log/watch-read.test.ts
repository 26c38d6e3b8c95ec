/**
 * A watcher's read of an output log (extension `attach`, src/server/output/log/output-log.ts
 * `watch`): it acknowledges nothing and changes nothing of what is sent; seqs after its
 * `afterSeq` that are no longer kept come back as one `gap`, the chunks after it exact; a
 * later hole (keep-last dropping unacknowledged chunks after kept history) ends the answer
 * before it, and the next read from `nextSeq - 1` reports it.
 */
import { describe, expect, it } from 'vitest';
import { OutputLog, type OutputLogOptions } from '../../../../../src/server/output/log/output-log.js';

const opts = (o: Partial<OutputLogOptions> = {}): OutputLogOptions => ({ windowBytes: 1000, retentionBytes: 0, maxChunkBytes: 8, clientAcks: true, ...o });
const piece = (i: number) => Buffer.from(`<${String(i).padStart(6, '0')}>`); // 8 bytes: one chunk each
const text = (chunks: { data: Buffer }[]) => chunks.map((c) => c.data.toString()).join('');
const pieces = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => piece(from + i).toString()).join('');

describe('a watcher reading an output log', () => {
  it('acknowledges nothing and leaves what is sent as it was', () => {
    const log = new OutputLog(opts({ clientAcks: false }));
    for (let i = 1; i <= 4; i++) log.append('stdout', piece(i));
    const answer = log.watch(0, null, 1 << 20);
    expect(answer.gap).toBeNull();
    expect(text(answer.chunks)).toBe(pieces(1, 4));
    expect(answer.nextSeq).toBe(5);
    expect(log.ackedSeq).toBe(0);
    expect(log.sentSeq).toBe(0);
    expect(log.unackedBytes).toBe(32);
    // A reader's read (the writer, Codex dialect) does acknowledge: the difference is the point.
    log.read(0, null, 1 << 20);
    expect(log.ackedSeq).toBe(4);
  });

  it('below the oldest kept seq it is told the gap, and the chunks after it are exact', () => {
    const log = new OutputLog(opts({ retentionBytes: 16 }));
    for (let i = 1; i <= 10; i++) log.append('stdout', piece(i));
    log.acknowledge(10); // history kept: the newest 16 bytes (seqs 9, 10)
    const answer = log.watch(0, null, 1 << 20);
    expect(answer.gap).toEqual({ first: 1, last: 8 });
    expect(answer.chunks.map((c) => c.seq)).toEqual([9, 10]);
    expect(answer.nextSeq).toBe(11);
    expect(log.watch(8, null, 1 << 20).gap).toBeNull();
    // Nothing at all kept after afterSeq: the gap reaches the newest seq.
    log.append('stdout', piece(11));
    expect(log.watch(0, 8, 1 << 20).chunks.map((c) => c.seq)).toEqual([9]);
  });

  it('a hole later on (keep-last) ends the answer before it; the next read reports it as its gap', () => {
    const log = new OutputLog(opts({ retentionBytes: 1000, keepLastBytes: 24 }));
    for (let i = 1; i <= 3; i++) log.append('stdout', piece(i));
    log.acknowledge(3); // 1..3 kept as history
    for (let i = 4; i <= 10; i++) log.append('stdout', piece(i)); // keep-last drops 4..7
    expect(log.pendingGaps).toEqual([{ first: 4, last: 7, bytes: 32 }]);
    const first = log.watch(0, null, 1 << 20);
    expect(first.gap).toBeNull();
    expect(first.chunks.map((c) => c.seq)).toEqual([1, 2, 3]);
    expect(first.nextSeq).toBe(4);
    const second = log.watch(first.nextSeq - 1, null, 1 << 20);
    expect(second.gap).toEqual({ first: 4, last: 7 });
    expect(text(second.chunks)).toBe(pieces(8, 10));
    expect(second.nextSeq).toBe(11);
  });
});
