/**
 * Reused output memory (src/util/byte-arena.ts) on its own and under the server's output log:
 * a block is reused only once nothing refers to it — whatever order sends, write completions,
 * acknowledgements, rewinds and evictions come in — so every byte sent or read back is the
 * byte that was produced. Fake timers for the trim; seeded property runs, bounded in count.
 */
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import { ByteArena, type ArenaTimers } from '../../../src/util/byte-arena.js';
import { OutputLog, outputParts, type OutputEntry } from '../../../src/server/output/log/output-log.js';

const KiB = 1024;
const fill = (n: number, byte: number) => Buffer.alloc(n, byte);

function fakeTimers(): ArenaTimers & { fire(): void; pending: number } {
  const timers = new Map<number, () => void>();
  let next = 1;
  return {
    setTimeout: (fn) => {
      timers.set(next, fn);
      return next++;
    },
    clearTimeout: (handle) => void timers.delete(handle as number),
    fire() {
      const fns = [...timers.values()];
      timers.clear();
      for (const fn of fns) fn();
    },
    get pending() {
      return timers.size;
    },
  };
}

describe('ByteArena', () => {
  it('copies into one block, and reuses the block once every view was released', () => {
    const arena = new ByteArena({ blockBytes: 64 * KiB, minBlockCopyBytes: 1 * KiB });
    const a = arena.copy(fill(16 * KiB, 1));
    const b = arena.copy(fill(16 * KiB, 2));
    expect(a.buffer).toBe(b.buffer);
    expect(b.byteOffset).toBe(a.byteOffset + a.length);
    expect(arena.heldBytes).toBe(64 * KiB);
    arena.release(a);
    const c = arena.copy(fill(16 * KiB, 3)); // b is still referenced: appended after it
    expect(c.byteOffset).toBe(b.byteOffset + b.length);
    expect(b.every((x) => x === 2)).toBe(true);
    arena.release(b);
    arena.release(c);
    const d = arena.copy(fill(16 * KiB, 4)); // nothing left: the same block, from its start
    expect(d.buffer).toBe(a.buffer);
    expect(d.byteOffset).toBe(0);
  });

  it('never reuses a block a retained view is in', () => {
    const arena = new ByteArena({ blockBytes: 32 * KiB, minBlockCopyBytes: 1 * KiB, keepBlocks: 4 });
    const a = arena.copy(fill(32 * KiB, 7)); // fills block 1
    arena.retain(a); // a write in progress
    arena.release(a); // the log let go of it
    const b = arena.copy(fill(32 * KiB, 8)); // block 1 is still being written: a new block
    expect(b.buffer).not.toBe(a.buffer);
    expect(a.every((x) => x === 7)).toBe(true);
    arena.release(a); // the write completed
    arena.release(b);
    const c = arena.copy(fill(32 * KiB, 9));
    expect([a.buffer, b.buffer]).toContain(c.buffer);
  });

  it('copies small and oversized pieces into ordinary Buffers, which it ignores', () => {
    const arena = new ByteArena({ blockBytes: 16 * KiB, minBlockCopyBytes: 4 * KiB });
    const small = arena.copy(fill(100, 1));
    const large = arena.copy(fill(20 * KiB, 2));
    expect(arena.heldBytes).toBe(0);
    arena.retain(small);
    arena.release(small);
    arena.release(large);
    expect(small.every((x) => x === 1) && large.every((x) => x === 2)).toBe(true);
  });

  it('merges a view with the next copy when they are adjacent', () => {
    const arena = new ByteArena({ blockBytes: 64 * KiB, minBlockCopyBytes: 1 * KiB });
    const a = arena.copy(fill(8 * KiB, 1));
    const b = arena.copy(fill(8 * KiB, 2));
    const merged = arena.extend(a, b)!;
    expect(merged.length).toBe(16 * KiB);
    expect(merged.subarray(8 * KiB).every((x) => x === 2)).toBe(true);
    arena.release(merged); // one reference for both
    const c = arena.copy(fill(8 * KiB, 3));
    expect(c.buffer).toBe(a.buffer); // the block was free again: reused from its start
    expect(c.byteOffset).toBe(0);
    const other = new ByteArena({ blockBytes: 64 * KiB, minBlockCopyBytes: 1 * KiB }).copy(fill(8 * KiB, 4));
    expect(arena.extend(c, other)).toBeNull();
  });

  it('keeps spare blocks while blocks are being taken, and gives them back once quiet', () => {
    const timers = fakeTimers();
    const onTrim = vi.fn();
    const arena = new ByteArena({ blockBytes: 16 * KiB, minBlockCopyBytes: 1 * KiB, keepBlocks: 1, trimAfterMs: 1000, timers, onTrim });
    const views = Array.from({ length: 8 }, (_, i) => arena.copy(fill(16 * KiB, i)));
    for (const v of views) arena.release(v);
    expect(arena.heldBytes).toBe(8 * 16 * KiB); // 8 spare: nothing refers to any
    expect(timers.pending).toBe(1);
    // Still streaming (a new block is taken): the timer re-arms.
    for (const v of [arena.copy(fill(16 * KiB, 9)), arena.copy(fill(16 * KiB, 10))]) arena.release(v);
    timers.fire();
    expect(onTrim).not.toHaveBeenCalled();
    expect(timers.pending).toBe(1);
    timers.fire(); // quiet for a whole period
    expect(onTrim).toHaveBeenCalledTimes(1);
    expect(arena.heldBytes).toBe(0); // nothing referred to: a quiet stream holds nothing
    const kept = arena.copy(fill(16 * KiB, 11));
    arena.squeeze(true); // memory is short: no spare blocks meanwhile
    for (const v of [arena.copy(fill(16 * KiB, 12)), arena.copy(fill(16 * KiB, 13))]) arena.release(v);
    expect(arena.heldBytes).toBe(16 * KiB); // the block of `kept` alone
    expect(kept.every((x) => x === 11)).toBe(true);
    arena.dispose();
    expect(arena.heldBytes).toBe(0);
    expect(timers.pending).toBe(0);
  });
});

/**
 * The output log over an arena, driven by random operations the way a session drives it:
 * reads of random sizes appended, entries sent (their pieces retained until a simulated
 * socket write completes, in any order),
 * acknowledgements, lost connections (rewind) and process/read. Every byte sent or read back
 * must be the byte produced at that position. (Node may run a failed write's callback twice:
 * the connection releases once — test/chaos/lossless.test.ts caught the double release.)
 */
describe('OutputLog over a ByteArena', () => {
  it('every byte sent or read is the byte produced, whatever the order (property)', () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant('read' as const), size: fc.integer({ min: 1, max: 40 * KiB }) }),
      fc.record({ kind: fc.constant('send' as const) }),
      fc.record({ kind: fc.constant('complete' as const), which: fc.nat() }),
      fc.record({ kind: fc.constant('ack' as const), back: fc.nat({ max: 3 }) }),
      fc.record({ kind: fc.constant('rewind' as const) }),
      fc.record({ kind: fc.constant('readBack' as const), back: fc.nat({ max: 5 }) }),
    );
    fc.assert(
      fc.property(fc.array(op, { minLength: 20, maxLength: 300 }), (ops) => {
        const arena = new ByteArena({ blockBytes: 64 * KiB, minBlockCopyBytes: 2 * KiB, keepBlocks: 2, timers: fakeTimers() });
        const log = new OutputLog({ windowBytes: 1 << 30, retentionBytes: 48 * KiB, maxChunkBytes: 96 * KiB, clientAcks: true, memory: arena });
        const produced: number[] = []; // the byte at each output position (a counter mod 251)
        const startOf = new Map<number, number>(); // seq -> position of its first byte
        let position = 0;
        const inFlight: { parts: Buffer[]; seq: number }[] = [];
        const check = (seq: number, data: Buffer) => {
          const start = startOf.get(seq)!;
          for (let i = 0; i < data.length; i += 997) expect(data[i]).toBe(produced[start + i]);
          expect(data[data.length - 1]).toBe(produced[start + data.length - 1]);
        };
        for (const o of ops) {
          switch (o.kind) {
            case 'read': {
              const chunk = Buffer.alloc(o.size);
              for (let i = 0; i < o.size; i++) chunk[i] = produced[position + i] = (position + i) % 251;
              const before = log.next;
              log.append('stdout', arena.copy(chunk));
              if (log.next !== before) startOf.set(before, position); // a new entry (else appended)
              position += o.size;
              break;
            }
            case 'send': {
              const e = log.takeNext(false) as OutputEntry | undefined;
              if (!e) break;
              const parts = [...outputParts(e)];
              for (const p of parts) arena.retain(p);
              inFlight.push({ parts, seq: e.seq });
              break;
            }
            case 'complete': {
              if (inFlight.length === 0) break;
              const w = inFlight.splice(o.which % inFlight.length, 1)[0]!;
              check(w.seq, Buffer.concat(w.parts)); // what the socket wrote, as it writes it
              for (const p of w.parts) arena.release(p);
              break;
            }
            case 'ack':
              log.acknowledge(Math.max(0, log.sentSeq - o.back));
              break;
            case 'rewind':
              log.rewind();
              break;
            case 'readBack': {
              const answer = log.read(Math.max(0, log.ackedSeq - o.back), null, 1 << 30);
              for (const c of answer.chunks) check(c.seq, c.data);
              break;
            }
          }
          for (const w of inFlight) check(w.seq, Buffer.concat(w.parts));
        }
      }),
      { seed: 20261122, numRuns: 60 },
    );
  });
});
