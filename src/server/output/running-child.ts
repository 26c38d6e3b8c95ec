/**
 * The child side of a managed process (process.ts): the child its back-end runs for it
 * (spawned, or adopted from a kept keeper: restart adoption) and what is done to that child
 * directly — its stdin wired (child-stdin.ts), its tree killed, its terminal resized, its
 * keeper handed over — and whether it, or anything it started, still lives. How the child is
 * run (pipes, a pty) is its back-end's business (backend/child.ts).
 */
import type { SpawnedChild } from '../backend/index.js';
import { ChildStdin } from './child-stdin.js';
import type { AdoptedOutput } from './process-spec.js';

export abstract class RunningChild {
  pid = 0;
  protected child: SpawnedChild | null = null;
  protected readonly stdin: ChildStdin;

  /** `tty`: it runs in a terminal (no end of file to send on its stdin). */
  constructor(tty: boolean) {
    this.stdin = new ChildStdin(tty);
  }

  /** Its child runs (spawned, or adopted with the writeIds its keeper took and whether stdin is over). */
  protected attach(child: SpawnedChild, adopted?: AdoptedOutput): void {
    this.child = child;
    this.pid = child.pid;
    if (adopted) this.stdin.seed(adopted.writeIds);
    this.stdin.attach(child.stdin, child.kept?.stdin ?? null);
    if (adopted && adopted.exitCode !== null) this.stdin.close();
  }

  /** Kept mode: its keeper's socket ('' otherwise). @internal */
  get keeperSocket(): string {
    return this.child?.kept?.socketPath ?? '';
  }

  /** Kept mode: the server stops and hands the keeper over (nothing is killed). @internal */
  handOver(): void {
    this.child?.kept?.handOver();
  }

  /** Kills the command and every descendant (its keeper does), whatever its state. */
  killTree(): void {
    this.child?.killTree();
  }

  /** Synchronous last resort when the server process is going down (a kept keeper only with `evenKept`). */
  killTreeSync(evenKept = false): void {
    this.child?.killTreeSync(evenKept);
  }

  /** Sets the terminal's size (tty processes only). */
  resize(cols: number, rows: number): void {
    this.child?.resize(cols, rows);
  }

  /** True while the command, or anything it started (a daemon, a background job), is alive. */
  get keeperAlive(): boolean {
    return this.child?.alive ?? false;
  }

  /** Resolves when the command and everything it started are gone. */
  get whenGone(): Promise<void> {
    return this.child?.whenGone ?? Promise.resolve();
  }

  /** Bytes written to its stdin (re-sent writes counted once). */
  get bytesWritten(): number {
    return this.stdin.bytesWritten;
  }
}
