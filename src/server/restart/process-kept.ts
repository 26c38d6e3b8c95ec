/**
 * What a ManagedProcess does in kept mode (issue #27), apart from its usual work: it tells
 * its keeper which output entries a client could have seen (`mark`, before the entry goes
 * out) and which the log let go of (`drop`), and, adopted by a successor, it rebuilds its log
 * from the keeper's dump so that the seqs its clients saw stay the same (`openLog`).
 */
import type { KeeperDump } from '../local/keeper/keeper.js';
import { keeperStream, type RestoreState } from '../output/log-restore.js';
import type { OutputLogObserver } from '../output/log-entries.js';
import { OutputLog, type OutputMemory } from '../output/output-log.js';
import { chunkLimit } from '../output/output-chunks.js';
import type { SpawnSpec } from '../output/process-host.js';
import type { ChildEvents, KeptChild, SpawnedChild } from '../local/spawn.js';
import { constants as osConstants } from 'node:os';

/** A child adopted from a kept keeper, its events held until `begin` (spawn.ts `adoptChild`). */
export interface AdoptedChild {
  readonly child: SpawnedChild;
  readonly dump: KeeperDump;
  /** Where its events go (set once, before `begin`). */
  bind(events: ChildEvents): void;
  begin(): void;
}

/** The exit code the server reports: the command's own, or 128+N for signal N. */
export function rawExitCode(code: number | null, signal: NodeJS.Signals | null): number {
  return code ?? 128 + (signal ? (osConstants.signals[signal] ?? 0) : 0);
}

/** Tells the keeper (once there is one) what the log exposes and drops (output-log.ts's observer). */
export function keeperObserver(kept: () => KeptChild | undefined): OutputLogObserver {
  return {
    exposed(entry) {
      const keeper = kept();
      if (!keeper) return;
      if (entry.kind === 'output') keeper.mark(entry.seq, keeperStream(entry.stream), entry.end);
      else keeper.markEvent(entry.seq, entry.kind === 'exit' ? 'x' : 'c');
    },
    dropped(seq) {
      kept()?.drop(seq);
    },
  };
}

/** What OutputLog.restore needs from a keeper's dump. */
export function restoreState(dump: KeeperDump, tty: boolean): RestoreState {
  return {
    streams: dump.streams,
    marks: dump.marks,
    tty,
    exitCode: dump.exited ? rawExitCode(dump.exited.code, dump.exited.signal) : null,
    droppedSeq: dump.droppedSeq,
  };
}

/**
 * A process's output log (output-log.ts), its bytes in `memory`: new, or rebuilt from the dump
 * of the keeper it was `adopted` from (issue #27). In kept mode (`spec.keep`, or adopted) its
 * observer tells the keeper what clients could see, and what the log let go of.
 */
export function openLog(spec: SpawnSpec, memory: OutputMemory, kept: () => KeptChild | undefined, adopted?: KeeperDump): OutputLog {
  const options = {
    memory,
    windowBytes: spec.limits.windowBytes,
    retentionBytes: spec.limits.retentionBytes,
    // A Codex client gets chunks the size of a pipe read at most (it may read in small steps).
    maxChunkBytes: chunkLimit(spec.limits.maxChunkBytes, spec.clientAcks),
    clientAcks: spec.clientAcks,
    observer: spec.keep || adopted ? keeperObserver(kept) : undefined,
  };
  return adopted ? OutputLog.restore(options, restoreState(adopted, spec.tty)) : new OutputLog(options);
}
