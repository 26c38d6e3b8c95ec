/**
 * Server-wide caps on what fs requests hold from the OS: operations in flight at once (each
 * may hold a descriptor while it works) and file handles open at once across all sessions,
 * so no client can take the descriptors the server needs for its sockets and children.
 */
import { invalidRequest } from '../../protocol/index.js';

/** At most `max` operations run at once; the rest wait their turn, first come first served. */
export class Limiter {
  private running = 0;
  private readonly queue: Array<() => void> = [];

  constructor(readonly max: number) {}

  async run<T>(operation: () => Promise<T>): Promise<T> {
    if (this.running >= this.max) await new Promise<void>((resolve) => this.queue.push(resolve));
    else this.running++;
    try {
      return await operation();
    } finally {
      const next = this.queue.shift();
      if (next) next();
      else this.running--;
    }
  }
}

/** Open file handles across the server. */
export class OpenFileCount {
  private open = 0;

  constructor(readonly max: number) {}

  /** Takes a slot or refuses with a -32600 that names the limit. */
  take(): void {
    if (this.open >= this.max) {
      throw invalidRequest(`too many open files on this server: at most ${this.max} file handles are open at once across all sessions (--max-open-files)`);
    }
    this.open++;
  }

  give(): void {
    this.open = Math.max(0, this.open - 1);
  }

  get count(): number {
    return this.open;
  }
}
