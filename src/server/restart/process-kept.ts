/**
 * A process a successor server adopted from its kept keeper (restart adoption, kept-server.ts):
 * its output log rebuilt from the keeper's dump (and its spill, with the `--keep-last` gaps
 * its predecessor told), so that the seqs its clients saw stay the same, with the observer that goes on telling the keeper what clients could see
 * (output/process-log.ts), its exit and the writeIds as the keeper knew them; the
 * ManagedProcess is handed that, never the dump.
 */
import type { AdoptedChild, KeptDump } from '../backend/index.js';
import { type RestoreState, OutputLog, ManagedProcess, type ProcessHost, keeperObserver, logOptions, type SpawnSpec } from '../output/index.js';
import { constants as osConstants } from 'node:os';

/** The exit code the server reports: the command's own, or 128+N for signal N. */
export function rawExitCode(code: number | null, signal: NodeJS.Signals | null): number {
  return code ?? 128 + (signal ? (osConstants.signals[signal] ?? 0) : 0);
}

/** What OutputLog.restore needs from a keeper's dump. */
export function restoreState(dump: KeptDump, tty: boolean, spilled?: RestoreState['spilled'], gaps?: RestoreState['gaps']): RestoreState {
  return {
    ...(spilled && spilled.length > 0 ? { spilled } : {}),
    ...(gaps && gaps.length > 0 ? { gaps } : {}),
    streams: dump.streams,
    marks: dump.marks,
    tty,
    exitCode: dump.exited ? rawExitCode(dump.exited.code, dump.exited.signal) : null,
    droppedSeq: dump.droppedSeq,
  };
}

/**
 * The process of an adopted child: its log rebuilt from the dump (its bytes in the process's
 * memory; throws if the dump does not fit together), its exit as the keeper knew it, the
 * writeIds the keeper took. It was announced before: its output flows when attached.
 */
export function adoptProcess(spec: SpawnSpec, host: ProcessHost, adopted: AdoptedChild, spilled?: RestoreState['spilled'], gaps?: RestoreState['gaps']): ManagedProcess {
  const { dump } = adopted;
  // The log tells this keeper from its first entry on, not only once the process has attached
  // the child: the restore itself spills when the keeper retained more than the window (a
  // predecessor killed between spilling and telling the keeper to drop, and what the keeper
  // read past the window meanwhile), and each chunk spilled must be marked and dropped at the
  // keeper. Else the keeper keeps a copy the server no longer holds in memory, sits at its cap
  // with everything forwarded, and reads no more: the child blocks while no client acknowledges.
  const keeper = () => adopted.child.kept;
  return ManagedProcess.adopt(spec, host, adopted, {
    openLog: (memory) => OutputLog.restore(logOptions(spec, memory, keeperObserver(keeper)), restoreState(dump, spec.tty, spilled, gaps)),
    exitCode: dump.exited ? rawExitCode(dump.exited.code, dump.exited.signal) : null,
    writeIds: dump.ids,
  });
}
