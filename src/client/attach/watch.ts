/**
 * Following a process without being its session's writer (extension `attach`, a watcher, or
 * a writer whose session was taken): its events are pulled with long-polled `process/read`s
 * from the last one delivered, never acknowledged, so a watcher never holds the producer back.
 * Output the server no longer holds comes back as a read `gap`, which the handle reports.
 * `ReadOnlyHost` is a watcher handle's host: everything but reading throws a clear error.
 */
import { Writable, type Readable } from 'node:stream';
import { Method, type ProcessReadResult, type SignalName } from '../../protocol/types.js';
import { isUnknownProcess } from '../error-text.js';
import { OutputLostError } from '../errors.js';
import { failProcess, isLive, mergeRead, outputStreamsOf, sequencerOf, type ExecProcess, type ProcessHost } from '../process/process.js';

/** How long one read waits for news on the server (a long-poll; the answer comes at once when there is some). */
export const WATCH_WAIT_MS = 10_000;

/** Pulls `proc`'s events until it closed or failed; `call` re-sends through drops (ProcessOps.call). */
export async function followByReads(proc: ExecProcess, call: <T>(method: string, params: object) => Promise<T>, waitMs = WATCH_WAIT_MS): Promise<void> {
  while (isLive(proc)) {
    // Read no further than a sink takes: a slow reader of `tether attach --watch` holds the watcher's reads back, not its memory.
    await room(proc);
    if (!isLive(proc)) return;
    const afterSeq = sequencerOf(proc).lastDelivered;
    let result: ProcessReadResult;
    try {
      result = await call<ProcessReadResult>(Method.processRead, { processId: proc.id, afterSeq, waitMs });
    } catch (err) {
      if (!isLive(proc)) return;
      failProcess(proc, isUnknownProcess(err) ? new OutputLostError(proc.id, afterSeq + 1, Infinity, 'could not be read: the server no longer knows the process') : (err as Error));
      return;
    }
    mergeRead(proc, afterSeq, result);
    if (isLive(proc) && result.closed && sequencerOf(proc).lastDelivered >= result.nextSeq - 1) {
      // Closed, and nothing after what was delivered: a close this handle can no longer see.
      failProcess(proc, new OutputLostError(proc.id, afterSeq + 1, Infinity, 'closed before it could be read'));
      return;
    }
  }
}

/**
 * Resolves once every sink `proc` writes into (`sinks`, spawn's `stdout`/`stderr`) has
 * drained, or it ended. (Its own `stdout`/`stderr` streams buffer what nobody reads yet.)
 */
async function room(proc: ExecProcess): Promise<void> {
  for (const dest of outputStreamsOf(proc)) {
    if (dest === proc.stdout || dest === proc.stderr || !(dest instanceof Writable)) continue;
    while (dest.writableNeedDrain && !dest.destroyed && isLive(proc)) {
      await new Promise<void>((resolve) => {
        const done = () => {
          dest.off('drain', done);
          dest.off('close', done);
          proc.off('close', done);
          clearTimeout(timer);
          resolve();
        };
        // A failed handle emits no 'close': look again now and then.
        const timer = setTimeout(done, 1000);
        dest.once('drain', done);
        dest.once('close', done);
        proc.once('close', done);
      });
    }
  }
}

/** The text a watcher's handle throws for anything but reading. */
export function readOnlyReason(processId: string, session: string, verb: string): string {
  return `process ${processId} is watched read-only (attached to session ${session} as a watcher): attach as the writer (take) to ${verb}`;
}

/** A watcher handle's host: reads are pulled by `followByReads`; writes, signals and resizes throw. */
export class ReadOnlyHost implements ProcessHost {
  constructor(private readonly session: () => string) {}

  #refuse(proc: ExecProcess, verb: string): never {
    throw new Error(readOnlyReason(proc.id, this.session(), verb));
  }

  writeStdin(proc: ExecProcess): Promise<void> {
    this.#refuse(proc, 'write to its stdin');
  }
  closeStdin(proc: ExecProcess): Promise<void> {
    this.#refuse(proc, 'close its stdin');
  }
  signal(proc: ExecProcess, signal: SignalName): Promise<void> {
    this.#refuse(proc, `signal it (${signal})`);
  }
  kill(proc: ExecProcess, signal: SignalName): void {
    this.#refuse(proc, `signal it (${signal})`);
  }
  terminate(proc: ExecProcess): Promise<boolean> {
    this.#refuse(proc, 'terminate it');
  }
  resize(proc: ExecProcess): Promise<boolean> {
    this.#refuse(proc, 'resize its terminal');
  }
  /** Holes cannot happen: every event comes from a read, in order. */
  fillHole(): void {}
  /** A watcher never kills what it watches, even when it can no longer follow it. */
  abandon(): void {}
  outputBuffered(_stream: Readable | Writable): void {}
  outputWanted(): void {}
  /** Never acknowledged: what a watcher takes changes nothing for the writer. */
  consumed(): void {}
}
