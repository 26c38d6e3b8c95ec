/**
 * An OutputSpill held in memory, for the output log's unit tests: what it takes, by seq, read
 * back and freed as the log asks. `refuse` makes it take nothing (a quota, ENOSPC).
 */
import { expect } from 'vitest';
import type { OutputSpill, SpillRefusal } from '../../src/server/output/index.js';
import type { OutputStream } from '../../src/protocol/index.js';

export class MemorySpill implements OutputSpill {
  readonly chunks = new Map<number, Buffer>();
  /** How many chunks it took. */
  appends = 0;
  /** The newest seq it took (0: none yet). */
  last = 0;
  refuse: SpillRefusal | null = null;
  closed = false;

  /** `inOrder`: each seq appended must be above the last (an expectation of the test). */
  constructor(private readonly check: { inOrder?: boolean } = {}) {}

  append(seq: number, _stream: OutputStream, data: Buffer): SpillRefusal | null {
    if (this.refuse) return this.refuse;
    if (this.check.inOrder) expect(seq).toBeGreaterThan(this.last);
    this.last = seq;
    this.appends++;
    this.chunks.set(seq, Buffer.from(data));
    return null;
  }
  read(seq: number, bytes: number): Buffer {
    const data = this.chunks.get(seq);
    if (!data || data.length !== bytes) throw new Error(`no chunk ${seq}`);
    return Buffer.from(data);
  }
  freeThrough(seq: number): void {
    for (const s of [...this.chunks.keys()]) if (s <= seq) this.chunks.delete(s);
  }
  get bytes(): number {
    let n = 0;
    for (const c of this.chunks.values()) n += c.length;
    return n;
  }
  close(): void {
    this.closed = true;
    this.chunks.clear();
  }
}
