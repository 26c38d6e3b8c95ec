/**
 * The server's output log on its own (src/server/output-log.ts): numbering, retention,
 * what may be evicted, `process/read` answers, and the decision to stop reading a child.
 */
import { describe, expect, it } from 'vitest';
import { OutputLog, shouldPauseReading } from '../src/server/output-log.js';

const bytes = (n: number, fill = 'x') => Buffer.alloc(n, fill);

describe('OutputLog', () => {
  it('numbers output and events from one sequence', () => {
    const log = new OutputLog(1024);
    expect(log.append('stdout', bytes(3)).seq).toBe(1);
    expect(log.append('stderr', bytes(3)).seq).toBe(2);
    expect(log.takeSeq()).toBe(3); // exit
    expect(log.takeSeq()).toBe(4); // close
    expect(log.next).toBe(5);
    expect(log.read(0, null)).toMatchObject({ nextSeq: 5, chunks: [{ seq: 1, stream: 'stdout' }, { seq: 2, stream: 'stderr' }] });
  });

  it('evicts delivered output beyond retention, oldest first, and never unsent or in-flight output', () => {
    const log = new OutputLog(100);
    const a = log.append('stdout', bytes(60));
    log.written(a, true);
    const b = log.append('stdout', bytes(60)); // over retention: a (delivered) goes
    expect(log.retainedBytes).toBe(60);
    log.unsent(b);
    const c = log.append('stdout', bytes(60));
    log.unsent(c);
    expect(log.retainedBytes).toBe(120); // both unsent: kept beyond retention
    expect(log.unsentBytes).toBe(120);
    const r = log.read(0, null);
    expect(r.chunks.map((x) => x.seq)).toEqual([2, 3]); // a reader sees the gap at 1
    expect(log.unsentBytes).toBe(0); // read back = delivered
    expect(log.retainedBytes).toBe(60);
  });

  it('does not evict a chunk whose socket died with it queued', () => {
    const log = new OutputLog(10);
    const a = log.append('stdout', bytes(20));
    log.written(a, false);
    log.append('stdout', bytes(20));
    expect(log.read(0, null).chunks[0]!.seq).toBe(1);
  });

  it('limits a read to maxBytes without splitting chunks, returning at least one', () => {
    const log = new OutputLog(1 << 20);
    for (let i = 0; i < 4; i++) log.append('stdout', bytes(10));
    expect(log.read(0, 25)).toMatchObject({ nextSeq: 3, chunks: [{ seq: 1 }, { seq: 2 }] });
    expect(log.read(0, 5)).toMatchObject({ nextSeq: 2, chunks: [{ seq: 1 }] });
    expect(log.read(2, 100)).toMatchObject({ nextSeq: 5, chunks: [{ seq: 3 }, { seq: 4 }] });
    expect(log.read(4, 100)).toEqual({ nextSeq: 5, chunks: [] });
  });

  it('pauses reading while backpressured, or while retention is full of unsent output', () => {
    const base = { finished: false, backpressured: false, unsentBytes: 0, retainedBytes: 0, retentionBytes: 100 };
    expect(shouldPauseReading(base)).toBe(false);
    expect(shouldPauseReading({ ...base, backpressured: true })).toBe(true);
    expect(shouldPauseReading({ ...base, unsentBytes: 1, retainedBytes: 100 })).toBe(true);
    expect(shouldPauseReading({ ...base, unsentBytes: 0, retainedBytes: 500 })).toBe(false);
    expect(shouldPauseReading({ ...base, backpressured: true, finished: true })).toBe(false);
  });
});
