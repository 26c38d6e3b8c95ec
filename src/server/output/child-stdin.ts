/**
 * A process's stdin from the protocol's side (`process/write`): whether it is still open,
 * the writeIds already taken (a write re-sent after a reconnect is not written twice), the
 * bytes written, and the wait until the pipe — or the terminal — took each write, so a
 * client that awaits its writes cannot make the server buffer unbounded input.
 */
import type { Writable } from 'node:stream';
import type { WriteStatus } from '../../protocol/index.js';
import type { KeptStdin } from '../backend/index.js';
import { WriteIds } from './write-ids.js';

export class ChildStdin {
  private stdin: Writable | null = null;
  /** Kept mode (restart adoption): writes go to the keeper as frames with their writeId (local/keeper/kept.ts). */
  private framed: KeptStdin | null = null;
  private open = false;
  private readonly writeIds = new WriteIds();
  /**
   * The writes not answered yet, by writeId. A write re-sent because its answer was lost at a
   * cut gets the same answer, when the first one gets it: 'accepted' at once would let a
   * client whose link is cut at every write run ahead of what the child (or its keeper) took,
   * its input piling up in the server unbounded.
   */
  private readonly unanswered = new Map<string, Promise<WriteStatus>>();
  private inputBytes = 0;

  /** `tty`: a terminal, which has no end of file to send. */
  constructor(private readonly tty: boolean) {}

  /** The child's stdin (null: it has none); it stays open until it errs, closes, or `close()`. */
  attach(stdin: Writable | null, framed: KeptStdin | null = null): void {
    if (!stdin) return;
    this.framed = framed;
    if (framed?.closed) return; // adopted with its stdin already closed
    this.stdin = stdin;
    this.open = true;
    stdin.on('error', () => (this.open = false));
    stdin.on('close', () => (this.open = false));
  }

  /** Adopted (restart adoption): the writeIds the keeper took before, oldest first, are taken already. */
  seed(writeIds: readonly string[]): void {
    for (const id of writeIds) this.writeIds.add(id);
  }

  /** The child exited: no more writes. */
  close(): void {
    this.open = false;
  }

  /**
   * Writes `data` (see ManagedProcess.write): 'accepted' once taken (or already taken under
   * this writeId), 'stdinClosed' if closed or `exited`. `closeStdin` ends the pipe after
   * `data`; on a terminal it is ignored (closing it would hang the child up).
   */
  async write(data: Buffer, writeId: string, closeStdin: boolean, exited: boolean): Promise<WriteStatus> {
    const first = this.unanswered.get(writeId);
    if (first) return first; // a re-send while the first is still waiting: its answer
    if (this.writeIds.has(writeId)) return 'accepted'; // a re-send after a reconnect: already written
    if (!this.open || exited) return 'stdinClosed';
    this.writeIds.add(writeId);
    this.inputBytes += data.length;
    const answer = this.apply(data, writeId, closeStdin);
    this.unanswered.set(writeId, answer);
    try {
      return await answer;
    } finally {
      this.unanswered.delete(writeId);
    }
  }

  private async apply(data: Buffer, writeId: string, closeStdin: boolean): Promise<WriteStatus> {
    const framed = this.framed;
    if (framed) {
      const taken = data.length > 0 ? framed.write(data, writeId) : Promise.resolve();
      if (closeStdin && !this.tty) {
        this.open = false;
        framed.end();
        return 'accepted';
      }
      await taken;
      return 'accepted';
    }
    const stdin = this.stdin!;
    if (closeStdin && !this.tty) {
      this.open = false;
      stdin.end(data);
      return 'accepted';
    }
    if (data.length === 0) return 'accepted';
    // The callback runs once the kernel took these bytes, or with an error once the pipe is gone.
    await new Promise<void>((resolve) => stdin.write(data, () => resolve()));
    return 'accepted';
  }

  /** Bytes written (re-sent writes counted once). */
  get bytesWritten(): number {
    return this.inputBytes;
  }
}
