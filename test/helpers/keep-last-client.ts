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

/**
 * What a client printed when the server may have told more than one gap: every `--keep-last`
 * gap line in `stderr`, and `got` exactly that many plus one runs of `expected`, in order, each
 * an exact copy: the first from its first byte, the last up to its last, and something dropped
 * between each two. (A chunk the server had sent but not yet seen acknowledged may still be
 * dropped after it; a client that had it in its socket then prints it, and the gap it is told
 * after a reconnect starts after it: two gaps, each exact.)
 */
export function expectGapsBetweenExactRuns(stderr: string, got: Buffer, expected: Buffer): { gaps: number; runs: number } {
  const gaps = [...stderr.matchAll(/^tether exec: output seqs (\d+)\.\.(\d+) were dropped \(--keep-last\)$/gm)];
  expect(gaps.length, stderr).toBeGreaterThan(0);
  let previousLast = 0;
  for (const [, from, to] of gaps) {
    expect(Number(from), stderr).toBeGreaterThan(previousLast);
    expect(Number(to), stderr).toBeGreaterThanOrEqual(Number(from));
    previousLast = Number(to);
  }
  // The last run: the longest common suffix (the producer's end).
  let suffix = 0;
  while (suffix < got.length && got[got.length - 1 - suffix] === expected[expected.length - 1 - suffix]) suffix++;
  expect(suffix, 'nothing of the end arrived').toBeGreaterThan(0);
  const end = got.length - suffix;
  // The runs before it: each an exact copy of `expected` from where it is found on.
  let g = 0;
  let e = 0;
  let runs = 0;
  while (g < end) {
    if (runs > 0) {
      // A run after a gap starts further on: where its first bytes (unique: numbered lines) are.
      const probe = got.subarray(g, Math.min(end, g + 64));
      const at = expected.indexOf(probe, e + 1);
      expect(at, `run ${runs + 1} (at byte ${g} printed) is not in the producer's output after the last one`).toBeGreaterThan(e);
      e = at;
    }
    let n = 0;
    while (g + n < end && got[g + n] === expected[e + n]) n++;
    expect(n, `run ${runs + 1} (at byte ${g} printed) differs from the producer's output`).toBeGreaterThan(0);
    g += n;
    e += n;
    runs++;
  }
  expect(e, 'the last run overlaps the one before it').toBeLessThan(expected.length - suffix);
  runs++;
  expect(runs, `${gaps.length} gaps told, ${runs} runs printed`).toBe(gaps.length + 1);
  return { gaps: gaps.length, runs };
}
