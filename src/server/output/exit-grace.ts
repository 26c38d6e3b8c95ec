/**
 * When a child's exit is reported. Normally once its pipes reached end of file (close), so
 * its output comes first; but a child that exited while a grandchild keeps its pipes open
 * has its exit reported after a short grace all the same. A pty's exit and close coincide:
 * no grace. Timers only.
 */

/** A process that exited with its pipes still open reports its exit after this. */
export const EXIT_WITHOUT_EOF_GRACE_MS = 20;

export class ExitGrace {
  private code: number | null = null;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly graceMs = EXIT_WITHOUT_EOF_GRACE_MS) {}

  /** The child exited with `code`; `due` (if given) is called once the grace ran out, unless `settle` came first. */
  exited(code: number, due?: () => void): void {
    this.code = code;
    if (due) this.timer = setTimeout(due, this.graceMs);
  }

  /** The exit is being reported (pipes closed, or the grace ran out): no more waiting. Its code (null: not exited). */
  settle(): number | null {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    return this.code;
  }

  /** The child has exited (reported or not). */
  get hasExited(): boolean {
    return this.code !== null;
  }
}
