/**
 * `tether exec --keep-last` as its end-to-end tests drive it: a client stopped (SIGSTOP) at its
 * first line of output, so that the producer runs on while nobody reads; then what the client
 * said and printed checked against what the producer wrote: one gap line naming the dropped
 * seqs, an exact prefix, and after the dropped bytes an exact suffix up to the last line.
 */
import type { ChildProcess } from 'node:child_process';
import { expect } from 'vitest';
import { reapAfter, type Cleanup } from './cleanups.js';
import { spawnTether } from './cli.js';

export interface StoppedClient {
  child: ChildProcess;
  /** Resolves once the first output arrived and the client was SIGSTOPped. */
  first: Promise<void>;
  /** The client's exit code. */
  closed: Promise<number | null>;
  /** What it printed so far. */
  out: Buffer[];
  /** What it said on stderr so far. */
  stderr(): string;
}

/** `tether ARGS...`, SIGSTOPped at its first stdout data (killed after the test if still running). */
export function spawnStoppedAtFirstOutput(args: string[], cleanups: Cleanup[]): StoppedClient {
  const child = spawnTether(args, { stdio: ['ignore', 'pipe', 'pipe'] });
  reapAfter(cleanups, child);
  const out: Buffer[] = [];
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const first = new Promise<void>((resolve) => {
    child.stdout!.on('data', (d: Buffer) => {
      if (out.length === 0) {
        child.kill('SIGSTOP');
        resolve();
      }
      out.push(d);
    });
  });
  const closed = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  return { child, first, closed, out, stderr: () => stderr };
}

/**
 * Exactly one `--keep-last` gap line in `stderr` (its seqs returned), and `got` an exact prefix
 * of `expected` then an exact suffix of it, with something dropped between them and `lastLine`
 * (the producer's last line, without its newline) at the end.
 */
export function expectOneGapThenSuffix(stderr: string, got: Buffer, expected: Buffer, lastLine: string): { from: number; to: number; prefix: number; suffix: number } {
  const gaps = [...stderr.matchAll(/^tether exec: output seqs (\d+)\.\.(\d+) were dropped \(--keep-last\)$/gm)];
  expect(gaps, stderr).toHaveLength(1);
  const [from, to] = [Number(gaps[0]![1]), Number(gaps[0]![2])];
  expect(to).toBeGreaterThanOrEqual(from);
  let prefix = 0;
  while (prefix < got.length && got[prefix] === expected[prefix]) prefix++;
  const suffix = got.subarray(prefix);
  expect(suffix.length).toBeGreaterThan(0);
  expect(suffix.equals(expected.subarray(expected.length - suffix.length))).toBe(true);
  // Something was really dropped between them, and the newest bytes (at least the last line) arrived.
  expect(prefix + suffix.length).toBeLessThan(expected.length);
  expect(got.subarray(-lastLine.length - 1).toString()).toBe(`${lastLine}\n`);
  return { from, to, prefix, suffix: suffix.length };
}
