/**
 * The server's output log on its own (src/server/output/log/output-log.ts): numbering, what is sent
 * next, acknowledgement and eviction, rewinding after a lost connection, the Codex-dialect
 * resume hold, `process/read` answers, and the decision to read a child.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { OutputLog, shouldReadChild, type LogEntry, type OutputLogOptions } from '../../../../../src/server/output/log/output-log.js';

const bytes = (n: number, fill = 'x') => Buffer.alloc(n, fill);
const acksLog = (o: Partial<OutputLogOptions> = {}) =>
  new OutputLog({ windowBytes: 1000, retentionBytes: 100, maxChunkBytes: 50, clientAcks: true, ...o });
const codexLog = (o: Partial<OutputLogOptions> = {}) => acksLog({ clientAcks: false, ...o });
const drain = (log: OutputLog): LogEntry[] => {
  const out: LogEntry[] = [];
  for (let e = log.takeNext(); e; e = log.takeNext()) out.push(e);
  return out;
};
const seqs = (entries: { seq: number }[]) => entries.map((e) => e.seq);

describe('OutputLog', () => {
  it('numbers output, exit and close from one sequence, and sends them in order', () => {
    const log = acksLog();
    log.append('stdout', bytes(3));
    expect(drain(log).map((e) => [e.kind, e.seq])).toEqual([['output', 1]]);
    log.append('stderr', bytes(3));
    expect(log.recordExit(3)).toBe(3);
    expect(log.recordClose()).toBe(4);
    expect(log.next).toBe(5);
    expect(drain(log).map((e) => [e.kind, e.seq])).toEqual([
      ['output', 2],
      ['exit', 3],
      ['close', 4],
    ]);
    expect(log.hasSendable).toBe(false);
  });

  it('joins output into the newest chunk while it is unsent, up to maxChunkBytes and per stream', () => {
    const log = acksLog({ maxChunkBytes: 10 });
    log.append('stdout', Buffer.from('abc'));
    log.append('stdout', Buffer.from('def'));
    log.append('stderr', Buffer.from('E'));
    log.append('stderr', Buffer.from('0123456789')); // would exceed 10: a new chunk
    const sent = drain(log) as Extract<LogEntry, { kind: 'output' }>[];
    expect(sent.map((e) => [e.seq, e.stream, e.data.toString()])).toEqual([
      [1, 'stdout', 'abcdef'],
      [2, 'stderr', 'E'],
      [3, 'stderr', '0123456789'],
    ]);
    log.append('stderr', Buffer.from('z')); // seq 3 was sent: sealed
    expect(seqs(drain(log))).toEqual([4]);
  });

  it('never appends to a chunk a read has returned', () => {
    const log = codexLog();
    log.append('stdout', Buffer.from('a'));
    expect(log.read(0, null, 1 << 20).chunks.map((c) => c.data.toString())).toEqual(['a']);
    log.append('stdout', Buffer.from('b'));
    expect(log.read(0, null, 1 << 20).chunks.map((c) => [c.seq, c.data.toString()])).toEqual([
      [1, 'a'],
      [2, 'b'],
    ]);
  });

  it('with acks: evicts only acknowledged output beyond retention, oldest first', () => {
    const log = acksLog({ retentionBytes: 100, maxChunkBytes: 60 });
    for (let i = 0; i < 5; i++) {
      log.append('stdout', bytes(60));
      drain(log);
    }
    expect(log.unackedBytes).toBe(300);
    expect(log.read(0, null, 1 << 20).chunks.length).toBe(5); // nothing acknowledged: all kept
    log.acknowledge(3); // 180 acknowledged, retention 100: seqs 1 and 2 go? only down to <= 100: 1 and 2
    expect(log.historyBytes).toBe(60);
    expect(seqs(log.read(0, null, 1 << 20).chunks)).toEqual([3, 4, 5]);
    expect(log.unackedBytes).toBe(120);
  });

  it('with acks: a read does not acknowledge, and an ack past what was sent is clamped by the caller', () => {
    const log = acksLog();
    log.append('stdout', bytes(10));
    log.read(0, null, 1 << 20);
    expect(log.unackedBytes).toBe(10);
    expect(log.acknowledge(99)).toBe(true); // clamped to the last seq there is
    expect(log.ackedSeq).toBe(1);
  });

  it('rewinds to the acknowledged point when the connection goes, and a resume can skip what the client has', () => {
    const log = acksLog({ maxChunkBytes: 10 });
    for (let i = 0; i < 5; i++) {
      log.append('stdout', bytes(10));
      drain(log);
    }
    log.acknowledge(2);
    log.rewind();
    expect(log.unsentBytes).toBe(30);
    log.skipTo(4); // the client delivered up to 4 (acknowledged only 2)
    expect(log.unsentBytes).toBe(10);
    expect(seqs(drain(log))).toEqual([5]);
    expect(log.unackedBytes).toBe(30); // 3..5 still count against the window
  });

  it('Codex dialect: the kernel taking a frame acknowledges it; a read acknowledges what it returned', () => {
    const log = codexLog({ maxChunkBytes: 10 });
    log.append('stdout', bytes(10));
    const [first] = drain(log);
    log.written(first!.seq);
    expect(log.ackedSeq).toBe(1);
    log.append('stdout', bytes(10));
    log.append('stdout', bytes(10)); // 2 and 3, unsent
    const r = log.read(1, 10, 1 << 20);
    expect(seqs(r.chunks)).toEqual([2]);
    expect(r.nextSeq).toBe(3);
    expect(log.ackedSeq).toBe(2);
    expect(seqs(drain(log))).toEqual([3]); // 2 was read: never sent
  });

  it('Codex dialect resume: holds the backlog until a read reaches its end, then sends exit and close', () => {
    const log = codexLog({ maxChunkBytes: 15 });
    for (let i = 0; i < 3; i++) log.append('stdout', bytes(10)); // 15 per chunk at most: three chunks
    log.holdBacklog();
    expect(log.holding).toBe(true);
    expect(log.takeNext()).toBeUndefined();
    expect(seqs(log.read(0, 10, 1 << 20).chunks)).toEqual([1]);
    expect(log.holding).toBe(true);
    log.append('stdout', bytes(5)); // joins seq 3 (never exposed); held too
    log.recordExit(0);
    log.recordClose();
    expect(log.takeNext()).toBeUndefined();
    const rest = log.read(1, null, 1 << 20);
    expect(rest.chunks.map((c) => [c.seq, c.bytes])).toEqual([
      [2, 10],
      [3, 15],
    ]);
    expect(rest.nextSeq).toBe(6);
    expect(log.holding).toBe(false);
    expect(drain(log).map((e) => e.kind)).toEqual(['exit', 'close']);
  });

  it('Codex dialect resume: a hold released by the grace sends the backlog', () => {
    const log = codexLog();
    log.append('stdout', bytes(10));
    log.holdBacklog();
    expect(log.hasSendable).toBe(false);
    log.releaseHold();
    expect(seqs(drain(log))).toEqual([1]);
  });

  it('limits a read to maxBytes and to the cap, never splitting chunks and returning at least one', () => {
    const log = acksLog({ maxChunkBytes: 10 });
    for (let i = 0; i < 4; i++) {
      log.append('stdout', bytes(10));
      drain(log);
    }
    log.recordExit(0);
    expect(log.read(0, 25, 1 << 20)).toMatchObject({ nextSeq: 3, chunks: [{ seq: 1 }, { seq: 2 }] });
    expect(log.read(0, 5, 1 << 20)).toMatchObject({ nextSeq: 2, chunks: [{ seq: 1 }] });
    expect(log.read(2, 100, 1 << 20)).toMatchObject({ nextSeq: 5, chunks: [{ seq: 3 }, { seq: 4 }] }); // maxBytes: last + 1
    expect(log.read(2, null, 1 << 20)).toMatchObject({ nextSeq: 6 }); // no maxBytes: counts the exit
    expect(log.read(0, null, 20)).toMatchObject({ nextSeq: 3, chunks: [{ seq: 1 }, { seq: 2 }] }); // the cap cut it short
    expect(log.read(4, 100, 1 << 20)).toMatchObject({ nextSeq: 6, chunks: [] });
  });

  it('knows when the client has acknowledged everything', () => {
    const log = acksLog();
    log.append('stdout', bytes(1));
    log.recordExit(0);
    log.recordClose();
    drain(log);
    expect(log.fullyAcknowledged).toBe(false);
    log.acknowledge(3);
    expect(log.fullyAcknowledged).toBe(true);
  });

  it('keeps its invariants under any sequence of operations (property)', () => {
    const op = fc.oneof(
      fc.record({ t: fc.constant('append' as const), n: fc.integer({ min: 1, max: 40 }), err: fc.boolean() }),
      fc.record({ t: fc.constant('send' as const), k: fc.integer({ min: 1, max: 4 }) }),
      fc.record({ t: fc.constant('ack' as const), back: fc.integer({ min: 0, max: 3 }) }),
      fc.record({ t: fc.constant('written' as const) }),
      fc.record({ t: fc.constant('rewind' as const) }),
      fc.record({ t: fc.constant('read' as const), after: fc.integer({ min: 0, max: 30 }), max: fc.option(fc.integer({ min: 1, max: 80 })) }),
    );
    fc.assert(
      fc.property(fc.boolean(), fc.array(op, { maxLength: 80 }), (clientAcks, ops) => {
        const log = new OutputLog({ windowBytes: 10_000, retentionBytes: 60, maxChunkBytes: 50, clientAcks });
        const produced: Buffer[] = []; // every byte, in order
        const seen = new Map<number, Buffer>(); // what the client got (sent or read), by seq
        let lastSent = 0;
        for (const o of ops) {
          switch (o.t) {
            case 'append': {
              const data = Buffer.from(Array.from({ length: o.n }, () => produced.length % 251));
              produced.push(data);
              log.append(o.err ? 'stderr' : 'stdout', data);
              break;
            }
            case 'send':
              for (let i = 0; i < o.k; i++) {
                const e = log.takeNext();
                if (!e) break;
                expect(e.seq).toBeGreaterThan(log.ackedSeq - 1);
                if (e.kind === 'output') seen.set(e.seq, e.data);
                lastSent = e.seq;
              }
              break;
            case 'ack':
              if (clientAcks) log.acknowledge(Math.max(0, Math.min(lastSent, log.sentSeq) - o.back));
              break;
            case 'written':
              log.written(log.sentSeq);
              break;
            case 'rewind':
              log.rewind();
              lastSent = log.sentSeq;
              break;
            case 'read': {
              const r = log.read(o.after, o.max, 100);
              for (let i = 1; i < r.chunks.length; i++) expect(r.chunks[i]!.seq).toBeGreaterThan(r.chunks[i - 1]!.seq);
              for (const c of r.chunks) {
                expect(c.seq).toBeGreaterThan(o.after);
                if (seen.has(c.seq)) expect(c.data.equals(seen.get(c.seq)!)).toBe(true); // a seq never changes once seen
                seen.set(c.seq, c.data);
              }
              break;
            }
          }
          // Accounting: unacked = everything after the acknowledged point, never evicted.
          const unacked = log.kept().reduce((n, e) => n + (e.kind === 'output' && e.seq > log.ackedSeq ? e.bytes : 0), 0);
          expect(log.unackedBytes).toBe(unacked);
          expect(log.unsentBytes).toBeLessThanOrEqual(log.unackedBytes);
          expect(log.sentSeq).toBeGreaterThanOrEqual(log.ackedSeq);
          expect(log.historyBytes).toBeLessThanOrEqual(60 + 50);
        }
        // Whatever was produced is, in order: evicted history (acknowledged) + what is kept.
        const total = produced.reduce((n, b) => n + b.length, 0);
        expect(log.totalBytes).toBe(total);
        const kept = log.read(0, null, Infinity).chunks;
        const keptBytes = Buffer.concat(kept.map((c) => c.data));
        for (const c of kept) if (seen.has(c.seq)) expect(c.data.equals(seen.get(c.seq)!)).toBe(true);
        expect(keptBytes.equals(Buffer.concat(produced).subarray(total - keptBytes.length))).toBe(true);
      }),
      { numRuns: 300 },
    );
  });
});

describe('OutputLog under the server memory budget (issue 13)', () => {
  it('keeps no acknowledged history while squeezed, never drops unacknowledged output, and keeps history again after', () => {
    const log = acksLog({ retentionBytes: 100, maxChunkBytes: 40 });
    for (let i = 0; i < 4; i++) {
      log.append('stdout', bytes(40, String(i)));
      drain(log);
    }
    log.acknowledge(2); // 80 acknowledged (kept: under retention), 80 not
    expect(log.historyBytes).toBe(80);
    log.squeezeHistory(true);
    expect(log.historyBytes).toBe(0);
    expect(log.unackedBytes).toBe(80);
    log.acknowledge(3);
    expect(log.historyBytes).toBe(0); // acknowledged while squeezed: freed at once
    expect(log.read(0, null, 1000).chunks.map((c) => c.data.toString()[0])).toEqual(['3']); // the unacknowledged chunk is still there
    log.squeezeHistory(false);
    log.acknowledge(4);
    expect(log.historyBytes).toBe(40);
  });

  it('discard frees every byte, and nothing is sent after it', () => {
    const log = codexLog();
    log.append('stdout', bytes(30));
    log.append('stderr', bytes(30));
    log.discard();
    expect(log.retainedBytes).toBe(0);
    expect(log.unsentBytes).toBe(0);
    expect(log.hasSendable).toBe(false);
    expect(log.recordClose()).toBe(3);
  });
});

describe('shouldReadChild', () => {
  const base = { finished: false, attached: true, unackedBytes: 0, unsentBytes: 0, windowBytes: 100, readAheadBytes: 10, memoryPressured: false };
  it('pauses every producer while the server memory budget is pressured, except a finished one (it must reach end of file)', () => {
    expect(shouldReadChild({ ...base, memoryPressured: true })).toBe(false);
    expect(shouldReadChild({ ...base, attached: false, memoryPressured: true })).toBe(false);
    expect(shouldReadChild({ ...base, finished: true, memoryPressured: true })).toBe(true);
  });
  it('reads until the window is full of unacknowledged output', () => {
    expect(shouldReadChild(base)).toBe(true);
    expect(shouldReadChild({ ...base, unackedBytes: 99 })).toBe(true);
    expect(shouldReadChild({ ...base, unackedBytes: 100 })).toBe(false);
  });
  it('while attached, reads only a little ahead of the connection; while detached, up to the window', () => {
    expect(shouldReadChild({ ...base, unackedBytes: 10, unsentBytes: 10 })).toBe(false);
    expect(shouldReadChild({ ...base, attached: false, unackedBytes: 50, unsentBytes: 50 })).toBe(true);
    expect(shouldReadChild({ ...base, attached: false, unackedBytes: 100, unsentBytes: 100 })).toBe(false);
  });
  it('always reads a finished process, so it reaches end of file', () => {
    expect(shouldReadChild({ ...base, finished: true, unackedBytes: 1000, unsentBytes: 1000 })).toBe(true);
  });
});
