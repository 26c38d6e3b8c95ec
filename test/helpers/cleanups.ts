/**
 * What a test leaves to undo (servers, proxies, child processes), undone after each test, the
 * last pushed first.
 */
import type { ChildProcess } from 'node:child_process';
import { afterEach } from 'vitest';

export type Cleanup = () => Promise<void> | void;

/** The calling file's cleanups, run after each of its tests, newest first: call it at the top of the file. */
export function cleanupsAfterEach(): Cleanup[] {
  const cleanups: Cleanup[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  return cleanups;
}

/** `child` killed -9 at cleanup unless it has ended already (woken first, as it may be SIGSTOPped). */
export function reapAfter(cleanups: Cleanup[], child: ChildProcess): void {
  cleanups.push(() => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGCONT');
    child.kill('SIGKILL');
  });
}
