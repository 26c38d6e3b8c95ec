/**
 * A session's `binaryOutput` handles (extension `binaryOutput`): which process each handle
 * stands for (null while its start is in flight), and the next one to give — a cursor a
 * successor server restores from the session record (restart adoption). Pure.
 */

/** Handles are u32, never 0 (0 is "no handle"). */
const MAX_HANDLE = 0xffff_ffff;

export class HandleTable<P> {
  private readonly handles = new Map<number, P | null>();
  private next = 1;

  /** The next handle it would give (the session record's `nextHandle`). */
  get cursor(): number {
    return this.next;
  }

  /** Gives handles from `cursor` on (a session rebuilt from its record). */
  restoreCursor(cursor: number): void {
    this.next = cursor >= 1 && cursor <= MAX_HANDLE ? cursor : 1;
  }

  get(handle: number): P | null | undefined {
    return this.handles.get(handle);
  }

  /**
   * Reserves a handle for a process being started: the one the client asked for, or the next
   * free one. Returns a refusal sentence when `requested` is in use.
   */
  claim(requested: number | null | undefined): number | string {
    if (requested !== undefined && requested !== null) {
      if (this.handles.has(requested)) return `handle ${requested} is already in use in this session`;
      this.handles.set(requested, null);
      return requested;
    }
    while (this.handles.has(this.next)) this.next = this.next >= MAX_HANDLE ? 1 : this.next + 1;
    const handle = this.next;
    this.next = handle >= MAX_HANDLE ? 1 : handle + 1;
    this.handles.set(handle, null);
    return handle;
  }

  /** The start holding `handle` is settled: bind it to `proc`, or (null: the start failed) free it. */
  bind(handle: number, proc: P | null): void {
    if (proc) this.handles.set(handle, proc);
    else this.handles.delete(handle);
  }

  /** `proc` is gone: its handle is free again (if it still stands for it). */
  release(handle: number, proc: P): void {
    if (handle !== 0 && this.handles.get(handle) === proc) this.handles.delete(handle);
  }
}
