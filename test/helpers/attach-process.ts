/**
 * A `tether attach` child process for the e2e tests: what it printed so far, its exit, and a
 * wait for its output that fails at once if it ends first. Killed -9 at cleanup if still running.
 */
import type { ChildProcess } from 'node:child_process';
import { spawnTether } from './cli.js';
import { reapAfter, type Cleanup } from './cleanups.js';

export interface Attached {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  closed: Promise<number | null>;
  /** Resolves once stdout (or stderr) satisfies `test`; rejects if tether attach ends first. */
  until(test: (out: string) => boolean, stream?: 'stdout' | 'stderr'): Promise<void>;
}

/** `tether attach ARGS`, reaped by `cleanups`. */
export function spawnAttach(cleanups: Cleanup[], args: string[], stdin: 'pipe' | 'ignore' = 'pipe'): Attached {
  const child = spawnTether(['attach', ...args], { stdio: [stdin, 'pipe', 'pipe'] });
  reapAfter(cleanups, child);
  let out = '';
  let err = '';
  const waiters = new Set<() => void>();
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
    for (const w of [...waiters]) w();
  });
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
    for (const w of [...waiters]) w();
  });
  const closed = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    closed,
    until: (test, stream = 'stdout') =>
      new Promise<void>((resolve, reject) => {
        const check = () => {
          if (test(stream === 'stdout' ? out : err)) {
            waiters.delete(check);
            resolve();
          }
        };
        waiters.add(check);
        void closed.then(() => {
          if (waiters.delete(check)) reject(new Error(`tether attach ended first; stdout: ${out.slice(-500)}; stderr: ${err}`));
        });
        check();
      }),
  };
}
