/**
 * The process trees tied to a session (session.ts): every process it lists, and those whose
 * keeper still runs — the command, or something it started that outlived it (a daemon, a
 * background job) — after they left the list. They all die with the session (no orphans).
 */
import type { ManagedProcess } from '../output/index.js';
import { settleWithin } from '../../util/timeouts.js';

export class ProcessTrees {
  /** Processes whose keeper still runs, listed or not. */
  private readonly kept = new Set<ManagedProcess>();

  /** `processes`: the session's list of processes. */
  constructor(private readonly processes: ReadonlyMap<string, ManagedProcess>) {}

  /** Keeps `proc`'s process tree tied to the session until everything in it is gone. */
  track(proc: ManagedProcess): void {
    if (!proc.keeperAlive) return;
    this.kept.add(proc);
    void proc.whenGone.then(() => this.kept.delete(proc));
  }

  /** Every process listed, and every one whose tree still runs. */
  get every(): Set<ManagedProcess> {
    return new Set([...this.processes.values(), ...this.kept]);
  }

  /** Synchronous last resort (the server process is exiting): every process tree is told to die (kept ones only with `evenKept`). */
  killAllSync(evenKept: boolean): void {
    for (const proc of this.every) proc.killTreeSync(evenKept);
  }

  /** Resolves when every process has closed and every process tree is gone, bounded by `timeoutMs`. */
  async waitAllClosed(timeoutMs: number): Promise<void> {
    await settleWithin(Promise.all([...this.every].map((p) => Promise.all([p.whenClosed, p.whenGone]))), timeoutMs);
  }
}
