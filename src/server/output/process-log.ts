/**
 * A process's output log (output-log.ts) as its spec asks for it: its window and retention,
 * chunks no larger than its client's dialect takes, its bytes in the process's memory, and in
 * kept mode (restart adoption: the child's keeper outlives the server) the observer that tells
 * the keeper which entries a client could have seen (`mark`, before the entry goes out) and
 * which the log let go of (`drop`). A new process's log opens here; one rebuilt for a process
 * a successor adopted opens in restart/process-kept.ts, with the same options.
 */
import type { KeptChild } from '../backend/index.js';
import type { OutputLogObserver } from './log/log-entries.js';
import { keeperStream } from './log/log-restore.js';
import { chunkLimit } from './output-chunks.js';
import { OutputLog, type OutputLogOptions, type OutputMemory } from './log/output-log.js';
import type { LogOpener, SpawnSpec } from './process-spec.js';

/** The options of a process's log, its bytes in `memory`, told to `observer` (kept mode). */
export function logOptions(spec: SpawnSpec, memory: OutputMemory, observer: OutputLogObserver | undefined): OutputLogOptions {
  return {
    memory,
    windowBytes: spec.limits.windowBytes,
    retentionBytes: spec.limits.retentionBytes,
    // A Codex client gets chunks the size of a pipe read at most (it may read in small steps).
    maxChunkBytes: chunkLimit(spec.limits.maxChunkBytes, spec.clientAcks),
    clientAcks: spec.clientAcks,
    observer,
    ...(spec.spill ? { spill: spec.spill } : {}),
    ...(spec.keepLastBytes !== undefined ? { keepLastBytes: spec.keepLastBytes } : {}),
  };
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

/** The log of a process being started: new, and in kept mode (`spec.keep`) observed for its keeper. */
export function newLog(spec: SpawnSpec): LogOpener {
  return (memory, kept) => new OutputLog(logOptions(spec, memory, spec.keep ? keeperObserver(kept) : undefined));
}
