/**
 * `--keep-last` across a restart (restart adoption): the gaps a server told are kept beside its
 * spill (src/server/restart/spill-files.ts, the file `gaps`) before anything of a dropped chunk
 * leaves the spill or the keeper, and a successor's restored log (OutputLog.restore) tells the
 * same gaps, with the same seqs and bytes, sends exactly what was not dropped, and goes on
 * dropping past its keep-last size, the new drops continuing the gap it told. The keeper is a
 * model of native/kept.c's mark/drop bookkeeping on stream 1 (as in process-kept.test.ts).
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { KeptChild, KeptDump } from '../../../../src/server/backend/index.js';
import { keeperObserver, OutputLog } from '../../../../src/server/output/index.js';
import type { OutputLogOptions } from '../../../../src/server/output/log/output-log.js';
import { DiskQuota } from '../../../../src/server/restart/disk-quota.js';
import { restoreState } from '../../../../src/server/restart/process-kept.js';
import { SpillFiles } from '../../../../src/server/restart/spill-files.js';

/** What kept.c does: retains every byte read, frees below the newest mark at or before a dropped seq. */
class KeeperModel {
  private base = 0;
  private data = Buffer.alloc(0);
  private marks: Array<{ seq: number; end: number }> = [];
  droppedSeq = 0;
  /** Drops sent to it are lost (its server was killed with them in flight). */
  deaf = false;

  read(bytes: Buffer): void {
    this.data = Buffer.concat([this.data, bytes]);
  }
  mark(seq: number, end: number): void {
    this.marks.push({ seq, end });
  }
  drop(seq: number): void {
    if (this.deaf || seq <= this.droppedSeq) return;
    this.droppedSeq = seq;
    const covered = this.marks.filter((m) => m.seq <= seq);
    const last = covered[covered.length - 1];
    if (last && last.end > this.base) {
      this.data = this.data.subarray(last.end - this.base);
      this.base = last.end;
    }
    this.marks = this.marks.filter((m) => m.seq > seq);
  }
  get kept(): KeptChild {
    return {
      stdin: null,
      mark: (seq, _stream, end) => this.mark(seq, end),
      markEvent: () => {},
      drop: (seq) => this.drop(seq),
      release: () => {},
      handOver: () => {},
      socketPath: '/nowhere/k.sock',
    };
  }
  /** What a successor adopting it gets. */
  dump(): KeptDump {
    return {
      meta: Buffer.from('{}'),
      streams: { 1: { base: this.base, data: this.data }, 2: { base: 0, data: Buffer.alloc(0) } },
      marks: this.marks.map((m) => ({ seq: m.seq, stream: 1 as const, end: m.end })),
      exited: null,
      droppedSeq: this.droppedSeq,
      ids: [],
    };
  }
}

const piece = (i: number) => Buffer.from(`<${String(i).padStart(6, '0')}>`); // 8 bytes: one chunk each
const opts = (keeper: KeeperModel, spill: SpillFiles): OutputLogOptions => ({
  windowBytes: 32,
  retentionBytes: 0,
  maxChunkBytes: 8,
  clientAcks: true,
  keepLastBytes: 48,
  spill,
  observer: keeperObserver(() => keeper.kept),
});

let dir = '';
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'tkl-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const account = () => new DiskQuota({ totalBytes: 1 << 20, sessionBytes: 1 << 20 }).account('owner', 'session');

/** A first server's log of a keep-last process, its keeper and spill, after `count` pieces; the client delivered `delivered`. */
function firstServer(count: number, delivered: number) {
  const keeper = new KeeperModel();
  const spill = SpillFiles.create(join(dir, 'spill'), account(), 64);
  const log = new OutputLog(opts(keeper, spill));
  const write = (i: number) => {
    keeper.read(piece(i));
    log.append('stdout', piece(i));
  };
  for (let i = 1; i <= 4; i++) write(i);
  // The client is there for a while: it gets (and acknowledges) the first seqs, then goes.
  for (let i = 1; i <= delivered; i++) expect(log.takeNext()?.seq).toBe(i);
  log.acknowledge(delivered);
  log.rewind();
  for (let i = 5; i <= count; i++) write(i);
  return { keeper, spill, log, write };
}

describe('keep-last gaps across a restart', () => {
  it("a successor's log tells the gap its predecessor had (same seqs, same bytes), sends every byte after it, and its own drops continue it", () => {
    const first = firstServer(40, 2);
    const told = first.log.pendingGaps.map((g) => ({ ...g }));
    expect(told).toEqual([{ first: 3, last: told[0]!.last, bytes: (told[0]!.last - 2) * 8 }]);
    const unsent: number[] = [];
    // kill -9: nothing more of the first server; a successor reopens the spill and adopts the keeper.
    const spill = SpillFiles.reopen(join(dir, 'spill'), account(), first.keeper.droppedSeq, 64);
    expect(spill.gaps()).toEqual(told);
    const log = OutputLog.restore(opts(first.keeper, spill), restoreState(first.keeper.dump(), false, spill.records(), spill.gaps()));
    expect(log.pendingGaps).toEqual(told);
    expect(log.unackedBytes).toBe(first.log.unackedBytes);

    // The client resumes having delivered 2: the gap first, then every byte after it, exact.
    log.skipTo(2);
    expect(log.takeGap()).toEqual(told[0]);
    for (let e = log.takeNext(); e; e = log.takeNext()) {
      if (e.kind !== 'output') continue;
      expect(e.data).toEqual(piece(e.seq));
      unsent.push(e.seq);
    }
    expect(unsent).toEqual(Array.from({ length: 40 - told[0]!.last }, (_, i) => told[0]!.last + 1 + i));

    // While the client is away again, the successor drops as its predecessor did: the same gap, longer.
    log.rewind();
    for (let i = 41; i <= 60; i++) {
      first.keeper.read(piece(i));
      log.append('stdout', piece(i));
    }
    const [gap] = log.pendingGaps;
    expect(gap!.first).toBe(3);
    expect(gap!.bytes).toBe((gap!.last - 2) * 8);
    expect(60 - gap!.last).toBe(48 / 8); // exactly keep-last's bytes are kept
    // And a successor of the successor reads the longer gap back.
    expect(SpillFiles.reopen(join(dir, 'spill'), account(), first.keeper.droppedSeq, 64).gaps()).toEqual([gap]);
  });

  it('chunks of the gap that the keeper or the spill still holds (drops that never reached the keeper) are not sent again', () => {
    const first = firstServer(20, 0);
    const droppedBefore = first.keeper.droppedSeq;
    // The server is killed with its last drops in flight: the keeper never hears of them.
    first.keeper.deaf = true;
    for (let i = 21; i <= 30; i++) first.write(i);
    const [gap] = first.log.pendingGaps;
    expect(first.keeper.droppedSeq).toBe(droppedBefore);
    expect(gap!.last).toBeGreaterThan(droppedBefore);
    first.keeper.deaf = false;
    const spill = SpillFiles.reopen(join(dir, 'spill'), account(), first.keeper.droppedSeq, 64);
    const log = OutputLog.restore(opts(first.keeper, spill), restoreState(first.keeper.dump(), false, spill.records(), spill.gaps()));
    // The successor tells the keeper to let go of them now (and of what its restore spilled).
    expect(first.keeper.droppedSeq).toBeGreaterThanOrEqual(gap!.last);
    expect(log.takeGap()).toEqual(gap);
    const sent: number[] = [];
    for (let e = log.takeNext(); e; e = log.takeNext()) {
      if (e.kind === 'output') expect(e.data).toEqual(piece(e.seq));
      sent.push(e.seq);
    }
    expect(sent).toEqual(Array.from({ length: 30 - gap!.last }, (_, i) => gap!.last + 1 + i));
  });

  it('no gaps file (a predecessor without --keep-last, or an older one) restores as before; a bad one is refused, saying why', () => {
    const none = SpillFiles.reopen(join(dir, 'nothing'), account(), 0, 64);
    expect(none.gaps()).toEqual([]);
    const header = (count: number, ...gaps: number[][]) => {
      const b = Buffer.alloc(8 + gaps.length * 24);
      b.writeUInt32LE(count, 0);
      gaps.forEach(([f, l, n], i) => {
        b.writeDoubleLE(f!, 8 + i * 24);
        b.writeDoubleLE(l!, 16 + i * 24);
        b.writeDoubleLE(n!, 24 + i * 24);
      });
      return b;
    };
    const bad: Record<string, Buffer> = {
      short: Buffer.alloc(3),
      overcount: header(2, [1, 2, 16]),
      backwards: header(1, [5, 4, 8]),
      overlapping: header(2, [1, 5, 40], [5, 6, 16]),
      fraction: header(1, [1.5, 2, 8]),
      negative: header(1, [1, 2, -8]),
    };
    for (const [name, bytes] of Object.entries(bad)) {
      const where = join(dir, name);
      mkdirSync(where);
      writeFileSync(join(where, 'gaps'), bytes);
      expect(() => SpillFiles.reopen(where, account(), 100, 64), name).toThrow(/keep-last gaps are not valid/);
    }
    // A count that says where a longer older list ended is read as the count says.
    const where = join(dir, 'trailing');
    mkdirSync(where);
    writeFileSync(join(where, 'gaps'), Buffer.concat([header(1, [3, 9, 56]), Buffer.alloc(24, 0xff)]));
    expect(SpillFiles.reopen(where, account(), 100, 64).gaps()).toEqual([{ first: 3, last: 9, bytes: 56 }]);
  });
});
