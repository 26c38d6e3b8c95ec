/**
 * A process a successor adopted from its kept keeper (src/server/restart/process-kept.ts): the
 * keeper hears of every chunk the rebuilt log spills, from the restore itself on. A predecessor
 * killed -9 between spilling chunks and telling the keeper to drop them (and a keeper that read
 * on meanwhile) leaves the keeper retaining more than the window; the restore spills the
 * excess, and unless the keeper is told, it keeps a copy the server no longer holds in memory,
 * sits at its cap with everything forwarded, and the child blocks for good while no client
 * acknowledges. The keeper here is a model of native/kept.c's mark/drop bookkeeping.
 */
import { describe, expect, it, vi } from 'vitest';
import type { AdoptedChild, KeptChild, KeptDump, SpawnedChild } from '../../../../src/server/backend/index.js';
import type { SpawnSpec } from '../../../../src/server/output/index.js';
import type { ProcessHost } from '../../../../src/server/output/process.js';
import { adoptProcess } from '../../../../src/server/restart/process-kept.js';
import { MemorySpill } from '../../../helpers/memory-spill.js';

/** What kept.c does with `mark` and `drop` on stream 1: frees below the newest mark at or before a dropped seq. */
class KeeperModel {
  readonly lines: string[] = [];
  constructor(
    private base: number,
    private readonly end: number,
    private marks: Array<{ seq: number; end: number }>,
  ) {}
  get retained(): number {
    return this.end - this.base;
  }
  mark(seq: number, stream: 1 | 2, end: number): void {
    this.lines.push(`mark ${seq} ${stream} ${end}`);
    this.marks.push({ seq, end });
  }
  drop(seq: number): void {
    this.lines.push(`drop ${seq}`);
    const covered = this.marks.filter((m) => m.seq <= seq);
    const last = covered[covered.length - 1];
    if (last && last.end > this.base) this.base = last.end;
    this.marks = this.marks.filter((m) => m.seq > seq);
  }
}

describe('adoptProcess', () => {
  it('a restore that spills (its keeper retained more than the window) marks and drops each spilled chunk at the keeper: its copy is what memory holds, nothing twice', () => {
    // The predecessor exposed seqs 1-5 (10 bytes each) and was killed before any drop; its keeper
    // read on to 150 bytes. The window is 100: the successor's restore spills.
    const data = Buffer.from(Array.from({ length: 150 }, (_, i) => 'abcdefghijklmnopqrstuvwxyz'.charCodeAt(i % 26)));
    const marks = [1, 2, 3, 4, 5].map((seq) => ({ seq, stream: 1 as const, end: seq * 10 }));
    const dump: KeptDump = {
      meta: Buffer.from('{}'),
      streams: { 1: { base: 0, data }, 2: { base: 0, data: Buffer.alloc(0) } },
      marks,
      exited: null,
      droppedSeq: 0,
      ids: [],
    };
    const keeper = new KeeperModel(0, 150, marks.map(({ seq, end }) => ({ seq, end })));
    const kept: KeptChild = {
      stdin: null,
      mark: (seq, stream, end) => keeper.mark(seq, stream, end),
      markEvent: () => {},
      drop: (seq) => keeper.drop(seq),
      release: () => {},
      handOver: () => {},
      socketPath: '/nowhere/k.sock',
    };
    const child: SpawnedChild = {
      pid: 4242,
      stdin: null,
      setReading: vi.fn(),
      signal: () => {},
      killTree: () => {},
      killTreeSync: () => {},
      resize: () => {},
      alive: true,
      whenGone: new Promise<void>(() => {}),
      kept,
    };
    const adopted: AdoptedChild = { child, dump, bind: () => {}, begin: () => {} };
    const spill = new MemorySpill();
    const spec: SpawnSpec = {
      processId: 'p',
      argv: ['seq'],
      cwd: '/',
      env: {},
      tty: false,
      pipeStdin: false,
      limits: { windowBytes: 100, retentionBytes: 30, readAheadBytes: 1000, maxChunkBytes: 10, readCapBytes: 1000 },
      clientAcks: true,
      spill,
    };
    const host: ProcessHost = { attached: false, outputReady: () => {}, processClosed: () => {}, processDone: () => {} };

    adoptProcess(spec, host, adopted);

    // Seqs 1-5 come back with their seqs, the 100 bytes after them are seqs 6-15; at the
    // window the oldest go to the spill: seqs 1-6. Seq 6 is new: marked before it is dropped.
    expect([...spill.chunks.keys()]).toEqual([1, 2, 3, 4, 5, 6]);
    expect(keeper.lines).toEqual(['drop 1', 'drop 2', 'drop 3', 'drop 4', 'drop 5', 'mark 6 1 60', 'drop 6']);
    // The keeper lets go of exactly what is on disk and keeps what memory holds (under the
    // window): it has room under its cap to read on.
    expect(keeper.retained).toBe(150 - spill.bytes);
    expect(keeper.retained).toBeLessThan(spec.limits.windowBytes);
    // Every byte once: what is on disk and what the keeper keeps are the whole output, in order.
    const onDisk = Buffer.concat([...spill.chunks.values()]);
    expect(Buffer.concat([onDisk, data.subarray(150 - keeper.retained)])).toEqual(data);
    // Below the window, the child is read.
    expect(child.setReading).toHaveBeenLastCalledWith(true);
  });
});
