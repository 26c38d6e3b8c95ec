/**
 * The output log's observer and its restore (src/server/output/log/output-log.ts, log-restore.ts; issue
 * #27): each entry is told once, in seq order, before a client can see it, with its stream's
 * END offset; eviction and discard are told as drops; and a log rebuilt from what a keeper
 * kept (the marks not dropped, the bytes retained) has the same seqs and bytes for every
 * entry a client may have seen — the successor's numbering matches the clients'.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { keeperStream, type RestoreMark, type RestoreState } from '../../../../../src/server/output/log/log-restore.js';
import { OutputLog, type ExposedEntry, type LogEntry, type OutputLogOptions } from '../../../../../src/server/output/log/output-log.js';
import type { OutputStream } from '../../../../../src/protocol/index.js';

/** What a keeper in kept mode does with marks and drops (native/kept.c), in memory. */
class FakeKeeper {
  readonly full: Record<1 | 2, Buffer> = { 1: Buffer.alloc(0), 2: Buffer.alloc(0) };
  readonly base: Record<1 | 2, number> = { 1: 0, 2: 0 };
  marks: RestoreMark[] = [];
  readonly told: ExposedEntry[] = [];
  lastExposed = 0;
  exitCode: number | null = null;
  /** The highest seq dropped: the dump must carry it (seqs continue after it when no mark is left). */
  droppedSeq = 0;
  readonly observer = {
    exposed: (e: ExposedEntry) => {
      expect(e.seq).toBeGreaterThan(this.lastExposed);
      this.lastExposed = e.seq;
      this.told.push(e);
      this.marks.push(e.kind === 'output' ? { seq: e.seq, stream: keeperStream(e.stream), end: e.end } : { seq: e.seq, stream: e.kind === 'exit' ? 'x' : 'c' });
    },
    dropped: (seq: number) => {
      for (const s of [1, 2] as const) {
        const newest = this.marks.filter((m) => m.seq <= seq && m.stream === s).pop();
        if (newest) this.base[s] = newest.end!;
      }
      this.marks = this.marks.filter((m) => m.seq > seq);
      this.droppedSeq = Math.max(this.droppedSeq, seq);
    },
  };
  constructor(readonly tty: boolean) {}
  read(stream: OutputStream, data: Buffer): void {
    const s = keeperStream(stream);
    this.full[s] = Buffer.concat([this.full[s], data]);
  }
  dump(): RestoreState {
    const part = (s: 1 | 2) => ({ base: this.base[s], data: this.full[s].subarray(this.base[s]) });
    return { streams: { 1: part(1), 2: part(2) }, marks: this.marks, tty: this.tty, exitCode: this.exitCode, droppedSeq: this.droppedSeq };
  }
}

const options = (o: Partial<OutputLogOptions> = {}): OutputLogOptions => ({ windowBytes: 1000, retentionBytes: 60, maxChunkBytes: 40, clientAcks: true, ...o });
const view = (e: LogEntry, log: OutputLog) => (e.kind === 'output' ? [e.seq, e.stream, log.joinOutput(e).toString('latin1')] : [e.seq, e.kind]);

describe('OutputLog observer', () => {
  it('tells each entry once, in seq order, before takeNext returns it, with per-stream END offsets', () => {
    const k = new FakeKeeper(true);
    const log = new OutputLog({ ...options(), observer: k.observer });
    log.append('pty', Buffer.from('abc'));
    log.append('pty', Buffer.from('de')); // joined into seq 1 while unexposed
    expect(k.told).toEqual([]);
    const first = log.takeNext()!;
    expect(k.told).toEqual([{ kind: 'output', seq: 1, stream: 'pty', end: 5 }]);
    expect(first.seq).toBe(1);
    log.append('pty', Buffer.from('f')); // sealed: a new entry
    log.append('stderr', Buffer.from('xyz'));
    log.recordExit(3);
    log.recordClose();
    while (log.takeNext());
    expect(k.told.slice(1)).toEqual([
      { kind: 'output', seq: 2, stream: 'pty', end: 6 },
      { kind: 'output', seq: 3, stream: 'stderr', end: 3 },
      { kind: 'exit', seq: 4 },
      { kind: 'close', seq: 5 },
    ]);
    log.rewind();
    while (log.takeNext()); // sent again: not told again
    expect(k.told).toHaveLength(5);
  });

  it('tells entries exposed by skipTo, by an acknowledgement before sending, and by a read', () => {
    const k = new FakeKeeper(false);
    const log = new OutputLog({ ...options({ clientAcks: false }), observer: k.observer });
    for (const s of ['a', 'b', 'c', 'd']) {
      log.append('stdout', Buffer.from(s));
      log.takeNext();
    }
    log.rewind();
    log.skipTo(1);
    expect(k.lastExposed).toBe(4); // sent before the rewinds
    log.append('stdout', Buffer.from('e'));
    log.append('stderr', Buffer.from('f'));
    const answer = log.read(0, 1, 100);
    expect(answer.chunks.map((c) => c.seq)).toEqual([1]);
    log.acknowledge(6);
    expect(k.told.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(k.told.slice(4)).toEqual([
      { kind: 'output', seq: 5, stream: 'stdout', end: 5 },
      { kind: 'output', seq: 6, stream: 'stderr', end: 1 },
    ]);
  });

  it('tells drops on eviction and on discard', () => {
    const drops: number[] = [];
    const told: ExposedEntry[] = [];
    const log = new OutputLog({ ...options({ retentionBytes: 0 }), observer: { exposed: (e) => told.push(e), dropped: (s) => drops.push(s) } });
    log.append('stdout', Buffer.from('a'));
    log.takeNext();
    log.append('stdout', Buffer.from('b'));
    log.takeNext();
    log.acknowledge(1);
    expect(drops).toEqual([1]);
    log.append('stdout', Buffer.from('c'));
    log.discard();
    expect(drops).toEqual([1, 3]);
    // Bytes discarded unexposed still count in the stream's offsets.
    log.append('stdout', Buffer.from('dd'));
    log.takeNext();
    expect(told.pop()).toEqual({ kind: 'output', seq: 4, stream: 'stdout', end: 5 });
  });
});

describe('OutputLog.restore', () => {
  it('rebuilds marked entries with their seqs, and bytes past the marks as new entries', () => {
    const log = OutputLog.restore(options({ maxChunkBytes: 4 }), {
      streams: { 1: { base: 2, data: Buffer.from('cdefghijk') }, 2: { base: 0, data: Buffer.from('EE') } },
      marks: [
        { seq: 7, stream: 1, end: 5 },
        { seq: 8, stream: 2, end: 1 },
        { seq: 9, stream: 1, end: 6 },
      ],
      tty: false,
    });
    expect(log.kept().map((e) => view(e, log))).toEqual([
      [7, 'stdout', 'cde'],
      [8, 'stderr', 'E'],
      [9, 'stdout', 'f'],
      [10, 'stdout', 'ghij'],
      [11, 'stdout', 'k'],
      [12, 'stderr', 'E'],
    ]);
    expect([log.ackedSeq, log.sentSeq, log.next, log.unackedBytes]).toEqual([6, 6, 13, 11]);
    log.recordExit(0);
    expect(log.exitSeq).toBe(13);
  });

  it('restores exit and close marks, and continues after droppedSeq when no mark is left', () => {
    const log = OutputLog.restore(options(), {
      streams: { 1: { base: 3, data: Buffer.alloc(0) }, 2: { base: 0, data: Buffer.alloc(0) } },
      marks: [{ seq: 4, stream: 'x' }, { seq: 5, stream: 'c' }],
      tty: true,
      exitCode: 7,
    });
    expect(log.kept()).toEqual([{ kind: 'exit', seq: 4, exitCode: 7 }, { kind: 'close', seq: 5 }]);
    expect([log.exitSeq, log.closeSeq, log.next]).toEqual([4, 5, 6]);
    const empty = OutputLog.restore(options(), { streams: { 1: { base: 9, data: Buffer.from('z') }, 2: { base: 0, data: Buffer.alloc(0) } }, marks: [], tty: true, droppedSeq: 12 });
    expect(empty.kept().map((e) => view(e, empty))).toEqual([[13, 'pty', 'z']]);
  });

  it('refuses marks that do not fit the retained bytes', () => {
    const streams = { 1: { base: 2, data: Buffer.from('ab') }, 2: { base: 0, data: Buffer.alloc(0) } };
    expect(() => OutputLog.restore(options(), { streams, marks: [{ seq: 1, stream: 1, end: 5 }], tty: false })).toThrow('outside the retained 2..4');
    expect(() => OutputLog.restore(options(), { streams, marks: [{ seq: 2, stream: 1, end: 3 }, { seq: 2, stream: 1, end: 4 }], tty: false })).toThrow('out of order');
    expect(() => OutputLog.restore(options(), { streams, marks: [{ seq: 2, stream: 'x' }], tty: false })).toThrow('without an exit code');
  });

  // The core guarantee: whatever the log did (appends, sends, acks, reads, rewinds, evictions),
  // a restore from the keeper's marks and bytes gives every entry not dropped its seq and bytes.
  it('matches the seqs and bytes clients could have seen, for random histories (seeded)', () => {
    const op = fc.oneof(
      fc.record({ t: fc.constant('append' as const), err: fc.boolean(), n: fc.integer({ min: 1, max: 30 }) }),
      fc.record({ t: fc.constant('take' as const), n: fc.integer({ min: 1, max: 4 }) }),
      fc.record({ t: fc.constantFrom('rewind' as const, 'squeeze' as const, 'unsqueeze' as const) }),
      fc.record({ t: fc.constantFrom('ack' as const, 'skip' as const, 'read' as const), back: fc.integer({ min: 0, max: 6 }) }),
    );
    const history = fc.record({ tty: fc.boolean(), clientAcks: fc.boolean(), ops: fc.array(op, { maxLength: 80 }), ending: fc.integer({ min: 0, max: 2 }) });
    fc.assert(
      fc.property(history, ({ tty, clientAcks, ops, ending }) => {
        const k = new FakeKeeper(tty);
        const opts = options({ clientAcks });
        const log = new OutputLog({ ...opts, observer: k.observer });
        let counter = 0;
        const expectTold = (seq: number) => expect(seq).toBeLessThanOrEqual(k.lastExposed);
        for (const o of ops) {
          if (o.t === 'append') {
            const stream: OutputStream = o.err ? 'stderr' : tty ? 'pty' : 'stdout';
            const data = Buffer.from(Array.from({ length: o.n }, () => 33 + (counter++ % 90)));
            k.read(stream, data);
            log.append(stream, data);
          } else if (o.t === 'take') {
            for (let i = 0; i < o.n; i++) {
              const e = log.takeNext();
              if (e) expectTold(e.seq);
            }
          } else if (o.t === 'rewind') log.rewind();
          else if (o.t === 'squeeze' || o.t === 'unsqueeze') log.squeezeHistory(o.t === 'squeeze');
          else if (o.t === 'ack') log.acknowledge(Math.max(0, log.sentSeq - o.back));
          else if (o.t === 'skip') log.skipTo(Math.max(0, log.next - 1 - o.back));
          else if (o.t === 'read') for (const c of log.read(Math.max(0, log.ackedSeq - o.back), 50, 100).chunks) expectTold(c.seq);
        }
        if (ending >= 1) {
          k.exitCode = 5;
          log.recordExit(5);
          log.recordClose();
          if (ending === 2) while (log.takeNext());
        }
        const restored = OutputLog.restore(opts, k.dump());
        const seen = log.kept().filter((e) => e.seq <= k.lastExposed);
        const unseen = log.kept().filter((e) => e.seq > k.lastExposed && e.kind === 'output');
        const restoredSeen = restored.kept().filter((e) => e.seq <= k.lastExposed);
        const restoredNew = restored.kept().filter((e) => e.seq > k.lastExposed);
        expect(restoredSeen.map((e) => view(e, restored))).toEqual(seen.map((e) => view(e, log)));
        // What no client saw comes back as new entries, the same bytes per stream.
        const bytesOf = (entries: LogEntry[], l: OutputLog, s: 1 | 2) =>
          entries.flatMap((e) => (e.kind === 'output' && keeperStream(e.stream) === s ? [l.joinOutput(e).toString('latin1')] : [])).join('');
        for (const s of [1, 2] as const) expect(bytesOf(restoredNew, restored, s)).toBe(bytesOf(unseen, log, s));
        expect(restored.next).toBeGreaterThan(k.lastExposed);
        // The successor's own observer continues the keeper's offsets.
        const k2 = new FakeKeeper(tty);
        const again = OutputLog.restore({ ...opts, observer: k2.observer }, k.dump());
        while (again.takeNext());
        for (const s of [1, 2] as const) {
          const last = k2.told.filter((e) => e.kind === 'output' && keeperStream(e.stream) === s).pop();
          if (last?.kind === 'output') expect(last.end).toBe(k.full[s].length);
        }
      }),
      { seed: 27, numRuns: 400 },
    );
  });
});
