/**
 * Where a stream's bytes live while they wait (the server's output until the client
 * acknowledges it; the client's output until its local sink took it): a few large blocks,
 * reused, instead of one fresh Buffer per socket read.
 *
 * Why: every Buffer Node allocates for a read is "external" memory to V8, and output that
 * waits (up to the window: 8 MiB) outlives young-generation collections. V8 then runs a full
 * mark-compact every few tens of MiB streamed; on a streaming server that was over half its
 * CPU. Bytes copied into reused blocks allocate nothing per read: a memcpy instead of an
 * allocation and its collection.
 *
 * - `copy` takes bytes that need not outlive the call (a shared read buffer) and returns a
 *   view into a block, counted as one reference to it;
 * - `retain`/`release` count further holders (a socket write in progress) and drop them; a
 *   block whose last reference is released is reused. Release exactly once per reference;
 * - `extend` merges a view with the one copied right after it (one chunk, two reads) into
 *   one view and one reference;
 * - views of other memory (small copies go to ordinary Buffers: a block per chattering
 *   terminal would waste more than it saves) are ignored by all of these;
 * - released blocks are kept for reuse, as many as were in use at once; once no block was
 *   taken for `trimAfterMs` every spare block is left to the collector (`onTrim` says so):
 *   a block nothing refers to is never held for long, so a quiet stream holds only what it
 *   still refers to;
 * - `squeeze(true)` (the owner's memory is short) gives every spare block back at once and
 *   keeps none until `squeeze(false)`.
 *
 * One arena per process: blocks are never shared between processes, so whatever a stale view
 * could show is that process's own output, to its own session.
 */

interface Block {
  readonly memory: Buffer;
  /** Bytes handed out from the start of the block. */
  used: number;
  /** Views handed out and not released, plus retains. */
  refs: number;
}

/** The timers the arena uses (injectable for tests). */
export interface ArenaTimers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface ByteArenaOptions {
  /** Size of one block (a larger copy goes to an ordinary Buffer). */
  blockBytes: number;
  /** Copies smaller than this go to ordinary Buffers. */
  minBlockCopyBytes: number;
  /** Released blocks kept for reuse while streaming, at least (more if more were in use at once). */
  keepBlocks: number;
  /** No block taken for this long: the spare blocks are let go. */
  trimAfterMs: number;
  timers: ArenaTimers;
  /** Called after a trim (the owner may account for the memory given back). */
  onTrim?: () => void;
}

const realTimers: ArenaTimers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

export const DEFAULT_ARENA_OPTIONS: ByteArenaOptions = {
  blockBytes: 256 * 1024,
  minBlockCopyBytes: 4 * 1024,
  keepBlocks: 4,
  trimAfterMs: 2_000,
  timers: realTimers,
};

export class ByteArena {
  private readonly options: ByteArenaOptions;
  private readonly blocks = new Map<ArrayBufferLike, Block>();
  private current: Block | null = null;
  private spare: Buffer[] = [];
  private disposed = false;
  /** Most blocks in use at once since the last trim: how many released ones are worth keeping. */
  private peakInUse = 0;
  /** Blocks taken so far: the measure of activity the trim timer looks at. */
  private taken = 0;
  private trimTimer: unknown = null;
  private squeezed = false;

  constructor(options: Partial<ByteArenaOptions> = {}) {
    this.options = { ...DEFAULT_ARENA_OPTIONS, ...options };
  }

  /** A copy of `bytes` the caller owns (one reference, if it is in a block). */
  copy(bytes: Uint8Array): Buffer {
    const n = bytes.length;
    if (n < this.options.minBlockCopyBytes || n > this.options.blockBytes || this.disposed) return Buffer.from(bytes);
    let block = this.current;
    if (!block || block.used + n > this.options.blockBytes) block = this.current = this.newBlock();
    block.memory.set(bytes, block.used);
    const view = block.memory.subarray(block.used, block.used + n);
    block.used += n;
    block.refs++;
    return view;
  }

  /**
   * The most bytes worth copying in one piece now: what is left of the block being filled
   * (so no block is left part empty when a read does not fit), or a whole block.
   */
  get fits(): number {
    const room = this.current ? this.options.blockBytes - this.current.used : 0;
    return room >= this.options.minBlockCopyBytes ? room : this.options.blockBytes;
  }

  /**
   * `first` and `second` (copied right after it, each one reference) as one view and one
   * reference, if they are adjacent in one block; else null (both stay as they were).
   */
  extend(first: Buffer, second: Buffer): Buffer | null {
    const block = this.blocks.get(first.buffer);
    if (!block || second.buffer !== first.buffer || first.byteOffset + first.length !== second.byteOffset) return null;
    block.refs--;
    const start = first.byteOffset - block.memory.byteOffset;
    return block.memory.subarray(start, start + first.length + second.length);
  }

  /** One more holder of `view` (a write in progress). */
  retain(view: Buffer): void {
    const block = this.blocks.get(view.buffer);
    if (block) block.refs++;
  }

  /** A holder of `view` let go of it. */
  release(view: Buffer): void {
    const block = this.blocks.get(view.buffer);
    if (!block) return;
    if (--block.refs > 0) return;
    // Nothing refers to it: a spare block (taken again from its start), even the one being
    // filled — a process whose output is all acknowledged holds no block.
    if (block === this.current) this.current = null;
    this.recycle(block);
  }

  /** `release` for each of `views`. */
  releaseAll(views: readonly Buffer[]): void {
    for (const view of views) this.release(view);
  }

  /** Memory is short (or no longer): keep no spare block meanwhile. */
  squeeze(squeezed: boolean): void {
    this.squeezed = squeezed;
    if (squeezed) this.trim();
  }

  /** Memory held in blocks (in use, being filled, kept for reuse). */
  get heldBytes(): number {
    return (this.blocks.size + this.spare.length) * this.options.blockBytes;
  }

  /**
   * The owner is gone: nothing is reused any more (a write still in progress keeps its block
   * alive until it completes; then the collector takes it).
   */
  dispose(): void {
    this.disposed = true;
    this.blocks.clear();
    this.spare = [];
    this.current = null;
    if (this.trimTimer !== null) this.options.timers.clearTimeout(this.trimTimer);
    this.trimTimer = null;
  }

  private newBlock(): Block {
    this.taken++;
    const memory = this.spare.pop() ?? Buffer.allocUnsafeSlow(this.options.blockBytes);
    const block: Block = { memory, used: 0, refs: 0 };
    this.blocks.set(memory.buffer, block);
    if (this.blocks.size > this.peakInUse) this.peakInUse = this.blocks.size;
    return block;
  }

  private recycle(block: Block): void {
    this.blocks.delete(block.memory.buffer);
    // Kept for reuse: as many as were in use at once since the last trim (a streaming process
    // cycles through about a window's worth, released in bursts as acks come), at least a few.
    if (this.squeezed || this.spare.length >= Math.max(this.options.keepBlocks, this.peakInUse)) return;
    this.spare.push(block.memory);
    if (this.trimTimer === null) this.armTrim();
  }

  /** Lets go of every spare block. */
  private trim(): void {
    this.spare = [];
    this.peakInUse = this.blocks.size;
  }

  /** One timer at most, re-armed while blocks are being taken. */
  private armTrim(): void {
    const takenBefore = this.taken;
    this.trimTimer = this.options.timers.setTimeout(() => {
      this.trimTimer = null;
      if (this.disposed) return;
      if (this.taken !== takenBefore) {
        if (this.spare.length > 0) this.armTrim();
        return;
      }
      this.trim();
      this.options.onTrim?.();
    }, this.options.trimAfterMs);
  }
}
