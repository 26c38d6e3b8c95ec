/**
 * Whether one process's child is read (read-decision.ts applied to its output log), how long
 * it was not (pause-clock.ts), and what its output holds under the server's memory budget
 * (held-output.ts), its history and spare blocks squeezed while the budget is past its pause
 * mark. ManagedProcess (process.ts) tells it every change of its log.
 */
import type { ByteArena } from '../../util/byte-arena.js';
import { HeldOutput } from './held-output.js';
import type { MemoryBudget } from '../memory/index.js';
import type { OutputLog } from './log/output-log.js';
import { PauseClock } from './pause-clock.js';
import type { OutputLimits } from './process-spec.js';
import { shouldReadChild } from './read-decision.js';
import type { SpillRefusal } from './log/output-spill.js';

/** Why a child's output is not read (see `OutputFlow.pauseReason`). */
export type PauseReason = 'memory' | 'output-window' | 'read-ahead' | SpillRefusal;

/** What of the process the decision depends on. */
export interface FlowState {
  /** The process is being removed: what it holds is no longer counted. */
  readonly released: boolean;
  /** Exited and closed, or released: nothing more to read. */
  readonly finished: boolean;
  /** Its session has a connection. */
  readonly attached: boolean;
  /** Whether the budget holds its session back now (its fair share); undefined: the budget's pressure decides. */
  readonly heldBack: boolean | undefined;
}

export class OutputFlow {
  private readonly held: HeldOutput;
  /** Whether its output is read (its streams start paused), and how long not. */
  private readonly clock = new PauseClock();

  constructor(
    private readonly log: OutputLog,
    private readonly arena: ByteArena,
    private readonly limits: OutputLimits,
    budget: MemoryBudget | undefined,
    /** What its output holds changed by `delta` bytes (reported to its session). */
    report: (delta: number) => void,
  ) {
    this.held = new HeldOutput(budget, report);
    if (this.held.pressured) this.squeeze();
  }

  /** The budget crossed its pause mark (either way): acknowledged history and spare blocks are kept, or not. */
  squeeze(): void {
    const pressured = this.held.pressured;
    this.log.squeezeHistory(pressured);
    this.arena.squeeze(pressured);
  }

  /** Counts what the log holds and decides whether to read the child: the decision if it changed, else null. */
  decide(state: FlowState): boolean | null {
    if (!state.released) {
      // Every change of the log passes here: the budget always knows what this process keeps.
      // What is spilled is on disk, not in memory: the budget and the window count memory.
      this.held.update({ historyBytes: this.log.historyBytes, unackedBytes: this.log.memoryUnackedBytes, arenaHeldBytes: this.arena.heldBytes });
    }
    const read = shouldReadChild({
      finished: state.finished,
      attached: state.attached,
      unackedBytes: this.log.memoryUnackedBytes,
      unsentBytes: this.log.unsentBytes,
      windowBytes: this.limits.windowBytes,
      // With a spill, a connection that is behind (a client reading slower than its process
      // writes, or asleep) does not pause the child: memory keeps the window, the rest spills.
      readAheadBytes: this.log.options.spill || this.log.options.keepLastBytes !== undefined ? Infinity : this.limits.readAheadBytes,
      // Under pressure, only sessions over their fair share (or past it with the budget full) pause.
      memoryPressured: this.held.budgeted ? (state.heldBack ?? this.held.pressured) : false,
    });
    this.heldBackNow = !read && this.held.budgeted && (state.heldBack ?? this.held.pressured);
    return this.clock.set(read) ? read : null;
  }

  /** The memory budget held the child back at the last decision. */
  private heldBackNow = false;

  /**
   * Why its output is not read now (null: it is): the memory budget ("memory"), the output
   * window with no spill or a spill that refused ("output-window", "output-disk-quota",
   * "output-disk-full"), or an attached connection that is behind ("read-ahead").
   */
  get pauseReason(): PauseReason | null {
    if (this.clock.reading) return null;
    if (this.heldBackNow) return 'memory';
    if (this.log.memoryUnackedBytes >= this.limits.windowBytes) return this.log.spillRefusal ?? 'output-window';
    return 'read-ahead';
  }

  /** The process is released: it holds nothing any more. */
  close(): void {
    this.held.close();
  }

  /** Whether its output is read now. */
  get reading(): boolean {
    return this.clock.reading;
  }

  /** How long its output has not been read, in all (metrics). */
  get pausedMs(): number {
    return this.clock.pausedMs;
  }
}
