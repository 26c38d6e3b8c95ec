/**
 * The writeIds a process has taken (`process/write`), so a write re-sent after a reconnect
 * is answered 'accepted' without writing it twice. Bounded: at least the last `keep` are
 * remembered (docs/protocol.md, "What tether adds to these": the last 4096); past twice that,
 * the oldest half is forgotten at once. Pure.
 */

/** Remembered writeIds per process. */
export const WRITE_ID_MEMORY = 4096;

export class WriteIds {
  private readonly ids = new Set<string>();

  constructor(private readonly keep = WRITE_ID_MEMORY) {}

  has(id: string): boolean {
    return this.ids.has(id);
  }

  add(id: string): void {
    this.ids.add(id);
    if (this.ids.size <= this.keep * 2) return;
    // Forget the oldest half at once (Sets iterate in insertion order).
    let drop = this.keep;
    for (const old of this.ids) {
      if (drop-- <= 0) break;
      this.ids.delete(old);
    }
  }

  get size(): number {
    return this.ids.size;
  }
}
