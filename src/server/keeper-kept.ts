/**
 * Kept mode's stdin on the server's side (issue #27): every write goes to the keeper as a
 * frame carrying its writeId (keeper-wire.ts `encodeStdinFrame`), and is answered once the
 * keeper reports (`took <N>`) that it took that frame whole — the keeper, not the server,
 * remembers which writeIds were applied, so a successor adopting it knows too. Frames are
 * numbered as the keeper counts them: cumulative for the process's whole life, eof included.
 */
import type { Socket } from 'node:net';
import { encodeStdinFrame, STDIN_EOF } from './keeper-wire.js';

export class FramedStdin {
  /** Frames sent so far (the keeper's numbering: an adopted one continues from what it took). */
  private sent: number;
  private taken: number;
  private readonly waiters: { frame: number; resolve: () => void }[] = [];
  private ended: boolean;

  constructor(
    private readonly socket: Socket,
    taken = 0,
    eofSent = false,
  ) {
    this.sent = this.taken = taken;
    this.ended = eofSent;
    socket.once('close', () => this.abandon());
  }

  /** The command's stdin was closed (eof sent, now or by a predecessor). */
  get closed(): boolean {
    return this.ended;
  }

  /** Sends one frame; resolves once the keeper took it (or can take nothing more). */
  write(data: Buffer, writeId: string): Promise<void> {
    if (this.ended || this.socket.destroyed || !this.socket.writable) return Promise.resolve();
    this.socket.write(encodeStdinFrame(data, writeId));
    const frame = ++this.sent;
    return new Promise((resolve) => this.waiters.push({ frame, resolve }));
  }

  /** Closes the command's stdin (after the frames sent before). */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    if (this.socket.destroyed || !this.socket.writable) return;
    this.socket.write(STDIN_EOF);
    this.sent++;
  }

  /** The keeper's `took <count>`: every frame up to `count` is taken. */
  took(count: number): void {
    if (count <= this.taken) return;
    this.taken = count;
    while (this.waiters.length > 0 && this.waiters[0]!.frame <= count) this.waiters.shift()!.resolve();
  }

  /** The keeper is gone: nothing more will be taken; answer every waiting write (as a pipe's error would). */
  abandon(): void {
    for (const waiter of this.waiters.splice(0)) waiter.resolve();
  }

  /**
   * The server lets go of the keeper to hand it over (a kept stop): the waiting writes stay
   * unanswered — their clients re-send them to the successor, which learns from the keeper
   * whether each was taken (writeIds), so none is lost or applied twice.
   */
  forget(): void {
    this.waiters.length = 0;
  }
}
