/**
 * Output beyond the window goes to disk, not into a pause: the output log's spill bookkeeping
 * on its own (src/server/output/log/output-log.ts with an injected OutputSpill held in memory).
 * What is spilled keeps its seqs, is sent and read back in order as if from memory, is freed
 * once acknowledged; a client that keeps up never causes a spill; a spill that refuses (its
 * quota, a full disk) pauses the child as the window always did, losing nothing.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { OutputLog, shouldReadChild, type OutputLogOptions } from '../../../../../src/server/output/log/output-log.js';
import type { OutputSpill } from '../../../../../src/server/output/log/output-spill.js';
import { MemorySpill } from '../../../../helpers/memory-spill.js';

const opts = (spill: OutputSpill | undefined, o: Partial<OutputLogOptions> = {}): OutputLogOptions => ({
  windowBytes: 100,
  retentionBytes: 30,
  maxChunkBytes: 10,
  clientAcks: true,
  ...(spill ? { spill } : {}),
  ...o,
});
const piece = (i: number) => Buffer.from(`<${String(i).padStart(6, '0')}>`); // 8 bytes
const reads = (log: OutputLog) =>
  shouldReadChild({ finished: false, attached: false, unackedBytes: log.memoryUnackedBytes, unsentBytes: log.unsentBytes, windowBytes: log.options.windowBytes, readAheadBytes: 1e9, memoryPressured: false });
const drainOutput = (log: OutputLog): { seq: number; data: Buffer }[] => {
  const out: { seq: number; data: Buffer }[] = [];
  for (let e = log.takeNext(); e; e = log.takeNext()) if (e.kind === 'output') out.push({ seq: e.seq, data: Buffer.from(e.data) });
  return out;
};

describe('OutputLog with a spill', () => {
  it('without a spill, the child pauses at the window (as it always did)', () => {
    const log = new OutputLog(opts(undefined));
    for (let i = 0; i < 13; i++) log.append('stdout', piece(i));
    expect(log.unackedBytes).toBe(104);
    expect(reads(log)).toBe(false);
  });

  it('keeps at most the window in memory, spills the oldest chunks in seq order, and the child is still read', () => {
    const spill = new MemorySpill({ inOrder: true });
    const log = new OutputLog(opts(spill));
    const all: Buffer[] = [];
    for (let i = 0; i < 1000; i++) {
      all.push(piece(i));
      log.append('stdout', piece(i));
      expect(log.memoryUnackedBytes).toBeLessThan(100);
      expect(reads(log)).toBe(true);
    }
    expect(log.unackedBytes).toBe(8000);
    expect(log.spilledBytes).toBe(spill.bytes);
    expect(log.spilledBytes + log.memoryUnackedBytes).toBe(8000);
    expect(log.retainedBytes).toBe(log.memoryUnackedBytes);
    // A client that comes back gets every byte once, in order, with unchanged seqs.
    const sent = drainOutput(log);
    expect(Buffer.concat(sent.map((c) => c.data)).equals(Buffer.concat(all))).toBe(true);
    expect(sent.map((c) => c.seq)).toEqual(sent.map((_, i) => i + 1));
    // What it acknowledges is freed.
    log.acknowledge(sent[sent.length - 1]!.seq);
    expect(spill.bytes).toBe(0);
    expect(log.spilledBytes).toBe(0);
    expect(log.unackedBytes).toBe(0);
  });

  it('a client that keeps up never causes a spill', () => {
    const spill = new MemorySpill({ inOrder: true });
    const log = new OutputLog(opts(spill));
    for (let i = 0; i < 1000; i++) {
      log.append('stdout', piece(i));
      if (i % 5 === 4) for (const c of drainOutput(log)) log.acknowledge(c.seq);
    }
    expect(spill.appends).toBe(0);
  });

  it('a connection lost mid-replay: everything after the acknowledged point is sent again, from the spill, identically', () => {
    const spill = new MemorySpill({ inOrder: true });
    const log = new OutputLog(opts(spill));
    for (let i = 0; i < 100; i++) log.append(i % 3 ? 'stdout' : 'stderr', piece(i));
    const first = drainOutput(log);
    log.acknowledge(first[20]!.seq);
    log.rewind();
    const again = drainOutput(log);
    expect(again.map((c) => c.seq)).toEqual(first.slice(21).map((c) => c.seq));
    expect(again.map((c) => c.data.toString())).toEqual(first.slice(21).map((c) => c.data.toString()));
  });

  it('process/read in the Codex dialect reads spilled chunks as if from memory, and its answer frees them', () => {
    const spill = new MemorySpill({ inOrder: true });
    const log = new OutputLog(opts(spill, { clientAcks: false }));
    for (let i = 0; i < 100; i++) log.append('stdout', piece(i));
    expect(spill.bytes).toBeGreaterThan(0);
    let after = 0;
    const got: Buffer[] = [];
    for (;;) {
      const answer = log.read(after, 64, 1 << 20);
      if (answer.chunks.length === 0) break;
      for (const c of answer.chunks) got.push(c.data);
      after = answer.chunks[answer.chunks.length - 1]!.seq;
    }
    expect(Buffer.concat(got).toString()).toBe(Array.from({ length: 100 }, (_, i) => piece(i).toString()).join(''));
    expect(spill.bytes).toBe(0);
  });

  it('a spill that refuses (quota, full disk) pauses the child with the reason, loses nothing, and takes again once freed', () => {
    const spill = new MemorySpill({ inOrder: true });
    const log = new OutputLog(opts(spill));
    for (let i = 0; i < 30; i++) log.append('stdout', piece(i));
    spill.refuse = 'output-disk-full';
    let i = 30;
    while (reads(log)) log.append('stdout', piece(i++));
    expect(log.spillRefusal).toBe('output-disk-full');
    expect(log.memoryUnackedBytes).toBeGreaterThanOrEqual(100);
    const total = i;
    // The client reads and acknowledges some: the spill frees, takes again, the child is read again.
    spill.refuse = null;
    const sent = drainOutput(log);
    log.acknowledge(sent[5]!.seq);
    expect(log.spillRefusal).toBe(null);
    expect(reads(log)).toBe(true);
    expect(Buffer.concat(sent.map((c) => c.data)).toString()).toBe(Array.from({ length: total }, (_, k) => piece(k).toString()).join(''));
  });

  it('exit and close after spilled output keep their order; discard closes the spill', () => {
    const spill = new MemorySpill({ inOrder: true });
    const log = new OutputLog(opts(spill));
    for (let i = 0; i < 40; i++) log.append('stdout', piece(i));
    const exitSeq = log.recordExit(7);
    const closeSeq = log.recordClose();
    const kinds: string[] = [];
    for (let e = log.takeNext(); e; e = log.takeNext()) kinds.push(e.kind);
    expect(kinds.slice(-2)).toEqual(['exit', 'close']);
    expect(closeSeq).toBe(exitSeq + 1);
    log.discard();
    expect(spill.closed).toBe(true);
    expect(log.spilledBytes).toBe(0);
  });

  it('any interleaving of output, sends, acks, lost connections and refusals delivers every byte once and in order (seeded)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.constant('append'), fc.constant('take'), fc.constant('ack'), fc.constant('rewind'), fc.constant('refuse'), fc.constant('accept')), { maxLength: 400 }),
        (ops) => {
          const spill = new MemorySpill({ inOrder: true });
          const log = new OutputLog(opts(spill));
          const written: string[] = [];
          const byseq = new Map<number, string>();
          let delivered = 0; // highest seq the client consumed
          let n = 0;
          for (const op of ops) {
            if (op === 'append' && reads(log)) {
              const p = piece(n++);
              written.push(p.toString());
              log.append('stdout', p);
            } else if (op === 'take') {
              const e = log.takeNext();
              if (e?.kind === 'output') {
                if (e.seq > delivered) {
                  byseq.set(e.seq, e.data.toString());
                  delivered = e.seq;
                }
              }
            } else if (op === 'ack') log.acknowledge(delivered);
            else if (op === 'rewind') log.rewind();
            else if (op === 'refuse') spill.refuse = 'output-disk-quota';
            else spill.refuse = null;
            expect(log.memoryUnackedBytes).toBeLessThan(100 + 10 + (spill.refuse || log.spillRefusal ? 10 : 0));
          }
          spill.refuse = null;
          for (let e = log.takeNext(); e; e = log.takeNext()) if (e.kind === 'output' && e.seq > delivered) byseq.set((delivered = e.seq), e.data.toString());
          const got = [...byseq.entries()].sort((a, b) => a[0] - b[0]).map((x) => x[1]).join('');
          expect(got).toBe(written.join(''));
        },
      ),
      { seed: 37, numRuns: 200 },
    );
  });

  it('kept mode: a chunk is marked and dropped at the keeper only once it is in the spill, never past an event', () => {
    const spill = new MemorySpill({ inOrder: true });
    const told: string[] = [];
    const log = new OutputLog(
      opts(spill, {
        observer: {
          exposed: (e) => told.push(`mark ${e.seq}${e.kind === 'output' ? '' : ` ${e.kind}`}`),
          dropped: (seq) => {
            told.push(`drop ${seq}`);
            for (let s = log.ackedSeq + 1; s <= seq; s++) if (log.kept().some((e) => e.seq === s && e.kind === 'output')) expect(spill.chunks.has(s)).toBe(true);
          },
        },
      }),
    );
    for (let i = 0; i < 13; i++) log.append('stdout', piece(i));
    expect(told).toEqual(['mark 1', 'drop 1']);
    log.recordExit(0);
    for (let i = 13; i < 40; i++) log.append('stdout', piece(i)); // output after the exit: held, never spilled past it
    expect(told.filter((t) => t.startsWith('drop')).pop()).toBe(`drop ${log.spilledThrough}`);
    expect(log.spilledThrough).toBeLessThan(log.exitSeq!);
    expect(log.spillRefusal).toBe(null);
    expect(reads(log)).toBe(false); // pauses at the window, as without a spill
  });

  it('a successor rebuilds the spilled entries from the spill with their seqs, before what its keeper kept', () => {
    const spill = new MemorySpill({ inOrder: true });
    for (let seq = 4; seq <= 6; seq++) spill.append(seq, 'stdout', piece(seq));
    const kept = Buffer.concat([piece(7), piece(8)]);
    const log = OutputLog.restore(opts(spill), {
      streams: { 1: { base: 100, data: kept }, 2: { base: 0, data: Buffer.alloc(0) } },
      marks: [{ seq: 7, stream: 1, end: 108 }],
      tty: false,
      droppedSeq: 6,
      spilled: [4, 5, 6].map((seq) => ({ seq, stream: 'stdout' as const, bytes: 8 })),
    });
    expect(log.ackedSeq).toBe(3);
    expect(log.spilledBytes).toBe(24);
    expect(log.memoryUnackedBytes).toBe(16);
    const sent = drainOutput(log);
    expect(sent.map((c) => [c.seq, c.data.toString()])).toEqual([
      [4, piece(4).toString()],
      [5, piece(5).toString()],
      [6, piece(6).toString()],
      [7, piece(7).toString()],
      [8, piece(8).toString()],
    ]);
    log.acknowledge(8);
    expect(spill.bytes).toBe(0);
  });

  it('a restore refuses spilled chunks out of order or past what the keeper dropped', () => {
    const base = { streams: { 1: { base: 0, data: Buffer.alloc(0) }, 2: { base: 0, data: Buffer.alloc(0) } }, marks: [], tty: false, droppedSeq: 5 } as const;
    expect(() => OutputLog.restore(opts(new MemorySpill({ inOrder: true })), { ...base, spilled: [{ seq: 6, stream: 'stdout', bytes: 1 }] })).toThrow(/out of order/);
    expect(() => OutputLog.restore(opts(new MemorySpill({ inOrder: true })), { ...base, spilled: [{ seq: 3, stream: 'stdout', bytes: 1 }, { seq: 3, stream: 'stdout', bytes: 1 }] })).toThrow(/out of order/);
  });
});
